// OptimizerState and SchedulerState: what a prepared optimizer or scheduler handle shares (runtime-internal).
#pragma once

#include "ddp.h"

#include <accelerate/gradient_state.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

namespace accelerate::detail {

/// Which ATen fused kernel steps an optimizer, if any.
enum class FusedKind { None, Adam, AdamW, SGD };

struct OptimizerState {
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::shared_ptr<GradientState> gradient_state;
  std::shared_ptr<BackwardTracker> tracker;
  FusedKind fused = FusedKind::None;
  /// Adam/AdamW step counts as the fused kernels want them: one float tensor per parameter, on its device,
  /// with the libtorch step count it was made for.
  std::unordered_map<void*, std::pair<torch::Tensor, int64_t>> step_tensors;
  int64_t fused_steps = 0;
  bool last_step_skipped = false;
  int num_processes = 1;
};

struct SchedulerState {
  std::shared_ptr<torch::optim::LRScheduler> scheduler;
  std::shared_ptr<GradientState> gradient_state;
  bool step_with_optimizer = true;
  int steps_per_optimizer_step = 1;
  /// `gradient_state->optimizer_steps` when this scheduler last stepped.
  int64_t optimizer_steps_seen = 0;
  int64_t steps = 0;
};

/// Picks the fused kernel for `optimizer`'s type and options, or None.
FusedKind fused_kind_of(const torch::optim::Optimizer& optimizer);

} // namespace accelerate::detail
