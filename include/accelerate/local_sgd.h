// LocalSGD: processes train their replicas apart and average the parameters every few optimizer steps, as
// Hugging Face Accelerate's `LocalSGD` (runtime/parallel/local_sgd.cpp).
#pragma once

#include <accelerate/accelerator.h>

#include <cstdint>
#include <optional>

namespace accelerate {

/// A scope in which `model`'s gradients are not synchronised (`Accelerator::no_sync`) and its parameters are
/// averaged over the processes instead: every `local_sgd_steps` calls of `step()`, and when the scope ends.
/// Optimizer state is never averaged: each process keeps its own. As Accelerate's
/// `with LocalSGD(accelerator=..., model=..., local_sgd_steps=K) as local_sgd:`, call `step()` once after
/// each optimizer step:
///
///     accelerate::LocalSGD local_sgd(accelerator, model, 8);
///     for (auto& batch : loader) {
///       accelerator.backward(loss_of(batch));
///       optimizer.step();
///       optimizer.zero_grad();
///       local_sgd.step();
///     }
///     local_sgd.end(); // the final average (the destructor makes it when end() was not called)
///
/// `enabled` false (or one process) makes it do nothing, so a program can turn it off without changing its
/// loop. Under the "ddp" strategy only: a sharded strategy ("zero", "fsdp") is refused at construction.
class LocalSGD {
public:
  template <typename Model>
  LocalSGD(Accelerator& accelerator, Model& model, int64_t local_sgd_steps, bool enabled = true)
      : LocalSGD(accelerator, detail::module_of(model), local_sgd_steps, enabled) {}
  LocalSGD(Accelerator& accelerator, torch::nn::Module& model, int64_t local_sgd_steps, bool enabled = true);
  /// Ends the scope as `end()` does; when an exception is unwinding it leaves `no_sync` without averaging
  /// (the other processes may not reach an average).
  ~LocalSGD();
  LocalSGD(const LocalSGD&) = delete;
  LocalSGD& operator=(const LocalSGD&) = delete;

  /// One optimizer step done: every `local_sgd_steps`-th call averages the parameters (a collective: every
  /// process calls it as often).
  void step();
  /// Averages the parameters one last time and leaves `no_sync`. Calling `step()` after it is an error.
  void end();
  /// How many times the parameters were averaged so far.
  int64_t averages() const { return averages_; }

private:
  void average();

  Accelerator& accelerator_;
  torch::nn::Module& model_;
  int64_t local_sgd_steps_;
  bool enabled_;
  int64_t steps_ = 0;
  int64_t averages_ = 0;
  bool ended_ = false;
  std::optional<Accelerator::NoSyncGuard> no_sync_;
};

} // namespace accelerate
