// Multi-rank tests of mixed precision, run by test/harness/run_ranks.py as N ranks over Gloo: the fp16 grad
// scaler's skip decision is the same on every rank.
//
// Preconditions: float32 model without dropout or BatchNorm, equal per-rank batches, one intra-op thread.
#include <accelerate/accelerate.h>

#include "../../runtime/accelerator/state.h"
#include "../../runtime/precision/precision.h"
#include "../support/numerics.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <set>

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", accelerate::nn::Linear(8, 16));
    fc2 = register_module("fc2", accelerate::nn::Linear(16, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  accelerate::nn::Linear fc1{nullptr}, fc2{nullptr};
};

TEST(PrecisionMultirank, RanksSkipTogetherWhenOnlyOneOverflows) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(
      accelerate::AcceleratorOptions().cpu(true).mixed_precision("fp16").init_timeout(
          std::chrono::seconds(30)));
  const int rank = accelerator.process_index();
  ASSERT_GE(accelerator.num_processes(), 2) << "run this test under accel launch with at least 2 processes";
  torch::manual_seed(rank == 0 ? 7 : 100 + rank); // prepare makes every rank's weights rank 0's
  auto model = std::make_shared<Net>();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, /*step_size=*/1, /*gamma=*/0.9));
  // A small initial scale: float16 gradients never overflow by themselves here, only where injected.
  auto& precision = *accelerate::detail::internal_state(accelerator).precision;
  precision.scaler()->reset({/*init_scale=*/256, /*growth_factor=*/2, /*backoff_factor=*/0.5,
                             /*growth_interval=*/2000});
  // Only the last rank overflows, after the gradients were averaged: without the MAX all-reduce of found_inf
  // the other ranks would step and the replicas would drift apart.
  const std::set<int> overflow_steps{2, 5, 6};
  const bool overflows_here = rank == accelerator.num_processes() - 1;
  int taken = 0;
  for (int step = 0; step < 10; ++step) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * step + rank);
    auto x = at::randn({4, 8}, generator);
    auto y = at::randn({4, 1}, generator);
    auto guard = accelerator.accumulate(model);
    optimizer.zero_grad();
    accelerator.backward(torch::mse_loss(model->forward(x), y));
    if (overflows_here && overflow_steps.count(step)) {
      torch::NoGradGuard no_grad;
      model->fc1->weight.grad()[0][0].fill_(std::numeric_limits<float>::infinity());
    }
    optimizer.step();
    scheduler.step();
    const bool expected = overflow_steps.count(step) > 0;
    EXPECT_EQ(accelerator.optimizer_step_was_skipped(), expected) << "step " << step << " on rank " << rank;
    taken += expected ? 0 : 1;
  }
  EXPECT_EQ(scheduler.steps(), taken) << "rank " << rank;
  // Same scale and same weights everywhere.
  auto scale = torch::full({1}, precision.scaler()->get_scale());
  auto scales = accelerator.gather(scale);
  EXPECT_EQ(scales.min().item<double>(), scales.max().item<double>()) << "rank " << rank;
  EXPECT_EQ(scales.min().item<double>(), 256.0 / 8) << "three backoffs";
  std::vector<torch::Tensor> flat;
  for (const auto& parameter : model->parameters()) {
    flat.push_back(parameter.detach().reshape({-1}));
  }
  auto mine = torch::cat(flat).unsqueeze(0);
  auto all = accelerator.gather(mine);
  for (int64_t other = 1; other < all.size(0); ++other) {
    EXPECT_TRUE(torch::equal(all[0], all[other])) << "rank " << other << "'s weights differ from rank 0's";
  }
}

} // namespace
