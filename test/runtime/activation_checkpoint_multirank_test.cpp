// Multi-rank tests of activation checkpointing outside fsdp, run by test/harness/run_ranks.py: by hand
// (accelerate::checkpoint) on one process without an Accelerator the gradients equal the plain run's, and
// under DDP and ZeRO-2 on 2 processes training with checkpointed blocks ends where it ends without them; with
// the activation_checkpointing setting, the modules whose forward calls accelerate::fsdp::unit (as the
// fsdp-units pass writes it) are recomputed under DDP, ZeRO-2 and on one process, and train as without it.
//
// Preconditions: one intra-op thread, float64. The blocks use dropout, so the recomputation must draw the
// masks the forward drew (the random number generators are restored for it, then put back).
#include <accelerate/accelerate.h>

#include "../support/autograd_graph.h"
#include "../support/numerics.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace {

using accelerate_test::count_nodes;

/// Linear, tanh, dropout: its body checkpointed when `checkpointed`.
struct Block : torch::nn::Module {
  Block(int64_t in, int64_t out, bool checkpointed) : checkpointed(checkpointed) {
    fc = register_module("fc", torch::nn::Linear(in, out));
  }
  torch::Tensor body(const torch::Tensor& x) {
    return torch::dropout(torch::tanh(fc(x)), 0.25, is_training());
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (!checkpointed) {
      return body(x);
    }
    return accelerate::checkpoint(*this, x, [this](torch::Tensor x) { return body(x); });
  }
  torch::nn::Linear fc{nullptr};
  bool checkpointed;
};

/// The same block as the fsdp-units pass writes its forward: the body inside accelerate::fsdp::unit.
struct UnitBlock : torch::nn::Module {
  UnitBlock(int64_t in, int64_t out) { fc = register_module("fc", torch::nn::Linear(in, out)); }
  torch::Tensor forward(torch::Tensor x) {
    return accelerate::fsdp::unit(*this, x, [this](torch::Tensor x) {
      return torch::dropout(torch::tanh(fc(x)), 0.25, is_training());
    });
  }
  torch::nn::Linear fc{nullptr};
};

/// Two blocks and a head (the head not checkpointed): 6 -> 12 -> 9 -> 3. `checkpointed`: the blocks call
/// accelerate::checkpoint; `units`: they are UnitBlocks.
struct Net : torch::nn::Module {
  explicit Net(bool checkpointed, bool units = false) {
    if (units) {
      unit_first = register_module("first", std::make_shared<UnitBlock>(6, 12));
      unit_second = register_module("second", std::make_shared<UnitBlock>(12, 9));
    } else {
      first = register_module("first", std::make_shared<Block>(6, 12, checkpointed));
      second = register_module("second", std::make_shared<Block>(12, 9, checkpointed));
    }
    head = register_module("head", torch::nn::Linear(9, 3));
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (unit_first) {
      return head(unit_second->forward(unit_first->forward(x)));
    }
    return head(second->forward(first->forward(x)));
  }
  std::shared_ptr<Block> first, second;
  std::shared_ptr<UnitBlock> unit_first, unit_second;
  torch::nn::Linear head{nullptr};
};

constexpr const char* kCheckpointNode = "accelerate::CheckpointBackward";

constexpr int64_t kGlobalBatch = 8;

std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank, int world) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(900 + step);
  auto x = at::randn({kGlobalBatch, 6}, generator).to(torch::kFloat64);
  auto y = at::randn({kGlobalBatch, 3}, generator).to(torch::kFloat64);
  const int64_t rows = kGlobalBatch / world;
  return {x.narrow(0, rank * rows, rows), y.narrow(0, rank * rows, rows)};
}

torch::Tensor flat(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> parts;
  for (const auto& tensor : tensors) {
    parts.push_back(tensor.detach().reshape(-1).clone());
  }
  return torch::cat(parts);
}

std::vector<torch::Tensor> gradients(torch::nn::Module& model) {
  std::vector<torch::Tensor> grads;
  for (const auto& parameter : model.parameters()) {
    grads.push_back(parameter.grad());
  }
  return grads;
}

