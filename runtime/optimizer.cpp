// The prepared optimizer and scheduler: fused ATen optimizer steps, accumulation gating, sync checks.
#include <accelerate/optimizer.h>
#include <accelerate/scheduler.h>

#include "optimizer_state.h"

#include <map>
#include <stdexcept>

namespace accelerate {
namespace detail {
namespace {

/// The tensors one fused kernel call takes: parameters of one group on one device with one dtype.
struct FusedBatch {
  std::vector<torch::Tensor> params, grads, first_moments, second_moments, max_second_moments, steps;
};

using BatchKey = std::pair<c10::Device, c10::ScalarType>;

struct BatchKeyLess {
  bool operator()(const BatchKey& a, const BatchKey& b) const {
    if (a.first.type() != b.first.type()) {
      return a.first.type() < b.first.type();
    }
    if (a.first.index() != b.first.index()) {
      return a.first.index() < b.first.index();
    }
    return a.second < b.second;
  }
};

std::optional<torch::Tensor> grad_scale_for(int micro_steps, const c10::Device& device) {
  if (micro_steps <= 1) {
    return std::nullopt;
  }
  return torch::full({}, static_cast<float>(micro_steps), torch::TensorOptions(torch::kFloat32).device(device));
}

/// Adam and AdamW through `_fused_adam_` / `_fused_adamw_`, with the state kept in libtorch's AdamParamState.
template <typename Options>
void fused_adam_step(OptimizerState& state, int micro_steps, bool decoupled_weight_decay) {
  auto& optimizer = *state.optimizer;
  for (auto& group : optimizer.param_groups()) {
    auto& options = static_cast<Options&>(group.options());
    std::map<BatchKey, FusedBatch, BatchKeyLess> batches;
    for (auto& param : group.params()) {
      if (!param.grad().defined()) {
        continue;
      }
      auto& slot = optimizer.state()[param.unsafeGetTensorImpl()];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        if (options.amsgrad()) {
          fresh->max_exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        }
        slot = std::move(fresh);
      }
      auto& adam = static_cast<torch::optim::AdamParamState&>(*slot);
      // One float step tensor per parameter, refreshed whenever libtorch's count moved (e.g. a load).
      auto& [step_tensor, step_seen] = state.step_tensors[param.unsafeGetTensorImpl()];
      if (!step_tensor.defined() || step_seen != adam.step()) {
        step_tensor = torch::full({}, static_cast<float>(adam.step()),
                                  torch::TensorOptions(torch::kFloat32).device(param.device()));
      }
      step_seen = adam.step() + 1;
      adam.step(adam.step() + 1);
      auto& batch = batches[{param.device(), param.scalar_type()}];
      batch.params.push_back(param);
      batch.grads.push_back(param.grad());
      batch.first_moments.push_back(adam.exp_avg());
      batch.second_moments.push_back(adam.exp_avg_sq());
      if (options.amsgrad()) {
        batch.max_second_moments.push_back(adam.max_exp_avg_sq());
      }
      batch.steps.push_back(step_tensor);
    }
    const auto [beta1, beta2] = options.betas();
    for (auto& [key, batch] : batches) {
      torch::NoGradGuard no_grad;
      auto scale = grad_scale_for(micro_steps, key.first);
      at::_foreach_add_(batch.steps, 1); // the kernels read the step count after this step, as torch.optim does
      if (decoupled_weight_decay) {
        at::_fused_adamw_(batch.params, batch.grads, batch.first_moments, batch.second_moments,
                          batch.max_second_moments, batch.steps, options.lr(), beta1, beta2, options.weight_decay(),
                          options.eps(), options.amsgrad(), /*maximize=*/false, scale, std::nullopt);
      } else {
        at::_fused_adam_(batch.params, batch.grads, batch.first_moments, batch.second_moments,
                         batch.max_second_moments, batch.steps, options.lr(), beta1, beta2, options.weight_decay(),
                         options.eps(), options.amsgrad(), /*maximize=*/false, scale, std::nullopt);
      }
    }
  }
}

/// SGD through `_fused_sgd_`, with momentum buffers kept in libtorch's SGDParamState. Returns false when
/// the group's state is half-initialised (a new param group): the caller then steps the libtorch way.
bool fused_sgd_step(OptimizerState& state, int micro_steps) {
  auto& optimizer = *state.optimizer;
  for (auto& group : optimizer.param_groups()) {
    auto& options = static_cast<torch::optim::SGDOptions&>(group.options());
    const bool momentum = options.momentum() != 0;
    std::map<BatchKey, FusedBatch, BatchKeyLess> batches;
    size_t with_buffer = 0;
    size_t with_grad = 0;
    for (auto& param : group.params()) {
      if (!param.grad().defined()) {
        continue;
      }
      ++with_grad;
      auto it = optimizer.state().find(param.unsafeGetTensorImpl());
      if (it != optimizer.state().end() &&
          static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer().defined()) {
        ++with_buffer;
      }
    }
    if (momentum && with_buffer != 0 && with_buffer != with_grad) {
      return false;
    }
    const bool first_step = momentum && with_buffer == 0;
    for (auto& param : group.params()) {
      if (!param.grad().defined()) {
        continue;
      }
      auto& batch = batches[{param.device(), param.scalar_type()}];
      batch.params.push_back(param);
      batch.grads.push_back(param.grad());
      if (momentum) {
        auto& slot = optimizer.state()[param.unsafeGetTensorImpl()];
        if (!slot) {
          slot = std::make_unique<torch::optim::SGDParamState>();
        }
        auto& sgd = static_cast<torch::optim::SGDParamState&>(*slot);
        if (!sgd.momentum_buffer().defined()) {
          sgd.momentum_buffer(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        }
        batch.first_moments.push_back(sgd.momentum_buffer());
      }
    }
    for (auto& [key, batch] : batches) {
      torch::NoGradGuard no_grad;
      at::_fused_sgd_(batch.params, batch.grads, batch.first_moments, options.weight_decay(), options.momentum(),
                      options.lr(), options.dampening(), options.nesterov(), /*maximize=*/false, first_step,
                      grad_scale_for(micro_steps, key.first), std::nullopt);
    }
  }
  return true;
}

void plain_step(OptimizerState& state, int micro_steps) {
  if (micro_steps > 1) {
    torch::NoGradGuard no_grad;
    for (auto& group : state.optimizer->param_groups()) {
      for (auto& param : group.params()) {
        if (param.grad().defined()) {
          param.grad().div_(micro_steps);
        }
      }
    }
  }
  state.optimizer->step();
}

} // namespace

FusedKind fused_kind_of(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) {
    return FusedKind::AdamW;
  }
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) {
    return FusedKind::Adam;
  }
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) {
    return FusedKind::SGD;
  }
  return FusedKind::None;
}

} // namespace detail

