// The environment each rank starts with: the launcher's own, plus torchrun's variables for that rank.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace accel {

/// An environment as `NAME=value` entries, in the form execve wants.
class Environment {
public:
  /// The launcher's own environment (`environ`).
  static Environment current();

  std::optional<std::string> get(const std::string& name) const;
  /// Sets `name`, replacing any earlier value.
  void set(const std::string& name, const std::string& value);
  /// The entries as a null-terminated array for execve; valid while this Environment is unchanged.
  std::vector<char*> pointers();

private:
  std::vector<std::string> entries_;
};

/// Where one rank sits in the job: what torchrun tells each worker.
struct RankPlacement {
  int rank = 0;
  int localRank = 0;
  int worldSize = 1;
  int localWorldSize = 1;
  int nodeRank = 0; ///< torchrun's GROUP_RANK
  int numNodes = 1; ///< torchrun's GROUP_WORLD_SIZE
  std::string masterAddr;
  int masterPort = 0;
};

/// `base` with torchrun's variables set for `placement`: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
/// GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. The runtime
/// (and any torchrun-aware program) reads these; see DESIGN.md 3.5.
Environment rankEnvironment(Environment base, const RankPlacement& placement);

} // namespace accel
