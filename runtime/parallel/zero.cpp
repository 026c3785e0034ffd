// The "zero" strategy: ZeRO stages 1 and 2 on c10d. Every process holds the whole model, but its optimizer
// keeps state for, and steps, only this process's share of the parameters; the updated shares are then
// all-gathered into every process's parameters. Stage 2 also keeps gradients in shares: they are
// reduce-scattered bucket by bucket as backward produces them, so the whole gradient is never held.
//
// Layout. Each prepared model's trainable parameters are grouped by device and dtype into buckets of whole
// parameters (`bucket_cap_mb`, filled in reverse order of definition, the order backward produces gradients).
// A bucket's parameters are moved into one flat buffer (each parameter becomes a view of it), padded to a
// multiple of the world size; process r owns the r-th of its `world` equal slices. A parameter's share on
// process r is its intersection with that slice: at most one contiguous range, stepped as a 1-D view of the
// parameter's own storage. ATen's fused optimizer kernels are elementwise, and parameters and slices start on
// 64-byte boundaries, so stepping a share updates those elements exactly as stepping the whole parameter
// would. Another optimizer steps the share with its own step() when its type is declared per element
// (accelerate::declare_elementwise_optimizer; the prepared optimizer's step, runtime/accelerator).
//
// Transport: the collectives of runtime/transport/process_group.h (through shared memory when every process
// is on this machine, as DDP's gradient average; c10d's Gloo or NCCL otherwise). The average is the same
// arithmetic as DDP's (sum in rank order, divided once by the world size), so a step without accumulation or
// clipping is bit-identical to DDP's.
#include "parallel/engine.h"

#include "parallel/sharding.h"
#include "transport/process_group.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

namespace accelerate::detail {
namespace {

/// A prepared model's trainable parameters, moved into flat per-bucket buffers (see the file comment).
struct Layout {
  struct Bucket {
    torch::Tensor flat; // the parameters' values, world * share elements (alignment gaps, padded tail)
    int64_t share = 0;  // elements of each process's slice
    int64_t total = 0;  // elements before the padding
    std::vector<size_t> members;
    // Stage 2, during an armed backward: the gradients that arrived (in a staging buffer, or the one member's
    // own gradient when it fills the bucket exactly), and how many have not yet.
    torch::Tensor staging;
    size_t waiting = 0;
    // Stage 2: this process's slice of the bucket's averaged gradient, kept between steps (the shares'
    // gradients are views of it).
    torch::Tensor share_gradient;
  };
  struct Entry {
    torch::Tensor parameter;
    size_t bucket = 0;
    int64_t offset = 0; // of the parameter's first element in its bucket
    int64_t numel = 0;
    int64_t share_begin = 0;  // first element of the parameter (flattened) in this process's share
    int64_t share_length = 0; // 0: none of it is this process's
    int64_t slice_offset = 0; // where that element sits in this process's slice of the bucket
    torch::Tensor values;     // the share: a 1-D view of the parameter
    torch::Tensor gradient;   // stage 2: the share's accumulated gradient
    bool arrived = false;     // stage 2: its gradient came in the armed backward
    bool used = true;         // stage 2: some process's armed backward reached it
    // offload_optimizer_device "cpu": the share and its gradient in CPU memory (pinned beside a GPU), which
    // the optimizer steps; the device's share is copied in before each step and back after it.
    torch::Tensor host_values;
    torch::Tensor host_gradient;
  };

  std::vector<Bucket> buckets;
  std::vector<Entry> entries;
  int rank = 0;
  int world = 1;
  bool offload = false; // the optimizer steps the host copies (Entry::host_values)

