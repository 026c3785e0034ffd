// Multi-rank test of Accelerator::graphed_step: cuda_graph(true) with several processes is refused on every
// process at the first call, with the fix named (run by test/harness/run_ranks.py).
#include <accelerate/accelerate.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <string>

namespace {

TEST(GraphedStep, SeveralProcessesAreRefusedOnEveryProcess) {
  accelerate::Accelerator accelerator(
      accelerate::AcceleratorOptions().cpu(true).cuda_graph(true).init_timeout(std::chrono::seconds(30)));
  ASSERT_EQ(accelerator.num_processes(), 2);
  torch::manual_seed(0);
  torch::nn::Linear model(8, 2);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
  auto step = accelerator.graphed_step([&](const torch::Tensor& x) {
    optimizer.zero_grad();
    auto loss = model->forward(x).square().mean();
    accelerator.backward(loss);
    optimizer.step();
    return loss;
  });
  std::string error;
  try {
    step(torch::randn({4, 8}));
  } catch (const std::invalid_argument& caught) {
    error = caught.what();
  }
  EXPECT_NE(error.find("with 2 processes the gradient all-reduce would have to be captured"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("cuda_graph(false)"), std::string::npos) << error;
  // Nothing was started: the processes still agree and can go on without the graph.
  accelerator.wait_for_everyone();
}

} // namespace
