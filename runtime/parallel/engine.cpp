// The parallel-strategy interface's shared parts, and the registry of strategies by name.
#include "parallel/engine.h"

#include "checkpoint/component.h"
#include "transport/process_group.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

namespace accelerate::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, ParallelEngineFactory> factories;
};

Registry& registry() {
  // The strategies the runtime ships: one line each.
  static Registry instance{
      {}, {{"ddp", make_ddp_engine}, {"zero", make_zero_engine}, {"fsdp", make_fsdp_engine}}};
  return instance;
}

/// Makes every process's parameters and buffers of `model` process `source`'s.
void broadcast_module_state(const c10::intrusive_ptr<c10d::ProcessGroup>& process_group,
                            const torch::nn::Module& model, int source, size_t bucket_bytes) {
  std::vector<torch::Tensor> tensors = model.parameters();
  for (const auto& buffer : model.buffers()) {
    tensors.push_back(buffer);
  }
  broadcast_model_state(process_group, tensors, source, bucket_bytes);
}

} // namespace

std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& model) {
  std::vector<torch::Tensor> trainable;
  for (const auto& parameter : model.parameters()) {
    if (parameter.requires_grad()) {
      trainable.push_back(parameter);
    }
  }
  return trainable;
}

PreparedModel::PreparedModel(torch::nn::Module& model, c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                             std::shared_ptr<BackwardTracker> tracker)
    : model_(&model), process_group_(std::move(process_group)), parameters_(trainable_parameters(model)),
      tracker_(std::move(tracker)) {
  buffers_ = model.buffers();
  for (const auto& parameter : parameters_) {
    auto handle = parameter.register_hook([tracker = tracker_](const torch::Tensor&) {
      if (!tracker->inside_accelerator_backward.load(std::memory_order_relaxed)) {
        tracker->unsynchronised_gradients.store(true, std::memory_order_relaxed);
      }
    });
    hooks_.emplace_back(parameter, handle);
  }
}

PreparedModel::~PreparedModel() {
  for (auto& [parameter, handle] : hooks_) {
    parameter.remove_hook(handle);
  }
}

void PreparedModel::broadcast_state_from(int source) {
  if (!process_group_) {
    return;
  }
  broadcast_module_state(process_group_, *model_, source, kModelBroadcastBucketBytes);
}

void PreparedModel::observe_bucket_launches(std::function<void(size_t)> /*observer*/) {}

void PreparedModel::broadcast_buffers() {
  broadcast_model_state(process_group_, buffers_, /*source=*/0);
}

torch::Tensor GradientNorms::gradient_norm(const std::vector<torch::Tensor>& gradients, double norm_type) {
  auto stacked = torch::stack(at::_foreach_norm(gradients, norm_type));
  return std::isinf(norm_type) ? stacked.max() : stacked.norm(norm_type);
}

std::vector<torch::Tensor> GradientNorms::gradients(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> gradients;
  for (const auto& parameter : parameters) {
    if (parameter.grad().defined()) {
      gradients.push_back(parameter.grad());
    }
  }
  return gradients;
}

std::unique_ptr<CheckpointComponent>
WholeModel::model_checkpoint(const std::vector<std::shared_ptr<PreparedModel>>& models) {
  return replicated_model_checkpoint(models);
}

// The replicated defaults: stateless, shared by every strategy that keeps them.
OptimizerSharding& ParallelEngine::optimizer_sharding() {
  static OptimizerSharding replicated;
  return replicated;
}

GradientNorms& ParallelEngine::gradient_norms() {
  static GradientNorms replicated;
  return replicated;
}

WholeModel& ParallelEngine::whole_model() {
  static WholeModel replicated;
  return replicated;
}

bool ParallelEngine::holds_shares_of(const torch::nn::Module& model) {
  for (const auto& parameter : model.parameters(/*recurse=*/true)) {
    if (optimizer_sharding().whole_sizes(parameter) != parameter.sizes().vec()) {
      return true;
    }
  }
  return false;
}

std::map<std::string, torch::Tensor> WholeModel::whole_tensors(torch::nn::Module& model, bool /*keeps*/) {
  return module_tensors(model);
}

void ParallelEngine::place_and_broadcast(torch::nn::Module& model, size_t bucket_bytes) const {
  model.to(context_.device);
  if (context_.process_group) {
    broadcast_module_state(context_.process_group, model, /*source=*/0, bucket_bytes);
  }
}

void register_parallel_engine(const std::string& name, ParallelEngineFactory factory) {
  auto& instance = registry();
  std::lock_guard<std::mutex> lock(instance.mutex);
  if (!instance.factories.emplace(name, std::move(factory)).second) {
    throw std::logic_error("accelerate: a parallel strategy named '" + name + "' is already registered");
  }
}

std::vector<std::string> parallel_engine_names() {
  auto& instance = registry();
  std::lock_guard<std::mutex> lock(instance.mutex);
  std::vector<std::string> names;
  for (const auto& entry : instance.factories) {
    names.push_back(entry.first);
  }
  return names;
}

ParallelEngineFactory parallel_engine_factory(const std::string& name) {
  {
    auto& instance = registry();
    std::lock_guard<std::mutex> lock(instance.mutex);
    if (auto found = instance.factories.find(name); found != instance.factories.end()) {
      return found->second;
    }
  }
  std::string known;
  for (const auto& registered : parallel_engine_names()) {
    known += (known.empty() ? "'" : ", '") + registered + "'";
  }
  throw std::invalid_argument("accelerate: parallel_strategy '" + name +
                              "' is not a strategy this runtime knows; the known ones are " + known +
                              " (set it with AcceleratorOptions().parallel_strategy(...) or "
                              "ACCELERATE_PARALLEL_STRATEGY)");
}

} // namespace accelerate::detail
