// The optimizers' part of a checkpoint: each prepared optimizer's libtorch archive (per-parameter state and
// param groups) in `optimizer.bin`, `optimizer_1.bin`, ..., with its type and the fused kernels' step count.
// Under a strategy that shards the optimizer state (ZeRO, FSDP), that archive holds the param groups, and
// each process writes its shares of the state to `optimizer_shares_<rank>.bin`
// (`optimizer_1_shares_<rank>.bin`,
// ...): each field of a parameter's state as its `serialize` names it, per-element tensors over the share's
// range, numbers whole, for any optimizer type that steps per element. Either form loads into either kind of
// strategy at any world size: the state is first made whole per parameter, then the strategy keeps its shares
// (`ParallelEngine::adopt_optimizer_state`).
#include "accelerator/optimizer_state.h"
#include "accelerator/state.h"
#include "checkpoint/component.h"
#include "common/durable_file.h"

#include <map>
#include <optional>
#include <stdexcept>

namespace accelerate::detail {
namespace {

std::string optimizer_file(size_t index) {
  return numbered_file("optimizer", index, ".bin");
}

std::string shares_file(size_t index, int rank) {
  return numbered_file("optimizer", index, "") + "_shares_" + std::to_string(rank) + ".bin";
}

std::string type_of(const torch::optim::Optimizer& optimizer) {
  return c10::demangle(typeid(optimizer).name());
}

/// The optimizer's parameters in param-group order: a parameter's index is its place here.
std::vector<torch::Tensor> parameters_of(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> parameters;
  for (const auto& group : optimizer.param_groups()) {
    parameters.insert(parameters.end(), group.params().begin(), group.params().end());
  }
  return parameters;
}

/// One process's shares of the state: for each parameter with state, the range it holds (offset and length
/// in the flattened parameter, and Adam's step count), and the state's tensors over that range.
std::string encode_shares(const OptimizerState& prepared, int rank) {
  torch::serialize::OutputArchive archive;
  std::vector<int64_t> table;
  const auto parameters = parameters_of(*prepared.optimizer);
  auto& state = prepared.optimizer->state();
  int64_t written = 0;
  for (size_t index = 0; index < parameters.size(); ++index) {
    const auto& parameter = parameters[index];
    auto slot = state.find(parameter.unsafeGetTensorImpl());
    if (slot == state.end()) {
      continue;
    }
    auto share = prepared.engine->optimizer_sharding().share(parameter);
    if (!share && rank != 0) {
      continue; // a parameter the strategy does not shard: every process holds all of it; process 0 writes it
    }
    if (share && !prepared.engine->optimizer_sharding().writes_shares()) {
      continue; // another process holds the same share and writes it
    }
    const int64_t offset = share ? share->offset : 0;
    const int64_t length = share ? share->values.numel() : parameter.numel();
    const auto fields = state_fields(*slot->second);
    table.insert(table.end(), {static_cast<int64_t>(index), offset, length, state_step(fields)});
    // Its tensors over the range (each per element), and its numbers (the same on every process).
    const std::string prefix = "share_" + std::to_string(written) + "_";
    for (const auto& [name, value] : fields) {
      if (!value.isTensor() || value.toTensor().dim() == 0) {
        archive.write(prefix + name, value);
        continue;
      }
      const auto& tensor = value.toTensor();
      if (tensor.numel() != length) {
        throw std::logic_error("accelerate: save_state: the optimizer state '" + name + "' of parameter " +
                               std::to_string(index) + " of this " + type_of(*prepared.optimizer) +
                               " holds " + std::to_string(tensor.numel()) + " elements for a share of " +
                               std::to_string(length) +
                               ": the optimizer is not per element (do not declare it with "
                               "declare_elementwise_optimizer; use parallel_strategy 'ddp')");
      }
      archive.write(prefix + name, tensor.reshape(-1), /*is_buffer=*/true);
    }
    ++written;
  }
  archive.write("shares", torch::tensor(table, torch::kInt64).reshape({written, 4}), /*is_buffer=*/true);
  return archive_bytes(archive);
}

/// The state of whole parameters, by parameter index, assembled from every process's shares.
struct WholeState {
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, c10::IValue> numbers; // fields that are no per-element tensor (a step count)
  int64_t step = 0;
  int64_t covered = 0;
};

/// Adds the shares in `bytes` (the file `name`) to `whole`, checking them against the optimizer's
/// parameters.
void add_shares(const std::string& directory, const std::string& name, const std::string& bytes,
                const std::vector<int64_t>& numels, std::map<int64_t, WholeState>& whole) {
  auto damaged = [&](const std::string& problem) {
    throw std::invalid_argument("accelerate: load_state: the optimizer shares in '" +
                                join_path(directory, name) + "' " + problem +
                                "; the checkpoint is damaged or belongs to another optimizer: load another "
                                "checkpoint, or the one of this model and optimizer");
  };
  auto archive = archive_of(bytes, torch::kCPU);
  torch::Tensor table;
  archive.read("shares", table, /*is_buffer=*/true);
  if (table.dim() != 2 || table.size(1) != 4) {
    damaged("have no table of shares");
  }
  auto rows = table.accessor<int64_t, 2>();
  const auto keys = archive.keys();
  for (int64_t row = 0; row < table.size(0); ++row) {
    const int64_t index = rows[row][0];
    const int64_t offset = rows[row][1];
    const int64_t length = rows[row][2];
    if (index < 0 || index >= static_cast<int64_t>(numels.size())) {
      damaged("name parameter " + std::to_string(index) + ", but the optimizer has " +
              std::to_string(numels.size()));
    }
    const int64_t numel = numels[index];
    if (offset < 0 || length < 0 || offset + length > numel) {
      damaged("hold elements " + std::to_string(offset) + ".." + std::to_string(offset + length) +
              " of parameter " + std::to_string(index) + ", which has " + std::to_string(numel));
    }
    auto& state = whole[index];
    if (state.covered > 0 && state.step != rows[row][3]) {
      damaged("give parameter " + std::to_string(index) + " step " + std::to_string(rows[row][3]) +
              " where another share says " + std::to_string(state.step));
    }
    state.step = rows[row][3];
    state.covered += length;
    // Every field this share wrote: per-element tensors over its range, and numbers.
    const std::string prefix = "share_" + std::to_string(row) + "_";
    for (const auto& key : keys) {
      if (key.compare(0, prefix.size(), prefix) != 0) {
        continue;
      }
      const std::string field = key.substr(prefix.size());
      c10::IValue value;
      archive.try_read(key, value);
      if (!value.isTensor() || value.toTensor().dim() == 0) {
        state.numbers[field] = value;
        continue;
      }
      const auto part = value.toTensor();
      if (part.numel() != length) {
        damaged("hold " + std::to_string(part.numel()) + " elements of " + field + " for parameter " +
                std::to_string(index) + " where the table says " + std::to_string(length));
      }
      auto& target = state.tensors[field];
      if (!target.defined()) {
        target = torch::zeros({numel}, part.options());
      }
      target.narrow(0, offset, length).copy_(part);
    }
  }
}

class OptimizerComponent final : public CheckpointComponent {
public:
  explicit OptimizerComponent(AcceleratorState& state) : state_(state) {}
  std::string name() const override { return "optimizers"; }