  Layout(const std::vector<torch::Tensor>& parameters, int rank_, int world_, int64_t bucket_bytes,
         bool offload_)
      : rank(rank_), world(world_), offload(offload_) {
    torch::NoGradGuard no_grad;
    // Whole parameters, newest first, into the open bucket of their device and dtype while it has room (a
    // parameter larger than a bucket gets one of its own).
    std::map<std::pair<std::string, c10::ScalarType>, size_t> open;
    std::vector<std::vector<torch::Tensor>> members;
    std::vector<int64_t> bytes;
    std::set<c10::TensorImpl*> seen; // a parameter shared by two submodules is laid out once
    for (auto it = parameters.rbegin(); it != parameters.rend(); ++it) {
      if (!seen.insert(it->unsafeGetTensorImpl()).second) {
        continue;
      }
      const auto key = std::make_pair(it->device().str(), it->scalar_type());
      const int64_t size = it->numel() * static_cast<int64_t>(it->element_size());
      auto found = open.find(key);
      if (found == open.end() || (bytes[found->second] > 0 && bytes[found->second] + size > bucket_bytes)) {
        found = open.insert_or_assign(key, members.size()).first;
        members.emplace_back();
        bytes.push_back(0);
      }
      members[found->second].push_back(*it);
      bytes[found->second] += size;
    }
    for (size_t b = 0; b < members.size(); ++b) {
      Bucket bucket;
      const FlatPlan plan = plan_flat(members[b], rank, world);
      bucket.total = plan.total;
      bucket.share = plan.share;
      bucket.flat = torch::zeros({bucket.share * world}, members[b].front().options().requires_grad(false));
      for (size_t m = 0; m < members[b].size(); ++m) {
        const auto& parameter = members[b][m];
        const auto& placed = plan.members[m];
        Entry entry;
        entry.parameter = parameter;
        entry.bucket = b;
        entry.offset = placed.offset;
        entry.numel = placed.numel;
        auto view = bucket.flat.narrow(0, placed.offset, entry.numel);
        view.copy_(parameter.detach().reshape(-1));
        // The parameter keeps its identity (the optimizer's and the module's handles) but lives in the
        // bucket.
        parameter.set_data(view.view(parameter.sizes()));
        entry.share_begin = placed.share_begin;
        entry.share_length = placed.share_length;
        entry.slice_offset = placed.slice_offset;
        entry.values = bucket.flat.narrow(0, rank * bucket.share + placed.slice_offset, placed.share_length);
        if (offload) {
          entry.host_values = host_buffer(entry.values);
        }
        bucket.members.push_back(entries.size());
        entries.push_back(std::move(entry));
      }
      buckets.push_back(std::move(bucket));
    }
  }

  /// A CPU tensor shaped like `like` (pinned when `like` is on a GPU, so copies to and from it are DMA).
  static torch::Tensor host_buffer(const torch::Tensor& like) {
    auto options = like.options().device(torch::kCPU).requires_grad(false);
    return torch::empty(like.sizes(), options.pinned_memory(!like.device().is_cpu()));
  }

  /// This process's slice of bucket `b`.
  torch::Tensor slice(size_t b) const {
    const auto& bucket = buckets[b];
    return bucket.flat.narrow(0, rank * bucket.share, bucket.share);
  }
};

/// Stage 1: gradients are synchronised as "ddp" does (the model it prepared); the layout only serves the
/// optimizer's shares and the all-gather after each step.
class ShardedOptimizerModel final : public PreparedModel {
public:
  ShardedOptimizerModel(std::shared_ptr<PreparedModel> inner, std::shared_ptr<Layout> layout,
                        const ParallelContext& context)
      : PreparedModel(inner->model(), context.process_group, context.tracker), inner_(std::move(inner)),
        layout_(std::move(layout)) {}

