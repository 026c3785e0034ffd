// The profiler (`Accelerator::profile`, <accelerate/profiler.h>): libtorch's Kineto profiler driven through
// PyTorch's schedule (torch.profiler.profile's actions, written here since PyTorch's is Python), one Chrome
// trace per process named as Accelerate names it.
#include <accelerate/accelerator.h>
#include <accelerate/logging.h>
#include <accelerate/profiler.h>

#include "accelerator/state.h"
#include "common/durable_file.h"
#include "settings/spelling.h"

#include <cstdio>
#include <exception>
#include <set>
#include <stdexcept>

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

namespace accelerate {

namespace {

namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

const Logger& profiler_logger() {
  static const Logger logger = get_logger("accelerate.profiler");
  return logger;
}

/// PyTorch's ProfilerAction.
enum class Action { none, warmup, record, record_and_save };

/// PyTorch's `torch.profiler.schedule(...)` at `step`.
Action scheduled(const ProfileSchedule& schedule, int64_t step) {
  if (step < schedule.skip_first) {
    return Action::none;
  }
  step -= schedule.skip_first;
  const int64_t cycle = static_cast<int64_t>(schedule.wait) + schedule.warmup + schedule.active;
  if (schedule.repeat > 0 && step / cycle >= schedule.repeat) {
    return Action::none;
  }
  const int64_t within = step % cycle;
  if (within < schedule.wait) {
    return Action::none;
  }
  if (within < schedule.wait + schedule.warmup) {
    return Action::warmup;
  }
  return within < cycle - 1 ? Action::record : Action::record_and_save;
}

std::string schedule_text(const ProfileSchedule& s) {
  return "wait=" + std::to_string(s.wait) + ", warmup=" + std::to_string(s.warmup) +
         ", active=" + std::to_string(s.active) + ", repeat=" + std::to_string(s.repeat) +
         ", skip_first=" + std::to_string(s.skip_first);
}

void check_schedule(const ProfileSchedule& s) {
  if (s.wait < 0 || s.warmup < 0 || s.active < 1 || s.repeat < 0 || s.skip_first < 0) {
    throw std::invalid_argument("accelerate: ProfileKwargs().schedule_option(" + schedule_text(s) +
                                ") is not a profiler schedule: active must be >= 1 and wait, warmup, repeat "
                                "and skip_first >= 0 (e.g. {1, 1, 3, 1}: wait one step, warm up one, record "
                                "three, once)");
  }
}

} // namespace

struct Profiler::Impl {
  Accelerator* accelerator = nullptr;
  std::optional<ProfileSchedule> schedule;
  std::set<ActivityType> activities;
  ProfilerConfig config{ProfilerState::KINETO};
  bool synchronize_cuda = false;
  std::string trace_path;
  std::function<void(Profiler&)> on_trace_ready;
  Profiler* owner = nullptr; ///< the Profiler holding this (kept current across moves)

  int64_t step_num = 0;
  Action current = Action::none;
  bool enabled = false; ///< the Kineto profiler records now
  bool stopped = false;
  int uncaught_at_start = 0;
  std::unique_ptr<kineto::ProfilerResult> last; ///< the last recorded cycle
  /// Where `last` was written: libtorch writes a result once, so a later write of it copies that file.
  std::string saved;
  std::unique_ptr<at::RecordFunction> step_marker;

  Action action_at(int64_t step) const { return schedule ? scheduled(*schedule, step) : Action::record; }

  void prepare() { kineto::prepareProfiler(config, activities); }
  void start() {
    kineto::enableProfiler(config, activities);
    enabled = true;
  }
  void stop_recording() {
    if (synchronize_cuda) {
      torch::cuda::synchronize();
    }
    last = kineto::disableProfiler();
    saved.clear();
    enabled = false;
  }
  /// Writes `last` to `path` (through a temporary file beside it, renamed).
  void write_last(const std::string& path) {
    if (!saved.empty()) {
      if (saved != path) {
        detail::replace_file_atomically(path, detail::read_whole_file(saved));
      }
      return;
    }
    const std::string temporary =
        detail::join_path(detail::parent_path(path), "." + detail::file_name(path) + ".tmp");
    last->save(temporary);
    if (!detail::path_exists(temporary)) {
      throw std::runtime_error(
          "accelerate: the profiler could not write its trace to '" + path +
          "' (libtorch's profiler could not open the file: does its directory exist, and may "
          "this process write there?)");
    }
    detail::rename_path(temporary, path);
    saved = path;
  }
  void trace_ready() {
    if (on_trace_ready && owner) {
      on_trace_ready(*owner);
    }
  }

