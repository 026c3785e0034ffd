// The generators' part of a checkpoint: each process writes its own `random_states_<rank>.bin` (its CPU
// generator, and with a CUDA device every visible GPU's) and restores its own when the checkpoint has one.
#include "accelerator/state.h"
#include "checkpoint/component.h"

#include <iostream>

namespace accelerate::detail {
namespace {

std::string random_states_file(int rank) {
  return "random_states_" + std::to_string(rank) + ".bin";
}

/// Generator states by name: "cpu", and "cuda_<i>" for each GPU.
using GeneratorStates = std::map<std::string, torch::Tensor>;

at::Generator generator_named(const std::string& name) {
  if (name == "cpu") {
    return at::detail::getDefaultCPUGenerator();
  }
  const auto index = static_cast<c10::DeviceIndex>(std::stoi(name.substr(std::string("cuda_").size())));
  return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, index));
}

std::vector<std::string> generator_names(const AcceleratorState& state) {
  std::vector<std::string> names{"cpu"};
  if (state.device.is_cuda()) {
    const auto devices = static_cast<int>(torch::cuda::device_count());
    for (int index = 0; index < devices; ++index) {
      names.push_back("cuda_" + std::to_string(index));
    }
  }
  return names;
}

GeneratorStates current_states(const AcceleratorState& state) {
  GeneratorStates states;
  for (const auto& name : generator_names(state)) {
    auto generator = generator_named(name);
    std::lock_guard<std::mutex> lock(generator.mutex());
    states[name] = generator.get_state();
  }
  return states;
}

void set_states(const GeneratorStates& states) {
  for (const auto& [name, saved] : states) {
    auto generator = generator_named(name);
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(saved);
  }
}

class RandomStatesComponent final : public CheckpointComponent {
public:
  explicit RandomStatesComponent(AcceleratorState& state) : state_(state) {}
  std::string name() const override { return "random_states"; }

  void save(ComponentWriter& writer) override {
    torch::serialize::OutputArchive archive;
    for (const auto& [name, saved] : current_states(state_)) {
      archive.write(name, saved, /*is_buffer=*/true);
    }
    writer.rank_file(random_states_file(writer.rank()), archive_bytes(archive));
  }

  void verify(const ComponentReader& reader) override {
    saved_world_size_ = reader.checkpoint().world_size;
    rank_ = reader.rank();
    if (rank_ >= saved_world_size_) {
      return; // written by fewer processes: this one keeps its own generators
    }
    const std::string bytes = reader.file(random_states_file(rank_));
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    loaded_.emplace();
    for (const auto& name : generator_names(state_)) {
      torch::Tensor saved;
      if (name == "cpu") {
        archive.read(name, saved, /*is_buffer=*/true);
      } else if (!archive.try_read(name, saved, /*is_buffer=*/true)) {
        continue; // saved on a machine with fewer GPUs
      }
      (*loaded_)[name] = saved;
    }
  }

  void apply(Rollback& rollback) override {
    if (!loaded_) {
      if (state_.process_group) {
        std::cerr << "accelerate: load_state: the checkpoint was written by " << saved_world_size_
                  << " processes; process " << rank_ << " has no saved random state and keeps its own"
                  << std::endl;
      }
      return;
    }
    rollback.add([previous = current_states(state_)] { set_states(previous); });
    set_states(*loaded_);
  }

private:
  AcceleratorState& state_;
  int saved_world_size_ = 0;
  int rank_ = 0;
  std::optional<GeneratorStates> loaded_;
};

} // namespace

std::unique_ptr<CheckpointComponent> random_states_component(AcceleratorState& state) {
  return std::make_unique<RandomStatesComponent>(state);
}

} // namespace accelerate::detail
