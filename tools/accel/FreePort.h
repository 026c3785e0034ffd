// Choosing a free TCP port for the rendezvous when the user asks for port 0.
#pragma once

#include <string>

namespace accel {

/// A TCP port that is free on `address` right now: binds a socket to port 0 there, reads the port the kernel
/// chose, and closes the socket (as torchrun does; another process could take it before rank 0 binds it).
/// Throws UsageError when nothing can be bound on `address`, e.g. when it is not this machine's address.
int pickFreePort(const std::string& address);

} // namespace accel
