// The prepared optimizer and scheduler: fused ATen optimizer steps, accumulation gating, sync checks, and the
// fp16 grad scaler folded into the fused step (grad_scale/found_inf) with one deferred skip read per step.
#include <accelerate/optimizer.h>
#include <accelerate/scheduler.h>

#include "accelerator/optimizer_state.h"
#include "precision/precision.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Type.h>

#include <algorithm>
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

struct DeviceLess {
  bool operator()(const c10::Device& a, const c10::Device& b) const {
    return a.type() != b.type() ? a.type() < b.type() : a.index() < b.index();
  }
};

struct BatchKeyLess {
  bool operator()(const BatchKey& a, const BatchKey& b) const {
    if (a.first != b.first) {
      return DeviceLess()(a.first, b.first);
    }
    return a.second < b.second;
  }
};

/// What the fused kernels take besides the tensors: the divisor of the gradients (micro-steps, times the loss
/// scale while the gradients still carry it) and the fp16 skip flag.
struct StepScaling {
  int micro_steps = 1;
  torch::Tensor loss_scale; // undefined: the gradients carry no loss scale
  torch::Tensor found_inf;  // undefined: no fp16 skip check

  std::optional<torch::Tensor> grad_scale(const c10::Device& device) const {
    if (loss_scale.defined()) {
      // A power of two times a small integer is exact: dividing by it rounds as dividing by micro_steps does.
      return (micro_steps > 1 ? loss_scale * micro_steps : loss_scale).to(device);
    }
    if (micro_steps <= 1) {
      return std::nullopt;
    }
    return torch::full({}, static_cast<float>(micro_steps),
                       torch::TensorOptions(torch::kFloat32).device(device));
  }
  std::optional<torch::Tensor> found_inf_on(const c10::Device& device) const {
    if (!found_inf.defined()) {
      return std::nullopt;
    }
    return found_inf.to(device);
  }
};

/// What one parameter's step updates: the whole parameter and its `.grad()`, or, under a sharded strategy,
/// this process's share of it (both undefined when none of it is stepped here).
struct Stepped {
  torch::Tensor values;
  torch::Tensor gradient;
};

Stepped stepped_part(const OptimizerState& state, const torch::Tensor& param) {
  if (state.engine) {
    if (auto share = state.engine->optimizer_sharding().share(param)) {
      if (share->values.numel() == 0) {
        return {};
      }
      return {share->values, share->gradient};
    }
  }
  return {param, param.grad()};
}

/// Adam and AdamW through `_fused_adam_` / `_fused_adamw_`, with the state kept in libtorch's own param state
/// type. Appends the stepped parameters' keys to `stepped` (their step counts roll back if fp16 skips).
template <typename Options, typename ParamState>
void fused_adam_step(OptimizerState& state, const StepScaling& scaling, bool decoupled_weight_decay,
                     std::vector<void*>& stepped) {
  auto& optimizer = *state.optimizer;
  for (size_t group_index = 0; group_index < optimizer.param_groups().size(); ++group_index) {
    auto& group = optimizer.param_groups()[group_index];
    auto& options = static_cast<Options&>(group.options());
    const torch::Tensor* graph_lr =
        group_index < state.graph_lrs.size() ? &state.graph_lrs[group_index] : nullptr;
    std::map<BatchKey, FusedBatch, BatchKeyLess> batches;
    for (auto& param : group.params()) {
      const auto [values, gradient] = stepped_part(state, param);
      if (!gradient.defined()) {
        continue;
      }
      auto& slot = optimizer.state()[param.unsafeGetTensorImpl()];
      if (!slot) {
        auto fresh = std::make_unique<ParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(values, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(values, torch::MemoryFormat::Preserve));
        if (options.amsgrad()) {
          fresh->max_exp_avg_sq(torch::zeros_like(values, torch::MemoryFormat::Preserve));
        }
        slot = std::move(fresh);
      }
      auto& adam = static_cast<ParamState&>(*slot);
      // One float step tensor per parameter, refreshed whenever libtorch's count moved (e.g. a load).
      auto& [step_tensor, step_seen] = state.step_tensors[param.unsafeGetTensorImpl()];
      if (!step_tensor.defined() || step_seen != adam.step()) {
        step_tensor = torch::full({}, static_cast<float>(adam.step()),
                                  torch::TensorOptions(torch::kFloat32).device(values.device()));
      }
      step_seen = adam.step() + 1;
      adam.step(adam.step() + 1);
      stepped.push_back(param.unsafeGetTensorImpl());
      auto& batch = batches[{values.device(), values.scalar_type()}];
      batch.params.push_back(values);
      batch.grads.push_back(gradient);
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
      auto grad_scale = scaling.grad_scale(key.first);
      auto found_inf = scaling.found_inf_on(key.first);
      at::_foreach_add_(batch.steps,
                        1); // the kernels read the step count after this step, as torch.optim does
      // `lr`: a double, or (captured in a CUDA graph) a device tensor read at every replay.
      auto launch = [&](const auto& lr) {
        if (decoupled_weight_decay) {
          at::_fused_adamw_(batch.params, batch.grads, batch.first_moments, batch.second_moments,
                            batch.max_second_moments, batch.steps, lr, beta1, beta2, options.weight_decay(),
                            options.eps(), options.amsgrad(), /*maximize=*/false, grad_scale, found_inf);
        } else {
          at::_fused_adam_(batch.params, batch.grads, batch.first_moments, batch.second_moments,
                           batch.max_second_moments, batch.steps, lr, beta1, beta2, options.weight_decay(),
                           options.eps(), options.amsgrad(), /*maximize=*/false, grad_scale, found_inf);
        }
      };
      if (graph_lr != nullptr && key.first == graph_lr->device()) {
        launch(*graph_lr);
      } else {
        launch(options.lr());
      }
      if (found_inf) {
        // A skipped step takes its count back on the device, as torch.optim's fused Adam does.
        at::_foreach_sub_(batch.steps, std::vector<torch::Tensor>(batch.steps.size(), *found_inf));
      }
    }
  }
}

