// The registry of experiment trackers by name: the built-ins' table and what `register_tracker` adds.
#include "tracking/registry.h"

#include <map>
#include <mutex>
#include <stdexcept>

namespace accelerate {
namespace detail {
namespace {

struct BuiltinTracker {
  const char* name;
  std::unique_ptr<Tracker> (*make)(const TrackerRun&);
  /// Whether `log_with({"all"})` selects it on this process; null: always.
  bool (*available)() = nullptr;
};

/// The trackers the runtime ships: the only list of them.
constexpr BuiltinTracker kBuiltinTrackers[] = {
    {"tensorboard", make_tensorboard_tracker},
    {"jsonl", make_jsonl_tracker},
    {"csv", make_csv_tracker},
    {"mlflow", make_mlflow_tracker, mlflow_tracker_configured},
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, RegisteredTracker> trackers;
  Registry() {
    for (const auto& builtin : kBuiltinTrackers) {
      trackers.emplace(builtin.name, RegisteredTracker{builtin.make, true});
    }
  }
};

Registry& registry() {
  static Registry instance;
  return instance;
}

} // namespace

std::optional<RegisteredTracker> find_tracker(const std::string& name) {
  auto& instance = registry();
  std::lock_guard<std::mutex> lock(instance.mutex);
  auto found = instance.trackers.find(name);
  if (found == instance.trackers.end()) {
    return std::nullopt;
  }
  return found->second;
}

std::vector<std::string> builtin_tracker_names() {
  std::vector<std::string> names;
  for (const auto& builtin : kBuiltinTrackers) {
    if (builtin.available == nullptr || builtin.available()) {
      names.emplace_back(builtin.name);
    }
  }
  return names;
}

} // namespace detail

void register_tracker(const std::string& name, TrackerFactory factory, bool main_process_only) {
  if (name.empty() || name == "all") {
    throw std::invalid_argument("accelerate::register_tracker: '" + name +
                                "' cannot name a tracker (\"all\" selects every built-in one); pick another "
                                "name");
  }
  if (!factory) {
    throw std::invalid_argument("accelerate::register_tracker: the factory for '" + name + "' is empty");
  }
  auto& instance = detail::registry();
  std::lock_guard<std::mutex> lock(instance.mutex);
  if (!instance.trackers.emplace(name, detail::RegisteredTracker{std::move(factory), main_process_only})
           .second) {
    throw std::invalid_argument("accelerate::register_tracker: a tracker named '" + name +
                                "' is already registered; pick another name");
  }
}

std::vector<std::string> registered_trackers() {
  auto& instance = detail::registry();
  std::lock_guard<std::mutex> lock(instance.mutex);
  std::vector<std::string> names;
  for (const auto& entry : instance.trackers) {
    names.push_back(entry.first);
  }
  return names;
}

} // namespace accelerate
