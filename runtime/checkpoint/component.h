// The parts of a checkpoint: each component (the models, the optimizers, the schedulers, the data positions,
// the registered objects, the generators, the step counters, the registered counters) saves and loads its own
// part through one interface, so that save_state and load_state only run the list (runtime-internal).
//
// Saving: every process calls `save` with a writer that writes the checkpoint's files (the main process) and
// each process's own files (any process), and sets the component's entry in metadata.json.
// Loading is all or nothing: every component's `verify` reads and checks its part against this program
// without changing anything; only then does each `apply` change the program, registering how to undo it, and
// a failure undoes what the others applied.
#pragma once

#include "checkpoint/format.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace accelerate::detail {

struct AcceleratorState;
class PreparedModel;
class FileWriter;

/// Writes one component's part of a checkpoint.
class ComponentWriter {
public:
  ComponentWriter(AcceleratorState& state, FileWriter& files, Json& metadata, std::string component, int rank,
                  int world)
      : state_(state), files_(files), metadata_(metadata), component_(std::move(component)), rank_(rank),
        world_(world) {}

  AcceleratorState& state() const { return state_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  bool main() const { return rank_ == 0; }

  /// A file of the whole checkpoint; only the main process writes these.
  void file(const std::string& name, const std::string& bytes);
  /// A file of this process's own, on any process (its name must differ from every other process's):
  /// metadata.json records it with its size, hash and the process that wrote it.
  void rank_file(const std::string& name, const std::string& bytes);
  /// The component's entry in metadata.json (under its name); the main process's is the one recorded.
  Json& entry() { return metadata_[component_]; }

private:
  AcceleratorState& state_;
  FileWriter& files_;
  Json& metadata_;
  std::string component_;
  int rank_;
  int world_;
};

/// Reads one component's part of a checkpoint, whose metadata.json was read and checked.
class ComponentReader {
public:
  ComponentReader(AcceleratorState& state, const CheckpointMetadata& checkpoint, std::string component,
                  int rank)
      : state_(state), checkpoint_(checkpoint), component_(std::move(component)), rank_(rank) {}

  AcceleratorState& state() const { return state_; }
  int rank() const { return rank_; }
  const CheckpointMetadata& checkpoint() const { return checkpoint_; }
  const std::string& directory() const { return checkpoint_.directory; }

  /// The component's entry in metadata.json, and that entry as a list (a damaged checkpoint otherwise).
  const Json& entry() const { return field(checkpoint_.json, component_, directory()); }
  const Json& list() const { return list_field(checkpoint_.json, component_, directory()); }
  /// The recorded file `name`, checked against its recorded size and hash.
  std::string file(const std::string& name) const { return checkpoint_.read_file(name); }

  const Json& field_of(const Json& object, const std::string& key) const {
    return field(object, key, directory());
  }
  std::string text(const Json& object, const std::string& key) const {
    return text_field(object, key, directory());
  }
  template <typename T> T number(const Json& object, const std::string& key) const {
    return number_field<T>(object, key, directory());
  }
  /// Throws unless the checkpoint holds as many `what` (e.g. "optimizer(s)") as this program prepared.
  void check_count(const std::string& what, size_t saved, size_t prepared, const std::string& fix) const;

private:
  AcceleratorState& state_;
  const CheckpointMetadata& checkpoint_;
  std::string component_;
  int rank_;
};

/// Undo actions for a load that failed halfway, run newest first.
class Rollback {
public:
  void add(std::function<void()> undo) { undo_.push_back(std::move(undo)); }
  void run() noexcept;

private:
  std::vector<std::function<void()>> undo_;
};

/// One part of a checkpoint.
class CheckpointComponent {
public:
  virtual ~CheckpointComponent() = default;
  /// Its entry in metadata.json ("models", "optimizers", ...).
  virtual std::string name() const = 0;
  /// Writes its files and metadata entry; called on every process.
  virtual void save(ComponentWriter& writer) = 0;
  /// Reads its part of the checkpoint and checks it against this program, changing nothing, and keeps what
  /// it read for `apply`; called on every process, before any component applies.
  virtual void verify(const ComponentReader& reader) = 0;
  /// Puts what `verify` read into the program, adding to `rollback` how to undo each change.
  virtual void apply(Rollback& rollback) = 0;
};

/// A checkpoint's components, in the order of their metadata.json entries (and of verifying and applying).
std::vector<std::unique_ptr<CheckpointComponent>> checkpoint_components(AcceleratorState& state);

std::unique_ptr<CheckpointComponent> gradient_state_component(AcceleratorState& state);
/// The models' part when every process holds the whole model: the main process writes each one
/// (`WholeModel::model_checkpoint`'s default; a strategy chooses its own).
std::unique_ptr<CheckpointComponent>
replicated_model_checkpoint(const std::vector<std::shared_ptr<PreparedModel>>& models);
/// Every process calls it; the main process writes `tensors_of(i)` (every tensor of prepared model i, whole,
/// by name) to `model.safetensors`, `model_1.safetensors`, ... and records them: the replicated component's
/// form, for a strategy that gathers each model's tensors in its own way (on every process: `tensors_of` may
/// run collectives).
void save_whole_models(ComponentWriter& writer, size_t count,
                       const std::function<std::map<std::string, torch::Tensor>(size_t)>& tensors_of);
/// One process's part of a parameter under a sharded strategy: elements [offset, offset + numel) of the
/// flattened parameter `name` (as the unwrapped module names it).
struct ModelPiece {
  std::string name;
  torch::Tensor values;
  int64_t offset = 0;
  /// The whole parameter's shape (metadata.json records it for `accel merge-weights`).
  std::vector<int64_t> shape;
};
/// A sharded strategy's SHARDED_STATE_DICT: every process writes its pieces of prepared model i
/// (`pieces_of(i)`: each parameter the strategy shards, empty values where the process holds none of it) to
/// `model_shards_<rank>.safetensors` (`model_1_shards_<rank>...`), the main process adding the model's other
/// tensors whole; the models' entry lists the files. `replicated_model_checkpoint`'s component reads it
/// (assembling whole tensors, at any world size).
void save_model_pieces(ComponentWriter& writer, const std::vector<std::shared_ptr<PreparedModel>>& models,
                       const std::function<std::vector<ModelPiece>(size_t)>& pieces_of);
std::unique_ptr<CheckpointComponent> optimizer_component(AcceleratorState& state);
std::unique_ptr<CheckpointComponent> scheduler_component(AcceleratorState& state);
std::unique_ptr<CheckpointComponent> data_position_component(AcceleratorState& state);
std::unique_ptr<CheckpointComponent> registered_objects_component(AcceleratorState& state);
std::unique_ptr<CheckpointComponent> random_states_component(AcceleratorState& state);
std::unique_ptr<CheckpointComponent> counters_component(AcceleratorState& state);
std::unique_ptr<CheckpointComponent> trackers_component(AcceleratorState& state);

// ---- Helpers the components share
// ---------------------------------------------------------------------------

/// `stem` + `extension` for the first object, `stem_<index>` + `extension` after it (model.safetensors,
/// model_1.safetensors).
std::string numbered_file(const std::string& stem, size_t index, const std::string& extension);
/// A libtorch archive's bytes, and an archive read back from them onto `device`.
std::string archive_bytes(torch::serialize::OutputArchive& archive);
torch::serialize::InputArchive archive_of(const std::string& bytes, const torch::Device& device);
/// A module's parameters and buffers by name (the weights a checkpoint and `save_model` write).
std::map<std::string, torch::Tensor> module_tensors(const torch::nn::Module& model);

} // namespace accelerate::detail
