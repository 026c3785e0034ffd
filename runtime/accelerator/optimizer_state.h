// OptimizerState and SchedulerState: what a prepared optimizer or scheduler handle shares (runtime-internal).
#pragma once

#include "parallel/engine.h"

#include <accelerate/gradient_state.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/core/Event.h>
#include <torch/torch.h>

namespace accelerate::detail {

class Precision;

/// An fp16 step whose skip decision is still on the device: `found_inf` is being copied to the host
/// asynchronously, and is read once, when someone needs to know (`resolve_pending_step`).
struct PendingStep {
  bool pending = false;
  torch::Tensor found_inf_host;       // 0-dim float32, pinned when the step ran on a GPU
  std::shared_ptr<c10::Event> copied; // recorded after the copy on the device's stream; null on the CPU
  std::vector<void*> adam_parameters; // whose libtorch step counts roll back if the step was skipped
};

/// Which ATen fused kernel steps an optimizer, if any.
enum class FusedKind { None, Adam, AdamW, SGD };

/// An optimizer type whose step updates each element from that element alone (declared with
/// `declare_elementwise_optimizer`; SGD, Adam, AdamW, Adagrad and RMSprop from the start): a sharded strategy
/// steps shares with it, and its per-parameter state is read and made through the state's `serialize`
/// (runtime/accelerator/optimizer_kinds.cpp).
struct ElementwiseKind {
  std::string name;
  std::function<std::unique_ptr<torch::optim::OptimizerParamState>()> make_state;
};

/// The declared kind of `optimizer`'s exact type (a subclass may step otherwise), nullptr when it has none.
const ElementwiseKind* elementwise_kind_of(const torch::optim::Optimizer& optimizer);

/// One parameter's optimizer state as the named fields its `serialize` writes (tensors and numbers).
using StateFields = std::vector<std::pair<std::string, c10::IValue>>;
StateFields state_fields(const torch::optim::OptimizerParamState& state);
/// A state of `kind` holding `fields` (read back through its `serialize`).
std::unique_ptr<torch::optim::OptimizerParamState> state_from_fields(const ElementwiseKind& kind,
                                                                     const StateFields& fields);
/// The step count among `fields` (the integer field "step"), 0 when there is none.
int64_t state_step(const StateFields& fields);

/// A prepared optimizer's state: what its handles share. The parallel strategy sees it through
/// ShardableOptimizer (runtime/parallel/engine.h) only.
struct OptimizerState final : ShardableOptimizer {
  std::vector<torch::Tensor> stepped_parameters() const override;
  bool steps_per_element() const override { return elementwise != nullptr; }
  std::string type_name() const override;
  void keep_state_shares(
      const std::function<std::optional<StateShare>(const torch::Tensor& parameter)>& range_of) override;

  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::shared_ptr<GradientState> gradient_state;
  std::shared_ptr<BackwardTracker> tracker;
  /// The Accelerator's parallel strategy: told at prepare and after each step (a sharded one steps a share).
  std::shared_ptr<ParallelEngine> engine;
  FusedKind fused = FusedKind::None;
  /// Its declared per-element kind (nullptr: not declared; it steps only whole parameters).
  const ElementwiseKind* elementwise = nullptr;
  /// Adam/AdamW step counts as the fused kernels want them: one float tensor per parameter, on its device,
  /// with the libtorch step count it was made for.
  std::unordered_map<void*, std::pair<torch::Tensor, int64_t>> step_tensors;
  int64_t fused_steps = 0;
  bool last_step_skipped = false;
  int num_processes = 1;
  /// The Accelerator's precision recipe (its fp16 grad scaler), linked by `Precision::attach`.
  std::shared_ptr<Precision> precision;
  /// fp16: the last step's deferred skip decision.
  PendingStep pending;
  /// The last real step was skipped by the grad scaler (inf/nan gradients).
  bool last_step_overflowed = false;
  /// Set when clipping already unscaled this step's gradients: their inf/nan flag (consumed by the step).
  torch::Tensor unscaled_found_inf;
  /// While a CUDA graph captures a step (runtime/accelerator/step_graph.cpp): one float32 learning-rate
  /// tensor per param group, on the device, that the fused kernels read instead of the value baked in at
  /// capture, so that a scheduler stepping between replays still takes effect. Empty otherwise.
  std::vector<torch::Tensor> graph_lrs;
  /// `gradient_clipping`: the total gradient norm each step clips to first (0: none).
  double clip_norm = 0;
};

struct SchedulerState {
  std::shared_ptr<torch::optim::LRScheduler> scheduler;
  std::shared_ptr<GradientState> gradient_state;
  bool step_with_optimizer = true;
  int steps_per_optimizer_step = 1;
  /// `gradient_state->optimizer_steps` when this scheduler last stepped.
  int64_t optimizer_steps_seen = 0;
  int64_t steps = 0;
  /// The Accelerator's precision recipe: the scheduler reads fp16 skip decisions before stepping.
  std::shared_ptr<Precision> precision;
};

/// Picks the fused kernel for `optimizer`'s exact type, or None (a subclass steps with its own step()).
FusedKind fused_kind_of(const torch::optim::Optimizer& optimizer);

/// Whether `state`'s next step runs through one of ATen's fused kernels.
bool fused_step_possible(const OptimizerState& state);

/// Adam/AdamW: libtorch's per-parameter step counts, by parameter key, sorted (empty for other optimizers).
std::vector<std::pair<void*, int64_t>> adam_step_counts(const OptimizerState& state);
/// Adds `deltas` (by parameter key) to those counts and to what the step tensors were made for: the host
/// side of steps a CUDA graph replayed.
void advance_adam_step_counts(OptimizerState& state, const std::vector<std::pair<void*, int64_t>>& deltas);

/// The gradients of every parameter `state`'s optimizer steps, as the strategy holds them (the defined
/// `.grad()`s, or this process's shares: `GradientNorms::gradients`).
std::vector<torch::Tensor> optimizer_gradients(const OptimizerState& state);

/// `Accelerator::clip_grad_norm_` (and `gradient_clipping`'s clip in every step): scales the gradients of
/// `parameters`, as `engine` holds them, to a total norm of at most `max_norm`; returns the norm before.
torch::Tensor clip_gradient_norm(ParallelEngine& engine, Precision& precision,
                                 const GradientState& gradient_state,
                                 const std::vector<torch::Tensor>& parameters, double max_norm,
                                 double norm_type);

/// Reads `state`'s deferred fp16 skip decision, if any (one host read): on a skip, marks the step skipped and
/// takes it back from the step counters (`GradientState::optimizer_steps`, Adam's per-parameter step).
void resolve_pending_step(OptimizerState& state);

} // namespace accelerate::detail