  std::string synchronisation() const override { return inner_->synchronisation(); }
  void arm(const torch::Tensor& loss) override { inner_->arm(loss); }
  void finish_backward() override { inner_->finish_backward(); }
  void disarm() override { inner_->disarm(); }
  void shadow_armed_backward() override { inner_->shadow_armed_backward(); }
  void broadcast_state_from(int source) override { inner_->broadcast_state_from(source); }
  size_t bucket_count() const override { return inner_->bucket_count(); }
  void observe_bucket_launches(std::function<void(size_t)> observer) override {
    inner_->observe_bucket_launches(std::move(observer));
  }

private:
  std::shared_ptr<PreparedModel> inner_;
  std::shared_ptr<Layout> layout_;
};

/// Stage 2: as each parameter's gradient is accumulated, it is copied into its bucket's staging buffer and
/// dropped from `.grad()`; a complete bucket (in bucket order, the same on every process) is
/// reduce-scattered into the shares' gradients and its staging buffer freed. Every backward is armed, inside
/// accumulation windows too: the window accumulates in the shares.
class ShardedGradientModel final : public PreparedModel {
public:
  ShardedGradientModel(torch::nn::Module& model, std::shared_ptr<Layout> layout,
                       std::shared_ptr<const std::set<c10::TensorImpl*>> stepped,
                       const ParallelContext& context)
      : PreparedModel(model, context.process_group, context.tracker), layout_(std::move(layout)),
        stepped_(std::move(stepped)), find_unused_parameters_(context.config.find_unused_parameters) {
    // Every process must hold the same model (as under DDP); the message names the mismatch.
    c10d::verify_params_across_processes(process_group(), parameters(), std::nullopt);
    for (size_t i = 0; i < layout_->entries.size(); ++i) {
      auto accumulator = torch::autograd::impl::grad_accumulator(layout_->entries[i].parameter);
      const auto key = accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            gradient_arrived(i);
            return outputs;
          }));
      hooks_.emplace_back(std::move(accumulator), key);
    }
  }

  ~ShardedGradientModel() override {
    for (auto& [accumulator, key] : hooks_) {
      accumulator->del_post_hook(key);
    }
  }

  std::string synchronisation() const override { return "reduce_scatter"; }
  bool synchronises_every_backward() const override { return true; }

  void arm(const torch::Tensor&) override {
    if (!checked_) {
      refuse_parameters_no_optimizer_steps(*this, "ZeRO stage 2", *stepped_);
      checked_ = true;
    }
    broadcast_buffers();
    for (auto& bucket : layout_->buckets) {
      bucket.waiting = bucket.members.size();
      bucket.staging.reset();
    }
    for (auto& entry : layout_->entries) {
      entry.arrived = false;
      entry.used = !find_unused_parameters_;
    }
    next_ = 0;
    armed_ = true;
  }

  void finish_backward() override {
    if (!armed_) {
      return;
    }
    armed_ = false;
    // The buckets backward did not complete. A parameter whose gradient did not come takes part with zeros;
    // with find_unused_parameters, one no process used keeps its share's gradient as it was (undefined after
    // zero_grad, so the optimizer skips it), as DDP leaves such a gradient alone.
    std::vector<std::pair<size_t, Reduced>> held;
    while (next_ < layout_->buckets.size()) {
      const size_t b = next_++;
      auto reduced = communicate(b);
      if (find_unused_parameters_) {
        held.emplace_back(b, std::move(reduced));
      } else {
        accumulate(b, reduced);
      }
    }
    if (find_unused_parameters_) {
      agree_on_used_parameters();
      for (auto& [b, reduced] : held) {
        accumulate(b, reduced);
      }
    }
  }

  void disarm() override {
    armed_ = false;
    for (auto& bucket : layout_->buckets) {
      bucket.staging.reset();
    }
  }

  void shadow_armed_backward() override {
    broadcast_buffers();
    torch::NoGradGuard no_grad;
    for (auto& bucket : layout_->buckets) {
      auto discarded = torch::empty({bucket.share}, bucket.flat.options());
      reduce_scatter_average(process_group(), discarded, torch::zeros_like(bucket.flat));
    }
    if (find_unused_parameters_) {
      for (auto& entry : layout_->entries) {
        entry.arrived = false;
      }
      agree_on_used_parameters();
    }
  }

  size_t bucket_count() const override { return layout_->buckets.size(); }
  void observe_bucket_launches(std::function<void(size_t)> observer) override {
    observer_ = std::move(observer);
  }