  void save(ComponentWriter& writer) override {
    const bool sharded = state_.engine->optimizer_sharding().shards_optimizer_state();
    if (sharded) {
      for (size_t i = 0; i < state_.optimizers.size(); ++i) {
        writer.rank_file(shares_file(i, writer.rank()), encode_shares(*state_.optimizers[i], writer.rank()));
      }
    }
    if (!writer.main()) {
      return;
    }
    Json& entry = writer.entry() = Json::array();
    for (size_t i = 0; i < state_.optimizers.size(); ++i) {
      const auto& prepared = *state_.optimizers[i];
      torch::serialize::OutputArchive archive;
      prepared.optimizer->save(archive); // sharded: what counts is its param groups
      writer.file(optimizer_file(i), archive_bytes(archive));
      Json record = {{"file", optimizer_file(i)},
                     {"type", type_of(*prepared.optimizer)},
                     {"fused_steps", prepared.fused_steps}};
      if (sharded) {
        Json shares = Json::array();
        for (int rank = 0; rank < writer.world(); ++rank) {
          shares.push_back(shares_file(i, rank));
        }
        record["shares"] = shares;
      }
      entry.push_back(record);
    }
  }

  void verify(const ComponentReader& reader) override {
    const Json& optimizers = reader.list();
    reader.check_count("optimizer(s)", optimizers.size(), state_.optimizers.size(),
                       "prepare the same optimizers, in the same order, before load_state");
    for (size_t i = 0; i < optimizers.size(); ++i) {
      const std::string type = type_of(*state_.optimizers[i]->optimizer);
      const std::string saved_type = reader.text(optimizers[i], "type");
      if (saved_type != type) {
        throw std::invalid_argument("accelerate: load_state: the checkpoint's optimizer " +
                                    std::to_string(i) + " is a " + saved_type +
                                    ", but this program prepared a " + type +
                                    " there; prepare the optimizer the checkpoint was saved with");
      }
      archives_.push_back(reader.file(reader.text(optimizers[i], "file")));
      fused_steps_.push_back(reader.number<int64_t>(optimizers[i], "fused_steps"));
      wholes_.emplace_back();
      if (!optimizers[i].contains("shares")) {
        continue;
      }
      // Every process's shares, made whole: each parameter with state must be covered exactly once.
      const auto& prepared = *state_.optimizers[i];
      if (prepared.elementwise == nullptr) {
        throw std::invalid_argument("accelerate: load_state: the checkpoint holds the state of its " + type +
                                    " in per-process shares, and this program has not declared " + type +
                                    " per element: call accelerate::declare_elementwise_optimizer<" + type +
                                    ", ItsParamState>() before prepare, as the program that saved it did");
      }
      // The whole parameters' sizes (under fsdp a parameter holds none of its elements outside forward).
      std::vector<int64_t> numels;
      for (const auto& parameter : parameters_of(*prepared.optimizer)) {
        const auto sizes = state_.engine->optimizer_sharding().whole_sizes(parameter);
        numels.push_back(c10::multiply_integers(sizes));
      }
      auto& whole = wholes_.back().emplace();
      for (const auto& file : reader.field_of(optimizers[i], "shares")) {
        const auto name = file.get<std::string>();
        add_shares(reader.directory(), name, reader.file(name), numels, whole);
      }
      for (const auto& [index, state] : whole) {
        if (state.covered != numels[index]) {
          throw std::invalid_argument(
              "accelerate: load_state: the optimizer shares in '" + reader.directory() + "' hold " +
              std::to_string(state.covered) + " elements of the state of parameter " + std::to_string(index) +
              " of optimizer " + std::to_string(i) + ", which has " + std::to_string(numels[index]) +
              ": the shares do not add up (a process's file is from another checkpoint); load another "
              "checkpoint");
        }
      }
    }
  }

