// Data-parallel gradient synchronisation: one shared-memory average after backward on one machine, else
// c10d's Reducer (bucketed, overlapped with backward); and Join.
#include "ddp.h"

#include "process_group.h"
#include "shm_allreduce.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/distributed/c10d/comm.hpp>

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

/// What the Reducer does without a hook (divide by the world size, then sum), telling an observer when each
/// bucket's all-reduce starts. (c10d's own AllReduceCommHook is not exported from libtorch.)
class ObservedAllReduceHook : public c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>> {
public:
  ObservedAllReduceHook(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                        std::function<void(size_t)> observer)
      : CppCommHookInterface(group), observer_(std::move(observer)) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    observer_(bucket.getIndex());
    std::vector<at::Tensor> tensors{bucket.getBufferRef()};
    tensors[0].div_(state_->getSize());
    return state_->allreduce(tensors)->getFuture();
  }

private:
  std::function<void(size_t)> observer_;
};

std::unique_ptr<c10d::Reducer> make_reducer(torch::nn::Module& model,
                                            const std::vector<torch::Tensor>& parameters,
                                            const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                            const ResolvedConfig& config) {
  // Every process must hold the same model: DDP checks this too, and the message names the mismatch.
  c10d::verify_params_across_processes(group, parameters, std::nullopt);

  const auto bucket_bytes = static_cast<int64_t>(config.bucket_cap_mb * 1024 * 1024);
  const std::vector<bool> expect_sparse(parameters.size(), false);
  // As PyTorch's DDP: a small first bucket (so communication starts early) unless the user chose the size.
  const bool default_cap =
      config.sources.count("bucket_cap_mb") == 0 || config.sources.at("bucket_cap_mb") == "default";
  const int64_t first_bucket_bytes = default_cap ? c10d::kDefaultFirstBucketBytes : bucket_bytes;
  std::vector<size_t> limits = {static_cast<size_t>(first_bucket_bytes), static_cast<size_t>(bucket_bytes)};
  if (config.static_graph) {
    limits = {static_cast<size_t>(bucket_bytes)};
  }
  auto [buckets, per_bucket_limits] =
      c10d::compute_bucket_assignment_by_size(parameters, limits, expect_sparse);
  // Gradients become ready in reverse order of definition: reduce the last parameters first, as DDP does.
  std::reverse(buckets.begin(), buckets.end());
  std::reverse(per_bucket_limits.begin(), per_bucket_limits.end());
  std::vector<int64_t> bucket_caps(per_bucket_limits.begin(), per_bucket_limits.end());

  std::unordered_map<size_t, std::string> names;
  size_t index = 0;
  for (const auto& item : model.named_parameters()) {
    if (item.value().requires_grad()) {
      names[index++] = item.key();
    }
  }
  auto reducer = std::make_unique<c10d::Reducer>(
      parameters, std::move(buckets), group, expect_sparse, bucket_bytes, config.find_unused_parameters,
      config.gradient_as_bucket_view, std::move(names), first_bucket_bytes,
      /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false, std::move(bucket_caps));
  if (config.static_graph) {
    reducer->set_static_graph();
  }
  return reducer;
}

/// Decided from what every process has alike (the backend, the parameters' device, layout and dtype, the
/// configuration), so that all processes choose the same way.
bool can_average_in_shared_memory(const std::vector<torch::Tensor>& parameters, c10d::ProcessGroup& group,
                                  const ResolvedConfig& config) {
  if (config.find_unused_parameters ||
      !uses_shared_memory_allreduce(group.getBackend(c10::DeviceType::CPU))) {
    return false;
  }
  const auto dtype = parameters.front().scalar_type();
  return at::isFloatingType(dtype) &&
         std::all_of(parameters.begin(), parameters.end(), [dtype](const torch::Tensor& parameter) {
           return parameter.device().is_cpu() && parameter.layout() == c10::kStrided &&
                  parameter.scalar_type() == dtype;
         });
}

} // namespace

GradientSynchronizer::GradientSynchronizer(torch::nn::Module& model,
                                           c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                                           const ResolvedConfig& config,
                                           std::shared_ptr<BackwardTracker> tracker)
    : model_(&model), process_group_(std::move(process_group)), tracker_(std::move(tracker)) {
  for (const auto& parameter : model.parameters()) {
    if (parameter.requires_grad()) {
      parameters_.push_back(parameter);
    }
  }
  buffers_ = model.buffers();
  if (!process_group_) {
    return;
  }
  distributed_ = !parameters_.empty();
  shared_memory_average_ = distributed_ && can_average_in_shared_memory(parameters_, *process_group_, config);
  if (shared_memory_average_) {
    // Every process must hold the same model: the Reducer checks this too, and the message names the
    // mismatch.
    c10d::verify_params_across_processes(process_group_, parameters_, std::nullopt);
  } else if (distributed_) {
    reducer_ = make_reducer(model, parameters_, process_group_, config);
  }
  for (const auto& parameter : parameters_) {
    auto handle = parameter.register_hook([tracker = tracker_](const torch::Tensor&) {
      if (!tracker->inside_accelerator_backward.load(std::memory_order_relaxed)) {
        tracker->unsynchronised_gradients.store(true, std::memory_order_relaxed);
      }
    });
    hooks_.emplace_back(parameter, handle);
  }
}

