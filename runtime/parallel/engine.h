// The parallel strategy: the interface the Accelerator, the optimizer, clipping, checkpoints and debug mode
// go through, split by concern (the strategy itself, the prepared model's gradient synchronisation,
// optimizer-state sharding, gradient norms, the whole model), and a registry of the strategies by name
// (runtime-internal). docs/development.md, "Adding
// a parallel strategy", says how to add one.
#pragma once

#include "settings/config.h"
#include "transport/process_group.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

namespace accelerate::detail {

class CheckpointComponent;
struct MachineGroups;

/// Set while `Accelerator::backward` runs its backward; gradient hooks read it to tell a synchronised
/// backward from a plain `loss.backward()`.
struct BackwardTracker {
  std::atomic<bool> inside_accelerator_backward{false};
  std::atomic<bool> unsynchronised_gradients{false};
};

/// The parameters of `model` that require grad: those a strategy synchronises and steps.
std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& model);

/// What a strategy is made with: the job as the Accelerator sees it.
struct ParallelContext {
  torch::Device device{torch::kCPU};
  /// Null when the job has one process.
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;
  ResolvedConfig config;
  std::shared_ptr<BackwardTracker> tracker;
  /// The job machine by machine (runtime/transport/process_group.h), for a strategy that shards within a
  /// machine and replicates across machines: formed at the first call, a collective every process makes;
  /// throws when the job runs on one machine (`what` names the setting that asked). Unset when the job has
  /// one process.
  std::function<std::shared_ptr<const MachineGroups>(const std::string& what)> machine_groups;
};

/// One prepared model under the job's strategy: what `Accelerator::backward` arms, finishes and replays for a
/// process that has joined (uneven inputs). The base class holds what every strategy has: the model, its
/// trainable parameters (those that required grad at prepare) and buffers, the `no_sync` flag, and the hooks
/// that notice gradients computed outside `Accelerator::backward` (removed with the object).
class PreparedModel {
public:
  PreparedModel(torch::nn::Module& model, c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                std::shared_ptr<BackwardTracker> tracker);
  virtual ~PreparedModel();
  PreparedModel(const PreparedModel&) = delete;
  PreparedModel& operator=(const PreparedModel&) = delete;

  torch::nn::Module& model() const { return *model_; }
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }
  const std::vector<torch::Tensor>& buffers() const { return buffers_; }
  /// Whether backward synchronises gradients at all (several processes, trainable parameters).
  bool distributed() const { return process_group_ && !parameters_.empty(); }
  /// How this model's gradients are synchronised, for `Accelerator::state()` and tests ("none" with one
  /// process).
  virtual std::string synchronisation() const = 0;

  /// Arms the coming backward of `loss` for synchronisation. Called only when `distributed()`.
  virtual void arm(const torch::Tensor& loss) = 0;
  /// After the armed backward.
  virtual void finish_backward() = 0;
  /// After an armed backward that threw: forgets the arming.
  virtual void disarm() = 0;
  /// Takes part, with zero gradients, in the collectives one armed backward issues on the other processes
  /// (a process whose data ran out, under Join).
  virtual void shadow_armed_backward() = 0;
  /// Makes parameters and buffers equal to process `source`'s (after Join).
  virtual void broadcast_state_from(int source);

  /// Whether every backward through the model must be armed, inside accumulation windows and `no_sync` too:
  /// a strategy that moves each backward's gradients into per-process shares (ZeRO-2) accumulates there.
  virtual bool synchronises_every_backward() const { return false; }

  /// Suspends synchronisation (`Accelerator::no_sync`).
  bool no_sync = false;
  /// Set by `Accelerator::backward` before `arm`: whether this backward ends the model's accumulation window
  /// (false inside `no_sync` or mid-window). Read by a strategy that arms every backward
  /// (`synchronises_every_backward`) and keeps the window's gradients until it ends.
  bool synchronising = true;

  /// Test hooks: how many communication buckets the strategy made (0 when it has none), and a callback with
  /// each bucket's index as its all-reduce is launched.
  virtual size_t bucket_count() const { return 0; }
  virtual void observe_bucket_launches(std::function<void(size_t bucket_index)> observer);
  /// Test hook: the gradient bytes this process has handed to all-reduces through a gradient communication
  /// hook (parallel/comm_hook.h): counted on the Reducer path once a hook or an observer is set, else 0.
  virtual std::uint64_t gradient_bytes_sent() const { return 0; }

protected:
  /// Makes every process's buffers process 0's (PyTorch DDP's broadcast_buffers, at each synchronised step).
  void broadcast_buffers();
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return process_group_; }

private:
  torch::nn::Module* model_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> buffers_;
  std::shared_ptr<BackwardTracker> tracker_;
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
};

/// What debug mode's replica check (runtime/accelerator/debug_mode.cpp) may expect to be identical on every
/// process.
struct ReplicaExpectation {
  /// Every process holds the whole model, with the same values.
  bool parameters = true;
  /// Every process holds the whole optimizer state, with the same values.
  bool optimizer_state = true;
};

