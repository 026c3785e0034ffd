// Choosing a free TCP port for the rendezvous (port 0), and refusing a given port that is already in use.
#pragma once

#include <string>

namespace accel {

/// A TCP port that is free on `address` right now: binds a socket to port 0 there, reads the port the kernel
/// chose, and closes the socket (as torchrun does; another process could take it before rank 0 binds it).
/// Throws UsageError when nothing can be bound on `address`, e.g. when it is not this machine's address.
int pickFreePort(const std::string& address);

/// Throws UsageError when `port` on `address` is taken by a listening socket (another job's rendezvous), so
/// the launch fails at once with one line rather than in every rank. Any other bind failure is left for the
/// ranks to report (the address may be another machine's when this one is not rank 0's).
void checkPortIsFree(const std::string& address, int port);

} // namespace accel
