// The optimizers' part of a checkpoint: each prepared optimizer's libtorch archive (per-parameter state and
// param groups) in `optimizer.bin`, `optimizer_1.bin`, ..., with its type and the fused kernels' step count.
#include "../optimizer_state.h"
#include "../state.h"
#include "component.h"

#include <stdexcept>

namespace accelerate::detail {
namespace {

std::string optimizer_file(size_t index) {
  return numbered_file("optimizer", index, ".bin");
}

std::string type_of(const torch::optim::Optimizer& optimizer) {
  return c10::demangle(typeid(optimizer).name());
}

class OptimizerComponent final : public CheckpointComponent {
public:
  explicit OptimizerComponent(AcceleratorState& state) : state_(state) {}
  std::string name() const override { return "optimizers"; }

  void save(ComponentWriter& writer) override {
    if (!writer.main()) {
      return;
    }
    Json& entry = writer.entry() = Json::array();
    for (size_t i = 0; i < state_.optimizers.size(); ++i) {
      const auto& prepared = *state_.optimizers[i];
      torch::serialize::OutputArchive archive;
      prepared.optimizer->save(archive);
      writer.file(optimizer_file(i), archive_bytes(archive));
      entry.push_back({{"file", optimizer_file(i)},
                       {"type", type_of(*prepared.optimizer)},
                       {"fused_steps", prepared.fused_steps}});
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
            prepared.optimizer->load(archive);
            prepared.step_tensors.clear();
            prepared.fused_steps = fused;
          });
      auto archive = archive_of(archives_[i], state_.device);
      prepared.optimizer->load(archive);
      prepared.step_tensors.clear(); // the fused kernels' step tensors follow libtorch's restored counts
      prepared.fused_steps = fused_steps_[i];
    }
  }

private:
  AcceleratorState& state_;
  std::vector<std::string> archives_;
  std::vector<int64_t> fused_steps_;
};

} // namespace

std::unique_ptr<CheckpointComponent> optimizer_component(AcceleratorState& state) {
  return std::make_unique<OptimizerComponent>(state);
}

} // namespace accelerate::detail
