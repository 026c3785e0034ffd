// Multi-rank tests: run by test/harness/run_ranks.py as N ranks over Gloo on loopback.
//
// Preconditions of the parity oracle (shared/DESIGN.md §5): float64, mean-reduced loss, equal per-rank
// batches, rank r takes slice r of the global batch, no dropout or BatchNorm, one intra-op thread.
#include <accelerate/accelerate.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

constexpr int kSteps = 5;
constexpr int64_t kPerRankBatch = 4;

/// The global batch of `step`: the same on every rank, drawn from a generator seeded by the step.
std::pair<torch::Tensor, torch::Tensor> global_batch(int step, int64_t size) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  auto x = at::randn({size, 8}, generator, torch::kFloat64);
  auto y = at::randn({size, 1}, generator, torch::kFloat64);
  return {x, y};
}

std::shared_ptr<Mlp> make_model(uint64_t seed) {
  torch::manual_seed(seed);
  auto model = std::make_shared<Mlp>();
  model->to(torch::kFloat64);
  return model;
}

/// Five SGD steps on the whole global batch in one process: the oracle.
std::vector<torch::Tensor> single_process_reference(int64_t global_size) {
  auto model = make_model(7);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = global_batch(step, global_size);
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimizer.step();
  }
  return model->parameters();
}

TEST(DDP, TwoRanksEqualOneRankDoubleBatch) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(30)));
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  ASSERT_GE(world, 2) << "run this test under accel launch with at least 2 processes";
  const int64_t global_size = kPerRankBatch * world;

  // Ranks start from different weights: prepare must make them equal (rank 0's).
  auto model = make_model(rank == 0 ? 7 : 100 + rank);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  accelerator.prepare(model, optimizer);

  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = global_batch(step, global_size);
    auto local_x = x.slice(0, rank * kPerRankBatch, (rank + 1) * kPerRankBatch);
    auto local_y = y.slice(0, rank * kPerRankBatch, (rank + 1) * kPerRankBatch);
    optimizer.zero_grad();
    accelerator.backward(torch::mse_loss(model->forward(local_x), local_y));
    optimizer.step();
  }

  auto expected = single_process_reference(global_size);
  auto actual = model->parameters();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(torch::allclose(actual[i], expected[i], /*rtol=*/1e-6, /*atol=*/1e-12))
        << "parameter " << i << " on rank " << rank << " differs by "
        << (actual[i] - expected[i]).abs().max().item<double>();
  }
}

TEST(DDP, WaitForEveryoneReturnsOnAllRanks) {
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(30)));
  accelerator.wait_for_everyone();
  EXPECT_EQ(accelerator.distributed_type(), accelerate::DistributedType::MULTI_CPU);
  EXPECT_EQ(accelerator.is_main_process(), accelerator.process_index() == 0);
}

} // namespace