  void apply(Rollback& rollback) override {
    for (size_t i = 0; i < state_.optimizers.size(); ++i) {
      auto& prepared = *state_.optimizers[i];
      torch::serialize::OutputArchive before;
      prepared.optimizer->save(before);
      rollback.add(
          [&prepared, bytes = archive_bytes(before), device = state_.device, fused = prepared.fused_steps] {
            auto archive = archive_of(bytes, device);
            prepared.optimizer->state().clear();
            prepared.optimizer->load(archive);
            prepared.step_tensors.clear();
            prepared.fused_steps = fused;
          });
      auto archive = archive_of(archives_[i], state_.device);
      prepared.optimizer->state().clear(); // the checkpoint's state replaces this program's
      prepared.optimizer->load(archive);
      if (wholes_[i]) {
        // The archive gave the param groups; the state is the shares made whole.
        prepared.optimizer->state().clear();
        const auto parameters = parameters_of(*prepared.optimizer);
        for (const auto& [index, whole] : *wholes_[i]) {
          const auto& parameter = parameters[index];
          StateFields fields;
          if (whole.numbers.count("step") == 0) {
            fields.emplace_back("step", whole.step); // checkpoints before numbers were written: the table's
          }
          for (const auto& [name, number] : whole.numbers) {
            fields.emplace_back(name, number);
          }
          for (const auto& [name, tensor] : whole.tensors) {
            fields.emplace_back(name, tensor.to(parameter.options().requires_grad(false))
                                          .view(state_.engine->optimizer_sharding().whole_sizes(parameter)));
          }
          prepared.optimizer->state()[parameter.unsafeGetTensorImpl()] =
              state_from_fields(*prepared.elementwise, fields);
        }
      }
      state_.engine->optimizer_sharding().adopt_optimizer_state(
          prepared);                 // a sharded strategy keeps its shares
      prepared.step_tensors.clear(); // the fused kernels' step tensors follow libtorch's restored counts
      prepared.fused_steps = fused_steps_[i];
    }
  }

private:
  AcceleratorState& state_;
  std::vector<std::string> archives_;
  std::vector<int64_t> fused_steps_;
  std::vector<std::optional<std::map<int64_t, WholeState>>> wholes_; // per optimizer, when saved in shares
};

} // namespace

std::unique_ptr<CheckpointComponent> optimizer_component(AcceleratorState& state) {
  return std::make_unique<OptimizerComponent>(state);
}

} // namespace accelerate::detail