Optimizer::Optimizer(std::shared_ptr<detail::OptimizerState> state) : state_(std::move(state)) {}

torch::optim::Optimizer& Optimizer::unwrap() const { return *state_->optimizer; }
bool Optimizer::step_was_skipped() const { return state_->last_step_skipped; }
int64_t Optimizer::fused_steps() const { return state_->fused_steps; }

void Optimizer::step() {
  auto& state = *state_;
  auto& gradients = *state.gradient_state;
  if (!gradients.sync_gradients) {
    state.last_step_skipped = true;
    return;
  }
  if (state.num_processes > 1 && state.tracker->unsynchronised_gradients.exchange(false)) {
    throw std::logic_error(
        "accelerate: optimizer.step() on gradients that were never synchronised across processes: a plain "
        "loss.backward() ran. Call accelerator.backward(loss) instead, so every process steps on the same "
        "averaged gradients");
  }
  const int micro_steps = std::max(gradients.micro_steps_in_window, 1);
  bool fused = true;
  switch (state.fused) {
  case detail::FusedKind::AdamW:
    detail::fused_adam_step<torch::optim::AdamWOptions>(state, micro_steps, /*decoupled_weight_decay=*/true);
    break;
  case detail::FusedKind::Adam:
    detail::fused_adam_step<torch::optim::AdamOptions>(state, micro_steps, /*decoupled_weight_decay=*/false);
    break;
  case detail::FusedKind::SGD:
    fused = detail::fused_sgd_step(state, micro_steps);
    if (!fused) {
      detail::plain_step(state, micro_steps);
    }
    break;
  case detail::FusedKind::None:
    fused = false;
    detail::plain_step(state, micro_steps);
    break;
  }
  state.fused_steps += fused ? 1 : 0;
  state.last_step_skipped = false;
  ++gradients.optimizer_steps;
  gradients.backwards_since_step = 0;
}

void Optimizer::zero_grad(bool set_to_none) {
  const auto& gradients = *state_->gradient_state;
  // Inside an accumulation window only the first zero_grad of the window (before any backward) or one after
  // the real step clears: the window's gradients must survive until its optimizer step.
  if (gradients.accumulation_steps > 1 && gradients.backwards_since_step > 0) {
    return;
  }
  state_->optimizer->zero_grad(set_to_none);
}

void Optimizer::save(torch::serialize::OutputArchive& archive) const { state_->optimizer->save(archive); }
void Optimizer::load(torch::serialize::InputArchive& archive) { state_->optimizer->load(archive); }

Scheduler::Scheduler(std::shared_ptr<detail::SchedulerState> state) : state_(std::move(state)) {}

torch::optim::LRScheduler& Scheduler::unwrap() const { return *state_->scheduler; }
int64_t Scheduler::steps() const { return state_->steps; }

void Scheduler::step() {
  auto& state = *state_;
  int repeats = 1;
  if (state.step_with_optimizer) {
    const int64_t optimizer_steps = state.gradient_state->optimizer_steps;
    if (optimizer_steps == state.optimizer_steps_seen) {
      return; // no real optimizer step since the last call: a micro-step, or a skipped fp16 step
    }
    state.optimizer_steps_seen = optimizer_steps;
    repeats = state.steps_per_optimizer_step;
  }
  for (int i = 0; i < repeats; ++i) {
    state.scheduler->step();
    ++state.steps;
  }
}

} // namespace accelerate
