// Trackers in one process: a custom tracker registered by name receives every call, exactly; the registry's
// refusals; get_tracker.
#include <accelerate/accelerate.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace {

/// What a tracker received, call by call.
struct Calls {
  std::vector<std::string> order;
  accelerate::TrackedValues config;
  std::vector<std::pair<accelerate::TrackedValues, std::optional<int64_t>>> logs;
  accelerate::TrackerRun run;
};

class RecordingTracker : public accelerate::Tracker {
public:
  explicit RecordingTracker(Calls* calls) : calls_(calls) {}
  void store_init_configuration(const accelerate::TrackedValues& config) override {
    calls_->order.push_back("store_init_configuration");
    calls_->config = config;
  }
  void log(const accelerate::TrackedValues& values, std::optional<int64_t> step) override {
    calls_->order.push_back("log");
    calls_->logs.emplace_back(values, step);
  }
  void finish() override { calls_->order.push_back("finish"); }

private:
  Calls* calls_;
};

Calls recorded;

void register_recorder_once() {
  static const bool registered = [] {
    accelerate::register_tracker("recorder", [](const accelerate::TrackerRun& run) {
      recorded.run = run;
      return std::make_unique<RecordingTracker>(&recorded);
    });
    return true;
  }();
  (void)registered;
}

/// Options that select the recorder, with what it recorded cleared.
accelerate::AcceleratorOptions recording_options() {
  register_recorder_once();
  recorded = Calls();
  return accelerate::AcceleratorOptions()
      .cpu(true)
      .log_with({"recorder"})
      .project_dir("/tmp/accelerate-unit-runs");
}

TEST(Tracking, ACustomTrackerRegisteredByNameReceivesEveryCall) {
  accelerate::Accelerator accelerator(recording_options());
  accelerator.init_trackers("custom", {{"lr", 0.25}, {"layers", 3}, {"optimizer", "AdamW"}});
  const auto loss = torch::tensor(0.1f); // a float32 0-d tensor: read as the double of that float
  for (int64_t step = 0; step < 4; ++step) {
    accelerator.log({{"loss", loss * static_cast<float>(step)}, {"phase", "train"}, {"count", step}}, step);
  }
  accelerator.log({{"epoch_end", 1.5}});
  accelerator.end_training();

  EXPECT_EQ(recorded.run.project_name, "custom");
  EXPECT_EQ(recorded.run.directory, "/tmp/accelerate-unit-runs/custom");
  EXPECT_EQ(recorded.run.process_index, 0);
  const std::vector<std::string> order = {
      "store_init_configuration", "log", "log", "log", "log", "log", "finish"};
  EXPECT_EQ(recorded.order, order);
  ASSERT_EQ(recorded.config.size(), 3u);
  EXPECT_EQ(recorded.config[0].name, "lr");
  EXPECT_EQ(recorded.config[0].number(), 0.25);
  EXPECT_EQ(recorded.config[1].number(), 3.0);
  EXPECT_EQ(recorded.config[2].text(), "AdamW");
  ASSERT_EQ(recorded.logs.size(), 5u);
  for (int64_t step = 0; step < 4; ++step) {
    const auto& [values, logged_step] = recorded.logs[static_cast<size_t>(step)];
    EXPECT_EQ(logged_step, step);
    ASSERT_EQ(values.size(), 3u);
    EXPECT_EQ(values[0].name, "loss");
    EXPECT_EQ(values[0].number(), static_cast<double>(0.1f * static_cast<float>(step)));
    EXPECT_EQ(values[1].text(), "train");
    EXPECT_EQ(values[2].number(), static_cast<double>(step));
  }
  EXPECT_FALSE(recorded.logs[4].second.has_value());
  EXPECT_EQ(recorded.logs[4].first[0].number(), 1.5);
}

TEST(Tracking, GetTrackerReturnsTheStartedTrackerAndRefusesOthers) {
  accelerate::Accelerator accelerator(recording_options());
  EXPECT_THROW(accelerator.get_tracker("recorder"), std::invalid_argument); // before init_trackers
  accelerator.init_trackers("lookup");
  EXPECT_NE(dynamic_cast<RecordingTracker*>(&accelerator.get_tracker("recorder")), nullptr);
  try {
    accelerator.get_tracker("wandb");
    FAIL() << "get_tracker of a tracker log_with does not name returned";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("no tracker 'wandb' was started; log_with selected 'recorder'"),
              std::string::npos)
        << error.what();
  }
}

TEST(Tracking, TheRegistryRefusesATakenOrReservedName) {
  auto make = [](const accelerate::TrackerRun&) { return std::unique_ptr<accelerate::Tracker>(); };
  EXPECT_THROW(accelerate::register_tracker("tensorboard", make), std::invalid_argument);
  EXPECT_THROW(accelerate::register_tracker("all", make), std::invalid_argument);
  EXPECT_THROW(accelerate::register_tracker("", make), std::invalid_argument);
  const auto names = accelerate::registered_trackers();
  for (const char* builtin : {"csv", "jsonl", "tensorboard"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), builtin), names.end()) << builtin;
  }
}

TEST(Tracking, ATrackerThatThrowsIsLeftOutAndTrainingGoesOn) {
  static int logs_seen = 0;
  accelerate::register_tracker("flaky", [](const accelerate::TrackerRun&) {
    struct Flaky : accelerate::Tracker {
      void log(const accelerate::TrackedValues&, std::optional<int64_t>) override {
        if (++logs_seen == 2) {
          throw std::runtime_error("the service is unreachable");
        }
      }
    };
    return std::make_unique<Flaky>();
  });
  accelerate::Accelerator accelerator(
      accelerate::AcceleratorOptions().cpu(true).log_with({"flaky"}).project_dir(
          "/tmp/accelerate-unit-runs"));
  accelerator.init_trackers("flaky");
  testing::internal::CaptureStderr();
  for (int step = 0; step < 5; ++step) {
    accelerator.log({{"loss", 1.0}}, step);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(logs_seen, 2); // left out after it threw
  EXPECT_NE(
      err.find("the 'flaky' tracker failed in log: the service is unreachable. It is left out from now on; "
               "training goes on"),
      std::string::npos)
      << err;
}

} // namespace
