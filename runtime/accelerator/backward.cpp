// What every parallel strategy's backward shares: the reach analysis and Join.
#include "accelerator/backward.h"

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include <torch/csrc/autograd/functions/accumulate_grad.h>

namespace accelerate::detail {
namespace {

/// How many leaves of earlier backward calls ReachAnalysis remembers at most (live ones: a per-step leaf is
/// forgotten once it is freed). Past this, it forgets them all and starts over from the current call's.
constexpr size_t kForeignLeavesRemembered = 4096;

bool unprepared_parameters_allowed() {
  const char* value = std::getenv("ACCELERATE_ALLOW_UNPREPARED_PARAMETERS");
  if (value == nullptr || *value == '\0') {
    return false;
  }
  const std::string setting = value;
  if (setting == "1" || setting == "true" || setting == "yes" || setting == "on") {
    return true;
  }
  if (setting == "0" || setting == "false" || setting == "no" || setting == "off") {
    return false;
  }
  throw std::invalid_argument("accelerate: ACCELERATE_ALLOW_UNPREPARED_PARAMETERS must be 1 or 0 (got '" +
                              setting + "')");
}

} // namespace

ReachAnalysis::ReachAnalysis() : allow_unprepared_parameters_(unprepared_parameters_allowed()) {}

void ReachAnalysis::add(PreparedModel* model) {
  const size_t index = models_.size();
  models_.push_back(model);
  for (const auto& parameter : model->parameters()) {
    owner_of_[parameter.unsafeGetTensorImpl()] = index;
  }
  for (const auto& parameter : model->model().parameters()) {
    if (!parameter.requires_grad()) {
      frozen_at_prepare_.insert(parameter.unsafeGetTensorImpl());
    }
  }
}

void ReachAnalysis::clear() {
  models_.clear();
  stepped_by_prepared_optimizer_.clear();
  owner_of_.clear();
  frozen_at_prepare_.clear();
  foreign_leaves_seen_.clear();
}

void ReachAnalysis::add_optimizer_parameters(const std::vector<torch::Tensor>& parameters) {
  for (const auto& parameter : parameters) {
    stepped_by_prepared_optimizer_.insert(parameter.unsafeGetTensorImpl());
  }
}

void ReachAnalysis::walk(
    const torch::Tensor& loss, std::vector<size_t>& reached_parameters,
    std::vector<std::pair<const torch::Tensor*, const torch::autograd::Node*>>& foreign) const {
  reached_parameters.assign(models_.size(), 0);
  if (!loss.grad_fn()) {
    return;
  }
  // Each node to visit with the node whose edge led to it.
  std::vector<std::pair<torch::autograd::Node*, torch::autograd::Node*>> pending{
      {loss.grad_fn().get(), nullptr}};
  std::unordered_set<torch::autograd::Node*> seen{loss.grad_fn().get()};
  while (!pending.empty()) {
    auto [node, consumer] = pending.back();
    pending.pop_back();
    if (auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      if (auto it = owner_of_.find(leaf->variable.unsafeGetTensorImpl()); it != owner_of_.end()) {
        ++reached_parameters[it->second];
      } else {
        foreign.emplace_back(&leaf->variable, consumer);
      }
      continue;
    }
    for (const auto& edge : node->next_edges()) {
      if (edge.function && seen.insert(edge.function.get()).second) {
        pending.emplace_back(edge.function.get(), node);
      }
    }
  }
}

void ReachAnalysis::refuse_unsynchronised_training(const torch::Tensor& loss) {
  if (allow_unprepared_parameters_) {
    return;
  }
  std::vector<size_t> reached_parameters;
  std::vector<std::pair<const torch::Tensor*, const torch::autograd::Node*>> foreign;
  walk(loss, reached_parameters, foreign);
  if (!foreign.empty()) {
    refuse_unprepared_parameters(foreign);
  }
}

std::vector<PreparedModel*> ReachAnalysis::reached_by(const torch::Tensor& loss,
                                                      bool find_unused_parameters) {
  std::vector<size_t> reached_parameters;
  std::vector<std::pair<const torch::Tensor*, const torch::autograd::Node*>> foreign;
  walk(loss, reached_parameters, foreign);
  if (!foreign.empty() && !allow_unprepared_parameters_) {
    refuse_unprepared_parameters(foreign);
  }
  std::vector<PreparedModel*> reached;
  for (size_t i = 0; i < models_.size(); ++i) {
    if (reached_parameters[i] == 0) {
      continue;
    }
    const size_t total = models_[i]->parameters().size();
    if (reached_parameters[i] < total && !find_unused_parameters && models_[i]->distributed()) {
      throw std::logic_error("accelerate: the loss reaches only " + std::to_string(reached_parameters[i]) +
                             " of the " + std::to_string(total) +
                             " trainable parameters of a prepared model; gradient synchronisation needs all "
                             "of them. Set AcceleratorOptions().find_unused_parameters(true), or freeze the "
                             "unused ones (requires_grad false) before prepare");
    }
    reached.push_back(models_[i]);
  }
  return reached;
}

void ReachAnalysis::refuse_unprepared_parameters(
    const std::vector<std::pair<const torch::Tensor*, const torch::autograd::Node*>>& foreign) {
  const std::pair<const torch::Tensor*, const torch::autograd::Node*>* first = nullptr;
  bool first_was_frozen = false;
  size_t refused = 0;
  for (const auto& entry : foreign) {
    const auto* impl = entry.first->unsafeGetTensorImpl();
    const bool frozen = frozen_at_prepare_.count(impl) > 0;
    const auto seen = foreign_leaves_seen_.find(impl);
    // A tensor a prepared optimizer steps is a parameter from the first backward on.
    if (frozen || stepped_by_prepared_optimizer_.count(impl) > 0 ||
        (seen != foreign_leaves_seen_.end() && !seen->second.expired())) {
      if (first == nullptr) {
        first = &entry;
        first_was_frozen = frozen;
      }
      ++refused;
    }
  }
  if (first != nullptr) {
    const torch::Tensor& tensor = *first->first;
    std::ostringstream message;
    message << "accelerate: the loss reaches a trained tensor of shape " << tensor.sizes() << " and dtype "
            << c10::getDtypeNames(tensor.scalar_type()).first << ", used by "
            << (first->second != nullptr ? first->second->name() : std::string("the loss itself"));
    if (refused > 1) {
      message << " (and " << refused - 1 << " more such tensor" << (refused > 2 ? "s" : "") << ")";
    }
    if (first_was_frozen) {
      message << ", that is a parameter of a prepared model which did not require grad when the model was "
                 "prepared: its gradients are not synchronised across processes, so the processes' copies "
                 "of it would drift apart. Make it trainable before accelerator.prepare(model) (to freeze "
                 "parameters after prepare, set AcceleratorOptions().find_unused_parameters(true))";
    } else {
      message << ", that is a parameter of no prepared model"
              << (stepped_by_prepared_optimizer_.count(tensor.unsafeGetTensorImpl()) > 0
                      ? " (a prepared optimizer steps it)"
                      : "")
              << ": its gradients are not synchronised across "
                 "processes, so the processes' copies of it would drift apart. Prepare the model that owns "
                 "it with accelerator.prepare(model) (preparing only the optimizer that trains it does not "
                 "synchronise its gradients)";
    }
    message << "; or, if each process is meant to train it on its own, set the environment variable "
               "ACCELERATE_ALLOW_UNPREPARED_PARAMETERS=1";
    throw std::logic_error(message.str());
  }
  for (auto it = foreign_leaves_seen_.begin(); it != foreign_leaves_seen_.end();) {
    it = it->second.expired() ? foreign_leaves_seen_.erase(it) : std::next(it);
  }
  if (foreign_leaves_seen_.size() + foreign.size() > kForeignLeavesRemembered) {
    foreign_leaves_seen_.clear();
  }
  for (const auto& entry : foreign) {
    foreign_leaves_seen_.try_emplace(
        entry.first->unsafeGetTensorImpl(),
        c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(entry.first->getIntrusivePtr()));
  }
}

int64_t JoinCoordinator::processes_with_batches(bool has_batch) {
  batches_taken_ += has_batch ? 1 : 0;
  if (!current_step_.empty()) {
    last_step_ = std::move(current_step_);
    current_step_.clear();
  }
  std::vector<torch::Tensor> flag{torch::full({1}, has_batch ? 1 : 0, torch::kInt64)};
  process_group_->allreduce(flag)->wait();
  last_count_ = flag[0].item<int64_t>();
  return last_count_;
}

void JoinCoordinator::join_until_all_exhausted() {
  while (last_count_ > 0) {
    for (auto* model : last_step_) {
      model->shadow_armed_backward();
    }
    processes_with_batches(false);
  }
  synchronize_models();
}

void JoinCoordinator::synchronize_models() {
  // The process that took the most batches (the highest rank among equals) trained on everything.
  const int64_t world = process_group_->getSize();
  std::vector<torch::Tensor> key{
      torch::full({1}, batches_taken_ * world + process_group_->getRank(), torch::kInt64)};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  process_group_->allreduce(key, max)->wait();
  const int source = static_cast<int>(key[0].item<int64_t>() % world);
  for (const auto& model : *models_) {
    model->broadcast_state_from(source);
  }
  batches_taken_ = 0;
}

} // namespace accelerate::detail
