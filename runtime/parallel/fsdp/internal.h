// Internal to the "fsdp" strategy (runtime/parallel/fsdp/): the declarations its files share, from a prepared
// model's units and their flat buffers to the strategy's PreparedModel and engine. How the strategy works:
//
// The "fsdp" strategy: fully sharded training (FSDP, ZeRO-3) on c10d. Parameters, gradients and optimizer
// state are all held in 1/N shares; a unit's whole parameters exist only while it computes.
//
// Units. The modules whose type calls `accelerate::fsdp::unit` in its forward (include/accelerate/fsdp.h) are
// the candidates; at prepare, fsdp_auto_wrap_policy chooses the units among them (WrapPolicy below: NO_WRAP
// every candidate, TRANSFORMER_BASED_WRAP the listed classes, SIZE_BASED_WRAP by parameter count); a
// candidate not chosen runs as a plain call. The root is a unit when its type calls unit(), and otherwise
// holds the parameters outside every unit as a *resident* unit, whose whole parameters stay gathered. A unit
// owns the trainable parameters of its submodules that are not units themselves; a parameter shared by
// modules of two units (tied weights) belongs to their nearest common unit. Frozen parameters stay whole on
// every process.
//
// Layout. A unit's parameters of one dtype are moved into one flat buffer `full` (each parameter becomes a
// view of it; runtime/parallel/sharding.h's aligned plan), padded to world x share elements. Process r keeps
// elements [r * share, (r + 1) * share) in `shard`, which its optimizer steps (ParallelEngine::share); the
// storage of `full` is released while the unit is sharded, so the parameters keep their identity and shape
// but hold no data, and the tensors autograd saved in forward see the data again when it is gathered back
// into the same storage before the unit's backward.
//
// A step. unit(): all-gather the unit's shards into `full`, run the body, hook its outputs, release `full`
// (FULL_SHARD; SHARD_GRAD_OP keeps it until the unit's backward). Backward: the first output hook of a
// released unit gathers it again; each parameter's incoming gradient is taken before AccumulateGrad (a pre
// hook of its node; AccumulateGrad gets none, so makes no copy of its own) and held; once every parameter of
// the unit has its gradient the unit is released first, and then the held gradients are staged into one
// full-size gradient buffer of the unit, which takes the memory the release gave back: so a unit's backward
// holds two unit-sized buffers at most (its parameters and its gradients), not three. The units' buffers are
// reduce-scattered, in one order on every process (reverse order of the units, the resident unit last), into
// each process's share gradients. Inside an accumulation window (or `no_sync`) the staged gradients are
// summed across micro-steps (a gradient arriving for a unit already staged in the window is added straight
// into its buffer) and reduce-scattered at the window's end: the full gradients are kept meanwhile (the
// memory cost), and the arithmetic is DDP's.
//
// Hybrid sharding (HYBRID_SHARD, HYBRID_SHARD_ZERO2: FULL_SHARD's and SHARD_GRAD_OP's gathers). The shares
// split each unit among the processes of one machine (runtime/transport/process_group.h's MachineGroups:
// shared memory within it), and every machine holds the same shares: gathers stay within the machine, and
// after each reduce-scatter the share's gradient is averaged with the same share on the other machines (one
// all-reduce over the network per unit). The gradient norm is taken over one machine's shares; in a sharded
// checkpoint the first machine's processes write the shares, once.
//
// Prefetch. Each training forward records the order in which units first run. With fsdp_forward_prefetch, a
// unit's gather starts the all-gather of the unit that ran after it in the previous forward; with
// fsdp_backward_prefetch BACKWARD_PRE (BACKWARD_POST), the start (end) of a unit's backward starts the
// all-gather of the unit that ran before it. A started all-gather is waited for where the unit is gathered,
// and settled (waited for, then released) where it is resharded, at the end of every backward and before
// every optimizer step, so none is in flight while shards change. Only where the transport overlaps: c10d's
// Gloo works on its own threads and NCCL on its own stream, but the shared-memory transport gathers with
// copies made by the calling thread, where starting early would only hold memory sooner.
#pragma once

