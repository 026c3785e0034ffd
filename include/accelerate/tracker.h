// The experiment trackers' seam: the interface a tracker implements and the registry of trackers by name.
//
// This header does not include torch: trackers that write files (TensorBoard's event files among them) are
// compiled without torch's headers, which bundle their own protobuf and fmt.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace accelerate {

/// One value as a tracker receives it: a number (a 0-d tensor is already read) or a text.
struct TrackedValue {
  std::string name;
  std::variant<double, std::string> value;

  bool is_number() const { return std::holds_alternative<double>(value); }
  double number() const { return std::get<double>(value); }
  const std::string& text() const { return std::get<std::string>(value); }
};
using TrackedValues = std::vector<TrackedValue>;

/// What a tracker is started for (`Accelerator::init_trackers`).
struct TrackerRun {
  /// The `project_name` given to `init_trackers` (TensorBoard's run name).
  std::string project_name;
  /// Where the tracker writes: `project_dir/project_name`, absolute (`project_dir` defaults to `./runs`). A
  /// tracker that writes files creates it.
  std::string directory;
  int process_index = 0;
  int num_processes = 1;
};

/// An experiment tracker, as Accelerate's `GeneralTracker`: it receives the run's configuration once, then
/// every `accelerator.log(...)`, then `finish()` from `accelerator.end_training()`. A call that throws is
/// reported once with the tracker's name and the error, and the tracker is left out from then on: training
/// goes on. Write a record whole (one `write` per record) so that a killed run leaves readable files.
///
/// ```
/// class PrintTracker : public accelerate::Tracker {
/// public:
///   void log(const accelerate::TrackedValues& values, std::optional<int64_t> step) override {
///     for (const auto& value : values) {
///       if (value.is_number()) std::cout << value.name << "=" << value.number() << "\n";
///     }
///   }
/// };
/// accelerate::register_tracker("print", [](const accelerate::TrackerRun&) {
///   return std::make_unique<PrintTracker>();
/// });
/// accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().log_with({"print", "tensorboard"}));
/// ```
class Tracker {
public:
  virtual ~Tracker() = default;
  /// The run's hyperparameters (`init_trackers`'s `config`), once, before the first `log`.
  virtual void store_init_configuration(const TrackedValues& config) { (void)config; }
  /// One `accelerator.log(values, step)`; `step` is unset when the call gave none.
  virtual void log(const TrackedValues& values, std::optional<int64_t> step) = 0;
  /// The end of training: flush and close.
  virtual void finish() {}
  /// What a restarted job needs to continue this tracker's run (MLflow's run id), as text: `save_state`
  /// records it in the checkpoint's metadata.json under "trackers", by the tracker's name. Empty (the
  /// default): nothing to record.
  virtual std::string checkpoint_state() { return {}; }
  /// What `checkpoint_state` returned when the checkpoint `load_state` read was saved: called by `load_state`
  /// on a started tracker, or by `init_trackers` when `load_state` came first, so the order of the two calls
  /// does not matter.
  virtual void load_checkpoint_state(const std::string& state) { (void)state; }
};

/// Starts a tracker for a run; may throw (a directory it cannot create): the tracker is then left out.
using TrackerFactory = std::function<std::unique_ptr<Tracker>(const TrackerRun& run)>;

/// Adds a tracker that `AcceleratorOptions().log_with({...})` selects by `name`, as Accelerate 1.15's
/// `register_tracker_class`. With `main_process_only` (the default) it runs on the main process only;
/// otherwise on every process (`run.process_index` tells which). Throws std::invalid_argument when the name
/// is empty, `"all"`, or taken (the built-ins are `"tensorboard"`, `"jsonl"`, `"csv"` and `"mlflow"`).
void register_tracker(const std::string& name, TrackerFactory factory, bool main_process_only = true);

/// The registered trackers' names, sorted.
std::vector<std::string> registered_trackers();

} // namespace accelerate