/// True when every SGD group's momentum state is all there or all missing: `_fused_sgd_` takes one
/// is_first_step per call, so a half-initialised group (a new param group) steps the libtorch way.
bool fused_sgd_possible(const OptimizerState& state) {
  auto& optimizer = *state.optimizer;
  for (auto& group : optimizer.param_groups()) {
    auto& options = static_cast<torch::optim::SGDOptions&>(group.options());
    if (options.momentum() == 0) {
      continue;
    }
    size_t with_buffer = 0;
    size_t with_grad = 0;
    for (auto& param : group.params()) {
      if (!stepped_part(state, param).gradient.defined()) {
        continue;
      }
      ++with_grad;
      auto it = optimizer.state().find(param.unsafeGetTensorImpl());
      if (it != optimizer.state().end() &&
          static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer().defined()) {
        ++with_buffer;
      }
    }
    if (with_buffer != 0 && with_buffer != with_grad) {
      return false;
    }
  }
  return true;
}

/// SGD through `_fused_sgd_`, with momentum buffers kept in libtorch's SGDParamState (`fused_sgd_possible`
/// must hold).
void fused_sgd_step(OptimizerState& state, const StepScaling& scaling) {
  auto& optimizer = *state.optimizer;
  for (size_t group_index = 0; group_index < optimizer.param_groups().size(); ++group_index) {
    auto& group = optimizer.param_groups()[group_index];
    auto& options = static_cast<torch::optim::SGDOptions&>(group.options());
    const torch::Tensor* graph_lr =
        group_index < state.graph_lrs.size() ? &state.graph_lrs[group_index] : nullptr;
    const bool momentum = options.momentum() != 0;
    std::map<BatchKey, FusedBatch, BatchKeyLess> batches;
    bool first_step = momentum;
    for (auto& param : group.params()) {
      if (!momentum || !stepped_part(state, param).gradient.defined()) {
        continue;
      }
      auto it = optimizer.state().find(param.unsafeGetTensorImpl());
      if (it != optimizer.state().end() &&
          static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer().defined()) {
        first_step = false;
      }
    }
    for (auto& param : group.params()) {
      const auto [values, gradient] = stepped_part(state, param);
      if (!gradient.defined()) {
        continue;
      }
      auto& batch = batches[{values.device(), values.scalar_type()}];
      batch.params.push_back(values);
      batch.grads.push_back(gradient);
      if (momentum) {
        auto& slot = optimizer.state()[param.unsafeGetTensorImpl()];
        if (!slot) {
          slot = std::make_unique<torch::optim::SGDParamState>();
        }
        auto& sgd = static_cast<torch::optim::SGDParamState&>(*slot);
        if (!sgd.momentum_buffer().defined()) {
          sgd.momentum_buffer(torch::zeros_like(values, torch::MemoryFormat::Preserve));
        }
        batch.first_moments.push_back(sgd.momentum_buffer());
      }
    }
    for (auto& [key, batch] : batches) {
      torch::NoGradGuard no_grad;
      auto launch = [&](const auto& lr) { // a double, or a device tensor (see fused_adam_step)
        at::_fused_sgd_(batch.params, batch.grads, batch.first_moments, options.weight_decay(),
                        options.momentum(), lr, options.dampening(), options.nesterov(), /*maximize=*/false,
                        first_step, scaling.grad_scale(key.first), scaling.found_inf_on(key.first));
      };
      if (graph_lr != nullptr && key.first == graph_lr->device()) {
        launch(*graph_lr);
      } else {
        launch(options.lr());
      }
    }
  }
}

