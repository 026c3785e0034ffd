// The "ddp" strategy: every process holds the whole model and optimizer, and gradients are averaged after
// each synchronised backward. Per model, one of two ways: when every process is on this machine (the CPU
// backend all-reduces through shared memory) and the model's parameters are dense CPU tensors of one floating
// dtype, without find_unused_parameters, one `average_in_shared_memory` over all gradients right after
// backward; otherwise c10d's Reducer (bucketed, overlapped with backward). With one core per process the
// Reducer's overlap buys nothing there (the shared-memory all-reduce runs on the calling thread), and its
// bucket copies cost two passes over the gradients.
#include "parallel/comm_hook.h"
#include "parallel/engine.h"

#include "transport/process_group.h"
#include "transport/shm_allreduce.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

namespace accelerate::detail {
namespace {

/// What a prepared model's Reducer calls for each bucket: tells an observer (tests) when the bucket's
/// all-reduce starts, then runs the model's gradient communication hook (parallel/comm_hook.h) through a
/// channel that counts the bytes sent.
class ReducerCommHook : public c10d::CppCommHookInterface<std::shared_ptr<CommHookChannel>> {
public:
  ReducerCommHook(std::unique_ptr<CommHook> hook, std::shared_ptr<CommHookChannel> channel,
                  std::shared_ptr<std::function<void(size_t)>> observer)
      : CppCommHookInterface(std::move(channel)), hook_(std::move(hook)), observer_(std::move(observer)) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    if (*observer_) {
      (*observer_)(bucket.getIndex());
    }
    return hook_->run(bucket, *state_);
  }

private:
  std::unique_ptr<CommHook> hook_;
  std::shared_ptr<std::function<void(size_t)>> observer_;
};

std::shared_ptr<c10d::Reducer> make_reducer(torch::nn::Module& model,
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
  auto reducer = std::make_shared<c10d::Reducer>(
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
  // A gradient communication hook is a step of the Reducer's path.
  if (config.find_unused_parameters || config.comm_hook != "no" ||
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

/// One process: nothing to synchronise.
class UnsynchronisedModel final : public PreparedModel {
public:
  using PreparedModel::PreparedModel;
  std::string synchronisation() const override { return "none"; }
  void arm(const torch::Tensor&) override {}
  void finish_backward() override {}
  void disarm() override {}
  void shadow_armed_backward() override {}
};

/// c10d's Reducer: buckets all-reduced as their gradients become ready, during backward.
class ReducerModel final : public PreparedModel {
public:
  ReducerModel(torch::nn::Module& model, const ParallelContext& context)
      : PreparedModel(model, context.process_group, context.tracker) {
    reducer_ = make_reducer(model, parameters(), process_group(), context.config);
    // The Reducer reports through a Logger it holds weakly and dereferences unchecked (the search for unused
    // parameters does): PyTorch's DDP always gives it one.
    logger_ = std::make_shared<c10d::Logger>(reducer_);
    reducer_->set_logger(logger_);
    first_static_iteration_ = context.config.static_graph;
    if (auto hook = make_comm_hook(context.config.comm_hook)) {
      register_hook(std::move(hook));
    }
  }

  std::string synchronisation() const override { return "reducer"; }

  void arm(const torch::Tensor& loss) override {
    broadcast_buffers();
    reducer_->rebuild_buckets();
    reducer_->prepare_for_forward();
    reducer_->prepare_for_backward({loss});
  }
  void finish_backward() override {
    if (std::exchange(first_static_iteration_, false)) {
      // static_graph: in its first iteration the Reducer only counts which gradients arrive, and PyTorch's
      // DDP queues this at the end of that backward (_DDPSink): every bucket all-reduced at once, and the set
      // of unused parameters fixed for the iterations after.
      reducer_->delay_all_reduce();
    }
    // Otherwise the Reducer has averaged during backward.
  }
  void disarm() override {}
  void shadow_armed_backward() override {
    broadcast_buffers();
    reducer_->rebuild_buckets();
    for (auto& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/true)) {
      std::vector<torch::Tensor> zeros{bucket.getBufferRef()};
      process_group()->allreduce(zeros)->wait();
    }
  }

  size_t bucket_count() const override { return reducer_->get_grad_buckets(true).size(); }
  void observe_bucket_launches(std::function<void(size_t)> observer) override {
    *observer_ = std::move(observer);
    if (!channel_) {
      // The Reducer's own all-reduce, as a hook, so that its launches can be seen.
      register_hook(make_allreduce_comm_hook());
    }
  }
  std::uint64_t gradient_bytes_sent() const override { return channel_ ? channel_->bytes_sent() : 0; }

private:
  /// Gives the Reducer `hook` (once: the Reducer takes one).
  void register_hook(std::unique_ptr<CommHook> hook) {
    channel_ = std::make_shared<CommHookChannel>(process_group());
    reducer_->register_comm_hook(std::make_unique<ReducerCommHook>(std::move(hook), channel_, observer_));
  }

  std::shared_ptr<std::function<void(size_t)>> observer_ = std::make_shared<std::function<void(size_t)>>();
  std::shared_ptr<CommHookChannel> channel_;
  std::shared_ptr<c10d::Reducer> reducer_;
  std::shared_ptr<c10d::Logger> logger_;
  bool first_static_iteration_ = false;
};

/// One shared-memory average over every gradient after backward.
class SharedMemoryModel final : public PreparedModel {
public:
  SharedMemoryModel(torch::nn::Module& model, const ParallelContext& context)
      : PreparedModel(model, context.process_group, context.tracker) {
    // Every process must hold the same model: the Reducer checks this too, and the message names the
    // mismatch.
    c10d::verify_params_across_processes(process_group(), parameters(), std::nullopt);
  }

  std::string synchronisation() const override { return "shared_memory"; }

  void arm(const torch::Tensor&) override {
    broadcast_buffers();
    armed_ = true;
  }

  void finish_backward() override {
    if (!armed_) {
      return;
    }
    armed_ = false;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> gradients;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> copied_back; // (gradient, its contiguous copy)
    gradients.reserve(parameters().size());
    for (const auto& parameter : parameters()) {
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
    average_in_shared_memory(process_group()->getBackend(c10::DeviceType::CPU), gradients);
    for (auto& [gradient, copy] : copied_back) {
      gradient.copy_(copy);
    }
  }

  void disarm() override { armed_ = false; }

  void shadow_armed_backward() override {
    broadcast_buffers();
    int64_t numel = 0;
    for (const auto& parameter : parameters()) {
      numel += parameter.numel();
    }
    average_in_shared_memory(process_group()->getBackend(c10::DeviceType::CPU),
                             {torch::zeros({numel}, parameters().front().options())});
  }

private:
  bool armed_ = false;
};

class DdpEngine final : public ParallelEngine {
public:
  using ParallelEngine::ParallelEngine;

  std::string name() const override { return "ddp"; }

  /// "ddp" and "zero" checkpoints hold whole models, and optimizer state either whole or in per-process
  /// shares, both of which the optimizers' component reads into either strategy at any world size.
  bool reads_checkpoints_of(const std::string& strategy) const override {
    return strategy == "ddp" || strategy == "zero" || strategy == "fsdp"; // the same files, read whole
  }

  std::shared_ptr<PreparedModel> prepare_model(torch::nn::Module& model) override {
    place_and_broadcast(model);
    const auto& job = context();
    const auto parameters = trainable_parameters(model);
    if (!job.process_group || parameters.empty()) {
      return std::make_shared<UnsynchronisedModel>(model, job.process_group, job.tracker);
    }
    if (can_average_in_shared_memory(parameters, *job.process_group, job.config)) {
      return std::make_shared<SharedMemoryModel>(model, job);
    }
    return std::make_shared<ReducerModel>(model, job);
  }
};

} // namespace

std::unique_ptr<ParallelEngine> make_ddp_engine(const ParallelContext& context) {
  return std::make_unique<DdpEngine>(context);
}

} // namespace accelerate::detail
