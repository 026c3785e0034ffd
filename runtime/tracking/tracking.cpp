// The Accelerator's experiment tracking: init_trackers, log, get_tracker, end_training. Trackers run on the
// main process (or on every process when registered so); a tracker that fails is reported once and left out,
// and training goes on.
#include <accelerate/accelerator.h>
#include <accelerate/logging.h>
#include <accelerate/progress.h>

#include "accelerator/state.h"
#include "common/durable_file.h"
#include "tracking/registry.h"
#include "tracking/tracker_states.h"

#include <algorithm>
#include <map>
#include <set>

namespace accelerate {
namespace detail {

struct TrackingState {
  struct Started {
    std::string name;
    std::unique_ptr<Tracker> tracker;
  };
  enum class Phase { not_started, started, ended };
  Phase phase = Phase::not_started;
  /// The names `log_with` resolved to ("all" expanded), for `get_tracker`.
  std::vector<std::string> selected;
  /// The trackers running on this process; a tracker that failed is removed.
  std::vector<Started> trackers;
  bool warned_log_before_init = false;
  /// Keys already reported as not numbers (each is reported once).
  std::set<std::string> warned_not_numbers;
  /// The trackers' states the last `load_state` read, by tracker name: a tracker started after it gets its
  /// own at `init_trackers`.
  std::map<std::string, std::string> loaded_states;
};

namespace {

const Logger& tracking_logger() {
  static const Logger logger = get_logger("accelerate.tracking");
  return logger;
}

/// A tracker that ignores every call: `get_tracker` on a process where the tracker does not run.
class IdleTracker : public Tracker {
public:
  void log(const TrackedValues&, std::optional<int64_t>) override {}
};

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) {
    text += (text.empty() ? "'" : ", '") + name + "'";
  }
  return text;
}

std::string shape_text(const at::Tensor& tensor) {
  std::string text = "[";
  for (const auto size : tensor.sizes()) {
    text += (text.size() > 1 ? ", " : "") + std::to_string(size);
  }
  return text + "]";
}

/// `values` as trackers receive them. The tensors are read together: converted to float64 on their device and
/// copied to the host in one transfer (one synchronisation per call on a GPU). A value that is not a number
/// is reported (once per name) and left out.
TrackedValues read_values(TrackingState& tracking, const LogValues& values, const char* call) {
  TrackedValues read;
  std::vector<at::Tensor> tensors;
  std::vector<size_t> tensor_slots;
  for (const auto& [name, value] : values) {
    const auto& held = value.get();
    if (const auto* number = std::get_if<double>(&held)) {
      read.push_back({name, *number});
    } else if (const auto* text = std::get_if<std::string>(&held)) {
      read.push_back({name, *text});
    } else {
      const auto& tensor = std::get<at::Tensor>(held);
      std::string problem;
      if (!tensor.defined()) {
        problem = "an undefined tensor";
      } else if (tensor.numel() != 1) {
        problem =
            "a tensor of shape " + shape_text(tensor) + " (" + std::to_string(tensor.numel()) + " elements)";
      } else if (tensor.is_complex()) {
        problem = "a complex tensor";
      }
      if (!problem.empty()) {
        if (tracking.warned_not_numbers.insert(name).second) {
          tracking_logger().on_every_process().warning(
              call, ": the value '", name, "' is ", problem,
              ", not a number; log a number, a 0-d tensor (loss.mean()) or a text. It is left out, the other "
              "values are logged, and training goes on (reported once per name)");
        }
        continue;
      }
      tensor_slots.push_back(read.size());
      tensors.push_back(tensor.detach().reshape({}).to(at::kDouble));
      read.push_back({name, 0.0});
    }
  }
  if (!tensors.empty()) {
    const bool one_device = std::all_of(tensors.begin(), tensors.end(), [&](const at::Tensor& t) {
      return t.device() == tensors.front().device();
    });
    if (one_device) {
      const auto host = at::stack(tensors).to(at::kCPU);
      const double* numbers = host.data_ptr<double>();
      for (size_t i = 0; i < tensor_slots.size(); ++i) {
        read[tensor_slots[i]].value = numbers[i];
      }
    } else {
      for (size_t i = 0; i < tensor_slots.size(); ++i) {
        read[tensor_slots[i]].value = tensors[i].item<double>();
      }
    }
  }
  return read;
}

/// The loss a progress bar shows: the value named "loss", else the first whose name holds "loss".
void show_loss_in_progress_bars(const TrackedValues& values) {
  const TrackedValue* loss = nullptr;
  for (const auto& value : values) {
    if (value.is_number() &&
        (value.name == "loss" || (!loss && value.name.find("loss") != std::string::npos))) {
      loss = &value;
    }
  }
  if (loss != nullptr) {
    note_logged_loss(loss->name, loss->number());
  }
}

/// Runs `call` on each started tracker; one that throws is reported with its name and left out.
template <typename Call> void for_each_tracker(TrackingState& tracking, const char* what, Call call) {
  auto& trackers = tracking.trackers;
  for (auto it = trackers.begin(); it != trackers.end();) {
    try {
      call(*it->tracker, it->name);
      ++it;
    } catch (const std::exception& error) {
      tracking_logger().on_every_process().warning(
          "the '", it->name, "' tracker failed in ", what, ": ", error.what(),
          ". It is left out from now on; training goes on, and the records it wrote before stay readable");
      it = trackers.erase(it);
    }
  }
}

/// Hands each started tracker the state `load_state` read for it (`tracking.loaded_states`).
void hand_back_loaded_states(TrackingState& tracking) {
  for_each_tracker(tracking, "load_checkpoint_state", [&](Tracker& tracker, const std::string& name) {
    if (auto loaded = tracking.loaded_states.find(name); loaded != tracking.loaded_states.end()) {
      tracker.load_checkpoint_state(loaded->second);
    }
  });
}

} // namespace
} // namespace detail

