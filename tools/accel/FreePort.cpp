// Binding and holding the rendezvous port (see FreePort.h).
#include "FreePort.h"

#include "Flags.h"

#include <cerrno>
#include <cstring>
#include <iostream>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace accel {
namespace {

/// How many connections may wait for rank 0's store to start accepting (c10d's TCPStore listens with more).
constexpr int kBacklog = 2048;

/// A listening socket on `port` of every address: IPv6 accepting IPv4 too where the machine has IPv6, else
/// IPv4; -1 with errno set when neither binds.
int listenOnEveryAddress(int port) {
  int lastErrno = 0;
  for (int family : {AF_INET6, AF_INET}) {
    int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      lastErrno = errno;
      continue;
    }
    int on = 1; // as c10d's TCPStore binds: a port in TIME_WAIT from an earlier run is free
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_storage address{};
    socklen_t length = 0;
    if (family == AF_INET6) {
      int off = 0;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
      in6->sin6_family = AF_INET6;
      in6->sin6_addr = in6addr_any;
      in6->sin6_port = htons(static_cast<uint16_t>(port));
      length = sizeof(sockaddr_in6);
    } else {
      auto* in4 = reinterpret_cast<sockaddr_in*>(&address);
      in4->sin_family = AF_INET;
      in4->sin_addr.s_addr = htonl(INADDR_ANY);
      in4->sin_port = htons(static_cast<uint16_t>(port));
      length = sizeof(sockaddr_in);
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 && ::listen(fd, kBacklog) == 0)
      return fd;
    lastErrno = errno;
    ::close(fd);
    if (lastErrno == EADDRINUSE)
      break; // the port is taken; the other family would only say so again
  }
  errno = lastErrno;
  return -1;
}

int boundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0)
    return -1;
  return bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

} // namespace

HeldPort holdRendezvousPort(int port, bool portGiven, bool quiet) {
  int fd = listenOnEveryAddress(port);
  if (fd < 0 && errno == EADDRINUSE && port != 0) {
    if (portGiven)
      throw UsageError("--main_process_port " + std::to_string(port) +
                       " is already in use on this machine (another job's rendezvous? give another port, or "
                       "0 to pick a free one)");
    fd = listenOnEveryAddress(0);
    if (fd >= 0 && !quiet)
      std::cerr << "accel launch: note: the default port " << port
                << " is in use (another job?); this job's rendezvous is on port " << boundPort(fd)
                << " (give --main_process_port to choose)\n";
  }
  if (fd < 0)
    throw UsageError("cannot listen on port " + std::to_string(port) + " for the rendezvous: " +
                     std::strerror(errno) + " (give another --main_process_port, or 0 to pick a free one)");
  return {fd, boundPort(fd)};
}

} // namespace accel
