// Data-parallel gradient synchronisation of one prepared model, over c10d's Reducer, and Join for uneven
// inputs.
#pragma once

#include "config.h"

#include <accelerate/detail/loader_context.h>

#include <atomic>
#include <functional>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <torch/torch.h>

namespace accelerate::detail {

/// Set while `Accelerator::backward` runs its backward; gradient hooks read it to tell a synchronised
/// backward from a plain `loss.backward()`.
struct BackwardTracker {
  std::atomic<bool> inside_accelerator_backward{false};
  std::atomic<bool> unsynchronised_gradients{false};
};

/// One prepared model: its parameters, how its gradients are averaged (with more than one process), and the
/// hooks that notice gradients computed outside `Accelerator::backward`.
///
/// Averaging: when every process is on this machine (the CPU backend all-reduces through shared memory) and
/// the model's parameters are dense CPU tensors of one floating dtype, without find_unused_parameters, one
/// `average_in_shared_memory` over all gradients right after backward; otherwise c10d's Reducer (bucketed,
/// overlapped with backward). With one core per process the Reducer's overlap buys nothing there (the
/// shared-memory all-reduce runs on the calling thread), and its bucket copies cost two passes over the
/// gradients.
class GradientSynchronizer {
public:
  GradientSynchronizer(torch::nn::Module& model, c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                       const ResolvedConfig& config, std::shared_ptr<BackwardTracker> tracker);
  ~GradientSynchronizer();

  torch::nn::Module& model() const { return *model_; }
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }
  bool distributed() const { return distributed_; }
  /// Whether gradients are averaged through shared memory after backward rather than by the Reducer.
  bool averages_in_shared_memory() const { return shared_memory_average_; }

  /// Arms the coming backward of `loss` for synchronisation (the Reducer: what PyTorch's DDP does in forward;
  /// the shared-memory average: `finish_backward` then runs), and broadcasts the buffers from rank 0 (DDP's
  /// default).
  void arm(const torch::Tensor& loss);
  /// After the armed backward: averages the gradients (shared-memory averaging; the Reducer has already).
  void finish_backward();
  /// After an armed backward that threw: forgets the arming.
  void disarm() { armed_ = false; }
  /// Takes part, with zero gradients, in the collectives one armed backward issues on the other processes.
  void shadow_armed_backward();
  /// Makes parameters and buffers equal to process `source`'s.
  void broadcast_state_from(int source);
  /// Suspends synchronisation (`Accelerator::no_sync`).
  bool no_sync = false;

  /// Test hook: called with each bucket's index as its all-reduce is launched.
  void observe_bucket_launches(std::function<void(size_t bucket_index)> observer);
  size_t bucket_count() const;

private:
  void broadcast_buffers();

  torch::nn::Module* model_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<c10d::Reducer> reducer_;
  bool distributed_ = false;
  bool shared_memory_average_ = false;
  bool armed_ = false;
  std::shared_ptr<BackwardTracker> tracker_;
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
};

/// Finds which prepared models a loss's autograd graph reaches, and refuses partial reach that the
/// Reducer would only report one iteration later. Called only with more than one process.
///
/// The same walk refuses a loss that reaches a trained parameter of no prepared model, whose gradients no
/// one synchronises (the processes' copies would drift apart). libtorch tensors carry no "is a parameter"
/// flag, so a leaf that requires grad and no prepared model owns counts as a parameter when it is the same
/// tensor object in two backward calls; a leaf made afresh each step (WGAN-GP's interpolated inputs) never
/// is. A parameter of a prepared model that was frozen at prepare (so never synchronised) is refused at
/// once. ACCELERATE_ALLOW_UNPREPARED_PARAMETERS=1 turns this check off (docs/runtime.md).
class ReachAnalysis {
public:
  /// Reads ACCELERATE_ALLOW_UNPREPARED_PARAMETERS.
  ReachAnalysis();
  void add(GradientSynchronizer* model);
  void clear();
  /// The models whose parameters `loss` reaches, in preparation order. Throws std::logic_error, before
  /// anything is armed or differentiated, on partial reach or an unprepared parameter.
  std::vector<GradientSynchronizer*> reached_by(const torch::Tensor& loss, bool find_unused_parameters);

private:
  /// Throws when one of this call's leaves that no prepared model owns is a parameter (see the class), else
  /// remembers them for the next calls. `foreign`: each leaf with the node that consumes it.
  void refuse_unprepared_parameters(
      const std::vector<std::pair<const torch::Tensor*, const torch::autograd::Node*>>& foreign);

  std::vector<GradientSynchronizer*> models_;
  std::unordered_map<const void*, size_t> owner_of_;
  /// Parameters of prepared models that did not require grad at prepare: owned, but never synchronised.
  std::unordered_set<const void*> frozen_at_prepare_;
  bool allow_unprepared_parameters_ = false;
  /// Leaves no prepared model owns, from earlier backward calls. Held weakly: a per-step tensor expires when
  /// its step's graph goes (and is forgotten at the next call), and while it is held its address cannot be
  /// reused by a newer tensor, so a match by address is the same tensor object.
  std::unordered_map<const c10::TensorImpl*,
                     c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>>
      foreign_leaves_seen_;
};

/// torch's Join, for prepared loaders with even_batches false: a process whose data ran out keeps
/// answering the others' gradient all-reduces with zeros (the average stays over the whole world size).
class JoinCoordinator : public Joiner {
public:
  /// `models` are the Accelerator's prepared models (re-synchronised when everyone has joined).
  JoinCoordinator(c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                  const std::vector<std::shared_ptr<GradientSynchronizer>>* models)
      : process_group_(std::move(process_group)), models_(models) {}

  int64_t processes_with_batches(bool has_batch) override;
  void join_until_all_exhausted() override;
  /// Records that this step's backward armed `model` (the pattern a joined process replays).
  void record_armed(GradientSynchronizer* model) { current_step_.push_back(model); }

private:
  /// Broadcasts every prepared model's parameters and buffers from the process that took the most steps.
  void synchronize_models();

  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  const std::vector<std::shared_ptr<GradientSynchronizer>>* models_;
  int64_t batches_taken_ = 0;
  std::vector<GradientSynchronizer*> current_step_;
  std::vector<GradientSynchronizer*> last_step_;
  int64_t last_count_ = 0;
};

} // namespace accelerate::detail
