// Declarations c10d's ProcessGroupGloo.hpp needs from Gloo (see ../README.md for why these exist).
#pragma once

#include <chrono>

namespace gloo {
/// Named by inline code in ProcessGroupGloo.hpp (`setTimeout`) that the runtime never calls.
class Context {
public:
  void setTimeout(std::chrono::milliseconds timeout);
};
} // namespace gloo
