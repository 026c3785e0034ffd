// The gradients' side of a step (FsdpModel): each parameter's gradient taken before AccumulateGrad, staged in
// its unit's full-size buffer once the unit is released, and reduce-scattered into this process's shares.
#include "parallel/fsdp/internal.h"

#include <algorithm>
#include <stdexcept>

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

namespace accelerate::detail::fsdp_internal {

FsdpModel::FsdpModel(torch::nn::Module& model, std::shared_ptr<Sharded> sharded,
                     std::shared_ptr<const std::set<c10::TensorImpl*>> stepped,
                     const ParallelContext& context)
    : PreparedModel(model, context.process_group, context.tracker), sharded_(std::move(sharded)),
      stepped_(std::move(stepped)) {
  for (size_t i = 0; i < sharded_->members.size(); ++i) {
    auto accumulator = sharded_->members[i].accumulator;
    auto taker = std::make_unique<TakeGradient>(
        [this, i](const torch::autograd::variable_list& gradients) { return take_gradient(i, gradients); });
    const auto* pre = taker.get();
    accumulator->add_pre_hook(std::move(taker));
    const auto key = accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          auto& gradient = sharded_->members[i].parameter.mutable_grad();
          if (gradient.defined() && gradient_arrived(i, gradient)) {
            gradient.reset();
          }
          return outputs;
        }));
    hooks_.push_back({std::move(accumulator), pre, key});
  }
}

FsdpModel::~FsdpModel() {
  for (auto& hook : hooks_) {
    auto& pre_hooks = hook.accumulator->pre_hooks();
    pre_hooks.erase(std::remove_if(pre_hooks.begin(), pre_hooks.end(),
                                   [&](const auto& pre) { return pre.get() == hook.pre; }),
                    pre_hooks.end());
    hook.accumulator->del_post_hook(hook.post);
  }
}

void FsdpModel::arm(const torch::Tensor&) {
  if (!checked_) {
    refuse_parameters_no_optimizer_steps(*this, "FSDP", *stepped_);
    checked_ = true;
  }
  broadcast_buffers();
  sharded_->adopt_recorded_order();
  for (auto& unit : sharded_->units) {
    unit.waiting = unit.trainable;
    unit.complete = unit.trainable == 0;
  }
  for (auto& member : sharded_->members) {
    member.arrived = false;
  }
  next_ = 0;
  reduce_ = synchronising;
  armed_ = true;
}

void FsdpModel::finish_backward() {
  if (!armed_) {
    return;
  }
  armed_ = false;
  // Units whose backward did not run (or not for every parameter): a parameter whose gradient did not
  // come takes part with zeros, as under DDP.
  for (auto& unit : sharded_->units) {
    unit.complete = true;
    sharded_->reshard(unit); // prefetched units included
    stage_held(unit);
  }
  if (reduce_) {
    while (next_ < sharded_->order.size()) {
      reduce(sharded_->order[next_++]);
    }
  }
}

void FsdpModel::disarm() {
  armed_ = false;
  for (auto& unit : sharded_->units) {
    for (auto& group : unit.groups) {
      give_back(sharded_->pool, group.staging);
    }
    sharded_->reshard(unit);
  }
  for (auto& member : sharded_->members) {
    member.staged = false;
    member.held.reset();
  }
}

void FsdpModel::shadow_armed_backward() {
  throw std::logic_error("accelerate: parallel_strategy 'fsdp' does not take part in Join (uneven inputs): "
                         "every process computes its share at every step; keep even_batches(true)");
}

torch::autograd::variable_list FsdpModel::take_gradient(size_t index,
                                                        const torch::autograd::variable_list& gradients) {
  const auto& member = sharded_->members[index];
  if (gradients.size() != 1 || !gradients[0].defined() || gradients[0].layout() != torch::kStrided ||
      member.parameter.grad().defined() || !gradient_arrived(index, gradients[0])) {
    return gradients;
  }
  return {torch::Tensor()};
}

