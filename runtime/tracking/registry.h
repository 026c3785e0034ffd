// The registry of experiment trackers by name, and the built-in trackers' factories (runtime-internal; no
// torch).
#pragma once

#include <accelerate/tracker.h>

#include <optional>
#include <string>
#include <vector>

namespace accelerate::detail {

struct RegisteredTracker {
  TrackerFactory factory;
  bool main_process_only = true;
};

/// The tracker registered as `name`, if any.
std::optional<RegisteredTracker> find_tracker(const std::string& name);

/// The built-in trackers' names, which `log_with({"all"})` selects.
std::vector<std::string> builtin_tracker_names();

/// The built-in trackers (one line each in runtime/tracking/registry.cpp's table).
std::unique_ptr<Tracker> make_tensorboard_tracker(const TrackerRun& run);
std::unique_ptr<Tracker> make_jsonl_tracker(const TrackerRun& run);
std::unique_ptr<Tracker> make_csv_tracker(const TrackerRun& run);

} // namespace accelerate::detail
