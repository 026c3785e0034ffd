// Declarations c10d's ProcessGroupGloo.hpp needs from Gloo (see ../README.md for why these exist).
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace gloo::rendezvous {
/// The interface c10d's GlooStore overrides. Never instantiated by the runtime.
class Store {
public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) = 0;
};
} // namespace gloo::rendezvous
