// Choosing a free TCP port for the rendezvous, and checking a given one is free (see FreePort.h).
#include "FreePort.h"

#include "Flags.h"

#include <cerrno>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace accel {
namespace {

// The port the kernel assigns when `candidate` is bound to port 0, or -1 with errno set.
int bindToAnyPort(const addrinfo& candidate) {
  int fd = ::socket(candidate.ai_family, candidate.ai_socktype | SOCK_CLOEXEC, candidate.ai_protocol);
  if (fd < 0)
    return -1;
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  int port = -1;
  if (::bind(fd, candidate.ai_addr, candidate.ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
    port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  int savedErrno = errno;
  ::close(fd);
  errno = savedErrno;
  return port;
}

} // namespace

int pickFreePort(const std::string& address) {
  const std::string fix = " (give a port, like --main_process_port 29500)";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* candidates = nullptr;
  if (int rc = ::getaddrinfo(address.c_str(), "0", &hints, &candidates); rc != 0)
    throw UsageError("--main_process_port 0 needs a free port on --main_process_ip " + address +
                     ", which does not resolve: " + ::gai_strerror(rc) + fix);
  int port = -1;
  int lastErrno = 0;
  for (addrinfo* candidate = candidates; candidate && port < 0; candidate = candidate->ai_next) {
    port = bindToAnyPort(*candidate);
    lastErrno = errno;
  }
  ::freeaddrinfo(candidates);
  if (port < 0)
    throw UsageError("--main_process_port 0 needs a free port on --main_process_ip " + address +
                     ", but binding there failed: " + std::strerror(lastErrno) + fix);
  return port;
}

void checkPortIsFree(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* candidates = nullptr;
  if (::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &candidates) != 0)
    return;
  bool inUse = false;
  for (addrinfo* candidate = candidates; candidate && !inUse; candidate = candidate->ai_next) {
    int fd = ::socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC, candidate->ai_protocol);
    if (fd < 0)
      continue;
    int on = 1; // as c10d's TCPStore binds: a port in TIME_WAIT from an earlier run is free
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    inUse = ::bind(fd, candidate->ai_addr, candidate->ai_addrlen) != 0 && errno == EADDRINUSE;
    ::close(fd);
  }
  ::freeaddrinfo(candidates);
  if (inUse)
    throw UsageError("--main_process_port " + std::to_string(port) + " is already in use on " + address +
                     " (another job's rendezvous? give another port, or 0 to pick a free one)");
}

} // namespace accel
