// AcceleratorState: what one Accelerator knows about the job and the objects it prepared (runtime-internal).
#pragma once

#include "config.h"
#include "environment.h"

#include <accelerate/gradient_state.h>

#include <atomic>
#include <memory>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

namespace accelerate::detail {

class GradientSynchronizer;
struct OptimizerState;
struct SchedulerState;
struct TrainingState;

struct AcceleratorState {
  ResolvedConfig config;
  LaunchEnvironment environment;
  torch::Device device{torch::kCPU};
  /// Null when the job has one process.
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;
  std::shared_ptr<GradientState> gradient_state = std::make_shared<GradientState>();
  /// One per prepared model, in preparation order.
  std::vector<std::shared_ptr<GradientSynchronizer>> models;
  std::vector<std::shared_ptr<OptimizerState>> optimizers;
  std::vector<std::shared_ptr<SchedulerState>> schedulers;
  /// The seed prepared loaders shuffle with (`set_seed`, or `AcceleratorOptions::seed`).
  uint64_t data_seed = 0;
  /// `set_trigger` raised it on this process.
  bool trigger = false;
  /// Backward tracking, reach analysis, Join (runtime/accelerator.cpp).
  std::shared_ptr<TrainingState> training;
};

} // namespace accelerate::detail
