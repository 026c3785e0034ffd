// What the sharded strategies ("zero", "fsdp") share: how a group of parameters is laid out in one flat
// buffer split into equal per-process slices, the gradient norm over every process's share, and how a
// prepared optimizer comes to step shares (runtime-internal).
#pragma once

#include "parallel/engine.h"

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace accelerate::detail {

/// Where parameters of one dtype and device sit in a flat buffer of `world * share` elements, of which
/// process r owns elements [r * share, (r + 1) * share).
///
/// Each parameter starts at a 64-byte boundary, as a tensor of its own would (c10's CPU alignment), so the
/// BLAS kernels of forward and backward take the same paths, and round, as on a separate tensor. Slices start
/// on such boundaries too: ATen's fused optimizer kernels run a vector loop from the start of each tensor
/// they step (in 64-byte units across threads) and a scalar tail, which round differently (fused
/// multiply-add); a share whose ends fall on such boundaries of its parameter puts every element in the same
/// loop as stepping the whole parameter, so stepping shares is bit-identical to stepping whole parameters.
struct FlatPlan {
  struct Member {
    int64_t offset = 0;       // of the parameter's first element in the buffer
    int64_t numel = 0;        // its elements
    int64_t share_begin = 0;  // first element of the parameter (flattened) in this process's slice
    int64_t share_length = 0; // 0: none of it is this process's
    int64_t slice_offset = 0; // where that element sits in this process's slice
  };
  std::vector<Member> members;
  int64_t total = 0; // elements up to the end of the last parameter
  int64_t share = 0; // elements of each process's slice
};

/// Lays out `parameters` (one dtype and device, in this order) for process `rank` of `world`.
FlatPlan plan_flat(const std::vector<torch::Tensor>& parameters, int rank, int world);

/// The norm of the gradients of the whole model when each process of `group` holds different elements of it
/// (`gradients`: this process's shares): every process's partial norm combined in float64 across the group.
torch::Tensor sharded_gradient_norm(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                    const torch::Device& device, const std::vector<torch::Tensor>& gradients,
                                    double norm_type);

/// At prepare(optimizer) under a sharded strategy (`what`, e.g. "parallel_strategy 'zero' (ZeRO stage 2)"):
/// each process steps its shares, so an optimizer whose step is not known to be per element is refused by
/// name (LBFGS, which needs a closure over the whole model, with its own reason).
void refuse_optimizer_not_per_element(const ShardableOptimizer& optimizer, const std::string& what);

/// At the first backward of a prepared model whose gradients go to shares (`what`: the strategy): a trainable
/// parameter of it in no prepared optimizer (`stepped`) would silently never train, and is refused by name.
void refuse_parameters_no_optimizer_steps(const PreparedModel& model, const std::string& what,
                                          const std::set<c10::TensorImpl*>& stepped);

/// The half of a sharded strategy that faces the optimizer, clipping and checkpoints: its optimizer-state
/// sharding and gradient norms (parallel/engine.h's concerns) from this process's share of each parameter,
/// its gradient, the norm across processes and the adoption of loaded state, all from one lookup (`held`)
/// each strategy provides over its own layout.
class ShardedEngine : public ParallelEngine, public OptimizerSharding, public GradientNorms {
public:
  using ParallelEngine::ParallelEngine;

  OptimizerSharding& optimizer_sharding() override { return *this; }
  GradientNorms& gradient_norms() override { return *this; }

  std::vector<torch::Tensor> gradients(const std::vector<torch::Tensor>& parameters) override;
  torch::Tensor gradient_norm(const std::vector<torch::Tensor>& gradients, double norm_type) override;
  std::optional<ParameterShare> share(const torch::Tensor& parameter) override;
  void zero_share_gradient(const torch::Tensor& parameter, bool set_to_none) override;
  void adopt_optimizer_state(ShardableOptimizer& optimizer) override;

protected:
  /// Where the strategy keeps this process's share of a parameter it shards.
  struct Held {
    torch::Tensor values;               // the 1-D view the optimizer steps (empty: none of it is here)
    torch::Tensor* gradient = nullptr;  // its gradient as the strategy keeps it (may be undefined)
    int64_t begin = 0;                  // the share's first element in the flattened parameter
    int64_t length = 0;                 // its elements
    std::shared_ptr<const void> holder; // keeps what `gradient` points into alive
  };
  /// This process's share of `parameter`, or nullopt when the strategy does not shard it.
  virtual std::optional<Held> held(const torch::Tensor& parameter) = 0;
  /// Whether gradients are kept in the shares (`Held::gradient`); false: in `.grad()`, whole on every
  /// process, and the shares' gradients are views of them (ZeRO stage 1).
  virtual bool gradients_in_shares() const { return true; }
  /// The processes among which the shares split the model (the job's group; one machine's under hybrid
  /// sharding, whose machines hold the same shares).
  virtual c10::intrusive_ptr<c10d::ProcessGroup> shard_group() const { return context().process_group; }
};

} // namespace accelerate::detail
