// The registered counters' part of a checkpoint: each integer given to `register_counter`, by name, in
// metadata.json's "counters" (a checkpoint written before counters existed has none, and loads).
#include "accelerator/state.h"
#include "checkpoint/component.h"

namespace accelerate::detail {
namespace {

class CountersComponent final : public CheckpointComponent {
public:
  explicit CountersComponent(AcceleratorState& state) : state_(state) {}
  std::string name() const override { return "counters"; }

  void save(ComponentWriter& writer) override {
    if (!writer.main()) {
      return;
    }
    Json& entry = writer.entry() = Json::object();
    for (const auto& counter : state_.counters) {
      entry[counter.name] = counter.get();
    }
  }

  void verify(const ComponentReader& reader) override {
    saved_.clear();
    if (!reader.checkpoint().json.contains(name())) {
      return;
    }
    const Json& entry = reader.entry();
    if (!entry.is_object()) {
      throw std::runtime_error(
          "accelerate: the checkpoint " + reader.directory() +
          " is damaged: metadata.json's \"counters\" is not an object of names and integers");
    }
    for (const auto& [counter, value] : entry.items()) {
      saved_[counter] = reader.number<std::int64_t>(entry, counter);
    }
  }

  void apply(Rollback& rollback) override {
    rollback.add([&state = state_, previous = state_.loaded_counters] { state.loaded_counters = previous; });
    for (auto& counter : state_.counters) {
      auto saved = saved_.find(counter.name);
      if (saved == saved_.end()) {
        continue;
      }
      rollback.add([set = counter.set, before = counter.get()] { set(before); });
      counter.set(saved->second);
    }
    state_.loaded_counters = saved_;
  }

private:
  AcceleratorState& state_;
  std::map<std::string, std::int64_t> saved_;
};

} // namespace

std::unique_ptr<CheckpointComponent> counters_component(AcceleratorState& state) {
  return std::make_unique<CountersComponent>(state);
}

} // namespace accelerate::detail
