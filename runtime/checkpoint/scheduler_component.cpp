// The schedulers' part of a checkpoint: each prepared scheduler's counters, in metadata.json only (libtorch's
// LRScheduler has no state_dict; StepLR and friends compute the next rate from their step count).
#include "accelerator/optimizer_state.h"
#include "accelerator/state.h"
#include "checkpoint/component.h"

namespace accelerate::detail {
namespace {

/// Reaches the step count libtorch's LRScheduler keeps protected.
struct SchedulerStepCount : torch::optim::LRScheduler {
  static unsigned& of(torch::optim::LRScheduler& scheduler) {
    return scheduler.*(&SchedulerStepCount::step_count_);
  }
};

/// What a scheduler handle keeps (see docs/checkpoint-format.md).
struct SchedulerCounters {
  unsigned step_count = 0;
  int64_t steps = 0;
  int64_t optimizer_steps_seen = 0;
};

SchedulerCounters counters_of(SchedulerState& scheduler) {
  return {SchedulerStepCount::of(*scheduler.scheduler), scheduler.steps, scheduler.optimizer_steps_seen};
}

void set_counters(SchedulerState& scheduler, const SchedulerCounters& counters) {
  SchedulerStepCount::of(*scheduler.scheduler) = counters.step_count;
  scheduler.steps = counters.steps;
  scheduler.optimizer_steps_seen = counters.optimizer_steps_seen;
}

class SchedulerComponent final : public CheckpointComponent {
public:
  explicit SchedulerComponent(AcceleratorState& state) : state_(state) {}
  std::string name() const override { return "schedulers"; }

  void save(ComponentWriter& writer) override {
    if (!writer.main()) {
      return;
    }
    Json& entry = writer.entry() = Json::array();
    for (const auto& scheduler : state_.schedulers) {
      const auto counters = counters_of(*scheduler);
      entry.push_back({{"type", c10::demangle(typeid(*scheduler->scheduler).name())},
                       {"step_count", counters.step_count},
                       {"steps", counters.steps},
                       {"optimizer_steps_seen", counters.optimizer_steps_seen}});
    }
  }

  void verify(const ComponentReader& reader) override {
    const Json& schedulers = reader.list();
    reader.check_count("scheduler(s)", schedulers.size(), state_.schedulers.size(),
                       "prepare the same schedulers, in the same order, before load_state");
    for (const auto& scheduler : schedulers) {
      loaded_.push_back({reader.number<unsigned>(scheduler, "step_count"),
                         reader.number<int64_t>(scheduler, "steps"),
                         reader.number<int64_t>(scheduler, "optimizer_steps_seen")});
    }
  }

  void apply(Rollback& rollback) override {
    for (size_t i = 0; i < state_.schedulers.size(); ++i) {
      auto& scheduler = *state_.schedulers[i];
      rollback.add([&scheduler, previous = counters_of(scheduler)] { set_counters(scheduler, previous); });
      set_counters(scheduler, loaded_[i]);
    }
  }

private:
  AcceleratorState& state_;
  std::vector<SchedulerCounters> loaded_;
};

} // namespace

std::unique_ptr<CheckpointComponent> scheduler_component(AcceleratorState& state) {
  return std::make_unique<SchedulerComponent>(state);
}

} // namespace accelerate::detail
