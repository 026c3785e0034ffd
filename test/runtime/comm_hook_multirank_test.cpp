// Multi-rank tests of gradient communication hooks (option comm_hook, runtime/parallel/comm_hook.h), run by
// test/harness/run_ranks.py as N ranks: each hook against the uncompressed Reducer on the same data, the
// bytes each sends, and the settings refused.
//
// Preconditions: float32 model, one intra-op thread, no dropout or BatchNorm.
#include <accelerate/accelerate.h>

#include "../../runtime/accelerator/state.h"
#include "../../runtime/parallel/engine.h"
#include "../support/numerics.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, 1));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc3->forward(torch::tanh(fc2->forward(torch::tanh(fc1->forward(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

accelerate::AcceleratorOptions test_options() {
  return accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(30));
}

struct Run {
  std::vector<torch::Tensor> parameters;
  std::vector<double> losses; ///< this process's loss at each step
  std::uint64_t bytes_sent = 0;
  std::string synchronisation;
  /// The norm of the parameters' total movement over the run.
  double movement = 0;
};

constexpr int kSteps = 10;

/// kSteps of SGD with momentum on this process's share of seeded data, with gradient hook `hook`. With
/// `count`, the "no" hook's all-reduce is observed so that its bytes are counted too.
Run train(const std::string& hook, bool count) {
  accelerate::Accelerator accelerator(test_options().comm_hook(hook).bucket_cap_mb(4.0 / 1024));
  torch::manual_seed(7);
  auto model = std::make_shared<Net>();
  std::vector<torch::Tensor> start;
  for (const auto& parameter : model->parameters()) {
    start.push_back(parameter.detach().clone());
  }
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  accelerator.prepare(model);
  auto prepared = accelerator.prepare(optimizer);
  auto& synchroniser = *accelerate::detail::internal_state(accelerator).models.front();
  if (count) {
    synchroniser.observe_bucket_launches([](size_t) {});
  }
  Run run;
  run.synchronisation = synchroniser.synchronisation();
  const int rank = accelerator.process_index();
  for (int step = 0; step < kSteps; ++step) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(100 * step + rank);
    auto x = at::randn({16, 8}, generator, torch::kFloat32);
    auto y = at::randn({16, 1}, generator, torch::kFloat32);
    auto loss = torch::mse_loss(model->forward(x), y);
    accelerator.backward(loss);
    prepared.step();
    prepared.zero_grad();
    run.losses.push_back(loss.item<double>());
  }
  run.bytes_sent = synchroniser.gradient_bytes_sent();
  double movement = 0;
  for (size_t i = 0; i < start.size(); ++i) {
    run.parameters.push_back(model->parameters()[i].detach().clone());
    movement += (run.parameters[i] - start[i]).pow(2).sum().item<double>();
  }
  run.movement = std::sqrt(movement);
  return run;
}

/// The parameters as one vector, in float64.
torch::Tensor flat(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> pieces;
  for (const auto& parameter : parameters) {
    pieces.push_back(parameter.flatten().to(torch::kFloat64));
  }
  return torch::cat(pieces);
}

/// Each hook against the uncompressed Reducer ("no", observed): half the bytes, and the final parameters
/// within the hook dtype's bound. The bound: each averaged gradient element is rounded twice to the dtype
/// (before and after the sum of N = 2 values), a relative error of at most 2u (u its unit roundoff: 2^-11
/// for fp16, 2^-8 for bf16); the parameters move by lr-scaled sums of those gradients, so their difference
/// is at most 2u times the total movement, which the test checks is below the parameters' norm. Each run
/// prints the measured spread (`numerics:` lines) beside the limit.
void expect_within_bound(const std::string& hook, double unit_roundoff) {
  accelerate_test::set_intra_op_threads();
  const Run reference = train("no", /*count=*/true);
  const Run compressed = train(hook, /*count=*/false);
  EXPECT_EQ(compressed.synchronisation, "reducer") << "a hook runs on the Reducer's path";
  // Without a hook, one machine averages through shared memory, not the Reducer: bytes are compared where
  // both run the Reducer (the `.gloo` entries, ACCELERATE_SHM_ALLREDUCE=0).
  if (reference.synchronisation == "reducer") {
    ASSERT_GT(reference.bytes_sent, 0u);
    EXPECT_EQ(compressed.bytes_sent * 2, reference.bytes_sent)
        << hook << " must send half the bytes of float32 (" << compressed.bytes_sent << " against "
        << reference.bytes_sent << ")";
  } else {
    EXPECT_EQ(reference.synchronisation, "shared_memory");
    EXPECT_GT(compressed.bytes_sent, 0u);
  }
  ASSERT_LT(reference.movement, flat(reference.parameters).norm().item<double>()) << "the bound's premise";
  EXPECT_TRUE(accelerate_test::within(flat(compressed.parameters), flat(reference.parameters),
                                      2 * unit_roundoff, hook + " hook: parameters against no hook"));
  const double difference =
      accelerate_test::relative_difference(flat(compressed.parameters), flat(reference.parameters));
  EXPECT_GT(difference, 0.0) << hook << " changed nothing: was the gradient compressed at all?";
  EXPECT_TRUE(accelerate_test::within(compressed.losses, reference.losses, 2 * unit_roundoff * kSteps,
                                      hook + " hook: losses against no hook"));
}

} // namespace

TEST(CommHook, Fp16HalvesTheBytesWithinItsPrecision) {
  expect_within_bound("fp16", std::ldexp(1.0, -11));
}

TEST(CommHook, Bf16HalvesTheBytesWithinItsPrecision) {
  expect_within_bound("bf16", std::ldexp(1.0, -8));
}

TEST(CommHook, AnUnknownHookIsRefusedWithTheKnownNames) {
  try {
    accelerate::Accelerator accelerator(test_options().comm_hook("power_sgd_v9"));
    FAIL() << "an unknown hook was accepted";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("comm_hook='power_sgd_v9'"), std::string::npos) << message;
    EXPECT_NE(message.find("\"no\""), std::string::npos) << message;
    EXPECT_NE(message.find("\"fp16\""), std::string::npos) << message;
  }
}

TEST(CommHook, AShardedStrategyRefusesAHook) {
  for (const char* strategy : {"zero", "fsdp"}) {
    try {
      accelerate::Accelerator accelerator(test_options().comm_hook("bf16").parallel_strategy(strategy));
      FAIL() << "comm_hook with " << strategy << " was accepted";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("comm_hook='bf16'"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("parallel_strategy='") + strategy + "'"), std::string::npos)
          << message;
    }
  }
}
