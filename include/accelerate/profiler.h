// The profiler: `accelerator.profile(ProfileKwargs)` around a region or the training loop, as Hugging Face
// Accelerate's `Accelerator.profile` (libtorch's Kineto profiler, one Chrome trace per process).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accelerate {

class Accelerator;
class Profiler;

/// When the profiler records, as PyTorch's `torch.profiler.schedule(wait, warmup, active, repeat,
/// skip_first)`: after `skip_first` steps, each cycle waits `wait` steps, warms up for `warmup` (the profiler
/// is prepared, nothing is kept) and records `active` steps; `repeat` cycles (0: until the profile stops).
/// A step is what lies between two `Profiler::step()` calls.
struct ProfileSchedule {
  int wait = 0;
  int warmup = 0;
  int active = 1;
  int repeat = 0;
  int skip_first = 0;
};

/// How `Accelerator::profile` profiles, as Accelerate's `ProfileKwargs` (fluent setters, libtorch's style):
///
/// ```
/// auto kwargs = accelerate::ProfileKwargs()
///                   .activities({"cpu", "cuda"})
///                   .schedule_option({/*wait=*/1, /*warmup=*/1, /*active=*/3, /*repeat=*/1})
///                   .profile_memory(true)
///                   .output_trace_dir("traces");
/// ```
struct ProfileKwargs {
  /// "cpu" and/or "cuda" (Accelerate's names). Empty: the CPU, and CUDA when this process trains on a CUDA
  /// device (PyTorch's default). "cuda" on a process without CUDA is left out with a warning; any other name
  /// is refused.
  ProfileKwargs& activities(std::vector<std::string> value) {
    activities_ = std::move(value);
    return *this;
  }
  /// The schedule; unset: the `profile_schedule` setting (`ACCEL_PROFILE_SCHEDULE`), and when that is empty
  /// too, every step from `profile()` to `stop()` is recorded in one trace, without step markers (PyTorch's
  /// behaviour without a schedule).
  ProfileKwargs& schedule_option(ProfileSchedule value) {
    schedule_option_ = value;
    return *this;
  }
  /// Record each operator's input shapes.
  ProfileKwargs& record_shapes(bool value) {
    record_shapes_ = value;
    return *this;
  }
  /// Record tensor allocations and frees (`[memory]` events in the trace).
  ProfileKwargs& profile_memory(bool value) {
    profile_memory_ = value;
    return *this;
  }
  /// Record the stack of each operator: TorchScript frames only (a C++ caller's frames are not known to
  /// libtorch's profiler).
  ProfileKwargs& with_stack(bool value) {
    with_stack_ = value;
    return *this;
  }
  /// Estimate the FLOPs of the operators that have a formula (matrix products, convolutions).
  ProfileKwargs& with_flops(bool value) {
    with_flops_ = value;
    return *this;
  }
  /// Record the module hierarchy: TorchScript modules only, as `with_stack`.
  ProfileKwargs& with_modules(bool value) {
    with_modules_ = value;
    return *this;
  }
  /// Where `Profiler::stop()` writes this process's Chrome trace, `<dir>/profile_<process_index>.json`
  /// (Accelerate's name); an empty text writes none. Unset: the `profile_trace_dir` setting
  /// (`ACCEL_PROFILE_DIR`, default `profile`).
  ProfileKwargs& output_trace_dir(std::string value) {
    output_trace_dir_ = std::move(value);
    return *this;
  }
  /// Called at the end of each recorded cycle (PyTorch's `on_trace_ready`): the handler may write the
  /// cycle's trace itself with `profiler.export_chrome_trace(path)`.
  ProfileKwargs& on_trace_ready(std::function<void(Profiler&)> value) {
    on_trace_ready_ = std::move(value);
    return *this;
  }

  std::vector<std::string> activities_;
  std::optional<ProfileSchedule> schedule_option_;
  bool record_shapes_ = false;
  bool profile_memory_ = false;
  bool with_stack_ = false;
  bool with_flops_ = false;
  bool with_modules_ = false;
  std::optional<std::string> output_trace_dir_;
  std::function<void(Profiler&)> on_trace_ready_;
};

/// A running profile, returned by `Accelerator::profile`: it records from there until `stop()` (or its
/// destruction), following its schedule as `step()` advances it. With a schedule each step is marked in the
/// trace as PyTorch marks it (`ProfilerStep#<n>`). Use it on the thread that created it.
///
/// ```
/// auto profiler = accelerator.profile(accelerate::ProfileKwargs().schedule_option({1, 1, 3, 1}));
/// for (auto& batch : *loader) {
///   ...
///   optimizer.step();
///   profiler.step();
/// }
/// profiler.stop(); // writes profile/profile_<process_index>.json, then waits for every process
/// ```
///
/// As PyTorch's, the trace written at the end holds the last cycle recorded (earlier cycles go to
/// `on_trace_ready`). Outside its active steps the profiler is off: a step costs what it costs unprofiled.
/// A profiler refers to the accelerator that made it (its stop waits for every process): it must not outlive
/// it.
class Profiler {
public:
  Profiler(Profiler&& other) noexcept;
  Profiler& operator=(Profiler&& other) noexcept;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;
  /// Stops (see `stop()`); while an exception unwinds, the trace is still written but no process waits for
  /// the others.
  ~Profiler();

  /// The next step starts: the schedule moves on (PyTorch's `prof.step()`).
  void step();
  /// Ends the profile: the recording in progress ends, this process's trace is written to
  /// `<output_trace_dir>/profile_<process_index>.json` (nothing when no cycle was recorded: a warning says
  /// so), and every process waits for the others (`wait_for_everyone`). Later calls do nothing.
  void stop();

  /// Steps taken so far (`step()` calls).
  int64_t step_num() const;
  /// True while the profiler records (an active step of the schedule).
  bool recording() const;
  /// Where `stop()` writes this process's trace; empty when it writes none.
  const std::string& trace_path() const;
  /// Writes the last recorded cycle as a Chrome trace to `path` (PyTorch's `export_chrome_trace`); throws
  /// when no cycle has been recorded yet.
  void export_chrome_trace(const std::string& path);

  struct Impl;

private:
  explicit Profiler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class Accelerator;
};

} // namespace accelerate
