// Unit tests of Accelerator::graphed_step and AcceleratorOptions::cuda_graph
// (runtime/accelerator/step_graph.cpp). On the CPU the graphed step runs as written; the CUDA tests (capture,
// replay, counters, refusals at capture) run where a CUDA device is visible and are skipped otherwise.
// bench_precision --stage checks runs the same GPU checks on a machine without GoogleTest
// (scripts/gpu-check.sh).
#include <accelerate/accelerate.h>

#include "../../runtime/accelerator/state.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;

struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(32, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 5));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

struct Batch {
  torch::Tensor x, y;
};

std::vector<Batch> batches(int count, int64_t short_last = 0) {
  std::vector<Batch> out;
  for (int i = 0; i < count; ++i) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(10 + i);
    const int64_t rows = i == count - 1 && short_last > 0 ? short_last : 16;
    out.push_back({at::randn({rows, 32}, generator), at::randint(5, {rows}, generator)});
  }
  return out;
}

struct Trained {
  std::vector<double> losses;
  torch::Tensor weights;
  int64_t eager_calls = 0, replays = 0, captures = 0, optimizer_steps = 0, adam_steps = 0;
  bool captured = false;
};

/// Trains Mlp from seed 0 through a graphed step (`graphed`) or a plain loop; a StepLR steps between calls.
Trained train(AcceleratorOptions options, bool through_graphed_step, const std::vector<Batch>& data) {
  Accelerator accelerator(options);
  torch::manual_seed(0);
  auto model = std::make_shared<Mlp>();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, /*step_size=*/2, /*gamma=*/0.5));
  auto body = [&](const torch::Tensor& x, const torch::Tensor& y) {
    auto guard = accelerator.accumulate(model);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    accelerator.backward(loss);
    accelerator.clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
    return loss;
  };
  auto step = accelerator.graphed_step(body);
  Trained result;
  for (const auto& batch : data) {
    auto x = batch.x.to(accelerator.device());
    auto y = batch.y.to(accelerator.device());
    result.losses.push_back((through_graphed_step ? step(x, y) : body(x, y)).item<double>());
    scheduler.step();
  }
  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters()) {
    flat.push_back(p.detach().reshape({-1}).to(torch::kFloat64).cpu());
  }
  result.weights = torch::cat(flat);
  result.eager_calls = step.eager_calls();
  result.replays = step.replays();
  result.captures = step.captures();
  result.captured = step.captured();
  result.optimizer_steps = accelerate::detail::internal_state(accelerator).gradient_state->optimizer_steps;
  result.adam_steps = static_cast<torch::optim::AdamWParamState&>(
                          *optimizer.unwrap().state().at(model->fc1->weight.unsafeGetTensorImpl()))
                          .step();
  return result;
}

void expect_same_training(const Trained& actual, const Trained& expected, double tolerance) {
  ASSERT_EQ(actual.losses.size(), expected.losses.size());
  for (size_t i = 0; i < actual.losses.size(); ++i) {
    EXPECT_NEAR(actual.losses[i], expected.losses[i], tolerance * std::abs(expected.losses[i]))
        << "step " << i;
  }
  EXPECT_TRUE(torch::allclose(actual.weights, expected.weights, tolerance, 0.0));
  EXPECT_EQ(actual.optimizer_steps, expected.optimizer_steps);
  EXPECT_EQ(actual.adam_steps, expected.adam_steps);
}

std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

/// The first call of a graphed step under `options` (one AdamW step of Mlp), and what it threw.
std::string first_call_error(AcceleratorOptions options, bool rmsprop = false) {
  Accelerator accelerator(options);
  auto model = std::make_shared<Mlp>();
  accelerator.prepare(model);
  std::optional<accelerate::Optimizer> optimizer;
  if (rmsprop) {
    optimizer.emplace(accelerator.prepare(torch::optim::RMSprop(model->parameters(), 1e-2)));
  } else {
    optimizer.emplace(accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2)));
  }
  auto step = accelerator.graphed_step([&](const torch::Tensor& x, const torch::Tensor& y) {
    optimizer->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    accelerator.backward(loss);
    optimizer->step();
    return loss;
  });
  auto data = batches(1);
  return message_of([&] { step(data[0].x.to(accelerator.device()), data[0].y.to(accelerator.device())); });
}

TEST(GraphedStep, WithoutCudaRunsTheStepAsWritten) {
  const auto data = batches(7, /*short_last=*/5);
  const auto plain = train(AcceleratorOptions().cpu(true), false, data);
  for (bool cuda_graph : {false, true}) {
    const auto graphed = train(AcceleratorOptions().cpu(true).cuda_graph(cuda_graph), true, data);
    expect_same_training(graphed, plain, 0.0);
    EXPECT_FALSE(graphed.captured);
    EXPECT_EQ(graphed.eager_calls, 7);
    EXPECT_EQ(graphed.replays, 0);
  }
  EXPECT_EQ(plain.optimizer_steps, 7);
  EXPECT_EQ(plain.adam_steps, 7);
}

