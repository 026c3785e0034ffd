// accelerate::Optimizer: the prepared optimizer (fused ATen step, accumulation-aware, sync-checked).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

namespace accelerate {

namespace detail {
struct OptimizerState;
/// What `declare_elementwise_optimizer` records (runtime/accelerator/optimizer_kinds.cpp).
void declare_elementwise_optimizer(
    const std::type_info& type,
    std::function<std::unique_ptr<torch::optim::OptimizerParamState>()> make_state);
} // namespace detail

/// Declares that optimizer class `OptimizerType` updates each element of a parameter from that element's
/// value, gradient and state alone, and keeps per parameter a `ParamState` whose tensors are shaped like the
/// parameter (besides numbers such as a step count; `ParamState` implements `serialize`, as libtorch's
/// states do). torch::optim::SGD, Adam, AdamW, Adagrad and RMSprop are declared already.
///
/// Under ZeRO (stages 1 and 2) and FSDP each process then steps its share of the parameters with the
/// optimizer's own `step()`, and checkpoints hold the state whole per parameter (loadable at any process
/// count, under any strategy). Call it before `accelerator.prepare(optimizer)`.
///
/// Do not declare an optimizer whose step couples the elements of a parameter or of the model (a norm, as
/// LAMB's and LARS's trust ratios; factored moments, as Adafactor's) or that needs a closure (LBFGS): each
/// process would compute it over its share only and train differently from one process. Under ZeRO and FSDP
/// an optimizer not declared is refused at prepare, naming its type.
///
/// ```
/// accelerate::declare_elementwise_optimizer<MySignSgd, MySignSgdParamState>();
/// auto optimizer = accelerator.prepare(MySignSgd(model->parameters(), 1e-3));
/// ```
template <typename OptimizerType, typename ParamState> void declare_elementwise_optimizer() {
  static_assert(std::is_base_of_v<torch::optim::Optimizer, OptimizerType>,
                "declare_elementwise_optimizer: the first type must be a torch::optim::Optimizer");
  static_assert(std::is_base_of_v<torch::optim::OptimizerParamState, ParamState>,
                "declare_elementwise_optimizer: the second type must be the optimizer's "
                "torch::optim::OptimizerParamState");
  detail::declare_elementwise_optimizer(typeid(OptimizerType), [] { return std::make_unique<ParamState>(); });
}

/// What `accelerator.prepare(optimizer)` returns: a handle with the optimizer's member functions. Copies
/// share one state.
///
/// - `step()` uses ATen's fused kernels (`_fused_adamw_`, `_fused_adam_`, `_fused_sgd_`) for
///   `torch::optim::AdamW`, `Adam` and `SGD` themselves (a subclass steps with its own `step()`), reading lr,
///   betas, weight decay and momentum from `param_groups()` on every step so libtorch schedulers keep
///   working, and keeping the state in the libtorch optimizer's own state (so `torch::save` of it still
///   works). Other optimizers step as they are; under ZeRO and FSDP, on this process's share of each
///   parameter (see `declare_elementwise_optimizer`).
/// - Inside `accelerator.accumulate(...)`, `step()` and `zero_grad()` do nothing on micro-steps that do not
///   end an accumulation window; at the end of a window the gradients, summed over its micro-steps, are
///   divided by the number of micro-steps actually taken (a short final window included).
/// - With more than one process, stepping on gradients that `accelerator.backward` never synchronised (a
///   plain `loss.backward()`) throws and says so.
///
/// ```
/// auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 3e-4));
/// optimizer.zero_grad();
/// accelerator.backward(loss);
/// optimizer.step();
/// ```
class Optimizer {
public:
  explicit Optimizer(std::shared_ptr<detail::OptimizerState> state);

  void step();
  void zero_grad(bool set_to_none = true);

  /// The libtorch optimizer (for `torch::save`, `torch::optim::StepLR(optimizer, …)` and the like).
  torch::optim::Optimizer& unwrap() const;
  operator torch::optim::Optimizer&() const { return unwrap(); }
  /// `*optimizer` is the libtorch optimizer, as for a `shared_ptr` to one (`StepLR(*optimizer, …)`).
  torch::optim::Optimizer& operator*() const { return unwrap(); }
  /// Pointer-style call sites (`optimizer->step()`) reach this handle's members, not the libtorch ones.
  const Optimizer* operator->() const { return this; }
  Optimizer* operator->() { return this; }
  std::vector<torch::optim::OptimizerParamGroup>& param_groups() const { return unwrap().param_groups(); }

  /// True when the last `step()` call did not update the parameters (accumulation micro-step, or a step
  /// skipped by the fp16 grad scaler).
  bool step_was_skipped() const;
  /// How many steps used the fused ATen kernels (0 when this optimizer type has none).
  int64_t fused_steps() const;

  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

  const std::shared_ptr<detail::OptimizerState>& internal() const { return state_; }

private:
  std::shared_ptr<detail::OptimizerState> state_;
};

} // namespace accelerate