  /// torch.profiler.profile's action table: what moving from `from` to `to` (nullopt: the end) does.
  void transit(Action from, std::optional<Action> to) {
    if (!to) {
      if (from == Action::warmup) {
        start();
        stop_recording();
      } else if (from == Action::record || from == Action::record_and_save) {
        stop_recording();
        trace_ready();
      }
      return;
    }
    switch (from) {
    case Action::none:
      if (*to != Action::none) {
        prepare();
      }
      if (*to == Action::record || *to == Action::record_and_save) {
        start();
      }
      break;
    case Action::warmup:
      if (*to == Action::none) {
        profiler_logger().on_every_process().warning("profiler: a warmup step followed by no recording (",
                                                     schedule_text(*schedule), ")");
        start();
        stop_recording();
      } else if (*to != Action::warmup) {
        start();
      }
      break;
    case Action::record:
      if (*to == Action::none || *to == Action::warmup) {
        stop_recording();
      }
      break;
    case Action::record_and_save:
      if (*to == Action::record_and_save || *to == Action::record || *to == Action::warmup ||
          *to == Action::none) {
        stop_recording();
        trace_ready();
        if (*to != Action::none) {
          prepare();
        }
        if (*to == Action::record || *to == Action::record_and_save) {
          start();
        }
      }
      break;
    }
  }

  /// `ProfilerStep#<n>` around each step, as PyTorch marks steps when a schedule is given (recorded only
  /// while the profiler records).
  void open_step_marker() {
    if (!schedule) {
      return;
    }
    step_marker = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
    if (step_marker->isActive()) {
      step_marker->before("ProfilerStep#" + std::to_string(step_num));
    }
  }
  void close_step_marker() {
    if (step_marker) {
      step_marker->end();
      step_marker.reset();
    }
  }
};

Profiler::Profiler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->owner = this;
}

Profiler::Profiler(Profiler&& other) noexcept : impl_(std::move(other.impl_)) {
  if (impl_) {
    impl_->owner = this;
  }
}

Profiler& Profiler::operator=(Profiler&& other) noexcept {
  if (this != &other) {
    if (impl_) {
      try {
        stop();
      } catch (const std::exception& error) {
        profiler_logger().on_every_process().error("profiler: ", error.what());
      }
    }
    impl_ = std::move(other.impl_);
    if (impl_) {
      impl_->owner = this;
    }
  }
  return *this;
}

Profiler::~Profiler() {
  if (!impl_) {
    return;
  }
  try {
    stop();
  } catch (const std::exception& error) {
    profiler_logger().on_every_process().error("profiler: ", error.what());
  }
}

void Profiler::step() {
  if (!impl_ || impl_->stopped) {
    return;
  }
  impl_->close_step_marker();
  const Action previous = impl_->current;
  ++impl_->step_num;
  impl_->current = impl_->action_at(impl_->step_num);
  impl_->transit(previous, impl_->current);
  impl_->open_step_marker();
}

void Profiler::stop() {
  if (!impl_ || impl_->stopped) {
    return;
  }
  Impl& impl = *impl_;
  impl.stopped = true;
  impl.close_step_marker();
  impl.transit(impl.current, std::nullopt);
  if (!impl.trace_path.empty()) {
    if (impl.last) {
      impl.write_last(impl.trace_path);
    } else {
      profiler_logger().on_every_process().warning(
          "profiler: no step was recorded in ", impl.step_num, " steps (schedule ",
          schedule_text(impl.schedule.value_or(ProfileSchedule())), "), so no trace is written to ",
          impl.trace_path, "; call step() once per training step, or shorten the schedule's wait");
    }
  }
  // Accelerate waits for every process after writing; not while an exception unwinds this process, whose
  // peers may never get here.
  if (std::uncaught_exceptions() == impl.uncaught_at_start && impl.accelerator->num_processes() > 1) {
    impl.accelerator->wait_for_everyone();
  }
}