/// The optimizer's own `step()`, on the gradients divided by the window's micro-steps. A parameter the
/// strategy shards is stepped as its share: for the step, the param group holds a tensor over the share's
/// elements whose `.grad()` is the share's gradient, and the parameter's state (shaped like the share) is
/// keyed by it; both are put back afterwards, whatever the step throws. The optimizer's type steps per
/// element (checked at prepare), so stepping the share updates those elements as stepping the whole would.
void own_step(OptimizerState& state, int micro_steps) {
  auto& optimizer = *state.optimizer;
  auto& slots = optimizer.state();
  struct Stand {
    torch::Tensor* place; // the param group's entry
    torch::Tensor parameter;
    torch::Tensor share;
  };
  std::vector<Stand> stands;
  auto put_back = [&] {
    for (auto& stand : stands) {
      auto slot = slots.find(stand.share.unsafeGetTensorImpl());
      if (slot != slots.end()) {
        auto held = std::move(slot->second);
        slots.erase(slot);
        slots[stand.parameter.unsafeGetTensorImpl()] = std::move(held);
      }
      *stand.place = stand.parameter;
    }
    stands.clear();
  };
  torch::NoGradGuard no_grad;
  try {
    for (auto& group : optimizer.param_groups()) {
      for (auto& param : group.params()) {
        auto share = state.engine ? state.engine->optimizer_sharding().share(param) : std::nullopt;
        if (!share) {
          if (micro_steps > 1 && param.grad().defined()) {
            param.grad().div_(micro_steps);
          }
          continue;
        }
        auto stand = torch::empty({0}, share->values.options());
        if (share->values.numel() > 0) {
          stand.set_(share->values);
          if (share->gradient.defined()) {
            if (micro_steps > 1) {
              share->gradient.div_(micro_steps);
            }
            stand.mutable_grad() = share->gradient;
          }
        }
        auto slot = slots.find(param.unsafeGetTensorImpl());
        if (slot != slots.end()) {
          auto held = std::move(slot->second);
          slots.erase(slot);
          slots[stand.unsafeGetTensorImpl()] = std::move(held);
        }
        stands.push_back({&param, param, stand});
        param = stand;
      }
    }
    optimizer.step();
  } catch (...) {
    put_back();
    throw;
  }
  put_back();
}

/// Starts copying an fp16 step's `found_inf` to the host without waiting for it (read by
/// resolve_pending_step).
void defer_skip_decision(OptimizerState& state, const torch::Tensor& found_inf, std::vector<void*> stepped) {
  auto& pending = state.pending;
  pending.adam_parameters = std::move(stepped);
  if (found_inf.is_cpu()) {
    pending.found_inf_host = found_inf;
    pending.copied.reset();
  } else {
    if (!pending.found_inf_host.defined() || !pending.found_inf_host.is_pinned()) {
      pending.found_inf_host = at::empty({}, torch::TensorOptions(torch::kFloat32).pinned_memory(true));
    }
    pending.found_inf_host.copy_(found_inf, /*non_blocking=*/true);
    const auto device = found_inf.device();
    if (!pending.copied) {
      pending.copied = std::make_shared<c10::Event>(device.type());
    }
    c10::impl::VirtualGuardImpl guard(device.type());
    pending.copied->record(guard.getStream(device));
  }
  pending.pending = true;
}

template <typename ParamState>
void take_back_step_counts(OptimizerState& state, const std::vector<void*>& keys) {
  for (void* key : keys) {
    auto it = state.optimizer->state().find(key);
    if (it != state.optimizer->state().end()) {
      auto& adam = static_cast<ParamState&>(*it->second);
      adam.step(adam.step() - 1);
    }
    auto step = state.step_tensors.find(key);
    if (step != state.step_tensors.end()) {
      step->second.second -= 1; // the device tensor already took its count back
    }
  }
}