#include <accelerate/fsdp.h>

#include "accelerator/activation_checkpoint.h"
#include "parallel/engine.h"
#include "parallel/sharding.h"
#include "transport/collective_checks.h"
#include "transport/process_group.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/function.h>

namespace accelerate::detail::fsdp_internal {

// ---- The flat buffers' memory (flat_buffer.cpp)

/// CPU memory released by units, kept for the next gather or staging buffer of the same size. A large block
/// given back to glibc is unmapped, and the next one is a fresh mapping whose every page faults on first
/// touch: per step that was four times the parameters in page faults (docs/benchmarks.md). As many blocks of
/// a size are kept as are in flight at once: under FULL_SHARD one (a unit's gathered parameters, whose memory
/// its staging buffer takes over once they are released), so memory between steps grows by one unit; under
/// SHARD_GRAD_OP every unit (forward gathers them all and keeps them until backward), so between steps it
/// holds the memory its next forward takes again, and its training peak does not change; one more with
/// prefetch (the next unit's gather starts while one is gathered). CUDA memory goes back to its caching
/// allocator, which already reuses blocks.
class SparePool {
public:
  /// How many blocks of each size to keep (1 unless set).
  void keep(size_t blocks) { keep_ = blocks; }
  /// A block of `bytes` for `device`: a kept one, or a fresh one from `allocator`.
  at::DataPtr take(size_t bytes, const c10::Device& device, c10::Allocator* allocator);
  /// Keeps `block` (of `bytes`) if there is room, else frees it.
  void give(at::DataPtr block, size_t bytes);

private:
  std::vector<std::pair<size_t, at::DataPtr>> blocks_;
  size_t keep_ = 1;
};

/// Gives `tensor`'s storage `bytes` bytes (contents undefined) unless it has them.
void allocate_storage(const torch::Tensor& tensor, size_t bytes, SparePool& pool);

/// Releases `tensor`'s storage into `pool`: every view of it keeps its shape and holds no data.
void release_storage(const torch::Tensor& tensor, SparePool& pool);

/// A 1-D tensor of `numel` elements of `options`, on memory from `pool` (contents undefined; a fresh block
/// comes from `allocator`).
torch::Tensor empty_from(SparePool& pool, int64_t numel, const torch::TensorOptions& options,
                         c10::Allocator* allocator);

/// A 1-D tensor like `like`, of its numel, on memory from `pool` (contents undefined).
torch::Tensor empty_from(SparePool& pool, const torch::Tensor& like);

/// A zero-filled 1-D tensor like `like`, of its numel, on memory from `pool`.
torch::Tensor zeros_from(SparePool& pool, const torch::Tensor& like);

/// Gives the memory of `tensor` (made by zeros_from) back to `pool`.
void give_back(SparePool& pool, torch::Tensor& tensor);

// ---- A prepared model's units (gathered and released in gather.cpp; offloaded shares in offload.cpp)

struct Sharded;

/// A unit's parameters of one dtype and device.
struct Group {
  torch::Tensor full;        // world * share elements; its storage is released while the unit is sharded
  torch::Tensor shard;       // this process's share elements: what its optimizer steps
  torch::Tensor placeholder; // what the parameters are while the unit is sharded: no elements
  size_t full_bytes = 0;
  int64_t share = 0;
  std::vector<size_t> members;
  // The unit's gradients, full size, from their arrival until the end of the window's reduce-scatter.
  torch::Tensor staging;
  // This process's slice of the averaged gradient, kept between steps (the shares' gradients are views).
  torch::Tensor share_gradient;
  // A started all-gather into `full` (prefetch), until it is waited for.
  c10::intrusive_ptr<c10d::Work> pending;
  // With offload, the copy of `shard` on the device that a started all-gather reads, until it is waited for.
  torch::Tensor pending_share;
};

struct Member {
  torch::Tensor parameter;
  std::vector<int64_t> sizes; // its shape while gathered
  size_t unit = 0;
  size_t group = 0;
  FlatPlan::Member place;
  torch::Tensor values;   // the share: a 1-D view of `shard`
  torch::Tensor gradient; // the share's gradient, a view of `share_gradient`
  torch::Tensor held;     // its whole gradient as backward produced it, until its unit's backward is done
  // Its AccumulateGrad node, made while the parameter had its whole shape (autograd records a leaf's shape
  // when the node is made and checks every gradient against it) and kept here: autograd holds it weakly.
  std::shared_ptr<torch::autograd::Node> accumulator;
  bool arrived = false; // its gradient came in the armed backward
  bool staged = false;  // `staging` holds gradients of it from this window
};

struct Unit {
  Sharded* owner = nullptr;
  size_t index = 0;
  torch::nn::Module* module = nullptr;
  std::string name;      // its path in the model ("" for the root)
  bool resident = false; // the root's parameters outside every unit: always gathered
  std::vector<Group> groups;
  size_t trainable = 0;
  bool gathered = false;
  bool prefetched = false; // its all-gather was started ahead and not waited for yet
  int depth = 0;           // bodies of this unit running now
  size_t waiting = 0;      // parameters whose gradient has not come in the armed backward
  bool complete = false;
};

/// One prepared model's units.
struct Sharded {
  std::vector<Unit> units;
  std::vector<Member> members;
  std::vector<size_t> order; // of the reduce-scatters: reverse unit order, the resident unit last
  c10::intrusive_ptr<c10d::ProcessGroup> process_group; // the processes the shares split the units among
  // Hybrid sharding: the processes on other machines that hold the same shares (null: none), with which the
  // shares' gradients are averaged after each reduce-scatter.
  c10::intrusive_ptr<c10d::ProcessGroup> replicas;
  int rank = 0;
  int world = 1;
  bool reshard_after_forward = true;
  std::weak_ptr<Sharded> self;
  SparePool pool;
  // Prefetch (see the file comment): what is asked, whether the transport overlaps, the units in the order of
  // their first call in the last training forward (`position`: a unit's place in it, or -1), the order being
  // recorded, and how many all-gathers were started ahead.
  bool forward_prefetch = false;
  std::string backward_prefetch = "NO_PREFETCH";
  bool debug = false; // debug mode: each collective says which unit it is for
  // fsdp_offload_params on a GPU: `shard` and `share_gradient` live in CPU memory (pinned), where the
  // optimizer steps them; a gather copies the share to the device first (`share_on_device`), and the
  // reduce-scatter's result is copied back (FsdpModel::reduce).
  bool offload = false;
  bool asynchronous = false;
  std::vector<size_t> forward_order;
  std::vector<int64_t> position;
  std::vector<size_t> recording;
  int64_t prefetches = 0;