namespace {
/// This accelerator's tracking state, made on first use.
detail::TrackingState& tracking_of(detail::AcceleratorState& state) {
  if (!state.tracking) {
    state.tracking = std::make_shared<detail::TrackingState>();
  }
  return *state.tracking;
}
} // namespace

namespace detail {

std::map<std::string, std::string> tracker_checkpoint_states(AcceleratorState& state) {
  auto& tracking = tracking_of(state);
  std::map<std::string, std::string> states;
  for_each_tracker(tracking, "checkpoint_state", [&](Tracker& tracker, const std::string& name) {
    if (std::string text = tracker.checkpoint_state(); !text.empty()) {
      states[name] = std::move(text);
    }
  });
  // A tracker the checkpoint named that this start did not run (not selected, or failed to start) keeps its
  // state for the next restart.
  for (const auto& [name, text] : tracking.loaded_states) {
    states.emplace(name, text);
  }
  return states;
}

void load_tracker_checkpoint_states(AcceleratorState& state,
                                    const std::map<std::string, std::string>& states) {
  auto& tracking = tracking_of(state);
  tracking.loaded_states = states;
  hand_back_loaded_states(tracking);
}

} // namespace detail

void Accelerator::init_trackers(const std::string& project_name, const LogValues& config) {
  auto& state = *state_;
  auto& tracking = tracking_of(state);
  const auto& logger = detail::tracking_logger();
  if (tracking.phase == detail::TrackingState::Phase::started) {
    logger.warning(
        "init_trackers('", project_name,
        "'): the trackers were already started; this call is ignored (call end_training() first to "
        "start new ones)");
    return;
  }
  tracking.phase = detail::TrackingState::Phase::started;
  tracking.selected.clear();
  std::vector<std::string> names;
  for (const auto& name : state.config.log_with) {
    const auto expanded = name == "all" ? detail::builtin_tracker_names() : std::vector<std::string>{name};
    for (const auto& one : expanded) {
      if (std::find(names.begin(), names.end(), one) == names.end()) {
        names.push_back(one);
      }
    }
  }
  const std::string project_dir = state.config.project_dir.empty() ? "runs" : state.config.project_dir;
  TrackerRun run;
  run.project_name = project_name;
  run.process_index = process_index();
  run.num_processes = num_processes();
  for (const auto& name : names) {
    const auto registered = detail::find_tracker(name);
    if (!registered) {
      logger.warning(
          "log_with names '", name, "', but no tracker is registered by that name; the known ones are ",
          detail::joined(registered_trackers()),
          " (register your own with accelerate::register_tracker before init_trackers). It is left "
          "out; training goes on");
      continue;
    }
    tracking.selected.push_back(name);
    if (registered->main_process_only && !is_main_process()) {
      continue;
    }
    try {
      run.directory = detail::absolute_path(detail::join_path(project_dir, project_name));
      auto tracker = registered->factory(run);
      if (!tracker) {
        throw std::runtime_error("its factory returned no tracker");
      }
      tracking.trackers.push_back(detail::TrackingState::Started{name, std::move(tracker)});
    } catch (const std::exception& error) {
      logger.on_every_process().warning("the '", name, "' tracker could not start in '", run.directory,
                                        "': ", error.what(), ". It is left out; training goes on");
    }
  }
  if (tracking.trackers.empty()) {
    return;
  }
  // A load_state before init_trackers: each tracker continues what the checkpoint recorded for it.
  detail::hand_back_loaded_states(tracking);
  const auto values = detail::read_values(tracking, config, "init_trackers");
  detail::for_each_tracker(tracking, "store_init_configuration", [&](Tracker& tracker, const std::string&) {
    tracker.store_init_configuration(values);
  });
}