/// One process, no Accelerator: a forward and backward with checkpointed blocks gives the plain run's loss,
/// input gradient and parameter gradients (dropout included: the recomputation draws the same masks), and the
/// random number generator is where the plain run leaves it. The recomputation runs the same kernels on the
/// same values in the same order, so the results are expected bit-identical; the bound leaves 1e-14 relative
/// for a sum the autograd engine may take in another order (measured: reported below).
TEST(ActivationCheckpoint, GradientsEqualThePlainRunOnOneProcess) {
  accelerate_test::set_intra_op_threads();
  struct Run {
    torch::Tensor loss, input_gradient, parameter_gradients, next_draw;
  };
  auto run = [](bool checkpointed) {
    torch::manual_seed(7);
    Net model(checkpointed);
    model.train();
    auto [x, y] = batch(0, 0, 1);
    x = x.clone().requires_grad_(true);
    auto loss = torch::mse_loss(model.forward(x), y);
    loss.backward();
    return Run{loss.detach(), x.grad().clone(), flat(gradients(model)), torch::rand({4}, torch::kFloat64)};
  };
  const Run plain = run(false);
  const Run checkpointed = run(true);
  EXPECT_TRUE(accelerate_test::within(checkpointed.loss, plain.loss, 1e-14, "checkpointed loss"));
  EXPECT_TRUE(accelerate_test::within(checkpointed.input_gradient, plain.input_gradient, 1e-14,
                                      "checkpointed input gradient"));
  EXPECT_TRUE(accelerate_test::within(checkpointed.parameter_gradients, plain.parameter_gradients, 1e-14,
                                      "checkpointed parameter gradients"));
  EXPECT_TRUE(torch::equal(checkpointed.next_draw, plain.next_draw))
      << "the generator must be where the plain run leaves it after backward";
  // Without autograd it is a plain call: no graph, the same output.
  torch::manual_seed(3);
  Net model(true);
  model.eval();
  torch::NoGradGuard no_grad;
  auto [x, y] = batch(1, 0, 1);
  const auto output = model.forward(x);
  EXPECT_FALSE(output.requires_grad());
  torch::manual_seed(3);
  Net same(false);
  same.eval();
  EXPECT_TRUE(torch::equal(same.forward(x), output));
}

/// The blocks' activations are not kept: each checkpointed block is one node of the autograd graph (its
/// body's operations are not in it), so what backward holds for it is its input.
TEST(ActivationCheckpoint, TheBodysOperationsAreNotInTheGraph) {
  accelerate_test::set_intra_op_threads();
  auto count = [](bool checkpointed, const std::string& name) {
    torch::manual_seed(7);
    Net model(checkpointed);
    auto [x, y] = batch(0, 0, 1);
    return count_nodes(torch::mse_loss(model.forward(x), y), name);
  };
  EXPECT_EQ(count(true, kCheckpointNode), 2);
  EXPECT_EQ(count(false, kCheckpointNode), 0);
  EXPECT_EQ(count(true, "TanhBackward0"), 0) << "the bodies' tanh must not be in the graph";
  EXPECT_EQ(count(false, "TanhBackward0"), 2);
}

/// `steps` steps of SGD with momentum under `strategy` on the processes of the job, with or without
/// checkpointed blocks (by hand, or, with `units`, unit blocks under the activation_checkpointing setting);
/// returns the parameters, and the checkpointed nodes of the first step's graph in `recomputed`.
torch::Tensor train(const std::string& strategy, bool checkpointed, int steps, bool units = false,
                    int* recomputed = nullptr) {
  auto options = accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(30));
  options = strategy == "ddp" ? options.parallel_strategy("ddp")
                              : options.parallel_strategy("zero").zero_stage(2).bucket_cap_mb(0.0005);
  if (units) {
    options = options.activation_checkpointing(checkpointed);
  }
  accelerate::Accelerator accelerator(options.gradient_accumulation_steps(2));
  accelerate_test::set_intra_op_threads();
  torch::manual_seed(11); // prepare makes every process's model process 0's
  auto model = std::make_shared<Net>(checkpointed && !units, units);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare_optimizer(
      std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)));
  // Each process draws its own dropout masks, alike with and without checkpointing.
  torch::manual_seed(100 + accelerator.process_index());
  for (int step = 0; step < steps; ++step) {
    auto guard = accelerator.accumulate(model);
    optimizer.zero_grad();
    auto [x, y] = batch(step, accelerator.process_index(), accelerator.num_processes());
    auto loss = torch::mse_loss(model->forward(x), y);
    if (step == 0 && recomputed != nullptr) {
      *recomputed = count_nodes(loss, kCheckpointNode);
    }
    accelerator.backward(loss);
    optimizer.step();
  }
  return flat(model->parameters());
}