  /// A group's share on the device its unit computes on, for an all-gather to read: `shard` itself, or with
  /// offload a copy of it on memory from the pool, made on the device's current stream without waiting
  /// (from pinned memory), so the all-gather that reads it is ordered after it.
  torch::Tensor share_on_device(const Group& group);

  /// A buffer of one share's elements of `group` on its unit's device, on memory from the pool (contents
  /// undefined).
  torch::Tensor share_sized(const Group& group);

  /// All-gathers every process's share of `group` into its `full` (which has its memory).
  void gather_shares(Group& group);

  /// Waits until the copies to and from CPU memory issued so far are done, before the CPU writes what they
  /// read or reads what they write (an optimizer step, a checkpoint): with offload on a GPU, the copies of
  /// the shares to the device are not waited for where they are made.
  void settle_host_copies() const;

  /// Starts the all-gather of unit `u` ahead of its use, where the transport overlaps it.
  void prefetch(int64_t u);

  /// The unit that ran `step` places after unit `u` in the last training forward (-1 for none).
  int64_t neighbour(size_t u, int64_t step) const;

  /// Backward prefetch: starts the all-gather of the unit that ran before unit `u` (its backward comes next),
  /// unless that unit's backward already ran.
  void prefetch_previous(size_t u);

  /// Notes unit `u`'s first call in a training forward.
  void record(size_t u);

