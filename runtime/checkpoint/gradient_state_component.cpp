// The step counters' part of a checkpoint: the gradient state's optimizer steps and, when gradients were
// pending, the micro-steps of the accumulation window (metadata.json only).
#include "accelerator/state.h"
#include "checkpoint/component.h"

namespace accelerate::detail {
namespace {

/// A window's micro-steps survive a checkpoint only when no gradients are pending: the gradients themselves
/// are not saved. After the window's optimizer step (or between windows) the count restarts at zero.
int64_t micro_steps_to_save(const GradientState& gradients) {
  return gradients.backwards_since_step == 0 ? 0 : gradients.micro_steps_in_window;
}

class GradientStateComponent final : public CheckpointComponent {
public:
  explicit GradientStateComponent(AcceleratorState& state) : state_(state) {}
  std::string name() const override { return "gradient_state"; }

  void save(ComponentWriter& writer) override {
    if (!writer.main()) {
      return;
    }
    const auto& gradients = *state_.gradient_state;
    writer.entry() = {{"optimizer_steps", gradients.optimizer_steps},
                      {"micro_steps_in_window", micro_steps_to_save(gradients)},
                      {"accumulation_steps", gradients.accumulation_steps}};
  }

  void verify(const ComponentReader& reader) override {
    const Json& gradients = reader.entry();
    optimizer_steps_ = reader.number<int64_t>(gradients, "optimizer_steps");
    micro_steps_in_window_ = reader.number<int>(gradients, "micro_steps_in_window");
  }

  void apply(Rollback& rollback) override {
    auto& gradients = *state_.gradient_state;
    rollback.add([&gradients, previous = gradients] {
      gradients.optimizer_steps = previous.optimizer_steps;
      gradients.micro_steps_in_window = previous.micro_steps_in_window;
      gradients.backwards_since_step = previous.backwards_since_step;
      gradients.sync_gradients = previous.sync_gradients;
    });
    gradients.optimizer_steps = optimizer_steps_;
    gradients.micro_steps_in_window = micro_steps_in_window_;
    gradients.backwards_since_step = 0;
    gradients.sync_gradients = true;
  }

private:
  AcceleratorState& state_;
  int64_t optimizer_steps_ = 0;
  int micro_steps_in_window_ = 0;
};

} // namespace

std::unique_ptr<CheckpointComponent> gradient_state_component(AcceleratorState& state) {
  return std::make_unique<GradientStateComponent>(state);
}

} // namespace accelerate::detail
