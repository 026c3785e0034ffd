// What every parallel strategy's backward shares: the walk that finds which prepared models a loss reaches
// (and refuses what no strategy could synchronise), and Join for uneven inputs (runtime-internal).
#pragma once

#include "parallel/engine.h"

#include <accelerate/detail/loader_context.h>

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <torch/torch.h>

namespace accelerate::detail {

/// Finds which prepared models a loss's autograd graph reaches, and refuses partial reach that the
/// Reducer would only report one iteration later (and no strategy could synchronise). Called only with more
/// than one process.
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
  void add(PreparedModel* model);
  void clear();
  /// The models whose parameters `loss` reaches, in preparation order. Throws std::logic_error, before
  /// anything is armed or differentiated, on partial reach or an unprepared parameter.
  std::vector<PreparedModel*> reached_by(const torch::Tensor& loss, bool find_unused_parameters);
  /// Records the parameters a prepared optimizer steps (before any sharding replaces them).
  void add_optimizer_parameters(const std::vector<torch::Tensor>& parameters);
  /// For a job with more than one process whose data a prepared loader shards but whose loss reaches no
  /// model that synchronises (none was prepared, or the prepared ones do not take part): throws
  /// std::logic_error, before anything is differentiated, when the loss reaches a trained parameter of no
  /// prepared model. Such a parameter is known at the first backward when a prepared optimizer steps it, else
  /// at the second (see the class). Each process would otherwise train its share alone, unsynchronised.
  void refuse_unsynchronised_training(const torch::Tensor& loss);

private:
  /// Walks `loss`'s graph: counts, per prepared model, the parameters it reaches, and lists the leaves no
  /// prepared model owns, each with the node that consumes it.
  void walk(const torch::Tensor& loss, std::vector<size_t>& reached_parameters,
            std::vector<std::pair<const torch::Tensor*, const torch::autograd::Node*>>& foreign) const;

  /// Throws when one of this call's leaves that no prepared model owns is a parameter (see the class), else
  /// remembers them for the next calls. `foreign`: each leaf with the node that consumes it.
  void refuse_unprepared_parameters(
      const std::vector<std::pair<const torch::Tensor*, const torch::autograd::Node*>>& foreign);

  std::vector<PreparedModel*> models_;
  std::unordered_map<const void*, size_t> owner_of_;
  /// Parameters of prepared models that did not require grad at prepare: owned, but never synchronised.
  std::unordered_set<const void*> frozen_at_prepare_;
  /// Parameters prepared optimizers step, as they were when each optimizer was prepared.
  std::unordered_set<const void*> stepped_by_prepared_optimizer_;
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
                  const std::vector<std::shared_ptr<PreparedModel>>* models)
      : process_group_(std::move(process_group)), models_(models) {}

  int64_t processes_with_batches(bool has_batch) override;
  void join_until_all_exhausted() override;
  /// Records that this step's backward armed `model` (the pattern a joined process replays).
  void record_armed(PreparedModel* model) { current_step_.push_back(model); }

private:
  /// Broadcasts every prepared model's parameters and buffers from the process that took the most steps.
  void synchronize_models();

  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  const std::vector<std::shared_ptr<PreparedModel>>* models_;
  int64_t batches_taken_ = 0;
  std::vector<PreparedModel*> current_step_;
  std::vector<PreparedModel*> last_step_;
  int64_t last_count_ = 0;
};

} // namespace accelerate::detail