private:
  /// A bucket's slice of the averaged gradient: in the kept buffer itself (`fresh`: no share of the bucket
  /// held a gradient), or in a temporary to add to the shares.
  struct Reduced {
    torch::Tensor averaged;
    bool fresh = false;
  };

  void gradient_arrived(size_t index) {
    auto& entry = layout_->entries[index];
    auto& gradient = entry.parameter.mutable_grad();
    if (!armed_ || !gradient.defined() || entry.arrived) {
      return; // a backward outside accelerator.backward: the gradient stays, and the optimizer step refuses
    }
    torch::NoGradGuard no_grad;
    auto& bucket = layout_->buckets[entry.bucket];
    if (bucket.members.size() == 1 && bucket.total == bucket.flat.numel() && gradient.is_contiguous() &&
        gradient.scalar_type() == bucket.flat.scalar_type()) {
      bucket.staging = gradient.view(-1); // the gradient is the bucket: reduce-scattered without a copy
    } else {
      if (!bucket.staging.defined()) {
        bucket.staging = take_staging(bucket);
      }
      bucket.staging.narrow(0, entry.offset, entry.numel).copy_(gradient.reshape(-1));
    }
    gradient.reset();
    entry.arrived = true;
    entry.used = true;
    --bucket.waiting;
    while (next_ < layout_->buckets.size() && layout_->buckets[next_].waiting == 0) {
      const size_t b = next_++;
      auto reduced = communicate(b); // every member came: all used
      accumulate(b, reduced);
    }
  }

  /// Reduce-scatters bucket `b`'s staged gradients (zeros for the members whose gradient did not come).
  Reduced communicate(size_t b) {
    torch::NoGradGuard no_grad;
    auto& bucket = layout_->buckets[b];
    if (observer_) {
      observer_(b);
    }
    if (!bucket.staging.defined()) {
      bucket.staging = take_staging(bucket);
    }
    for (size_t member : bucket.members) {
      if (auto& entry = layout_->entries[member]; !entry.arrived) {
        bucket.staging.narrow(0, entry.offset, entry.numel).zero_();
      }
    }
    if (!bucket.share_gradient.defined()) {
      bucket.share_gradient = torch::empty({bucket.share}, bucket.flat.options());
    }
    Reduced reduced;
    reduced.fresh = std::all_of(bucket.members.begin(), bucket.members.end(), [&](size_t member) {
      const auto& entry = layout_->entries[member];
      return entry.share_length == 0 || !entry.gradient.defined() || layout_->offload;
    });
    reduced.averaged =
        reduced.fresh ? bucket.share_gradient : torch::empty({bucket.share}, bucket.flat.options());
    reduce_scatter_average(process_group(), reduced.averaged, bucket.staging);
    give_back_staging(bucket);
    return reduced;
  }

  /// Adds bucket `b`'s averaged slice to the gradients of the shares of the members used in this backward.
  void accumulate(size_t b, const Reduced& reduced) {
    torch::NoGradGuard no_grad;
    auto& bucket = layout_->buckets[b];
    for (size_t member : bucket.members) {
      auto& entry = layout_->entries[member];
      if (entry.share_length == 0 || !entry.used) {
        continue;
      }
      auto part = reduced.averaged.narrow(0, entry.slice_offset, entry.share_length);
      if (layout_->offload) {
        // The share's gradient is kept in CPU memory, where the optimizer steps (as DeepSpeed's
        // ZeRO-Offload).
        if (entry.host_gradient.defined()) {
          entry.host_gradient.add_(part.to(torch::kCPU));
        } else {
          entry.host_gradient = Layout::host_buffer(part);
          entry.host_gradient.copy_(part);
        }
        continue;
      }
      if (reduced.fresh) {
        entry.gradient = part;
      } else if (entry.gradient.defined()) {
        entry.gradient.add_(part);
      } else {
        entry.gradient = bucket.share_gradient.narrow(0, entry.slice_offset, entry.share_length);
        entry.gradient.copy_(part);
      }
    }
  }

  /// find_unused_parameters: a parameter counts as used when any process's backward reached it.
  void agree_on_used_parameters() {
    const auto& entries = layout_->entries;
    std::vector<int32_t> arrived(entries.size());
    std::transform(entries.begin(), entries.end(), arrived.begin(),
                   [](const auto& entry) { return entry.arrived ? 1 : 0; });
    const auto device = layout_->buckets.front().flat.device();
    std::vector<torch::Tensor> reduced{torch::tensor(arrived, torch::kInt32).to(device)};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    process_group()->allreduce(reduced, options)->wait();
    const auto used = reduced[0].cpu().contiguous();
    const int32_t* flags = used.data_ptr<int32_t>();
    for (size_t i = 0; i < entries.size(); ++i) {
      layout_->entries[i].used = flags[i] != 0;
    }
  }

  /// A staging buffer for `bucket`: the spare one if it has its size (buckets are alike in size; one is
  /// kept between uses, as DDP keeps its buckets), else a new one; the gaps between members and the padding
  /// are zeroed.
  torch::Tensor take_staging(const Layout::Bucket& bucket) {
    torch::Tensor staging;
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if (it->numel() == bucket.flat.numel() && it->scalar_type() == bucket.flat.scalar_type() &&
          it->device() == bucket.flat.device()) {
        staging = std::move(*it);
        spare_.erase(it);
        break;
      }
    }
    if (!staging.defined()) {
      staging = torch::empty({bucket.flat.numel()}, bucket.flat.options());
    }
    int64_t end = 0;
    for (size_t member : bucket.members) {
      const auto& entry = layout_->entries[member];
      if (entry.offset > end) {
        staging.narrow(0, end, entry.offset - end).zero_();
      }
      end = entry.offset + entry.numel;
    }
    staging.narrow(0, end, staging.numel() - end).zero_();
    return staging;
  }

  void give_back_staging(Layout::Bucket& bucket) {
    auto staging = std::move(bucket.staging);
    bucket.staging.reset();
    const bool own = bucket.members.size() == 1 && bucket.total == bucket.flat.numel();
    if (!own && staging.device().is_cpu() && spare_.empty()) { // a device tensor may still be in use
      spare_.push_back(std::move(staging));
    }
  }

  std::shared_ptr<Layout> layout_;
  std::shared_ptr<const std::set<c10::TensorImpl*>> stepped_; // every parameter of a prepared optimizer
  bool find_unused_parameters_;
  bool checked_ = false;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
  std::function<void(size_t)> observer_;
  std::vector<torch::Tensor> spare_;
  size_t next_ = 0;
  bool armed_ = false;
};

