// The Gloo backend: the only translation unit that includes ProcessGroupGloo.hpp (see gloo_shim/README.md).
#include "transport/process_group.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace accelerate::detail {
namespace {

/// The local address the kernel would use to reach `host`: the interface Gloo must listen on, so that
/// multi-node jobs work without a hard-coded 127.0.0.1 and without trusting the hostname to resolve.
std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0) {
    throw std::runtime_error("accelerate: MASTER_ADDR '" + host + "' does not resolve (" + gai_strerror(rc) +
                             "); set it to the main process's address");
  }
  std::string address;
  for (addrinfo* candidate = found; candidate != nullptr && address.empty(); candidate = candidate->ai_next) {
    int fd = socket(candidate->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) {
      continue;
    }
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (connect(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = local.ss_family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof(text)) != nullptr) {
        address = text;
      }
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (address.empty()) {
    throw std::runtime_error("accelerate: no local network interface reaches MASTER_ADDR '" + host +
                             "'; check the address, or name the interface with GLOO_SOCKET_IFNAME");
  }
  return address;
}

} // namespace

c10::intrusive_ptr<c10d::Backend> create_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                      int world_size, const std::string& master_addr,
                                                      std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* interfaces = std::getenv("GLOO_SOCKET_IFNAME");
      interfaces != nullptr && *interfaces != '\0') {
    std::string list = interfaces;
    for (std::size_t start = 0; start <= list.size();) {
      auto end = list.find(',', start);
      if (end == std::string::npos) {
        end = list.size();
      }
      if (end > start) {
        options->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForInterface(list.substr(start, end - start)));
      }
      start = end + 1;
    }
  } else {
    options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(local_address_towards(master_addr)));
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
}

} // namespace accelerate::detail
