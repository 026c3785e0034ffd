// The models' part of a checkpoint: each prepared model's parameters and buffers, by the unwrapped module's
// names, in `model.safetensors`, `model_1.safetensors`, ... (docs/checkpoint-format.md).
#include "../durable_file.h"
#include "../parallel.h"
#include "../safetensors.h"
#include "../state.h"
#include "component.h"

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

class ModelComponent final : public CheckpointComponent {
public:
  explicit ModelComponent(std::vector<torch::nn::Module*> modules) : modules_(std::move(modules)) {}
  std::string name() const override { return "models"; }

  void save(ComponentWriter& writer) override {
    if (!writer.main()) {
      return;
    }
    Json& entry = writer.entry() = Json::array();
    for (size_t i = 0; i < modules_.size(); ++i) {
      const auto tensors = module_tensors(*modules_[i]);
      writer.file(model_file(i), encode_safetensors(tensors, {{"format", "pt"}}));
      entry.push_back({{"file", model_file(i)}, {"tensors", tensors.size()}});
    }
  }

  void verify(const ComponentReader& reader) override {
    const Json& models = reader.list();
    reader.check_count("model(s)", models.size(), modules_.size(),
                       "prepare the same models, in the same order, before load_state");
    for (size_t i = 0; i < models.size(); ++i) {
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

std::unique_ptr<CheckpointComponent>
replicated_model_checkpoint(const std::vector<std::shared_ptr<PreparedModel>>& models) {
  return std::make_unique<ModelComponent>(modules_of(models));
}

} // namespace accelerate::detail
