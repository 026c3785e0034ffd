// The component interface's writer, reader and rollback, and the list of components (component.h).
#include "checkpoint/component.h"

#include "accelerator/state.h"
#include "parallel/engine.h"

#include "checkpoint/commit.h"

#include <sstream>
#include <stdexcept>

namespace accelerate::detail {

void ComponentWriter::file(const std::string& name, const std::string& bytes) {
  if (!main()) {
    throw std::logic_error("accelerate: save_state: the checkpoint's " + component_ + " wrote '" + name +
                           "' on process " + std::to_string(rank_) +
                           "; only the main process writes the checkpoint's shared files");
  }
  files_.write(name, bytes);
}

void ComponentWriter::rank_file(const std::string& name, const std::string& bytes) {
  files_.write(name, bytes, /*own=*/true);
}

void ComponentReader::check_count(const std::string& what, size_t saved, size_t prepared,
                                  const std::string& fix) const {
  if (saved != prepared) {
    throw std::invalid_argument("accelerate: load_state: the checkpoint '" + directory() + "' holds " +
                                std::to_string(saved) + " " + what + ", but this program prepared " +
                                std::to_string(prepared) + "; " + fix);
  }
}

void Rollback::run() noexcept {
  for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
    try {
      (*it)();
    } catch (...) {
    }
  }
  undo_.clear();
}

std::vector<std::unique_ptr<CheckpointComponent>> checkpoint_components(AcceleratorState& state) {
  std::vector<std::unique_ptr<CheckpointComponent>> components;
  components.push_back(gradient_state_component(state));
  components.push_back(state.engine->whole_model().model_checkpoint(state.models)); // the strategy's part
  components.push_back(optimizer_component(state));
  components.push_back(scheduler_component(state));
  components.push_back(data_position_component(state));
  components.push_back(registered_objects_component(state));
  components.push_back(random_states_component(state));
  components.push_back(counters_component(state));
  components.push_back(trackers_component(state)); // last: its apply registers no undo
  return components;
}

std::string numbered_file(const std::string& stem, size_t index, const std::string& extension) {
  return index == 0 ? stem + extension : stem + "_" + std::to_string(index) + extension;
}

std::string archive_bytes(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

torch::serialize::InputArchive archive_of(const std::string& bytes, const torch::Device& device) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size(), device);
  return archive;
}

std::map<std::string, torch::Tensor> module_tensors(const torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model.named_parameters(true)) {
    tensors[item.key()] = item.value();
  }
  for (const auto& item : model.named_buffers(true)) {
    tensors[item.key()] = item.value();
  }
  return tensors;
}

} // namespace accelerate::detail