template <typename ParamState>
std::vector<std::pair<void*, int64_t>> adam_counts(const OptimizerState& state) {
  std::vector<std::pair<void*, int64_t>> counts;
  for (const auto& [key, slot] : state.optimizer->state()) {
    counts.emplace_back(key, static_cast<const ParamState&>(*slot).step());
  }
  std::sort(counts.begin(), counts.end());
  return counts;
}

template <typename ParamState>
void advance_adam_counts(OptimizerState& state, const std::vector<std::pair<void*, int64_t>>& deltas) {
  for (const auto& [key, delta] : deltas) {
    auto it = state.optimizer->state().find(key);
    if (it != state.optimizer->state().end()) {
      auto& adam = static_cast<ParamState&>(*it->second);
      adam.step(adam.step() + delta);
    }
    auto step = state.step_tensors.find(key);
    if (step != state.step_tensors.end()) {
      step->second.second += delta; // the device tensor counted the replayed step itself
    }
  }
}

} // namespace

bool fused_step_possible(const OptimizerState& state) {
  return state.fused != FusedKind::None && (state.fused != FusedKind::SGD || fused_sgd_possible(state));
}

std::vector<std::pair<void*, int64_t>> adam_step_counts(const OptimizerState& state) {
  if (state.fused == FusedKind::AdamW) {
    return adam_counts<torch::optim::AdamWParamState>(state);
  }
  if (state.fused == FusedKind::Adam) {
    return adam_counts<torch::optim::AdamParamState>(state);
  }
  return {};
}

void advance_adam_step_counts(OptimizerState& state, const std::vector<std::pair<void*, int64_t>>& deltas) {
  if (state.fused == FusedKind::AdamW) {
    advance_adam_counts<torch::optim::AdamWParamState>(state, deltas);
  } else if (state.fused == FusedKind::Adam) {
    advance_adam_counts<torch::optim::AdamParamState>(state, deltas);
  }
}

std::vector<torch::Tensor> OptimizerState::stepped_parameters() const {
  std::vector<torch::Tensor> parameters;
  for (const auto& group : optimizer->param_groups()) {
    for (const auto& parameter : group.params()) {
      parameters.push_back(parameter);
    }
  }
  return parameters;
}

std::string OptimizerState::type_name() const {
  return c10::demangle(typeid(*optimizer).name());
}

void OptimizerState::keep_state_shares(
    const std::function<std::optional<StateShare>(const torch::Tensor& parameter)>& range_of) {
  auto& state = optimizer->state();
  for (const auto& group : optimizer->param_groups()) {
    for (const auto& parameter : group.params()) {
      auto slot = state.find(parameter.unsafeGetTensorImpl());
      if (slot == state.end()) {
        continue;
      }
      const auto range = range_of(parameter);
      if (!range) {
        continue;
      }
      if (range->length == 0) {
        state.erase(slot);
        continue;
      }
      // Each tensor of the state is per element (shaped like the parameter): keep the share's range of it.
      auto fields = state_fields(*slot->second);
      for (auto& [name, value] : fields) {
        if (!value.isTensor()) {
          continue;
        }
        const auto whole = value.toTensor();
        if (whole.dim() == 0) {
          continue; // a number kept as a tensor
        }
        if (whole.numel() < range->begin + range->length) {
          throw std::invalid_argument(
              "accelerate: the optimizer state '" + name + "' of a parameter of this " + type_name() +
              " holds " + std::to_string(whole.numel()) + " elements where the parameter has at least " +
              std::to_string(range->begin + range->length) +
              ", so no process can keep its share of it. An optimizer that makes its state when it is "
              "constructed (as Adagrad does) must be constructed before accelerator.prepare(model) under "
              "parallel_strategy 'fsdp', whose prepared parameters hold none of their elements outside "
              "forward");
        }
        value = whole.reshape(-1)
                    .narrow(0, range->begin, range->length)
                    .to(range->device, /*non_blocking=*/false, /*copy=*/true);
      }
      slot->second = state_from_fields(*elementwise, fields);
    }
  }
}

FusedKind fused_kind_of(const torch::optim::Optimizer& optimizer) {
  // The exact type: a subclass may override step(), which the fused kernels would silently skip.
  const auto& type = typeid(optimizer);
  if (type == typeid(torch::optim::AdamW)) {
    return FusedKind::AdamW;
  }
  if (type == typeid(torch::optim::Adam)) {
    return FusedKind::Adam;
  }
  if (type == typeid(torch::optim::SGD)) {
    return FusedKind::SGD;
  }
  return FusedKind::None;
}