/// Collects the warnings raised on this thread while alive.
class WarningCapture : public c10::WarningHandler {
public:
  WarningCapture() : guard_(this) {}
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;

private:
  c10::WarningUtils::WarningHandlerGuard guard_;
};

TEST(GraphedStep, CudaGraphWithoutAGraphedStepWarnsOnce) {
  for (bool wrapped : {false, true}) {
    WarningCapture warnings;
    Accelerator accelerator(AcceleratorOptions().cpu(true).cuda_graph(true));
    torch::nn::Linear model(4, 1);
    accelerator.prepare(model);
    auto body = [&](const torch::Tensor& x) {
      auto loss = model->forward(x).square().mean();
      accelerator.backward(loss);
      return loss;
    };
    auto step = accelerator.graphed_step(body);
    for (int i = 0; i < 3; ++i) {
      wrapped ? step(torch::ones({2, 4})) : body(torch::ones({2, 4}));
    }
    int count = 0;
    for (const auto& message : warnings.messages) {
      count += message.find("nothing is captured") != std::string::npos ? 1 : 0;
    }
    EXPECT_EQ(count, 0) << "a graphed step exists either way";
  }
  WarningCapture warnings;
  Accelerator accelerator(AcceleratorOptions().cpu(true).cuda_graph(true));
  torch::nn::Linear model(4, 1);
  accelerator.prepare(model);
  for (int i = 0; i < 3; ++i) {
    accelerator.backward(model->forward(torch::ones({2, 4})).square().mean());
  }
  ASSERT_EQ(warnings.messages.size(), 1u);
  EXPECT_NE(warnings.messages[0].find("no accelerator.graphed_step(...) wraps, so nothing is captured"),
            std::string::npos)
      << warnings.messages[0];
}

TEST(GraphedStep, StateShowsTheOption) {
  Accelerator accelerator(AcceleratorOptions().cpu(true).cuda_graph(true));
  EXPECT_NE(accelerator.state().find("cuda_graph: true"), std::string::npos) << accelerator.state();
}

TEST(GraphedStep, ConfigurationsAGraphCannotReplayAreRefusedOnEveryDevice) {
  const auto accumulation =
      first_call_error(AcceleratorOptions().cpu(true).cuda_graph(true).gradient_accumulation_steps(2));
  EXPECT_NE(accumulation.find("cuda_graph(true) cannot capture"), std::string::npos) << accumulation;
  EXPECT_NE(accumulation.find("gradient_accumulation_steps is 2"), std::string::npos) << accumulation;
  EXPECT_NE(accumulation.find("cuda_graph(false)"), std::string::npos) << accumulation;

  const auto optimizer = first_call_error(AcceleratorOptions().cpu(true).cuda_graph(true), /*rmsprop=*/true);
  EXPECT_NE(optimizer.find("does not step through a fused kernel"), std::string::npos) << optimizer;

  const auto fp16 = first_call_error(AcceleratorOptions().cpu(true).cuda_graph(true).mixed_precision("fp16"));
  EXPECT_NE(fp16.find("mixed_precision fp16 keeps state on the host"), std::string::npos) << fp16;

  const auto debug = first_call_error(AcceleratorOptions().cpu(true).cuda_graph(true).debug(true));
  EXPECT_NE(debug.find("debug mode"), std::string::npos) << debug;

  // Off, the same configurations run.
  EXPECT_EQ(first_call_error(AcceleratorOptions().cpu(true).gradient_accumulation_steps(2)), "");
  EXPECT_EQ(first_call_error(AcceleratorOptions().cpu(true), /*rmsprop=*/true), "");
}

// ---- On a CUDA device ------------------------------------------------------------------------------------

#define SKIP_WITHOUT_CUDA()                                                                                  \
  if (!torch::cuda::is_available()) {                                                                        \
    GTEST_SKIP() << "no CUDA device";                                                                        \
  }

TEST(GraphedStep, CudaReplaysTrainAsTheEagerStep) {
  SKIP_WITHOUT_CUDA();
  const auto data = batches(10, /*short_last=*/7);
  for (const std::string precision : {"no", "bf16"}) {
    const auto eager = train(AcceleratorOptions().mixed_precision(precision), false, data);
    const auto graphed = train(AcceleratorOptions().mixed_precision(precision).cuda_graph(true), true, data);
    SCOPED_TRACE(precision);
    expect_same_training(graphed, eager, 1e-5);
    EXPECT_TRUE(graphed.captured);
    EXPECT_EQ(graphed.captures, 1);
    EXPECT_EQ(graphed.eager_calls, 4); // 3 warm-up calls, and the short last batch
    EXPECT_EQ(graphed.replays, 6);     // calls 4 (the capture) to 9
    EXPECT_EQ(graphed.adam_steps, 10);
  }
}

