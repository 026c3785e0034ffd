// The models' part of a checkpoint: each prepared model's parameters and buffers, by the unwrapped module's
// names, in `model.safetensors`, `model_1.safetensors`, ..., or, written in pieces by every process (a
// sharded strategy's SHARDED_STATE_DICT), in `model_shards_<rank>.safetensors`, ...
// (docs/checkpoint-format.md). Reading assembles the pieces into whole tensors, so either form loads at any
// world size.
#include "accelerator/state.h"
#include "checkpoint/component.h"
#include "checkpoint/safetensors.h"
#include "common/durable_file.h"
#include "parallel/engine.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

namespace accelerate::detail {
namespace {

/// Each prepared model's module, as the user built it, in preparation order.
std::vector<torch::nn::Module*> modules_of(const std::vector<std::shared_ptr<PreparedModel>>& models) {
  std::vector<torch::nn::Module*> modules;
  for (const auto& prepared : models) {
    modules.push_back(&prepared->model());
  }
  return modules;
}

std::string model_file(size_t index) {
  return numbered_file("model", index, ".safetensors");
}

std::string shards_file(size_t index, int rank) {
  return numbered_file("model", index, "") + "_shards_" + std::to_string(rank) + ".safetensors";
}

/// The safetensors metadata key that holds where a piece starts in its flattened tensor.
std::string offset_key(const std::string& name) {
  return "offset:" + name;
}

std::string shape_of(const torch::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes();
  return out.str();
}

/// Throws, listing every difference, when `saved` is not a state of `model`.
void check_same_model(const std::string& file, size_t index, const SafetensorsContent& saved,
                      const torch::nn::Module& model) {
  const auto expected = module_tensors(model);
  std::vector<std::string> missing, unexpected, reshaped;
  for (const auto& [name, tensor] : expected) {
    const auto found = saved.tensors.find(name);
    if (found == saved.tensors.end()) {
      missing.push_back(name + " " + shape_of(tensor));
    } else if (found->second.sizes() != tensor.sizes()) {
      reshaped.push_back(name + ": checkpoint " + shape_of(found->second) + ", model " + shape_of(tensor));
    }
  }
  for (const auto& [name, tensor] : saved.tensors) {
    if (expected.find(name) == expected.end()) {
      unexpected.push_back(name + " " + shape_of(tensor));
    }
  }
  if (missing.empty() && unexpected.empty() && reshaped.empty()) {
    return;
  }
  auto list = [](const std::string& title, const std::vector<std::string>& items) {
    if (items.empty()) {
      return std::string();
    }
    std::string text = "\n  " + title + ":";
    for (size_t i = 0; i < items.size() && i < 20; ++i) {
      text += (i == 0 ? " " : ", ") + items[i];
    }
    if (items.size() > 20) {
      text += " and " + std::to_string(items.size() - 20) + " more";
    }
    return text;
  };
  throw std::invalid_argument(
      "accelerate: load_state: '" + file + "' holds another model than prepared model " +
      std::to_string(index) + " ('" + model.name() + "')" +
      list("in this model, missing from the checkpoint", missing) +
      list("in the checkpoint, not in this model", unexpected) + list("different shapes", reshaped) +
      "\nLoad a checkpoint of this model, or build the model the checkpoint was saved from");
}

/// Model `index`'s whole tensors from every process's pieces (`files`), checked against `model`: each tensor
/// of the model covered exactly once.
SafetensorsContent assemble_pieces(const ComponentReader& reader, const Json& files, size_t index,
                                   const torch::nn::Module& model) {
  const auto expected = module_tensors(model);
  SafetensorsContent whole;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> covered;
  std::string last_file;
  for (const auto& file : files) {
    const std::string name = file.get<std::string>();
    last_file = join_path(reader.directory(), name);
    auto content = decode_safetensors(reader.file(name), last_file);
    for (auto& [tensor_name, tensor] : content.tensors) {
      const auto offset = content.metadata.find(offset_key(tensor_name));
      const auto target = expected.find(tensor_name);
      if (offset == content.metadata.end() || target == expected.end()) {
        whole.tensors[tensor_name] = tensor; // whole (or not this model's: check_same_model names it)
        covered[tensor_name].emplace_back(0, tensor.numel());
        continue;
      }
      const int64_t begin = std::stoll(offset->second);
      const int64_t numel = target->second.numel();
      if (begin < 0 || begin + tensor.numel() > numel) {
        throw std::invalid_argument("accelerate: load_state: '" + last_file + "' holds elements [" +
                                    std::to_string(begin) + ", " + std::to_string(begin + tensor.numel()) +
                                    ") of '" + tensor_name + "', which has " + std::to_string(numel) +
                                    " in prepared model " + std::to_string(index) +
                                    ": the checkpoint is of another model; load a checkpoint of this model");
      }
      auto& assembled = whole.tensors[tensor_name];
      if (!assembled.defined()) {
        assembled = torch::zeros({numel}, tensor.options());
      }
      assembled.narrow(0, begin, tensor.numel()).copy_(tensor.reshape(-1));
      covered[tensor_name].emplace_back(begin, tensor.numel());
    }
  }
  for (auto& [tensor_name, ranges] : covered) {
    const auto target = expected.find(tensor_name);
    if (target == expected.end()) {
      continue;
    }
    std::sort(ranges.begin(), ranges.end());
    int64_t end = 0;
    for (const auto& [begin, length] : ranges) {
      if (begin != end) {
        break;
      }
      end = begin + length;
    }
    if (end != target->second.numel() || ranges.back().first + ranges.back().second != end) {
      throw std::invalid_argument(
          "accelerate: load_state: the pieces of '" + tensor_name + "' in the model shards of '" +
          reader.directory() + "' do not add up to its " + std::to_string(target->second.numel()) +
          " elements (a process's file is missing or from another checkpoint); load another checkpoint");
    }
    auto& assembled = whole.tensors[tensor_name];
    if (assembled.dim() == 1 && target->second.dim() != 1 && assembled.numel() == target->second.numel()) {
      assembled = assembled.view(target->second.sizes());
    }
  }
  return whole;
}

/// Each tensor's safetensors dtype and whole shape, by name: what `accel merge-weights` needs to assemble
/// the pieces of a sharded checkpoint without the model. A parameter a sharded strategy holds in shares keeps
/// its whole shape in the module (its shares live in the strategy's flat buffers).
Json weights_entry(const std::map<std::string, torch::Tensor>& tensors) {
  Json weights = Json::object();
  for (const auto& [name, tensor] : tensors) {
    weights[name] = {{"dtype", safetensors_dtype(tensor.scalar_type(), name)},
                     {"shape", tensor.sizes().vec()}};
  }
  return weights;
}

class ModelComponent final : public CheckpointComponent {
public:
  explicit ModelComponent(std::vector<torch::nn::Module*> modules) : modules_(std::move(modules)) {}
  std::string name() const override { return "models"; }