std::vector<torch::Tensor> optimizer_gradients(const OptimizerState& state) {
  std::vector<torch::Tensor> parameters;
  for (const auto& group : state.optimizer->param_groups()) {
    parameters.insert(parameters.end(), group.params().begin(), group.params().end());
  }
  return state.engine->gradient_norms().gradients(parameters);
}

torch::Tensor clip_gradient_norm(ParallelEngine& engine, Precision& precision,
                                 const GradientState& gradient_state,
                                 const std::vector<torch::Tensor>& parameters, double max_norm,
                                 double norm_type) {
  // The strategy's gradients of these parameters (this process's shares under ZeRO-2, which gradient_norm
  // then measures across processes: every process takes part, whether it holds any or not).
  auto gradients = engine.gradient_norms().gradients(parameters);
  if (gradients.empty() && !engine.optimizer_sharding().shards_optimizer_state()) {
    return torch::zeros({}, torch::TensorOptions(torch::kFloat32).device(engine.context().device));
  }
  torch::NoGradGuard no_grad;
  // fp16: unscales first (or, mid-window, says which loss scale the gradients still carry).
  auto loss_scale = precision.prepare_gradients_for_clipping(gradient_state.sync_gradients);
  // Inside an accumulation window the gradients are sums over its micro-steps; the norm is of their mean.
  const double micro_steps = std::max(gradient_state.micro_steps_in_window, 1);
  auto total = engine.gradient_norms().gradient_norm(gradients, norm_type) / micro_steps;
  if (loss_scale) {
    total = total / *loss_scale;
  }
  auto coefficient = (max_norm / (total + 1e-6)).clamp_max(1.0);
  // Per device: the gradients may be in CPU memory while the norm is on the GPU (fsdp_offload_params).
  std::map<c10::Device, std::vector<torch::Tensor>, DeviceLess> by_device;
  for (const auto& gradient : gradients) {
    by_device[gradient.device()].push_back(gradient);
  }
  for (auto& [device, group] : by_device) {
    at::_foreach_mul_(group, coefficient.to(device)); // the tensor itself where it is on that device
  }
  return total;
}

void resolve_pending_step(OptimizerState& state) {
  auto& pending = state.pending;
  if (!pending.pending) {
    return;
  }
  pending.pending = false;
  if (pending.copied) {
    pending.copied->synchronize();
  }
  const bool skipped = pending.found_inf_host.item<float>() != 0.0f;
  state.last_step_overflowed = skipped;
  if (!skipped) {
    return;
  }
  state.last_step_skipped = true;
  --state.gradient_state->optimizer_steps;
  if (state.fused == FusedKind::AdamW) {
    take_back_step_counts<torch::optim::AdamWParamState>(state, pending.adam_parameters);
  } else if (state.fused == FusedKind::Adam) {
    take_back_step_counts<torch::optim::AdamParamState>(state, pending.adam_parameters);
  }
}

} // namespace detail

Optimizer::Optimizer(std::shared_ptr<detail::OptimizerState> state) : state_(std::move(state)) {}

torch::optim::Optimizer& Optimizer::unwrap() const {
  return *state_->optimizer;
}
bool Optimizer::step_was_skipped() const {
  detail::resolve_pending_step(*state_);
  return state_->last_step_skipped;
}
int64_t Optimizer::fused_steps() const {
  return state_->fused_steps;
}

