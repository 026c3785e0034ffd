// AcceleratorState: what one Accelerator knows about the job and the objects it prepared (runtime-internal).
#pragma once

#include "settings/config.h"
#include "transport/environment.h"

#include <accelerate/detail/loader_context.h>
#include <accelerate/gradient_state.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

namespace accelerate {
class Accelerator;
}

namespace accelerate::detail {

class RecomputedUnits; // accelerator/activation_checkpoint.h

class ParallelEngine;
class PreparedModel;
struct OptimizerState;
struct SchedulerState;
struct TrainingState;
struct TrackingState;
class Precision;
struct MachineGroups;

/// What every Accelerator of a process shares, as Hugging Face's `AcceleratorState` is shared: the launch
/// environment, the device and the process group (its TCPStore). The first Accelerator creates it; one built
/// while another is alive reuses it; the process group shuts down when the last Accelerator holding it goes.
struct ProcessState {
  LaunchEnvironment environment;
  torch::Device device{torch::kCPU};
  /// Null when the job has one process.
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;
  /// The job machine by machine (hybrid sharding), formed the first time a strategy asks for it.
  std::shared_ptr<const MachineGroups> machine_groups;
  std::mutex machine_groups_mutex;
  ~ProcessState();
};

struct AcceleratorState {
  AcceleratorState(ResolvedConfig resolved, std::shared_ptr<ProcessState> shared)
      : config(std::move(resolved)), process(std::move(shared)), environment(process->environment),
        device(process->device), process_group(process->process_group) {}
  AcceleratorState(const AcceleratorState&) = delete;
  AcceleratorState& operator=(const AcceleratorState&) = delete;

  ResolvedConfig config;
  /// Shared with the process's other Accelerators.
  const std::shared_ptr<ProcessState> process;
  /// The process's facts, read from `process` (one home: these name its fields).
  const LaunchEnvironment& environment;
  const torch::Device& device;
  /// Null when the job has one process.
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group;
  std::shared_ptr<GradientState> gradient_state = std::make_shared<GradientState>();
  /// The parallel strategy (runtime/parallel/engine.h), chosen at construction from
  /// `config.parallel_strategy`.
  std::shared_ptr<ParallelEngine> engine;
  /// activation_checkpointing's unit host where the strategy leaves unit() a plain call (null otherwise).
  std::shared_ptr<RecomputedUnits> recomputed_units;
  /// One per prepared model, in preparation order.
  std::vector<std::shared_ptr<PreparedModel>> models;
  std::vector<std::shared_ptr<OptimizerState>> optimizers;
  std::vector<std::shared_ptr<SchedulerState>> schedulers;
  /// The seed prepared loaders shuffle with (`set_seed`, or `AcceleratorOptions::seed`).
  uint64_t data_seed = 0;
  /// Prepared loaders (for the data position in checkpoints, and `set_seed`).
  std::shared_ptr<LoaderRegistry> loaders = std::make_shared<LoaderRegistry>();
  /// Objects added by `register_for_checkpointing`, in registration order.
  std::vector<std::pair<std::function<void(torch::serialize::OutputArchive&)>,
                        std::function<void(torch::serialize::InputArchive&)>>>
      checkpoint_entries;
  /// Integers added by `register_counter`, by name (one registration a name: the latest).
  struct Counter {
    std::string name;
    std::function<std::int64_t()> get;
    std::function<void(std::int64_t)> set;
  };
  std::vector<Counter> counters;
  /// The counters the last `load_state` read, by name: a counter registered after it takes its value.
  std::map<std::string, std::int64_t> loaded_counters;
  /// The number the next automatically named checkpoint gets (restored by `load_state`).
  int64_t next_checkpoint_number = 0;
  /// `set_trigger` raised it on this process.
  bool trigger = false;
  /// The mixed-precision recipe (runtime/precision/precision.cpp).
  std::shared_ptr<Precision> precision;
  /// Backward tracking, reach analysis, Join (runtime/accelerator/accelerator.cpp).
  std::shared_ptr<TrainingState> training;
  /// `save_state`/`load_state` calls so far: numbers each collective checkpoint call
  /// (runtime/checkpoint/).
  int64_t checkpoint_calls = 0;
  /// The optimizer step debug mode last compared the replicas' checksums at
  /// (runtime/accelerator/debug_mode.cpp).
  int64_t debug_checked_step = -1;
  /// `graphed_step` was called (runtime/accelerator/step_graph.cpp); with `cuda_graph` on and none made,
  /// `backward` warns once that nothing is captured.
  bool graphed_step_made = false;
  bool warned_cuda_graph_unused = false;
  /// The started trackers and what `log` reports once (runtime/tracking/tracking.cpp).
  std::shared_ptr<TrackingState> tracking;
};

/// Gives `accelerator` a new process group after an attempt abandoned the old one
/// (find_executable_batch_size, runtime/accelerator/batch_size_search.cpp): drops its prepared objects
/// (`free_memory`), forms the job's next group over the kept store (a collective: every process calls it),
/// agrees on process 0's random state again, and rebuilds the strategy over the new group. The old group is
/// left to its last reference.
void replace_process_group(Accelerator& accelerator);

} // namespace accelerate::detail
