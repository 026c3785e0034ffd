// Multi-rank tests of LocalSGD (include/accelerate/local_sgd.h), run by test/harness/run_ranks.py as N ranks:
// averaging after every step equals DDP, replicas apart between averages and equal after each, the loss
// falls, and what is refused.
//
// Preconditions: float64, one intra-op thread, no dropout or BatchNorm.
#include <accelerate/accelerate.h>
#include <accelerate/local_sgd.h>

#include "../support/numerics.h"
#include "common/durable_file.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

accelerate::AcceleratorOptions test_options() {
  return accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(30));
}

std::shared_ptr<Net> make_model() {
  torch::manual_seed(11);
  auto model = std::make_shared<Net>();
  model->to(torch::kFloat64);
  return model;
}

/// This process's batch of step `step`: different on every process.
std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * step + rank);
  auto x = at::randn({8, 8}, generator, torch::kFloat64);
  return {x, 0.5 * x.sum(1, true) + 0.1 * at::randn({8, 1}, generator, torch::kFloat64)};
}

torch::Tensor flat(torch::nn::Module& model) {
  std::vector<torch::Tensor> pieces;
  for (const auto& parameter : model.parameters()) {
    pieces.push_back(parameter.detach().reshape(-1));
  }
  return torch::cat(pieces);
}

/// Whether every process holds the same parameters, bit for bit (each process's flat parameters gathered).
bool replicas_identical(accelerate::Accelerator& accelerator, torch::nn::Module& model) {
  auto mine = flat(model);
  auto all = accelerator.gather(mine.unsqueeze(0));
  for (int64_t rank = 1; rank < all.size(0); ++rank) {
    if (!torch::equal(all[rank], all[0])) {
      return false;
    }
  }
  return true;
}

torch::optim::SGDOptions sgd() {
  return torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01);
}

} // namespace

/// K = 1: each process steps its own momentum on its own gradients, then the parameters are averaged. SGD
/// with momentum and weight decay is linear in the gradients, so the average of the processes' steps is the
/// step on the averaged gradients: DDP's, up to the order of the additions (float64). The issue asks for
/// 1e-12 relative; the bound is kFloat64PathParity, 1e-13: the numerics matrix measured at most 5.7e-16 (2
/// and 3 processes, every setting; docs/development.md), and a limit is at most 1000 times the worst spread.
TEST(LocalSGD, EveryStepAveragedEqualsDdp) {
  accelerate_test::set_intra_op_threads();
  constexpr int kSteps = 12;
  torch::Tensor ddp_parameters;
  {
    accelerate::Accelerator accelerator(test_options());
    auto model = make_model();
    torch::optim::SGD optimizer(model->parameters(), sgd());
    accelerator.prepare(model);
    auto prepared = accelerator.prepare(optimizer);
    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = batch(step, accelerator.process_index());
      accelerator.backward(torch::mse_loss(model->forward(x), y));
      prepared.step();
      prepared.zero_grad();
    }
    ddp_parameters = flat(*model);
  }
  accelerate::Accelerator accelerator(test_options());
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), sgd());
  accelerator.prepare(model);
  auto prepared = accelerator.prepare(optimizer);
  accelerate::LocalSGD local_sgd(accelerator, model, 1);
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, accelerator.process_index());
    accelerator.backward(torch::mse_loss(model->forward(x), y));
    prepared.step();
    prepared.zero_grad();
    local_sgd.step();
  }
  local_sgd.end();
  EXPECT_EQ(local_sgd.averages(), kSteps + 1);
  EXPECT_TRUE(replicas_identical(accelerator, *model));
  EXPECT_TRUE(accelerate_test::within(flat(*model), ddp_parameters, accelerate_test::kFloat64PathParity,
                                      "LocalSGD K=1 against DDP"));
}

/// K = 4: the replicas part between averages (their gradients are not synchronised) and agree bit for bit
/// after each average, at a `save_state` after an average (the checkpoint's model is every process's) and
/// after the scope; the loss falls.
TEST(LocalSGD, ReplicasAgreeAfterEachAverageAndTheLossFalls) {
  accelerate_test::set_intra_op_threads();
  constexpr int kSteps = 40;
  constexpr int kEvery = 4;
  accelerate::Accelerator accelerator(test_options());
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
  accelerator.prepare(model);
  auto prepared = accelerator.prepare(optimizer);
  std::vector<double> losses;
  {
    accelerate::LocalSGD local_sgd(accelerator, model, kEvery);
    for (int step = 1; step <= kSteps; ++step) {
      auto [x, y] = batch(step, accelerator.process_index());
      auto loss = torch::mse_loss(model->forward(x), y);
      accelerator.backward(loss);
      prepared.step();
      prepared.zero_grad();
      local_sgd.step();
      losses.push_back(accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN).item<double>());
      const bool averaged = step % kEvery == 0;
      EXPECT_EQ(replicas_identical(accelerator, *model), averaged)
          << "step " << step
          << (averaged ? ": the replicas differ after an average"
                       : ": the replicas agree between averages (were gradients synchronised?)");
      if (step == kSteps / 2) {
        // A checkpoint inside the scope, after an average: written by the main process, it holds the model
        // every process holds.
        const std::string directory = testing::TempDir() + "/local_sgd_" + std::getenv("MASTER_PORT");
        accelerator.save_state(directory);
        EXPECT_TRUE(replicas_identical(accelerator, *model)) << "the replicas differ at save_state";
        accelerator.wait_for_everyone();
        if (accelerator.is_main_process()) {
          accelerate::detail::remove_tree(directory); // (the PyPI libtorch's std::filesystem crashes)
        }
      }
    }
    EXPECT_EQ(local_sgd.averages(), kSteps / kEvery);
  } // the scope's end averages once more (a no-op here: the last step averaged)
  EXPECT_TRUE(replicas_identical(accelerator, *model));
  double first = 0, last = 0;
  for (int i = 0; i < kEvery; ++i) {
    first += losses[i];
    last += losses[losses.size() - 1 - i];
  }
  EXPECT_LT(last, 0.5 * first) << "the loss did not fall";
}

TEST(LocalSGD, ShardedStrategiesAndZeroStepsAreRefused) {
  {
    accelerate::Accelerator accelerator(test_options());
    auto model = make_model();
    accelerator.prepare(model);
    EXPECT_THROW(accelerate::LocalSGD(accelerator, model, 0), std::invalid_argument);
  }
  accelerate::Accelerator accelerator(test_options().parallel_strategy("zero"));
  auto model = make_model();
  accelerator.prepare(model);
  try {
    accelerate::LocalSGD local_sgd(accelerator, model, 4);
    FAIL() << "LocalSGD under zero was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("parallel_strategy 'zero'"), std::string::npos) << error.what();
  }
  accelerate::LocalSGD disabled(accelerator, model, 4, /*enabled=*/false);
  disabled.step();
  EXPECT_EQ(disabled.averages(), 0);
}
