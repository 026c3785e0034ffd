// accelerate::Scheduler: the prepared learning-rate scheduler, stepping once per real optimizer step.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/optim/schedulers/lr_scheduler.h>

namespace accelerate {

namespace detail {
struct SchedulerState;
}

/// What `accelerator.prepare(scheduler)` returns. `step()` steps the libtorch scheduler once per optimizer
/// step actually taken: not on accumulation micro-steps, not after a step the fp16 grad scaler skipped.
/// Hugging Face Accelerate instead steps it `num_processes` times per optimizer step (one per process);
/// `AcceleratorOptions().scheduler_steps_per_process(true)` reproduces that, and
/// `step_scheduler_with_optimizer(false)` steps it on every call regardless of the optimizer.
///
/// ```
/// auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, /*step_size=*/10, /*gamma=*/0.5));
/// optimizer.step();
/// scheduler.step();
/// ```
class Scheduler {
public:
  explicit Scheduler(std::shared_ptr<detail::SchedulerState> state);

  void step();
  torch::optim::LRScheduler& unwrap() const;
  torch::optim::LRScheduler& operator*() const { return unwrap(); }
  /// Pointer-style call sites (`scheduler->step()`) reach this handle's `step`.
  Scheduler* operator->() { return this; }
  const Scheduler* operator->() const { return this; }
  /// libtorch scheduler steps taken so far.
  int64_t steps() const;

  const std::shared_ptr<detail::SchedulerState>& internal() const { return state_; }

private:
  std::shared_ptr<detail::SchedulerState> state_;
};

} // namespace accelerate