void Optimizer::step() {
  auto& state = *state_;
  detail::resolve_pending_step(state);
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
  state.engine->optimizer_sharding().before_optimizer_step(state);
  if (state.clip_norm > 0) {
    // gradient_clipping: every step clips the whole model's gradients to this norm, as DeepSpeed does.
    std::vector<torch::Tensor> parameters;
    for (const auto& group : state.optimizer->param_groups()) {
      parameters.insert(parameters.end(), group.params().begin(), group.params().end());
    }
    detail::clip_gradient_norm(*state.engine, *state.precision, gradients, parameters, state.clip_norm, 2.0);
  }
  detail::StepScaling scaling;
  scaling.micro_steps = std::max(gradients.micro_steps_in_window, 1);
  const bool fused = detail::fused_step_possible(state);

  // fp16: the gradients carry the loss scale unless clipping already unscaled them (and found their inf/nan).
  detail::GradScaler* scaler = state.precision ? state.precision->scaler() : nullptr;
  torch::Tensor found_inf = std::exchange(state.unscaled_found_inf, torch::Tensor());
  const bool carries_scale = scaler != nullptr && !found_inf.defined();
  torch::NoGradGuard no_grad;

  if (fused) {
    if (scaler != nullptr) {
      if (carries_scale) {
        // Check only (multiply by 1): the kernel divides by scale x micro-steps itself, as torch.amp does.
        found_inf = scaler->check_and_unscale(detail::optimizer_gradients(state),
                                              torch::ones({}, scaler->scale_tensor().options()));
        scaling.loss_scale = scaler->scale_tensor();
      }
      scaler->reduce_across_processes(found_inf);
      scaling.found_inf = found_inf;
    }
    std::vector<void*> stepped;
    switch (state.fused) {
    case detail::FusedKind::AdamW:
      detail::fused_adam_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
          state, scaling, /*decoupled_weight_decay=*/true, stepped);
      break;
    case detail::FusedKind::Adam:
      detail::fused_adam_step<torch::optim::AdamOptions, torch::optim::AdamParamState>(
          state, scaling, /*decoupled_weight_decay=*/false, stepped);
      break;
    case detail::FusedKind::SGD:
      detail::fused_sgd_step(state, scaling);
      break;
    case detail::FusedKind::None:
      break;
    }
    ++state.fused_steps;
    // Counted as taken; resolve_pending_step takes it back if found_inf says the kernels skipped it.
    state.last_step_skipped = false;
    state.last_step_overflowed = false;
    ++gradients.optimizer_steps;
    if (scaler != nullptr) {
      detail::defer_skip_decision(state, found_inf, std::move(stepped));
    }
  } else {
    bool skip = false;
    if (scaler != nullptr) {
      if (carries_scale) {
        found_inf = scaler->check_and_unscale(detail::optimizer_gradients(state), scaler->inverse_scale());
      }
      scaler->reduce_across_processes(found_inf);
      skip = found_inf.item<float>() != 0.0f; // libtorch's own step cannot read a device flag
    }
    if (!skip) {
      detail::own_step(state, scaling.micro_steps);
      ++gradients.optimizer_steps;
    }
    state.last_step_skipped = skip;
    state.last_step_overflowed = skip;
  }
  state.engine->optimizer_sharding().after_optimizer_step(state);
  if (scaler != nullptr) {
    scaler->update(found_inf);
  }
  gradients.backwards_since_step = 0;
}

void Optimizer::zero_grad(bool set_to_none) {
  const auto& gradients = *state_->gradient_state;
  // Inside an accumulation window only the first zero_grad of the window (before any backward) or one after
  // the real step clears: the window's gradients must survive until its optimizer step.
  if (gradients.accumulation_steps > 1 && gradients.backwards_since_step > 0) {
    return;
  }
  // As PyTorch's Optimizer.zero_grad, not libtorch's (which always calls detach_(), refused on the gradients
  // that gradient_as_bucket_view makes views of the Reducer's buckets).
  for (auto& group : state_->optimizer->param_groups()) {
    for (auto& parameter : group.params()) {
      auto& gradient = parameter.mutable_grad();
      if (!gradient.defined()) {
        continue;
      }
      if (set_to_none) {
        gradient.reset();
        continue;
      }
      if (gradient.grad_fn()) {
        gradient.detach_();
      } else {
        gradient.requires_grad_(false);
      }
      gradient.zero_();
    }
    for (auto& parameter : group.params()) {
      state_->engine->optimizer_sharding().zero_share_gradient(parameter, set_to_none);
    }
  }
  state_->unscaled_found_inf = torch::Tensor(); // fresh gradients carry the loss scale again
}

void Optimizer::save(torch::serialize::OutputArchive& archive) const {
  detail::resolve_pending_step(*state_); // Adam's step counts are final only once the skip decision is read
  state_->optimizer->save(archive);
}
void Optimizer::load(torch::serialize::InputArchive& archive) {
  detail::resolve_pending_step(*state_);
  state_->optimizer->load(archive);
}

Scheduler::Scheduler(std::shared_ptr<detail::SchedulerState> state) : state_(std::move(state)) {}

torch::optim::LRScheduler& Scheduler::unwrap() const {
  return *state_->scheduler;
}
int64_t Scheduler::steps() const {
  return state_->steps;
}

void Scheduler::step() {
  auto& state = *state_;
  int repeats = 1;
  if (state.step_with_optimizer) {
    if (state.precision) {
      state.precision->resolve_pending_steps(); // the one deferred host read of an fp16 step
    }
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