/// An Accelerator with Mlp (seed 0) and AdamW prepared, and a graphed step of them that calls `after_step`
/// (if set) with the loss after optimizer.step().
struct GraphedMlp {
  explicit GraphedMlp(AcceleratorOptions options) : accelerator(options) {
    torch::manual_seed(0);
    model = std::make_shared<Mlp>();
    accelerator.prepare(model);
    optimizer.emplace(accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2)));
  }
  int64_t adam_steps() {
    return static_cast<torch::optim::AdamWParamState&>(
               *optimizer->unwrap().state().at(model->fc1->weight.unsafeGetTensorImpl()))
        .step();
  }

  Accelerator accelerator;
  std::shared_ptr<Mlp> model;
  std::optional<accelerate::Optimizer> optimizer;
  std::function<void(const torch::Tensor&)> after_step;
  accelerate::GraphedStep<std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>> step =
      accelerator.graphed_step(std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>(
          [this](const torch::Tensor& x, const torch::Tensor& y) {
            optimizer->zero_grad();
            auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
            accelerator.backward(loss);
            optimizer->step();
            if (after_step) {
              after_step(loss);
            }
            return loss;
          }));
};

TEST(GraphedStep, CudaHostReadInsideTheStepIsRefusedAtCaptureAndTakenBack) {
  SKIP_WITHOUT_CUDA();
  GraphedMlp setup(AcceleratorOptions().cuda_graph(true));
  setup.after_step = [](const torch::Tensor& loss) {
    EXPECT_TRUE(std::isfinite(loss.item<double>())); // waits for the device
  };
  auto data = batches(1);
  auto x = data[0].x.cuda(), y = data[0].y.cuda();
  for (int i = 0; i < 3; ++i) {
    setup.step(x, y);
  }
  const auto error = message_of([&] { setup.step(x, y); });
  EXPECT_NE(error.find("could not be captured in a CUDA graph"), std::string::npos) << error;
  EXPECT_NE(error.find("no .item()"), std::string::npos) << error;
  EXPECT_EQ(accelerate::detail::internal_state(setup.accelerator).gradient_state->optimizer_steps, 3);
  EXPECT_EQ(setup.adam_steps(), 3);
  EXPECT_FALSE(setup.step.captured());
}

TEST(GraphedStep, CudaSchedulerInsideTheStepIsRefused) {
  SKIP_WITHOUT_CUDA();
  GraphedMlp setup(AcceleratorOptions().cuda_graph(true));
  auto scheduler = setup.accelerator.prepare(torch::optim::StepLR(*setup.optimizer, 1, 0.5));
  setup.after_step = [&](const torch::Tensor&) { scheduler.step(); };
  auto data = batches(1);
  auto x = data[0].x.cuda(), y = data[0].y.cuda();
  std::string error;
  for (int i = 0; i < 4 && error.empty(); ++i) {
    error = message_of([&] { setup.step(x, y); });
  }
  EXPECT_NE(error.find("calls scheduler.step()"), std::string::npos) << error;
}

TEST(GraphedStep, CudaLoadStateCapturesAgain) {
  SKIP_WITHOUT_CUDA();
  const auto directory = testing::TempDir() + "graphed-step-checkpoint-" + std::to_string(getpid());
  const auto data = batches(12);
  auto run = [&](bool cuda_graph) {
    GraphedMlp setup(AcceleratorOptions().cuda_graph(cuda_graph));
    std::vector<double> losses;
    for (int i = 0; i < 12; ++i) {
      if (i == 6) {
        setup.accelerator.save_state(directory + (cuda_graph ? "-graphed" : "-eager"));
        setup.accelerator.load_state(directory + (cuda_graph ? "-graphed" : "-eager"));
      }
      losses.push_back(setup.step(data[i].x.cuda(), data[i].y.cuda()).item<double>());
    }
    EXPECT_EQ(setup.adam_steps(), 12);
    return std::make_pair(losses, setup.step.captures());
  };
  const auto [eager, no_captures] = run(false);
  const auto [graphed, captures] = run(true);
  EXPECT_EQ(no_captures, 0);
  EXPECT_EQ(captures, 2);
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_NEAR(graphed[i], eager[i], 1e-5 * std::abs(eager[i])) << "step " << i;
  }
}

} // namespace