  /// Ends a training forward's recording: its order is what the next forward and this backward prefetch by.
  void adopt_recorded_order();

  /// Waits for every started all-gather and releases what it gathered (the end of a backward, an optimizer
  /// step: nothing may be in flight while the shards change).
  void settle();

  /// In debug mode, names unit `unit` and `what` in the fingerprints of the collectives issued meanwhile.
  std::optional<CollectivePurpose> say(const Unit& unit, const char* what) const;

  void gather(Unit& unit);

  /// Releases a unit's whole parameters: its parameters hold no elements (shape [0], as FSDP's sharded
  /// parameters), so code that touches one outside the unit's forward fails on its shape instead of reading
  /// released memory; the tensors autograd saved in forward keep the storage, whose data comes back with
  /// the next gather.
  void reshard(Unit& unit);

  /// Re-gathers a gathered unit after its shards changed (an optimizer step).
  void refresh(Unit& unit);

  /// Copies this process's slice of the gathered parameters into its shards (after they were changed whole).
  void write_back(Unit& unit);
};

/// The pre-backward side of a unit: the first of its outputs whose gradient is computed gathers it again.
/// With BACKWARD_PRE, it also starts the all-gather of the unit whose backward comes next.
void before_unit_backward(const std::weak_ptr<Sharded>& weak, size_t index);

// ---- The gradients' side (gradients.cpp)

/// A prepared model under "fsdp": the gradients' side of a step (see the file comment).
class FsdpModel final : public PreparedModel {
public:
  FsdpModel(torch::nn::Module& model, std::shared_ptr<Sharded> sharded,
            std::shared_ptr<const std::set<c10::TensorImpl*>> stepped, const ParallelContext& context);
  ~FsdpModel() override;

  const std::shared_ptr<Sharded>& sharded() const { return sharded_; }

  std::string synchronisation() const override { return "reduce_scatter"; }
  bool synchronises_every_backward() const override { return true; }

  void arm(const torch::Tensor&) override;
  void finish_backward() override;
  void disarm() override;
  void shadow_armed_backward() override;

  size_t bucket_count() const override { return sharded_->units.size(); }
  void observe_bucket_launches(std::function<void(size_t)> observer) override {
    observer_ = std::move(observer);
  }

private:
  /// A pre hook of a parameter's AccumulateGrad node.
  struct TakeGradient final : torch::autograd::FunctionPreHook {
    explicit TakeGradient(
        std::function<torch::autograd::variable_list(const torch::autograd::variable_list&)> take)
        : take_(std::move(take)) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& gradients) override {
      return take_(gradients);
    }
    std::function<torch::autograd::variable_list(const torch::autograd::variable_list&)> take_;
  };
  struct Hooks {
    std::shared_ptr<torch::autograd::Node> accumulator;
    const torch::autograd::FunctionPreHook* pre = nullptr;
    uintptr_t post = 0;
  };

  /// Before AccumulateGrad: the incoming gradient of parameter `index` is taken as it is and AccumulateGrad
  /// gets none, so it neither clones it into `.grad()`'s layout (a transposed Linear weight gradient would
  /// be: one more unit-sized buffer, written once more) nor keeps it. Where `.grad()` already holds a
  /// gradient (made outside accelerator.backward), or the gradient is not a dense tensor, AccumulateGrad
  /// runs as usual and its post hook takes `.grad()` instead.
  torch::autograd::variable_list take_gradient(size_t index, const torch::autograd::variable_list& gradients);

