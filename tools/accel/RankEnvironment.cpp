// The environment each rank starts with (see RankEnvironment.h).
#include "RankEnvironment.h"

#include <unistd.h>

extern char** environ;

namespace accel {

Environment Environment::current() {
  Environment environment;
  for (char** entry = environ; entry && *entry; ++entry)
    environment.entries_.emplace_back(*entry);
  return environment;
}

std::optional<std::string> Environment::get(const std::string& name) const {
  const std::string prefix = name + "=";
  for (const std::string& entry : entries_)
    if (entry.compare(0, prefix.size(), prefix) == 0)
      return entry.substr(prefix.size());
  return std::nullopt;
}

void Environment::set(const std::string& name, const std::string& value) {
  const std::string prefix = name + "=";
  for (std::string& entry : entries_) {
    if (entry.compare(0, prefix.size(), prefix) == 0) {
      entry = prefix + value;
      return;
    }
  }
  entries_.push_back(prefix + value);
}

std::vector<char*> Environment::pointers() {
  std::vector<char*> result;
  for (std::string& entry : entries_)
    result.push_back(entry.data());
  result.push_back(nullptr);
  return result;
}

Environment rankEnvironment(Environment base, const RankPlacement& placement) {
  base.set("RANK", std::to_string(placement.rank));
  base.set("LOCAL_RANK", std::to_string(placement.localRank));
  base.set("WORLD_SIZE", std::to_string(placement.worldSize));
  base.set("LOCAL_WORLD_SIZE", std::to_string(placement.localWorldSize));
  base.set("GROUP_RANK", std::to_string(placement.nodeRank));
  base.set("GROUP_WORLD_SIZE", std::to_string(placement.numNodes));
  // torchrun runs one role, "default", spanning every worker.
  base.set("ROLE_NAME", "default");
  base.set("ROLE_RANK", std::to_string(placement.rank));
  base.set("ROLE_WORLD_SIZE", std::to_string(placement.worldSize));
  base.set("MASTER_ADDR", placement.masterAddr);
  base.set("MASTER_PORT", std::to_string(placement.masterPort));
  return base;
}

} // namespace accel