/// float64 at 2 processes: DDP and ZeRO-2 (accumulation windows of 2) train with checkpointed blocks to the
/// parameters they reach without them. Same arithmetic per element, gradients summed in the same order; the
/// bound is the suite's float64 path-parity bound, 1e-12 relative (measured: reported below).
TEST(ActivationCheckpoint, DdpAndZero2TrainAsWithoutIt) {
  accelerate::Accelerator outer(accelerate::AcceleratorOptions().cpu(true));
  ASSERT_EQ(outer.num_processes(), 2) << "run this test under accel launch with 2 processes";
  for (const std::string strategy : {"ddp", "zero2"}) {
    const auto plain = train(strategy, false, 8);
    const auto checkpointed = train(strategy, true, 8);
    EXPECT_TRUE(accelerate_test::within(checkpointed, plain, 1e-12, strategy + " checkpointed parameters"))
        << strategy;
  }
}

/// The activation_checkpointing setting: under DDP and ZeRO-2 on 2 processes the unit blocks (the fsdp-units
/// pass's shape) are recomputed (two checkpointed nodes, none without the setting) and train as without it,
/// within the float64 path-parity bound (measured: reported below).
TEST(ActivationCheckpoint, UnitsRecomputeUnderDdpAndZero2WithTheSetting) {
  accelerate::Accelerator outer(accelerate::AcceleratorOptions().cpu(true));
  ASSERT_EQ(outer.num_processes(), 2) << "run this test under accel launch with 2 processes";
  for (const std::string strategy : {"ddp", "zero2"}) {
    int recomputed_off = -1, recomputed_on = -1;
    const auto plain = train(strategy, false, 8, /*units=*/true, &recomputed_off);
    const auto checkpointed = train(strategy, true, 8, /*units=*/true, &recomputed_on);
    EXPECT_EQ(recomputed_off, 0) << strategy;
    EXPECT_EQ(recomputed_on, 2) << strategy << ": both unit blocks must be checkpointed";
    EXPECT_TRUE(
        accelerate_test::within(checkpointed, plain, 1e-12, strategy + " units checkpointed parameters"))
        << strategy;
  }
}

/// The setting on one process (no launcher): the unit blocks are recomputed and the gradients equal the plain
/// run's (bound as in GradientsEqualThePlainRunOnOneProcess); a module outside the prepared model is a plain
/// call, and the setting ends with its Accelerator.
TEST(ActivationCheckpoint, UnitsRecomputeOnOneProcessWithTheSetting) {
  accelerate_test::set_intra_op_threads();
  auto run = [](bool setting, int* recomputed) {
    accelerate::Accelerator accelerator(
        accelerate::AcceleratorOptions().cpu(true).activation_checkpointing(setting));
    torch::manual_seed(7);
    auto model = std::make_shared<Net>(false, /*units=*/true);
    accelerator.prepare(model);
    auto [x, y] = batch(0, 0, 1);
    auto loss = torch::mse_loss(model->forward(x), y);
    *recomputed = count_nodes(loss, kCheckpointNode);
    accelerator.backward(loss);
    std::vector<torch::Tensor> grads;
    for (const auto& parameter : model->parameters()) {
      grads.push_back(parameter.grad());
    }
    // Not prepared: a plain call even with the setting on.
    UnitBlock outside(6, 4);
    outside.to(torch::kFloat64);
    EXPECT_EQ(count_nodes(outside.forward(x).sum(), kCheckpointNode), 0);
    return flat(grads);
  };
  int off = -1, on = -1;
  const auto plain = run(false, &off);
  const auto checkpointed = run(true, &on);
  EXPECT_EQ(off, 0);
  EXPECT_EQ(on, 2);
  EXPECT_TRUE(
      accelerate_test::within(checkpointed, plain, 1e-14, "one process units checkpointed gradients"));
  // The setting went with its Accelerator: a unit block of a model prepared without it is a plain call.
  accelerate::Accelerator later(accelerate::AcceleratorOptions().cpu(true));
  auto model = std::make_shared<Net>(false, /*units=*/true);
  later.prepare(model);
  auto [x, y] = batch(0, 0, 1);
  EXPECT_EQ(count_nodes(torch::mse_loss(model->forward(x), y), kCheckpointNode), 0);
}

} // namespace