bool FsdpModel::gradient_arrived(size_t index, const torch::Tensor& gradient) {
  auto& member = sharded_->members[index];
  if (!armed_ || member.arrived) {
    return false;
  }
  torch::NoGradGuard no_grad;
  auto& unit = sharded_->units[member.unit];
  auto& group = unit.groups[member.group];
  if (group.staging.defined()) {
    stage(member, group, gradient); // the window staged this unit already
  } else {
    member.held = gradient; // staged once the unit is released, into the memory it gives back
  }
  member.arrived = true;
  if (--unit.waiting == 0) {
    unit.complete = true;
    sharded_->reshard(unit);
    stage_held(unit);
    if (sharded_->backward_prefetch == "BACKWARD_POST") {
      sharded_->prefetch_previous(member.unit);
    }
    while (reduce_ && next_ < sharded_->order.size() && sharded_->units[sharded_->order[next_]].complete) {
      reduce(sharded_->order[next_++]);
    }
  }
  return true;
}

void FsdpModel::stage(Member& member, Group& group, const torch::Tensor& gradient) {
  // In the parameter's shape: the gradient may be strided differently (a Linear weight's comes transposed),
  // and reshaping it flat would copy it first.
  auto slot = group.staging.narrow(0, member.place.offset, member.place.numel).view(gradient.sizes());
  if (member.staged) {
    slot.add_(gradient);
  } else {
    slot.copy_(gradient);
    member.staged = true;
  }
}

void FsdpModel::stage_held(Unit& unit) {
  torch::NoGradGuard no_grad;
  for (auto& group : unit.groups) {
    const bool any = std::any_of(group.members.begin(), group.members.end(),
                                 [&](size_t m) { return sharded_->members[m].held.defined(); });
    if (!any) {
      continue;
    }
    if (!group.staging.defined()) {
      group.staging = empty_from(sharded_->pool, group.full);
      int64_t written = 0; // the buffer is filled up to here; members lie in increasing offsets
      for (size_t m : group.members) {
        const auto& place = sharded_->members[m].place;
        if (sharded_->members[m].held.defined()) {
          group.staging.narrow(0, written, place.offset - written).zero_();
          written = place.offset + place.numel;
        }
      }
      group.staging.narrow(0, written, group.staging.numel() - written).zero_();
    }
    for (size_t m : group.members) {
      auto& member = sharded_->members[m];
      if (member.held.defined()) {
        stage(member, group, member.held);
        member.held.reset();
      }
    }
  }
}

void FsdpModel::reduce(size_t u) {
  torch::NoGradGuard no_grad;
  auto& unit = sharded_->units[u];
  if (observer_) {
    observer_(u);
  }
  const auto purpose = sharded_->say(unit, "reduce-scatter");
  for (auto& group : unit.groups) {
    if (!group.staging.defined()) {
      group.staging = zeros_from(sharded_->pool, group.full);
    }
    if (!group.share_gradient.defined()) {
      group.share_gradient = torch::empty({group.share}, group.shard.options());
    }
    const bool fresh = std::all_of(group.members.begin(), group.members.end(), [&](size_t m) {
      const auto& member = sharded_->members[m];
      return member.place.share_length == 0 || !member.gradient.defined();
    });
    // With offload the collectives write a buffer on the device, copied into CPU memory afterwards.
    auto averaged = sharded_->offload ? sharded_->share_sized(group)
                    : fresh           ? group.share_gradient
                                      : torch::empty({group.share}, group.full.options());
    reduce_scatter_average(sharded_->process_group, averaged, group.staging);
    give_back(sharded_->pool, group.staging);
    if (sharded_->replicas) {
      const auto across = sharded_->say(unit, "all-reduce across machines");
      all_reduce_average(sharded_->replicas, averaged);
    }
    if (sharded_->offload) {
      // Waits for the copy: the optimizer reads it on the CPU next.
      auto on_device = averaged;
      averaged = fresh ? group.share_gradient.copy_(on_device) : on_device.to(group.shard.device());
      give_back(sharded_->pool, on_device);
    }
    for (size_t m : group.members) {
      auto& member = sharded_->members[m];
      member.staged = false;
      if (member.place.share_length == 0) {
        continue;
      }
      auto part = averaged.narrow(0, member.place.slice_offset, member.place.share_length);
      if (fresh) {
        member.gradient = part;
      } else if (member.gradient.defined()) {
        member.gradient.add_(part);
      } else {
        member.gradient =
            group.share_gradient.narrow(0, member.place.slice_offset, member.place.share_length);
        member.gradient.copy_(part);
      }
    }
  }
}

} // namespace accelerate::detail::fsdp_internal