  /// Takes `gradient`, the whole gradient of parameter `index` from the armed backward (false: not armed,
  /// or the parameter's gradient came already: the caller leaves it where it is, and the optimizer step
  /// refuses a gradient made outside accelerator.backward).
  bool gradient_arrived(size_t index, const torch::Tensor& gradient);

  /// Adds (copies, the first time in the window) `gradient` into `member`'s place in `group`'s staging
  /// buffer.
  static void stage(Member& member, Group& group, const torch::Tensor& gradient);

  /// Stages the gradients held for `unit` (after its release, so a new staging buffer takes the memory of
  /// the gathered parameters). A new buffer is written once: the held gradients are copied into it and only
  /// the rest (parameters without one, alignment gaps, padding) is zero-filled.
  void stage_held(Unit& unit);

  /// Reduce-scatters unit `u`'s staged gradients (zeros for parameters whose gradient did not come) and adds
  /// its slice to the shares' gradients.
  void reduce(size_t u);

  std::shared_ptr<Sharded> sharded_;
  std::shared_ptr<const std::set<c10::TensorImpl*>> stepped_;
  std::vector<Hooks> hooks_;
  std::function<void(size_t)> observer_;
  size_t next_ = 0;
  bool armed_ = false;
  bool reduce_ = false;
  bool checked_ = false;
};

// ---- Which modules are units (units.cpp)

/// A module of the model being sharded, in pre-order (the root first).
struct ModuleEntry {
  torch::nn::Module* module;
  std::string name; // its path in the model ("" for the root)
  int parent;       // its index in the list; -1 for the root
  bool candidate;   // its type calls unit() in its forward
};

/// fsdp_auto_wrap_policy and its settings: the one place that decides which candidates are units.
struct WrapPolicy {
  std::string policy = "NO_WRAP"; // NO_WRAP, TRANSFORMER_BASED_WRAP or SIZE_BASED_WRAP
  std::vector<std::string> classes;
  int64_t min_num_params = 100000000;

  static WrapPolicy of(const ResolvedConfig& config);

  /// For each module of `modules`, whether it is a unit (the root's entry: whether it is one rather than the
  /// resident unit). `warn`: say what TRANSFORMER_BASED_WRAP could not make a unit of its own.
  std::vector<bool> choose(const std::vector<ModuleEntry>& modules, bool warn) const;

private:
  void choose_by_class(const std::vector<ModuleEntry>& modules, std::vector<bool>& unit, bool warn) const;

  /// PyTorch's size_based_auto_wrap_policy, bottom-up: a candidate whose subtree holds at least
  /// min_num_params trainable parameter elements outside the units below it is a unit, and its elements
  /// count no further up. A parameter held by several modules (tied) counts once, where first met.
  void choose_by_size(const std::vector<ModuleEntry>& modules, std::vector<bool>& unit) const;

  static std::string join(const std::vector<std::string>& names);
};

/// The units of `model` and the owner of each trainable parameter (see the file comment).
std::shared_ptr<Sharded> shard_model(torch::nn::Module& model,
                                     const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                     bool reshard_after_forward, bool offload, const WrapPolicy& policy,
                                     bool warn);

// ---- Offload (offload.cpp)

/// Whether the offloads move anything: on a GPU; on the CPU, where they are no-ops, only under the test hook
/// ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1 (docs/development.md), with CPU memory standing in for the device's.
bool takes_offload_path(const ParallelContext& context);

/// The engine's context: the job's; or, with one process and fsdp_offload_params where it moves something or
/// fsdp_activation_checkpointing, the job's with a group of this process alone. As PyTorch FSDP on one GPU,
/// each unit is then sharded into one share (with offload kept in CPU memory with its gradient and the
/// optimizer step) and gathered for its forward and backward, and its units can recompute: a model larger
/// than the device's memory, or whose activations are, trains on one device.
ParallelContext with_group_of_one(ParallelContext context);