GradientSynchronizer::~GradientSynchronizer() {
  for (auto& [parameter, handle] : hooks_) {
    parameter.remove_hook(handle);
  }
}

void GradientSynchronizer::arm(const torch::Tensor& loss) {
  if (!distributed_) {
    return;
  }
  broadcast_buffers();
  if (shared_memory_average_) {
    armed_ = true;
    return;
  }
  reducer_->rebuild_buckets();
  reducer_->prepare_for_forward();
  reducer_->prepare_for_backward({loss});
}

void GradientSynchronizer::finish_backward() {
  if (!armed_) {
    return;
  }
  armed_ = false;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> gradients;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copied_back; // (gradient, its contiguous copy)
  gradients.reserve(parameters_.size());
  for (const auto& parameter : parameters_) {
    auto& gradient = parameter.mutable_grad();
    if (!gradient.defined()) {
      // Not reached by this backward (e.g. `inputs` left it out): it takes part as zeros, as with the
      // Reducer.
      gradient = torch::zeros(parameter.sizes(), parameter.options());
    }
    if (gradient.is_sparse()) {
      throw std::invalid_argument(
          "accelerate: a prepared model's parameter got a sparse gradient; gradient "
          "synchronisation needs dense gradients (e.g. Embedding with sparse(false))");
    }
    if (gradient.is_contiguous() && gradient.scalar_type() == parameter.scalar_type()) {
      gradients.push_back(gradient);
    } else {
      copied_back.emplace_back(gradient, gradient.to(parameter.scalar_type()).contiguous());
      gradients.push_back(copied_back.back().second);
    }
  }
  average_in_shared_memory(process_group_->getBackend(c10::DeviceType::CPU), gradients);
  for (auto& [gradient, copy] : copied_back) {
    gradient.copy_(copy);
  }
}

void GradientSynchronizer::broadcast_buffers() {
  broadcast_model_state(process_group_, buffers_, /*source=*/0);
}

void GradientSynchronizer::shadow_armed_backward() {
  if (!distributed_) {
    return;
  }
  broadcast_buffers();
  if (shared_memory_average_) {
    int64_t numel = 0;
    for (const auto& parameter : parameters_) {
      numel += parameter.numel();
    }
    average_in_shared_memory(process_group_->getBackend(c10::DeviceType::CPU),
                             {torch::zeros({numel}, parameters_.front().options())});
    return;
  }
  reducer_->rebuild_buckets();
  for (auto& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/true)) {
    std::vector<torch::Tensor> zeros{bucket.getBufferRef()};
    process_group_->allreduce(zeros)->wait();
  }
}

void GradientSynchronizer::observe_bucket_launches(std::function<void(size_t)> observer) {
  if (reducer_) {
    reducer_->register_comm_hook(
        std::make_unique<ObservedAllReduceHook>(process_group_, std::move(observer)));
  }
}

size_t GradientSynchronizer::bucket_count() const {
  return reducer_ ? reducer_->get_grad_buckets(true).size() : 0;
}

ReachAnalysis::ReachAnalysis() : allow_unprepared_parameters_(unprepared_parameters_allowed()) {}

void ReachAnalysis::add(GradientSynchronizer* model) {
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
  owner_of_.clear();
  frozen_at_prepare_.clear();
  foreign_leaves_seen_.clear();
}

std::vector<GradientSynchronizer*> ReachAnalysis::reached_by(const torch::Tensor& loss,
                                                             bool find_unused_parameters) {
  std::vector<size_t> reached_parameters(models_.size(), 0);
  std::vector<std::pair<const torch::Tensor*, const torch::autograd::Node*>> foreign;
  if (loss.grad_fn()) {
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
  if (!foreign.empty() && !allow_unprepared_parameters_) {
    refuse_unprepared_parameters(foreign);
  }
  std::vector<GradientSynchronizer*> reached;
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
    if (frozen || (seen != foreign_leaves_seen_.end() && !seen->second.expired())) {
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
      message << ", that is a parameter of no prepared model: its gradients are not synchronised across "
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

void GradientSynchronizer::broadcast_state_from(int source) {
  if (!process_group_) {
    return;
  }
  std::vector<torch::Tensor> tensors = model_->parameters();
  tensors.insert(tensors.end(), buffers_.begin(), buffers_.end());
  broadcast_model_state(process_group_, tensors, source);
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
