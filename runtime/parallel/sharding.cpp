// What the sharded strategies share (runtime/parallel/sharding.h).
#include "parallel/sharding.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <c10/util/Type.h>

namespace accelerate::detail {

FlatPlan plan_flat(const std::vector<torch::Tensor>& parameters, int rank, int world) {
  FlatPlan plan;
  if (parameters.empty()) {
    return plan;
  }
  const int64_t align = std::max<int64_t>(1, 64 / static_cast<int64_t>(parameters.front().element_size()));
  for (const auto& parameter : parameters) {
    plan.total = (plan.total + align - 1) / align * align;
    FlatPlan::Member member;
    member.offset = plan.total;
    member.numel = parameter.numel();
    plan.members.push_back(member);
    plan.total += parameter.numel();
  }
  plan.share = ((plan.total + world - 1) / world + align - 1) / align * align;
  const int64_t slice_begin = rank * plan.share;
  const int64_t slice_end = slice_begin + plan.share;
  for (auto& member : plan.members) {
    const int64_t first = std::max(slice_begin, member.offset);
    const int64_t last = std::min(slice_end, member.offset + member.numel);
    if (last > first) {
      member.share_begin = first - member.offset;
      member.share_length = last - first;
      member.slice_offset = first - slice_begin;
    } else {
      member.share_begin = 0;
      member.share_length = 0;
      member.slice_offset = std::clamp<int64_t>(member.offset - slice_begin, 0, plan.share);
    }
  }
  return plan;
}

torch::Tensor sharded_gradient_norm(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                    const torch::Device& device, const std::vector<torch::Tensor>& gradients,
                                    double norm_type) {
  const bool infinity = std::isinf(norm_type);
  auto local = torch::zeros({1}, torch::TensorOptions(torch::kFloat64).device(device));
  if (!gradients.empty()) {
    // On the collective's device: the shares' gradients may be in CPU memory (fsdp_offload_params).
    auto norms = torch::stack(at::_foreach_norm(gradients, norm_type)).to(device, torch::kFloat64);
    local = (infinity ? norms.max() : norms.pow(norm_type).sum()).reshape({1});
  }
  std::vector<torch::Tensor> reduced{local};
  c10d::AllreduceOptions options;
  options.reduceOp = infinity ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  group->allreduce(reduced, options)->wait();
  auto total = reduced[0].reshape({});
  return infinity ? total : total.pow(1.0 / norm_type);
}

void refuse_optimizer_not_per_element(const ShardableOptimizer& optimizer, const std::string& what) {
  if (optimizer.steps_per_element()) {
    return;
  }
  const std::string type = optimizer.type_name();
  if (type == "torch::optim::LBFGS") {
    throw std::invalid_argument(
        "accelerate: prepare: " + what +
        " steps each process's share of the parameters, but torch::optim::LBFGS steps with a closure over "
        "the "
        "whole model (its line search and two-loop recursion take dot products over every element), which no "
        "share can compute. Use parallel_strategy 'ddp' with LBFGS, or an optimizer that steps per element "
        "(SGD, Adam, AdamW, Adagrad, RMSprop)");
  }
  throw std::invalid_argument(
      "accelerate: prepare: " + what + " steps each process's share of the parameters, and " + type +
      " is not declared to update each element from that element alone. If its step reads nothing but each "
      "element's parameter, gradient and state, call accelerate::declare_elementwise_optimizer<" +
      type +
      ", ItsParamState>() before prepare; if it couples elements (a norm over a parameter or the model, a "
      "trust ratio, factored moments), use parallel_strategy 'ddp'");
}

void refuse_parameters_no_optimizer_steps(const PreparedModel& model, const std::string& what,
                                          const std::set<c10::TensorImpl*>& stepped) {
  std::set<const c10::TensorImpl*> sharded;
  for (const auto& parameter : model.parameters()) {
    sharded.insert(parameter.unsafeGetTensorImpl());
  }
  for (const auto& item : model.model().named_parameters()) {
    auto* impl = item.value().unsafeGetTensorImpl();
    if (sharded.count(impl) != 0 && stepped.count(impl) == 0) {
      throw std::logic_error(
          "accelerate: backward: under " + what +
          " a prepared model's gradients go to the shares that prepared optimizers step, but parameter '" +
          item.key() + "' of model '" + model.model().name() +
          "' is in no optimizer given to accelerator.prepare, so it would never train; prepare the optimizer "
          "(auto optimizer = accelerator.prepare(torch::optim::AdamW(...))) before the first backward, or "
          "freeze the parameter (requires_grad(false)) before preparing the model");
    }
  }
}

std::vector<torch::Tensor> ShardedEngine::gradients(const std::vector<torch::Tensor>& parameters) {
  if (!gradients_in_shares()) {
    return GradientNorms::gradients(parameters);
  }
  std::vector<torch::Tensor> gradients;
  for (const auto& parameter : parameters) {
    if (auto share = held(parameter)) {
      if (share->length > 0 && share->gradient->defined()) {
        gradients.push_back(*share->gradient);
      }
    } else if (parameter.grad().defined()) {
      gradients.push_back(parameter.grad());
    }
  }
  return gradients;
}

torch::Tensor ShardedEngine::gradient_norm(const std::vector<torch::Tensor>& gradients, double norm_type) {
  if (!gradients_in_shares() || !context().process_group) {
    if (gradients.empty()) {
      return torch::zeros({}, torch::TensorOptions(torch::kFloat32).device(context().device));
    }
    return GradientNorms::gradient_norm(gradients, norm_type);
  }
  return sharded_gradient_norm(shard_group(), context().device, gradients, norm_type);
}

std::optional<ParameterShare> ShardedEngine::share(const torch::Tensor& parameter) {
  auto share = held(parameter);
  if (!share) {
    return std::nullopt;
  }
  ParameterShare result{share->values, share->begin, {}};
  if (share->length == 0) {
    return result;
  }
  if (gradients_in_shares()) {
    result.gradient = *share->gradient;
  } else if (const auto& gradient = parameter.grad(); gradient.defined()) {
    result.gradient = gradient.reshape(-1).narrow(0, share->begin, share->length);
  }
  return result;
}

void ShardedEngine::zero_share_gradient(const torch::Tensor& parameter, bool set_to_none) {
  auto share = held(parameter);
  if (!share || !gradients_in_shares()) {
    return;
  }
  if (set_to_none) {
    share->gradient->reset();
  } else if (share->gradient->defined()) {
    share->gradient->zero_();
  }
}

void ShardedEngine::adopt_optimizer_state(ShardableOptimizer& optimizer) {
  optimizer.keep_state_shares([&](const torch::Tensor& parameter) {
    std::optional<StateShare> range;
    if (auto share = held(parameter)) {
      range = StateShare{share->begin, share->length, share->values.device()};
    }
    return range;
  });
}

} // namespace accelerate::detail