/// offload_optimizer_device "cpu" on a GPU (or on the CPU under ACCELERATE_ZERO_OFFLOAD_PATH_ON_CPU=1, the
/// test hook that runs the copies with CPU memory standing in for the device's).
bool takes_offload_path(const ParallelContext& context) {
  const char* hook = std::getenv("ACCELERATE_ZERO_OFFLOAD_PATH_ON_CPU");
  return context.config.offload_optimizer_device == "cpu" &&
         (!context.device.is_cpu() || (hook != nullptr && std::string(hook) == "1"));
}

/// ZeRO-Offload on one process, as DeepSpeed's on one GPU: the model is one share over a group of one, so
/// that the optimizer steps it in CPU memory.
ParallelContext with_group_of_one(ParallelContext context) {
  if (!context.process_group && takes_offload_path(context)) {
    context.process_group = create_group_of_one(context.device, context.config.timeout);
  }
  return context;
}

class ZeroEngine final : public ShardedEngine {
public:
  explicit ZeroEngine(const ParallelContext& context) : ZeroEngine(with_group_of_one(context), 0) {}

private:
  ZeroEngine(const ParallelContext& context, int)
      : ShardedEngine(context), replicated_(make_ddp_engine(context)),
        stage_(context.config.zero_stage == 0 ? 2 : context.config.zero_stage),
        offload_(takes_offload_path(context)) {
    if (stage_ != 1 && stage_ != 2) {
      throw std::invalid_argument("accelerate: parallel_strategy 'zero' takes zero_stage 1 or 2, not " +
                                  std::to_string(stage_));
    }
  }

public:
  std::string name() const override { return "zero"; }

  std::shared_ptr<PreparedModel> prepare_model(torch::nn::Module& model) override {
    const auto& job = context();
    if (!job.process_group || trainable_parameters(model).empty()) {
      return replicated_->prepare_model(model); // nothing to shard
    }
    const int world = job.process_group->getSize();
    const int rank = job.process_group->getRank();
    const auto bucket_bytes = static_cast<int64_t>(job.config.bucket_cap_mb * 1024 * 1024);
    std::shared_ptr<PreparedModel> prepared;
    std::shared_ptr<Layout> layout;
    if (stage_ == 1) {
      auto inner = replicated_->prepare_model(model); // placement, broadcast, DDP's synchronisation
      layout = std::make_shared<Layout>(trainable_parameters(model), rank, world, bucket_bytes, offload_);
      prepared = std::make_shared<ShardedOptimizerModel>(std::move(inner), layout, job);
    } else {
      place_and_broadcast(model);
      layout = std::make_shared<Layout>(trainable_parameters(model), rank, world, bucket_bytes, offload_);
      prepared = std::make_shared<ShardedGradientModel>(model, layout, stepped_, job);
    }
    for (size_t i = 0; i < layout->entries.size(); ++i) {
      entries_[layout->entries[i].parameter.unsafeGetTensorImpl()] = {layout, i};
    }
    return prepared;
  }

  void prepare_optimizer(ShardableOptimizer& optimizer) override {
    for (const auto& parameter : optimizer.stepped_parameters()) {
      stepped_->insert(parameter.unsafeGetTensorImpl());
    }
    refuse_optimizer_not_per_element(optimizer,
                                     "parallel_strategy 'zero' (ZeRO stage " + std::to_string(stage_) + ")");
    // State the optimizer made when it was constructed (Adagrad's), for whole parameters: this process's
    // shares.
    adopt_optimizer_state(optimizer);
  }

  void before_optimizer_step(ShardableOptimizer& optimizer) override {
    if (!offload_) {
      return;
    }
    // The host copies take the device's values (which anything may have written since: a load, the user).
    torch::NoGradGuard no_grad;
    for (const auto& parameter : optimizer.stepped_parameters()) {
      auto [layout, index] = find(parameter);
      if (layout && layout->entries[index].share_length > 0) {
        auto& entry = layout->entries[index];
        entry.host_values.copy_(entry.values);
      }
    }
  }