  void save(ComponentWriter& writer) override {
    save_whole_models(writer, modules_.size(), [&](size_t i) { return module_tensors(*modules_[i]); });
  }

  void verify(const ComponentReader& reader) override {
    const Json& models = reader.list();
    reader.check_count("model(s)", models.size(), modules_.size(),
                       "prepare the same models, in the same order, before load_state");
    for (size_t i = 0; i < models.size(); ++i) {
      if (models[i].contains("shards")) {
        loaded_.push_back(assemble_pieces(reader, reader.field_of(models[i], "shards"), i, *modules_[i]));
        check_same_model(join_path(reader.directory(), shards_file(i, 0)), i, loaded_.back(), *modules_[i]);
        continue;
      }
      const std::string name = reader.text(models[i], "file");
      const std::string path = join_path(reader.directory(), name);
      loaded_.push_back(decode_safetensors(reader.file(name), path));
      check_same_model(path, i, loaded_.back(), *modules_[i]);
    }
  }

  void apply(Rollback& rollback) override {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < modules_.size(); ++i) {
      for (auto& [name, tensor] : module_tensors(*modules_[i])) {
        rollback.add([tensor = tensor, previous = tensor.detach().clone()]() mutable {
          torch::NoGradGuard guard;
          tensor.copy_(previous);
        });
        tensor.copy_(loaded_[i].tensors.at(name));
      }
    }
  }

private:
  std::vector<torch::nn::Module*> modules_;
  std::vector<SafetensorsContent> loaded_;
};

} // namespace

void save_whole_models(ComponentWriter& writer, size_t count,
                       const std::function<std::map<std::string, torch::Tensor>(size_t)>& tensors_of) {
  Json entry = Json::array();
  for (size_t i = 0; i < count; ++i) {
    const auto tensors = tensors_of(i);
    if (writer.main()) {
      writer.file(model_file(i), encode_safetensors(tensors, {{"format", "pt"}}));
      entry.push_back(
          {{"file", model_file(i)}, {"tensors", tensors.size()}, {"weights", weights_entry(tensors)}});
    }
  }
  if (writer.main()) {
    writer.entry() = entry;
  }
}

void save_model_pieces(ComponentWriter& writer, const std::vector<std::shared_ptr<PreparedModel>>& models,
                       const std::function<std::vector<ModelPiece>(size_t)>& pieces_of) {
  std::vector<Json> weights(models.size());
  for (size_t i = 0; i < models.size(); ++i) {
    std::map<std::string, torch::Tensor> tensors;
    std::map<std::string, std::string> metadata{{"format", "pt"}};
    std::set<std::string> pieced;
    weights[i] = weights_entry(module_tensors(models[i]->model()));
    for (auto& piece : pieces_of(i)) {
      pieced.insert(piece.name);
      if (!piece.shape.empty()) { // the module's own shape may be a resharded unit's [0]
        weights[i][piece.name] = {{"dtype", safetensors_dtype(piece.values.scalar_type(), piece.name)},
                                  {"shape", piece.shape}};
      }
      if (piece.values.numel() == 0) {
        continue;
      }
      metadata[offset_key(piece.name)] = std::to_string(piece.offset);
      tensors[piece.name] = piece.values;
    }
    if (writer.main()) {
      for (auto& [name, tensor] : module_tensors(models[i]->model())) {
        if (pieced.count(name) == 0) {
          tensors[name] = tensor; // buffers and parameters every process holds whole
        }
      }
    }
    writer.rank_file(shards_file(i, writer.rank()), encode_safetensors(tensors, metadata));
  }
  if (!writer.main()) {
    return;
  }
  Json& entry = writer.entry() = Json::array();
  for (size_t i = 0; i < models.size(); ++i) {
    Json shards = Json::array();
    for (int rank = 0; rank < writer.world(); ++rank) {
      shards.push_back(shards_file(i, rank));
    }
    entry.push_back({{"shards", shards},
                     {"tensors", module_tensors(models[i]->model()).size()},
                     {"weights", weights[i]}});
  }
}

std::unique_ptr<CheckpointComponent>
replicated_model_checkpoint(const std::vector<std::shared_ptr<PreparedModel>>& models) {
  return std::make_unique<ModelComponent>(modules_of(models));
}

} // namespace accelerate::detail