/// This process's part of one parameter under a sharded strategy: the elements its optimizer steps.
struct ParameterShare {
  /// A 1-D view of those elements, in the parameter's own storage; empty when this process steps none.
  torch::Tensor values;
  /// The index of its first element in the flattened parameter.
  int64_t offset = 0;
  /// Their gradient (same shape), undefined when there is none.
  torch::Tensor gradient;
};

/// Where a process keeps the optimizer state of its share of a parameter: elements [begin, begin + length)
/// of the flattened parameter, on `device` (the share's: CPU memory under fsdp_offload_params).
struct StateShare {
  int64_t begin = 0;
  int64_t length = 0; // 0: none of it is this process's
  torch::Device device = torch::kCPU;
};

/// A prepared optimizer as a strategy sees it (the argument of OptimizerSharding's methods): the parameters
/// it steps, whether ATen's fused kernels step it, and its per-parameter state to narrow to shares. The
/// prepared optimizer's own state (runtime/accelerator/optimizer_state.h) implements it; nothing in
/// runtime/parallel/ reads more of it.
class ShardableOptimizer {
public:
  virtual ~ShardableOptimizer() = default;
  /// The parameters it steps, group after group (the same order on every process).
  virtual std::vector<torch::Tensor> stepped_parameters() const = 0;
  /// Whether its step updates each element from that element alone (ATen's fused kernels for SGD, Adam and
  /// AdamW; a type declared with declare_elementwise_optimizer), the only steps a strategy can point at a
  /// share.
  virtual bool steps_per_element() const = 0;
  /// The optimizer's C++ type, for messages.
  virtual std::string type_name() const = 0;
  /// After a checkpoint load gave it the state of whole parameters: keeps, of each parameter `range_of`
  /// returns a share for, that range of the flattened state, on the share's device (length 0: the state is
  /// dropped); parameters it returns nullopt for keep their whole state.
  virtual void keep_state_shares(
      const std::function<std::optional<StateShare>(const torch::Tensor& parameter)>& range_of) = 0;
};

/// Optimizer-state sharding: which elements of each parameter this process's optimizer steps, what comes
/// before and after the step, and how loaded optimizer state is kept. The defaults are a replicated
/// strategy's: every process steps every parameter whole.
class OptimizerSharding {
public:
  virtual ~OptimizerSharding() = default;
  /// At `prepare(optimizer)`: a sharded strategy narrows what this process's optimizer steps to its share.
  virtual void prepare_optimizer(ShardableOptimizer& /*optimizer*/) {}
  /// Before each optimizer step that runs: a sharded strategy finishes the collectives it started ahead.
  virtual void before_optimizer_step(ShardableOptimizer& /*optimizer*/) {}
  /// After each optimizer step that ran (taken or skipped by the fp16 scaler on the device): a sharded
  /// strategy gathers the updated shares here.
  virtual void after_optimizer_step(ShardableOptimizer& /*optimizer*/) {}
  /// This process's part of `parameter` for its optimizer step, or nullopt when the optimizer steps it whole
  /// (every parameter of a replicated strategy; a sharded one's parameters outside the models it prepared).
  virtual std::optional<ParameterShare> share(const torch::Tensor& /*parameter*/) { return std::nullopt; }
  /// The shape of `parameter` as the model defines it: a strategy whose parameters hold none of their
  /// elements outside forward (fsdp) gives the whole shape, which checkpoints of optimizer state are made of.
  virtual std::vector<int64_t> whole_sizes(const torch::Tensor& parameter) { return parameter.sizes().vec(); }
  /// `zero_grad` on `parameter`: a strategy that keeps its share's gradient apart from `.grad()` zeroes it
  /// (or drops it with `set_to_none`).
  virtual void zero_share_gradient(const torch::Tensor& /*parameter*/, bool /*set_to_none*/) {}
  /// Whether the optimizer state is held in shares (checkpoints then hold one file per process).
  virtual bool shards_optimizer_state() const { return false; }
  /// Whether this process writes its shares into a sharded checkpoint: false where another process holds the
  /// same shares and writes them (hybrid sharding: the machines after the first), so every element is written
  /// once. Its files are still written, without those shares.
  virtual bool writes_shares() const { return true; }
  /// After a checkpoint load gave `optimizer` the state of whole parameters: a sharded strategy keeps its
  /// shares of it.
  virtual void adopt_optimizer_state(ShardableOptimizer& /*optimizer*/) {}
};

/// The gradients clipping measures and scales and the fp16 overflow check reads, and their norm. The defaults
/// are a replicated strategy's: the parameters' `.grad()`s, measured locally.
class GradientNorms {
public:
  virtual ~GradientNorms() = default;
  /// The tensors that hold the gradients of `parameters` on this process: by default their defined
  /// `.grad()`s; a strategy that keeps gradients in shares returns those (and measures them with
  /// `gradient_norm` across processes).
  virtual std::vector<torch::Tensor> gradients(const std::vector<torch::Tensor>& parameters);
  /// The norm of the gradients of the whole model, from this process's `gradients` (each already divided as
  /// clipping wants): with replicated gradients, the local norm.
  virtual torch::Tensor gradient_norm(const std::vector<torch::Tensor>& gradients, double norm_type);
};