// ---- The engine (engine.cpp; gather_full_parameters, whole_tensors and model_checkpoint in state_dict.cpp)

/// The "fsdp" strategy's engine (make_fsdp_engine): it makes units of the models it prepares, and is the
/// UnitHost their forwards call.
class FsdpEngine final : public ShardedEngine, public WholeModel, public fsdp::detail::UnitHost {
public:
  explicit FsdpEngine(const ParallelContext& context);
  ~FsdpEngine() override;

  WholeModel& whole_model() override { return *this; }

  std::string name() const override { return "fsdp"; }

  std::shared_ptr<PreparedModel> prepare_model(torch::nn::Module& model) override;

  // ---- UnitHost
  void* enter(torch::nn::Module& module, const std::type_info& type) override;
  void leave(void* handle, const std::vector<torch::Tensor>& outputs) override;
  bool recomputes(void* handle) const override;
  bool offloads_inputs() const override { return offload_inputs_; }
  void abandon(void* handle) noexcept override;

  // ---- The optimizer's side
  void prepare_optimizer(ShardableOptimizer& optimizer) override;
  void before_optimizer_step(ShardableOptimizer&) override;
  void after_optimizer_step(ShardableOptimizer& optimizer) override;
  std::vector<int64_t> whole_sizes(const torch::Tensor& parameter) override;

  bool shards_optimizer_state() const override {
    return context().process_group != nullptr && sharding_ != "NO_SHARD";
  }

  c10::intrusive_ptr<c10d::ProcessGroup> shard_group() const override {
    return machines_ ? machines_->machine : context().process_group;
  }

  bool writes_shares() const override { return !machines_ || machines_->machine_index == 0; }

  bool reads_checkpoints_of(const std::string& strategy) const override {
    return replicated_->reads_checkpoints_of(strategy);
  }

  ReplicaExpectation replica_expectation() const override;
  std::string describe() const override;
  std::function<void()> gather_full_parameters(torch::nn::Module& model) override;
  std::map<std::string, torch::Tensor> whole_tensors(torch::nn::Module& module, bool keeps) override;

  std::unique_ptr<CheckpointComponent>
  model_checkpoint(const std::vector<std::shared_ptr<PreparedModel>>& models) override;

protected:
  std::optional<Held> held(const torch::Tensor& parameter) override;

private:
  /// The units of prepared `model`, or null (not prepared here, released, or replicated).
  std::shared_ptr<Sharded> sharded_of(const torch::nn::Module& model) const;
  std::pair<std::shared_ptr<Sharded>, size_t> find(const torch::Tensor& parameter);

  std::unique_ptr<ParallelEngine> replicated_;
  std::string sharding_;
  bool hybrid_ = false;
  std::shared_ptr<const MachineGroups> machines_; // hybrid sharding on several machines
  bool activation_checkpointing_ = false;
  bool offload_params_ = false; // fsdp_offload_params, where it moves something (a GPU run)
  bool offload_inputs_ = false; // fsdp_activation_checkpointing_offload, likewise
  fsdp::detail::UnitHost* previous_host_ = nullptr;
  std::shared_ptr<std::set<c10::TensorImpl*>> stepped_ = std::make_shared<std::set<c10::TensorImpl*>>();
  std::mutex mutex_;
  std::unordered_map<torch::nn::Module*, std::pair<std::weak_ptr<Sharded>, size_t>> units_;
  std::unordered_set<torch::nn::Module*> known_modules_;
  std::unordered_map<c10::TensorImpl*, std::pair<std::weak_ptr<Sharded>, size_t>> members_;
  std::vector<std::pair<torch::nn::Module*, std::weak_ptr<Sharded>>> models_;
};

} // namespace accelerate::detail::fsdp_internal