int64_t Profiler::step_num() const {
  return impl_ ? impl_->step_num : 0;
}

bool Profiler::recording() const {
  return impl_ && impl_->enabled;
}

const std::string& Profiler::trace_path() const {
  static const std::string none;
  return impl_ ? impl_->trace_path : none;
}

void Profiler::export_chrome_trace(const std::string& path) {
  if (!impl_ || !impl_->last) {
    throw std::logic_error(
        "accelerate: Profiler::export_chrome_trace(\"" + path +
        "\"): no cycle has been recorded yet (call it from on_trace_ready, or after stop())");
  }
  impl_->write_last(path);
}

Profiler Accelerator::profile(const ProfileKwargs& kwargs) {
  const detail::ResolvedConfig& config = detail::internal_state(*this).config;
  auto impl = std::make_unique<Profiler::Impl>();
  impl->accelerator = this;
  impl->uncaught_at_start = std::uncaught_exceptions();

  // Activities: Accelerate's names; by default the CPU, and CUDA when this process trains on it.
  std::vector<std::string> names = kwargs.activities_;
  if (names.empty()) {
    names.push_back("cpu");
    if (device().is_cuda()) {
      names.push_back("cuda");
    }
  }
  for (const auto& name : names) {
    if (name == "cpu") {
      impl->activities.insert(ActivityType::CPU);
    } else if (name == "cuda") {
      if (torch::cuda::is_available()) {
        impl->activities.insert(ActivityType::CUDA);
        impl->synchronize_cuda = true;
      } else {
        profiler_logger().warning(
            "profiler: activity 'cuda' left out: CUDA is not available on this machine");
      }
    } else {
      throw std::invalid_argument("accelerate: ProfileKwargs().activities: '" + name +
                                  "' is not a profiler activity; use \"cpu\" and/or \"cuda\"");
    }
  }
  if (impl->activities.empty()) {
    throw std::invalid_argument("accelerate: ProfileKwargs().activities leaves nothing to profile on this "
                                "machine; add \"cpu\"");
  }

  // The schedule: the kwargs', else the profile_schedule setting (already checked when it was resolved).
  if (kwargs.schedule_option_) {
    check_schedule(*kwargs.schedule_option_);
    impl->schedule = kwargs.schedule_option_;
  } else if (!config.profile_schedule.empty()) {
    const auto numbers = spelling::profile_schedule(config.profile_schedule);
    if (!numbers) {
      throw std::invalid_argument("accelerate: profile_schedule='" + config.profile_schedule +
                                  "' is not a profiler schedule; " + spelling::kProfileScheduleForm);
    }
    impl->schedule = ProfileSchedule{(*numbers)[0], (*numbers)[1], (*numbers)[2], (*numbers)[3], 0};
  }

  const std::string directory = kwargs.output_trace_dir_.value_or(config.profile_trace_dir);
  if (!directory.empty()) {
    try {
      detail::make_directories(directory);
    } catch (const std::exception& error) {
      throw std::invalid_argument(
          "accelerate: the profiler's trace directory '" + directory + "' cannot be made (" + error.what() +
          "); set ProfileKwargs().output_trace_dir(...) or ACCEL_PROFILE_DIR to a directory this process can "
          "write, or to an empty text for no trace file");
    }
    impl->trace_path = detail::join_path(directory, "profile_" + std::to_string(process_index()) + ".json");
  }

  impl->config = ProfilerConfig(ProfilerState::KINETO, kwargs.record_shapes_, kwargs.profile_memory_,
                                kwargs.with_stack_, kwargs.with_flops_, kwargs.with_modules_);
  impl->on_trace_ready = kwargs.on_trace_ready_;
  if (kineto::isProfilerEnabledInMainThread()) {
    throw std::logic_error(
        "accelerate: accelerator.profile(): libtorch's profiler is already recording in this "
        "process; stop() the running profile before starting another");
  }

  Profiler profiler(std::move(impl));
  Profiler::Impl& started = *profiler.impl_;
  started.current = started.action_at(0);
  started.transit(Action::none, started.current);
  started.open_step_marker();
  return profiler;
}

} // namespace accelerate
