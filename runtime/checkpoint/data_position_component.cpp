// The data positions' part of a checkpoint: each prepared loader's position, in global batches the program
// consumed, with the global batch size it was counted in (metadata.json only). Loading maps it by sample
// count onto another number of processes (LoaderCore::set_state).
#include <accelerate/accelerator.h>

#include "accelerator/state.h"
#include "checkpoint/component.h"

namespace accelerate::detail {
namespace {

std::vector<std::shared_ptr<LoaderCore>> live_loaders(const AcceleratorState& state) {
  std::vector<std::shared_ptr<LoaderCore>> loaders;
  for (const auto& weak : state.loaders->cores) {
    if (auto core = weak.lock()) {
      loaders.push_back(std::move(core));
    }
  }
  return loaders;
}

class DataPositionComponent final : public CheckpointComponent {
public:
  explicit DataPositionComponent(AcceleratorState& state) : state_(state) {}
  std::string name() const override { return "data_loaders"; }

  void save(ComponentWriter& writer) override {
    if (!writer.main()) {
      return;
    }
    Json& entry = writer.entry() = Json::array();
    for (const auto& core : live_loaders(state_)) {
      const auto position = core->state();
      entry.push_back({{"epoch", position.epoch},
                       {"batches_consumed", position.batches_consumed},
                       {"seed", position.seed},
                       {"global_batch_size", position.global_batch_size}});
    }
  }

  void verify(const ComponentReader& reader) override {
    const Json& loaders = reader.list();
    loaders_ = live_loaders(state_);
    reader.check_count("data loader position(s)", loaders.size(), loaders_.size(),
                       "prepare the same data loaders, in the same order, before load_state");
    for (const auto& loader : loaders) {
      DataLoaderState position;
      position.epoch = reader.number<uint64_t>(loader, "epoch");
      position.batches_consumed = reader.number<uint64_t>(loader, "batches_consumed");
      position.seed = reader.number<uint64_t>(loader, "seed");
      position.global_batch_size = reader.number<uint64_t>(loader, "global_batch_size");
      positions_.push_back(position);
    }
  }

  void apply(Rollback& rollback) override {
    for (size_t i = 0; i < loaders_.size(); ++i) {
      const auto previous = loaders_[i]->state();
      loaders_[i]->set_state(positions_[i]); // checks the position against this loader's batches
      rollback.add([core = loaders_[i], previous] { core->set_state(previous); });
    }
  }

private:
  AcceleratorState& state_;
  std::vector<std::shared_ptr<LoaderCore>> loaders_;
  std::vector<DataLoaderState> positions_;
};

} // namespace

std::unique_ptr<CheckpointComponent> data_position_component(AcceleratorState& state) {
  return std::make_unique<DataPositionComponent>(state);
}

} // namespace accelerate::detail