/// The whole model where processes hold parts of it: gathering the whole parameters, and the model's part of
/// a checkpoint. The defaults are a replicated strategy's: every process already holds the whole model.
class WholeModel {
public:
  virtual ~WholeModel() = default;
  /// `Accelerator::unshard(model)`: makes the whole parameters of prepared `model` present (a collective:
  /// every process calls it) and returns what restores the sharded state, writing each process's slice of the
  /// whole parameters back into its shards; empty when every process already holds the whole model.
  virtual std::function<void()> gather_full_parameters(torch::nn::Module& /*model*/) { return {}; }
  /// Every parameter and buffer of `model`, whole, by name (`module_tensors`' names), to be written out by
  /// the process that `keeps` them: a strategy that shards parameters gathers them one unit at a time (a
  /// collective: every process calls it) into CPU copies where `keeps`, undefined tensors elsewhere. By
  /// default the module's own tensors.
  virtual std::map<std::string, torch::Tensor> whole_tensors(torch::nn::Module& model, bool keeps);
  /// Its part of a checkpoint: the component that saves and loads the prepared `models`
  /// (runtime/checkpoint/component.h). By default the replicated one, in which the main process writes each
  /// whole model; a sharded strategy writes each process's share (`ComponentWriter::rank_file`).
  virtual std::unique_ptr<CheckpointComponent>
  model_checkpoint(const std::vector<std::shared_ptr<PreparedModel>>& models);
};

/// The job's parallel strategy, made once in the Accelerator's constructor from `parallel_strategy`. Its own
/// methods say what it is: its name, how a model is prepared (the PreparedModel synchronises gradients),
/// which checkpoints it reads and what the replica check expects. Each other concern is an interface of its
/// own, reached through an accessor: optimizer-state sharding, gradient norms, the whole model. A strategy
/// implements only the concerns it changes (returning itself, or a part of itself, from the accessor); the
/// others stay the replicated defaults.
class ParallelEngine {
public:
  explicit ParallelEngine(ParallelContext context) : context_(std::move(context)) {}
  virtual ~ParallelEngine() = default;

  /// The name it was registered under (recorded in checkpoints).
  virtual std::string name() const = 0;

  /// Places `model` on the device, makes every process's copy process 0's, and wraps it.
  virtual std::shared_ptr<PreparedModel> prepare_model(torch::nn::Module& model) = 0;
  /// Whether a checkpoint written under the strategy named `strategy` loads under this one.
  virtual bool reads_checkpoints_of(const std::string& strategy) const { return strategy == name(); }
  /// What the replica check may compare.
  virtual ReplicaExpectation replica_expectation() const { return {}; }
  /// A line for `Accelerator::state()` on what the strategy does in this job (empty: nothing to add).
  virtual std::string describe() const { return ""; }

  /// Its concerns (the replicated defaults unless the strategy overrides the accessor).
  virtual OptimizerSharding& optimizer_sharding();
  virtual GradientNorms& gradient_norms();
  virtual WholeModel& whole_model();

  /// Whether some parameter of `model` holds only a share of its elements here (outside `unshard`).
  bool holds_shares_of(const torch::nn::Module& model);

  const ParallelContext& context() const { return context_; }

protected:
  /// `model.to(device)`, then parameters and buffers broadcast from process 0 (with several processes), in
  /// messages of up to `bucket_bytes` (broadcast_model_state).
  void place_and_broadcast(torch::nn::Module& model, size_t bucket_bytes = kModelBroadcastBucketBytes) const;

private:
  ParallelContext context_;
};

/// Makes a strategy for a job.
using ParallelEngineFactory = std::function<std::unique_ptr<ParallelEngine>(const ParallelContext&)>;

/// Adds a strategy under `name`; throws std::logic_error when the name is taken.
void register_parallel_engine(const std::string& name, ParallelEngineFactory factory);

/// The names of the registered strategies, sorted.
std::vector<std::string> parallel_engine_names();

/// The factory of the strategy registered as `name`. Throws std::invalid_argument listing the registered
/// names when there is none by that name (the Accelerator asks before it forms the process group).
ParallelEngineFactory parallel_engine_factory(const std::string& name);

/// Registers a strategy at static initialisation, from the translation unit that defines it (a strategy in an
/// executable, a test's). The runtime's own are listed in one table in runtime/parallel/engine.cpp, which
/// says in one place which strategies ship and does not depend on the order of static initialisation.
struct ParallelEngineRegistration {
  ParallelEngineRegistration(const std::string& name, ParallelEngineFactory factory) {
    register_parallel_engine(name, std::move(factory));
  }
};

/// The runtime's strategies (one line each in runtime/parallel/engine.cpp's table).
std::unique_ptr<ParallelEngine> make_ddp_engine(const ParallelContext& context);
std::unique_ptr<ParallelEngine> make_zero_engine(const ParallelContext& context);
std::unique_ptr<ParallelEngine> make_fsdp_engine(const ParallelContext& context);

} // namespace accelerate::detail
