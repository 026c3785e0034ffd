// This machine's host name (runtime-internal, header-only, no torch): in checkpoint messages about
// filesystems processes do not share, in TensorBoard event files' names, and in the mark the mlflow tracker
// puts on what it spools.
#pragma once

#include <unistd.h>

#include <string>

namespace accelerate::detail {

/// The host name, or "localhost" when the system gives none.
inline std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    return "localhost";
  }
  return name;
}

} // namespace accelerate::detail
