// The registered objects' part of a checkpoint: the i-th object given to `register_for_checkpointing` (the
// fp16 grad scaler registers itself too) as a libtorch archive in `custom_checkpoint_<i>.bin`.
#include "accelerator/state.h"
#include "checkpoint/component.h"

namespace accelerate::detail {
namespace {

std::string custom_file(size_t index) {
  return "custom_checkpoint_" + std::to_string(index) + ".bin";
}

class RegisteredObjectsComponent final : public CheckpointComponent {
public:
  explicit RegisteredObjectsComponent(AcceleratorState& state) : state_(state) {}
  std::string name() const override { return "custom_objects"; }

  void save(ComponentWriter& writer) override {
    if (!writer.main()) {
      return;
    }
    Json& entry = writer.entry() = Json::array();
    for (size_t i = 0; i < state_.checkpoint_entries.size(); ++i) {
      torch::serialize::OutputArchive archive;
      state_.checkpoint_entries[i].first(archive);
      writer.file(custom_file(i), archive_bytes(archive));
      entry.push_back({{"file", custom_file(i)}});
    }
  }

  void verify(const ComponentReader& reader) override {
    const Json& custom = reader.list();
    reader.check_count(
        "registered object(s)", custom.size(), state_.checkpoint_entries.size(),
        "register the same objects with register_for_checkpointing, in the same order, before load_state");
    for (const auto& entry : custom) {
      archives_.push_back(reader.file(reader.text(entry, "file")));
    }
  }

  void apply(Rollback& rollback) override {
    for (size_t i = 0; i < state_.checkpoint_entries.size(); ++i) {
      auto& load = state_.checkpoint_entries[i].second;
      torch::serialize::OutputArchive before;
      state_.checkpoint_entries[i].first(before);
      rollback.add([&load, bytes = archive_bytes(before), device = state_.device] {
        auto archive = archive_of(bytes, device);
        load(archive);
      });
      auto archive = archive_of(archives_[i], state_.device);
      load(archive);
    }
  }

private:
  AcceleratorState& state_;
  std::vector<std::string> archives_;
};

} // namespace

std::unique_ptr<CheckpointComponent> registered_objects_component(AcceleratorState& state) {
  return std::make_unique<RegisteredObjectsComponent>(state);
}

} // namespace accelerate::detail
