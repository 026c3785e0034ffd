// The rendezvous port of rank 0's store: bound and held by the launcher from before any rank starts.
#pragma once

namespace accel {

/// A listening TCP socket on every address of this machine (IPv6 and IPv4, as c10d's TCPStore binds), which
/// the launcher keeps for the job's life and hands to rank 0's store (ACCELERATE_STORE_LISTEN_FD): binding
/// and holding leaves no moment in which another job can take the port (two launches at the same moment on
/// the default port), and the port stays the job's across restarts.
struct HeldPort {
  int fd = -1;
  int port = 0;
};

/// Binds and listens on `port`, or on a port the kernel picks when `port` is 0. When `port` is the default
/// (not given by the user) and in use, falls back to a port the kernel picks and says so (unless `quiet`).
/// Throws UsageError naming the port when a given port is in use or nothing can be bound.
HeldPort holdRendezvousPort(int port, bool portGiven, bool quiet);

} // namespace accel