  std::optional<ParameterShare> share(const torch::Tensor& parameter) override {
    auto result = ShardedEngine::share(parameter);
    if (!offload_ || !result || stage_ != 1 || !result->gradient.defined()) {
      return result;
    }
    // Stage 1 keeps whole gradients on the device: the share's part goes to CPU memory, where it is stepped.
    auto [layout, index] = find(parameter);
    auto& entry = layout->entries[index];
    if (!entry.host_gradient.defined()) {
      entry.host_gradient = Layout::host_buffer(result->gradient);
    }
    entry.host_gradient.copy_(result->gradient);
    result->gradient = entry.host_gradient;
    return result;
  }

  void after_optimizer_step(ShardableOptimizer& optimizer) override {
    // Every bucket holding a parameter this optimizer stepped, once, in the order its parameters come (the
    // same on every process).
    torch::NoGradGuard no_grad;
    std::set<std::pair<Layout*, size_t>> gathered;
    for (const auto& parameter : optimizer.stepped_parameters()) {
      auto found = find(parameter);
      if (!found.first) {
        continue;
      }
      if (offload_) {
        // The stepped host copy back into the device's share, before the bucket is gathered.
        auto& entry = found.first->entries[found.second];
        if (entry.share_length > 0) {
          entry.values.copy_(entry.host_values);
        }
      }
    }
    for (const auto& parameter : optimizer.stepped_parameters()) {
      auto found = find(parameter);
      if (!found.first) {
        continue;
      }
      const size_t bucket = found.first->entries[found.second].bucket;
      if (gathered.insert({found.first.get(), bucket}).second) {
        auto& flat = found.first->buckets[bucket].flat;
        all_gather_into(context().process_group, flat, found.first->slice(bucket));
      }
    }
  }

  bool shards_optimizer_state() const override { return context().process_group != nullptr; }

  bool reads_checkpoints_of(const std::string& strategy) const override {
    return replicated_->reads_checkpoints_of(strategy);
  }

  ReplicaExpectation replica_expectation() const override {
    ReplicaExpectation expectation;
    expectation.optimizer_state = context().process_group == nullptr;
    return expectation;
  }

  std::string describe() const override {
    std::ostringstream out;
    const int world = context().process_group ? context().process_group->getSize() : 1;
    out << "zero: stage " << stage_ << ", "
        << (world > 1 || offload_ ? "optimizer state" + std::string(stage_ == 2 ? " and gradients" : "") +
                                        " in " + std::to_string(world) + " shares"
                                  : "one process: nothing to shard");
    if (offload_) {
      out << "; offload_optimizer_device cpu: the shares, their gradients and the optimizer state in CPU "
             "memory, stepped there";
    } else if (context().config.offload_optimizer_device == "cpu") {
      out << "; offload_optimizer_device cpu: a no-op (the optimizer state is already on the CPU)";
    }
    return out.str();
  }

protected:
  std::optional<Held> held(const torch::Tensor& parameter) override {
    auto [layout, index] = find(parameter);
    if (!layout) {
      return std::nullopt;
    }
    auto& entry = layout->entries[index];
    if (offload_) {
      return Held{entry.host_values, &entry.host_gradient, entry.share_begin, entry.share_length, layout};
    }
    return Held{entry.values, &entry.gradient, entry.share_begin, entry.share_length, layout};
  }
  bool gradients_in_shares() const override { return stage_ == 2; }

private:
  std::pair<std::shared_ptr<Layout>, size_t> find(const torch::Tensor& parameter) {
    auto found = entries_.find(parameter.unsafeGetTensorImpl());
    if (found == entries_.end()) {
      return {nullptr, 0};
    }
    auto layout = found->second.first.lock();
    if (!layout) {
      entries_.erase(found); // its model was released (free_memory)
      return {nullptr, 0};
    }
    return {std::move(layout), found->second.second};
  }

  std::unique_ptr<ParallelEngine> replicated_;
  int stage_;
  bool offload_;
  std::shared_ptr<std::set<c10::TensorImpl*>> stepped_ = std::make_shared<std::set<c10::TensorImpl*>>();
  std::unordered_map<c10::TensorImpl*, std::pair<std::weak_ptr<Layout>, size_t>> entries_;
};

} // namespace

std::unique_ptr<ParallelEngine> make_zero_engine(const ParallelContext& context) {
  return std::make_unique<ZeroEngine>(context);
}

} // namespace accelerate::detail
