// The trackers' part of a checkpoint: what each started tracker needs to continue its run after a restart
// (MLflow's run id), in metadata.json's "trackers" as {tracker name: text}. A checkpoint written before
// trackers had a part has none, and loads.
#include "accelerator/state.h"
#include "checkpoint/component.h"
#include "tracking/tracker_states.h"

namespace accelerate::detail {
namespace {

class TrackersComponent final : public CheckpointComponent {
public:
  explicit TrackersComponent(AcceleratorState& state) : state_(state) {}
  std::string name() const override { return "trackers"; }

  void save(ComponentWriter& writer) override {
    if (!writer.main()) {
      return; // the trackers run on the main process (one registered for every process keeps nothing here)
    }
    Json& entry = writer.entry() = Json::object();
    for (const auto& [tracker, text] : tracker_checkpoint_states(state_)) {
      entry[tracker] = text;
    }
  }

  void verify(const ComponentReader& reader) override {
    saved_.clear();
    present_ = reader.checkpoint().json.contains(name());
    if (!present_) {
      return;
    }
    const Json& entry = reader.entry();
    if (!entry.is_object()) {
      throw std::runtime_error(
          "accelerate: the checkpoint " + reader.directory() +
          " is damaged: metadata.json's \"trackers\" is not an object of tracker names and texts");
    }
    for (const auto& [tracker, text] : entry.items()) {
      saved_[tracker] = reader.text(entry, tracker);
    }
  }

  /// Applied last of all the components (checkpoint_components' order), so no later one can fail and ask
  /// for an undo: it registers none. (Asking the trackers for their state to undo to would have them create
  /// a run before they are handed the saved one.) A tracker that throws is left out; this never throws.
  void apply(Rollback& rollback) override {
    (void)rollback;
    if (present_) {
      load_tracker_checkpoint_states(state_, saved_);
    }
  }

private:
  AcceleratorState& state_;
  bool present_ = false;
  std::map<std::string, std::string> saved_;
};

} // namespace

std::unique_ptr<CheckpointComponent> trackers_component(AcceleratorState& state) {
  return std::make_unique<TrackersComponent>(state);
}

} // namespace accelerate::detail
