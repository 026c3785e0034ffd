// GradientState: what the prepared optimizer, scheduler and data loader share about the current step.
#pragma once

#include <cstdint>

namespace accelerate {

/// The step-level state every prepared object reads, as in Hugging Face Accelerate: the optimizer, the
/// scheduler and the loader never talk to the `Accelerator`, only to this (held by `shared_ptr`).
struct GradientState {
  /// Micro-steps per optimizer step (`gradient_accumulation_steps`).
  int accumulation_steps = 1;
  /// True on the micro-step that ends an accumulation window: gradients are synchronised across
  /// processes, and the prepared optimizer and scheduler step. Always true outside `accumulate`.
  bool sync_gradients = true;
  /// Micro-steps taken in the current window, this one included.
  int micro_steps_in_window = 0;
  /// True while the batch just yielded by a prepared loader is its last one of the epoch.
  bool end_of_dataloader = false;
  /// A prepared loader is being iterated.
  bool in_dataloader = false;
  /// How many samples of the final global batch are real (not padding) when `even_batches` padded it;
  /// -1 when nothing was padded. `gather_for_metrics` drops the rest.
  int64_t remainder = -1;
  /// Batches the active loader still holds after the current one (-1: unknown length).
  int64_t batches_remaining = -1;
  /// Optimizer steps actually taken (skipped accumulation micro-steps do not count).
  int64_t optimizer_steps = 0;
  /// `Accelerator::backward` calls since the last real optimizer step: inside an accumulation window a
  /// prepared optimizer's `zero_grad` only clears gradients when this is 0, so it may stand before the
  /// forward or after the step.
  int backwards_since_step = 0;
};

} // namespace accelerate