void Accelerator::log(const LogValues& values, std::optional<int64_t> step) {
  auto& state = *state_;
  auto& tracking = tracking_of(state);
  if (tracking.phase == detail::TrackingState::Phase::not_started && !state.config.log_with.empty() &&
      !tracking.warned_log_before_init) {
    tracking.warned_log_before_init = true;
    detail::tracking_logger().warning(
        "accelerator.log(...) was called before accelerator.init_trackers(project_name): nothing is logged "
        "until "
        "init_trackers is called (before the training loop); training goes on (reported once)");
  }
  const bool bar = detail::progress_bar_shown();
  if (tracking.trackers.empty() && !bar) {
    return; // nothing on this process reads the values: no tensor is read
  }
  const auto read = detail::read_values(tracking, values, "accelerator.log");
  if (bar) {
    detail::show_loss_in_progress_bars(read);
  }
  detail::for_each_tracker(tracking, "log",
                           [&](Tracker& tracker, const std::string&) { tracker.log(read, step); });
}

Tracker& Accelerator::get_tracker(const std::string& name) {
  auto& state = *state_;
  if (state.tracking) {
    for (auto& started : state.tracking->trackers) {
      if (started.name == name) {
        return *started.tracker;
      }
    }
    const auto& selected = state.tracking->selected;
    if (std::find(selected.begin(), selected.end(), name) != selected.end()) {
      static detail::IdleTracker idle;
      return idle;
    }
  }
  throw std::invalid_argument(
      "accelerate::Accelerator::get_tracker: no tracker '" + name + "' was started" +
      (state.tracking && state.tracking->phase != detail::TrackingState::Phase::not_started
           ? "; log_with selected " + (state.tracking->selected.empty()
                                           ? std::string("none")
                                           : detail::joined(state.tracking->selected))
           : std::string("; call init_trackers(project_name) first")) +
      " (AcceleratorOptions().log_with({...}) names the trackers)");
}

void Accelerator::end_training() {
  auto& tracking = tracking_of(*state_);
  detail::for_each_tracker(tracking, "finish",
                           [](Tracker& tracker, const std::string&) { tracker.finish(); });
  tracking.trackers.clear();
  if (tracking.phase == detail::TrackingState::Phase::started) {
    tracking.phase = detail::TrackingState::Phase::ended;
  }
}

} // namespace accelerate
