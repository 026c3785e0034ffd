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

/// The built-in trackers `log_with({"all"})` selects: each one this process can use (mlflow when
/// MLFLOW_TRACKING_URI is set, as Accelerate's "all" picks the trackers whose package is installed).
std::vector<std::string> builtin_tracker_names();

/// The built-in trackers (one line each in runtime/tracking/registry.cpp's table).
std::unique_ptr<Tracker> make_tensorboard_tracker(const TrackerRun& run);
std::unique_ptr<Tracker> make_jsonl_tracker(const TrackerRun& run);
std::unique_ptr<Tracker> make_csv_tracker(const TrackerRun& run);
std::unique_ptr<Tracker> make_mlflow_tracker(const TrackerRun& run);
/// MLFLOW_TRACKING_URI is set: "all" includes the mlflow tracker.
bool mlflow_tracker_configured();

} // namespace accelerate::detail
