// Multi-rank tests of the "fsdp" strategy (runtime/parallel/fsdp/), run by test/harness/run_ranks.py as N
// ranks: a 4-block model whose blocks are units written by hand (accelerate::fsdp::unit), trained under
// FULL_SHARD and SHARD_GRAD_OP against DDP on the same per-process data, with accumulation, clipping, tied
// embeddings, a frozen block, a unit called twice in one forward and fp16; what `unshard` gives; what a
// sharded parameter holds outside its unit; and the bad input the issue names.
//
// Preconditions: one intra-op thread, models without dropout or BatchNorm.
#include <accelerate/accelerate.h>

#include "../../bench/counting_allocator.h"
#include "../../runtime/accelerator/state.h"
#include "../../runtime/common/durable_file.h"
#include "../../runtime/parallel/engine.h"
#include "../../runtime/transport/process_group.h"
#include "../../runtime/transport/shm_allreduce.h"
#include "../support/autograd_graph.h"
#include "../support/numerics.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <string>

#include <unistd.h>

namespace {

using accelerate_test::count_nodes;

/// Whether the test hook that runs FSDP's offload code paths on the CPU is set (the offload tests are
/// registered with it).
bool offload_path_on_cpu() {
  const char* hook = std::getenv("ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU");
  return hook != nullptr && std::string(hook) == "1";
}

accelerate::AcceleratorOptions test_options() {
  return accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(30));
}

constexpr int64_t kVocab = 13;
constexpr int64_t kWidth = 10;
constexpr int64_t kHidden = 17; // odd sizes: no world size here divides a unit's elements
constexpr int64_t kGlobalBatch = 6;
constexpr int64_t kSequence = 5;

/// A residual block: one unit.
struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(kWidth, kHidden));
    fc2 = register_module("fc2", torch::nn::Linear(kHidden, kWidth));
    scale = register_parameter("scale", torch::full({kWidth}, 0.5));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return accelerate::fsdp::unit(*this, x, [&](const torch::Tensor& x) {
      auto hidden = torch::tanh(fc1(x));
      if (dropout) {
        hidden = torch::dropout(hidden, 0.25, is_training());
      }
      return x + fc2(hidden) * scale;
    });
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::Tensor scale;
  bool dropout = false;
};
TORCH_MODULE(Block);

/// A block class that inherits its forward (and the unit call in it) from BlockImpl: no unit of its own, its
/// parameters train in the unit that holds it (the root's resident unit here).
struct InheritingBlockImpl : BlockImpl {};

/// Two blocks and a projection of its own: a unit holding units (its parameters are the projection's).
struct PairImpl : torch::nn::Module {
  PairImpl() {
    first = register_module("first", Block());
    second = register_module("second", Block());
    mix = register_module("mix", torch::nn::Linear(kWidth, kWidth));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return accelerate::fsdp::unit(*this, x,
                                  [&](const torch::Tensor& x) { return second(torch::tanh(mix(first(x)))); });
  }
  Block first{nullptr}, second{nullptr};
  torch::nn::Linear mix{nullptr};
};
TORCH_MODULE(Pair);

/// What the model varies.
struct Shape {
  bool tied = false;         // the output layer is the embedding (a parameter of the root)
  bool frozen_block = false; // block 1 does not train
  bool reuse = false;        // block 2 runs twice in each forward
  bool nested = false;       // then a unit holding two block units
  bool dropout = false;      // the blocks drop a quarter of their hidden units in training
  bool inheriting = false;   // block 3 is of a class that inherits BlockImpl's forward
};

/// Embedding, 4 blocks (units), a head (or the embedding again): the root holds the embedding and the head.
struct Model : torch::nn::Module {
  Model(const Shape& shape_, torch::Dtype dtype) : shape(shape_) {
    embed = register_module("embed", torch::nn::Embedding(kVocab, kWidth));
    for (int i = 0; i < 4; ++i) {
      blocks.push_back(
          register_module("block" + std::to_string(i),
                          i == 3 && shape.inheriting
                              ? Block(std::shared_ptr<BlockImpl>(std::make_shared<InheritingBlockImpl>()))
                              : Block()));
      blocks.back()->dropout = shape.dropout;
    }
    if (shape.nested) {
      pair = register_module("pair", Pair());
    }
    if (!shape.tied) {
      head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(kWidth, kVocab).bias(false)));
    }
    if (shape.frozen_block) {
      for (auto& parameter : blocks[1]->parameters()) {
        parameter.set_requires_grad(false);
      }
    }
    to(dtype);
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto h = embed(tokens);
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (i == 2 && rank == skip_block2_on_rank) {
        continue; // a rank-dependent branch (the debug-mode test's bug)
      }
      h = blocks[i](h);
      if (shape.reuse && i == 2) {
        h = blocks[i](h);
      }
    }
    if (shape.nested) {
      h = pair(h);
    }
    return shape.tied ? torch::matmul(h, embed->weight.t()) : head(h);
  }
  Shape shape;
  int rank = 0;
  int skip_block2_on_rank = -1;
  Pair pair{nullptr};
  torch::nn::Embedding embed{nullptr};
  std::vector<Block> blocks;
  torch::nn::Linear head{nullptr};
};

/// fsdp_auto_wrap_policy and its settings; unset: the default (NO_WRAP).
struct Wrap {
  std::string policy;
  std::string classes;
  int64_t min_num_params = -1;
  accelerate::AcceleratorOptions apply(accelerate::AcceleratorOptions options) const {
    if (!policy.empty()) {
      options.fsdp_auto_wrap_policy(policy);
    }
    if (!classes.empty()) {
      options.fsdp_transformer_layer_cls_to_wrap(classes);
    }
    if (min_num_params >= 0) {
      options.fsdp_min_num_params(min_num_params);
    }
    return options;
  }
};

struct Strategy {
  Strategy(std::string name_, bool forward_prefetch_ = false, std::string backward_prefetch_ = "NO_PREFETCH",
           Wrap wrap_ = {})
      : name(std::move(name_)), forward_prefetch(forward_prefetch_),
        backward_prefetch(std::move(backward_prefetch_)), wrap(std::move(wrap_)) {}
  std::string name; // "ddp", or a sharding strategy: "FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", ...
  bool forward_prefetch = false;
  std::string backward_prefetch = "NO_PREFETCH";
  Wrap wrap;
  bool checkpointing = false;         // fsdp_activation_checkpointing
  bool offload = false;               // fsdp_offload_params
  bool checkpointing_offload = false; // fsdp_activation_checkpointing_offload
  accelerate::AcceleratorOptions apply(accelerate::AcceleratorOptions options) const {
    if (name == "ddp") {
      return options.parallel_strategy("ddp");
    }
    return wrap.apply(options.parallel_strategy("fsdp")
                          .fsdp_sharding_strategy(name)
                          .fsdp_forward_prefetch(forward_prefetch)
                          .fsdp_backward_prefetch(backward_prefetch)
                          .fsdp_activation_checkpointing(checkpointing)
                          .fsdp_activation_checkpointing_offload(checkpointing_offload)
                          .fsdp_offload_params(offload));
  }
};
const Strategy kDdp{"ddp"};
const std::vector<Strategy> kSharded = {{"FULL_SHARD"}, {"SHARD_GRAD_OP"}};

struct RunSettings {
  Shape shape;
  torch::Dtype dtype = torch::kFloat64;
  int accumulation = 1;
  int micro_steps = 10;
  double clip = 0;
  bool no_sync_first = false; // the first micro-step of each window runs inside no_sync (accumulation > 1)
};

/// This process's rows of micro-step `step`'s global batch (the same global data at any world size).
std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank, int world) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(500 + step);
  auto tokens = at::randint(kVocab, {kGlobalBatch, kSequence}, generator, torch::kInt64);
  auto targets = at::randint(kVocab, {kGlobalBatch, kSequence}, generator, torch::kInt64);
  const int64_t rows = kGlobalBatch / world;
  return {tokens.narrow(0, rank * rows, rows), targets.narrow(0, rank * rows, rows)};
}

torch::Tensor flat(const torch::nn::Module& model) {
  std::vector<torch::Tensor> parts;
  for (const auto& parameter : model.parameters()) {
    parts.push_back(parameter.detach().reshape(-1).to(torch::kFloat64));
  }
  return torch::cat(parts);
}

using accelerate_test::kFloat64PathParity;
using accelerate_test::relative_difference;
using accelerate_test::within;

struct Outcome {
  std::string state;        // accelerator.state() at the end
  torch::Tensor parameters; // read inside unshard()
  int64_t state_elements = 0;
  int64_t trainable = 0;
  int clipped_steps = 0;
  std::vector<double> norms; // what clip_grad_norm_ returned: the total norm before clipping
  std::vector<double> losses;
  int recomputed_units = 0; // checkpointed units in the first step's graph
};

Outcome train(const Strategy& strategy, const RunSettings& run) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(
      strategy.apply(test_options()).gradient_accumulation_steps(run.accumulation));
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  torch::manual_seed(7 + rank); // prepare makes every process's model process 0's
  auto model = std::make_shared<Model>(run.shape, run.dtype);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(
      torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1)));
  auto gradient_state = accelerator.gradient_state();
  Outcome outcome;
  for (int micro = 0; micro < run.micro_steps; ++micro) {
    gradient_state->end_of_dataloader = micro == run.micro_steps - 1;
    auto guard = accelerator.accumulate(model);
    optimizer.zero_grad();
    auto [tokens, targets] = batch(micro, rank, world);
    auto loss = torch::cross_entropy_loss(model->forward(tokens).reshape({-1, kVocab}), targets.reshape(-1));
    outcome.losses.push_back(loss.item<double>());
    if (micro == 0) {
      outcome.recomputed_units = count_nodes(loss, "accelerate::CheckpointBackward");
    }
    if (run.no_sync_first && micro % run.accumulation == 0 && !accelerator.sync_gradients()) {
      auto no_sync = accelerator.no_sync(model);
      accelerator.backward(loss);
    } else {
      accelerator.backward(loss);
    }
    if (accelerator.sync_gradients() && run.clip > 0) {
      auto norm = accelerator.clip_grad_norm_(model->parameters(), run.clip);
      outcome.clipped_steps += norm.item<double>() > run.clip ? 1 : 0;
      outcome.norms.push_back(norm.item<double>());
    }
    optimizer.step();
  }
  gradient_state->end_of_dataloader = false;
  {
    auto whole = accelerator.unshard(model);
    outcome.parameters = flat(*model);
  }
  for (const auto& parameter : model->parameters()) {
    outcome.trainable += parameter.requires_grad() ? parameter.numel() : 0;
  }
  for (const auto& [key, slot] : optimizer.unwrap().state()) {
    outcome.state_elements += static_cast<torch::optim::AdamWParamState&>(*slot).exp_avg().numel();
  }
  outcome.state = accelerator.state();
  accelerator.wait_for_everyone();
  return outcome;
}

int64_t sum_over_processes(accelerate::Accelerator& accelerator, int64_t count) {
  return accelerator.gather(torch::tensor({count}, torch::kInt64)).sum().item<int64_t>();
}

/// The bound for float64: every element within rtol 1e-6, atol 1e-12 of DDP's.
void expect_near_ddp(const Outcome& sharded, const Outcome& ddp, const std::string& label) {
  EXPECT_TRUE(torch::allclose(sharded.parameters, ddp.parameters, 1e-6, 1e-12))
      << label << ": ‖Δθ‖/‖θ‖ = " << relative_difference(sharded.parameters, ddp.parameters);
  EXPECT_EQ(sharded.clipped_steps, ddp.clipped_steps) << label;
  accelerate_test::report_spread(label + " against DDP",
                                 relative_difference(sharded.parameters, ddp.parameters), 1e-6);
}

// ---- FSDP against DDP ----------------------------------------------------------------------------------

/// 10 AdamW steps in float64, each sharding strategy against DDP, for each model shape; every element of the
/// optimizer state held by exactly one process.
TEST(Fsdp, MatchesDdpAfterTenAdamWSteps) {
  accelerate::Accelerator outer(test_options());
  for (const Shape shape : {Shape{}, Shape{true, false, false, false}, Shape{false, true, false, false},
                            Shape{false, false, true, false}, Shape{false, false, false, true},
                            Shape{true, true, true, true}, Shape{false, false, false, false, false, true}}) {
    RunSettings run;
    run.shape = shape;
    const auto ddp = train(kDdp, run);
    for (const auto& strategy : kSharded) {
      const std::string label =
          strategy.name + " tied=" + std::to_string(shape.tied) +
          " frozen=" + std::to_string(shape.frozen_block) + " reuse=" + std::to_string(shape.reuse) +
          " nested=" + std::to_string(shape.nested) + " inheriting=" + std::to_string(shape.inheriting);
      const auto fsdp = train(strategy, run);
      expect_near_ddp(fsdp, ddp, label);
      // The same forward arithmetic, on a flat buffer's views against separate tensors: not bit-exact.
      EXPECT_TRUE(within(fsdp.losses, ddp.losses, kFloat64PathParity, label + " losses against DDP"));
      EXPECT_EQ(sum_over_processes(outer, fsdp.state_elements), ddp.trainable) << label;
      EXPECT_LT(fsdp.state_elements, ddp.trainable) << label << ": this process holds all the state";
    }
  }
}

/// Accumulation (3 micro-steps, a short last window, the first micro-step of each window inside no_sync) and
/// clipping that triggers, with tied embeddings, a frozen block and a reused unit.
TEST(Fsdp, MatchesDdpWithAccumulationNoSyncAndClipping) {
  accelerate::Accelerator outer(test_options());
  RunSettings run;
  run.shape = Shape{true, true, true, true};
  run.accumulation = 3;
  run.micro_steps = 10;
  run.clip = 0.5;
  run.no_sync_first = true;
  const auto ddp = train(kDdp, run);
  EXPECT_GT(ddp.clipped_steps, 0) << "the clip bound never triggers: the test would not test clipping";
  for (const auto& strategy : kSharded) {
    expect_near_ddp(train(strategy, run), ddp, strategy.name + " accumulation, no_sync, clipping");
  }
}

/// Hybrid sharding, run as 2 machines x 2 processes on loopback: each unit sharded among one machine's
/// processes, the shares' gradients averaged across the machines. Against DDP on the same 4 processes
/// (float64, rtol 1e-6): plain steps, and accumulation with no_sync and clipping that triggers (the norm is
/// one machine's shares, not both machines'). Each machine holds the optimizer state once. The machine
/// boundary: the machine's group uses shared memory, the job's group and the group across machines do not.
TEST(Fsdp, HybridShardingMatchesDdpOnTwoMachines) {
  accelerate::Accelerator outer(test_options());
  ASSERT_EQ(outer.num_processes(), 4);
  ASSERT_EQ(outer.local_process_index(), outer.process_index() % 2) << "run as 2 machines x 2 processes";
  RunSettings plain;
  plain.shape = Shape{true, true, true, true};
  RunSettings windowed = plain;
  windowed.accumulation = 3;
  windowed.clip = 0.5;
  windowed.no_sync_first = true;
  for (const auto& run : {plain, windowed}) {
    const auto ddp = train(kDdp, run);
    if (run.clip > 0) {
      EXPECT_GT(ddp.clipped_steps, 0) << "the clip bound never triggers: the test would not test clipping";
    }
    for (const std::string name : {"HYBRID_SHARD", "HYBRID_SHARD_ZERO2"}) {
      const std::string label = name + (run.accumulation > 1 ? " accumulation, no_sync, clipping" : "");
      const auto hybrid = train(Strategy{name}, run);
      expect_near_ddp(hybrid, ddp, label);
      // The whole model's norm, once: a norm over both machines' shares would be sqrt(2) times it.
      ASSERT_EQ(hybrid.norms.size(), ddp.norms.size()) << label;
      for (size_t i = 0; i < ddp.norms.size(); ++i) {
        EXPECT_NEAR(hybrid.norms[i], ddp.norms[i], 1e-9 * ddp.norms[i]) << label << ": step " << i;
      }
      EXPECT_EQ(sum_over_processes(outer, hybrid.state_elements), 2 * ddp.trainable)
          << label << ": each machine holds the whole optimizer state once";
      EXPECT_LT(hybrid.state_elements, ddp.trainable) << label;
      EXPECT_NE(hybrid.state.find("in 2 shares within each of 2 machines, replicated across them"),
                std::string::npos)
          << hybrid.state;
    }
  }
  const auto& process = *accelerate::detail::internal_state(outer).process;
  ASSERT_TRUE(process.machine_groups);
  EXPECT_EQ(process.machine_groups->machine_index, outer.process_index() / 2);
  EXPECT_EQ(process.machine_groups->machine->getSize(), 2);
  EXPECT_EQ(process.machine_groups->replicas->getSize(), 2);
  using accelerate::detail::uses_shared_memory_allreduce;
  EXPECT_TRUE(
      uses_shared_memory_allreduce(process.machine_groups->machine->getBackend(c10::DeviceType::CPU)));
  EXPECT_FALSE(
      uses_shared_memory_allreduce(process.machine_groups->replicas->getBackend(c10::DeviceType::CPU)));
  EXPECT_FALSE(uses_shared_memory_allreduce(process.process_group->getBackend(c10::DeviceType::CPU)))
      << "the job's group spans two machines: no shared memory across the machine boundary";
}

/// Bad input: hybrid sharding on one machine has nothing to replicate; every process says so, none hangs.
TEST(Fsdp, HybridShardingOnOneMachineIsRefused) {
  accelerate::Accelerator outer(test_options());
  for (const std::string name : {"HYBRID_SHARD", "HYBRID_SHARD_ZERO2"}) {
    try {
      accelerate::Accelerator accelerator(Strategy{name}.apply(test_options()));
      FAIL() << name << " on one machine was accepted";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("fsdp_sharding_strategy " + name), std::string::npos) << message;
      EXPECT_NE(message.find("this job runs on one machine"), std::string::npos) << message;
      EXPECT_NE(message.find("accel launch --num_machines"), std::string::npos) << message;
    }
  }
  outer.wait_for_everyone();
}

/// Activation checkpointing: each block unit keeps only its input and runs its body again in backward, with
/// the random number generator as it was (dropout draws the same mask) — the same arithmetic on the same
/// values, so the parameters are those of the run without it (within the float64 path-parity bound: other
/// buffers), for every model shape, accumulation with no_sync and clipping included. The model itself (the
/// root) is never recomputed.
TEST(Fsdp, ActivationCheckpointingRecomputesTheSameGradients) {
  accelerate::Accelerator outer(test_options());
  for (const Shape shape : {Shape{}, Shape{true, true, true, true}, Shape{false, false, true, false, true}}) {
    for (int accumulation : {1, 3}) {
      RunSettings run;
      run.shape = shape;
      run.accumulation = accumulation;
      run.no_sync_first = accumulation > 1;
      run.clip = accumulation > 1 ? 0.5 : 0;
      for (const auto& sharding : kSharded) {
        Strategy strategy = sharding;
        const std::string label = sharding.name + " reuse=" + std::to_string(shape.reuse) +
                                  " nested=" + std::to_string(shape.nested) +
                                  " dropout=" + std::to_string(shape.dropout) +
                                  " accumulation=" + std::to_string(accumulation);
        const auto stored = train(strategy, run);
        strategy.checkpointing = true;
        const auto recomputed = train(strategy, run);
        EXPECT_EQ(stored.recomputed_units, 0) << label;
        EXPECT_NE(recomputed.state.find("activation checkpointing on"), std::string::npos)
            << recomputed.state;
        // 4 blocks (block 2 twice when reused; a frozen block holds nothing to shard, so it is no unit), and
        // the pair when nested (its blocks run again inside its recomputation).
        EXPECT_EQ(recomputed.recomputed_units,
                  4 + (shape.reuse ? 1 : 0) - (shape.frozen_block ? 1 : 0) + (shape.nested ? 1 : 0))
            << label;
        // Recomputed against kept activations: the same kernels on other buffers, so within the float64
        // path-parity bound, not bit-exact (docs/development.md).
        EXPECT_TRUE(
            within(recomputed.parameters, stored.parameters, kFloat64PathParity, label + " recomputed"));
        EXPECT_TRUE(
            within(recomputed.losses, stored.losses, kFloat64PathParity, label + " recomputed losses"));
      }
    }
  }
}

/// fsdp_offload_params on a CPU run is accepted as a no-op (the shards and the optimizer step already live in
/// CPU memory): the parameters and losses are bit-identical to the run without it, accelerator.state() says
/// so, and the INFO line saying why is printed once, by the main process.
TEST(Fsdp, OffloadParamsIsANoOpOnTheCpu) {
  accelerate::Accelerator outer(test_options());
  accelerate::get_logger("accelerate.fsdp", accelerate::LogLevel::info);
  const std::string line =
      "INFO accelerate.fsdp: fsdp_offload_params: the run is on the CPU, where the shards "
      "and the optimizer step already live; there is nothing to offload";
  RunSettings run;
  run.shape = Shape{true, true, true, true};
  run.accumulation = 2;
  run.clip = 0.5;
  run.no_sync_first = true;
  for (const auto& sharding : kSharded) {
    Strategy strategy = sharding;
    const auto plain = train(strategy, run);
    strategy.offload = true;
    testing::internal::CaptureStderr();
    const auto offloaded = train(strategy, run);
    const std::string log = testing::internal::GetCapturedStderr();
    int64_t printed = 0;
    for (auto at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) {
      ++printed;
    }
    EXPECT_EQ(printed, outer.is_main_process() ? 1 : 0) << sharding.name << ": " << log;
    EXPECT_EQ(sum_over_processes(outer, printed), 1) << sharding.name;
    EXPECT_EQ(plain.state.find("offload params"), std::string::npos) << plain.state;
    EXPECT_NE(offloaded.state.find("offload params: on (a no-op on the CPU)"), std::string::npos)
        << offloaded.state;
    // Exact: on the CPU the option changes no code the arithmetic runs (the same kernels on the same buffers
    // in the same order).
    EXPECT_TRUE(torch::equal(offloaded.parameters, plain.parameters))
        << sharding.name << ": ‖Δθ‖/‖θ‖ = " << relative_difference(offloaded.parameters, plain.parameters);
    EXPECT_EQ(offloaded.losses, plain.losses) << sharding.name;
  }
}

/// The offload code paths, run on the CPU through ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1 (registered with it):
/// with fsdp_offload_params each gather copies the share into a buffer of its own first and each
/// reduce-scattered gradient is copied out of one, and with fsdp_activation_checkpointing_offload a
/// checkpointed unit keeps copies of its inputs made in forward, as on a GPU, where the copies cross to CPU
/// memory and back. The arithmetic is unchanged, so parameters and losses are those of the runs without them
/// (within the float64 path-parity bound: other buffers): both sharding strategies, tied, frozen, reused and
/// nested units, accumulation with no_sync and clipping that triggers, prefetch (which overlaps over Gloo,
/// where it is registered too). And the bad input: offloading the inputs of checkpointed units without
/// checkpointing.
TEST(Fsdp, OffloadPathsTrainAsWithoutThem) {
  ASSERT_TRUE(offload_path_on_cpu()) << "registered with ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1";
  accelerate::Accelerator outer(test_options());
  RunSettings run;
  run.shape = Shape{true, true, true, true};
  run.accumulation = 2;
  run.micro_steps = 8;
  run.clip = 0.5;
  run.no_sync_first = true;
  for (Strategy sharding :
       {Strategy{"FULL_SHARD"}, Strategy{"SHARD_GRAD_OP"}, Strategy{"FULL_SHARD", true, "BACKWARD_PRE"}}) {
    const std::string label = sharding.name + (sharding.forward_prefetch ? " with prefetch" : "");
    const auto plain = train(sharding, run);
    EXPECT_GT(plain.clipped_steps, 0) << "the clip bound never triggers: the test would not test clipping";
    Strategy offloaded = sharding;
    offloaded.offload = true;
    const auto moved = train(offloaded, run);
    EXPECT_NE(
        moved.state.find("offload params: on (shards, their gradients and the optimizer step in CPU memory)"),
        std::string::npos)
        << moved.state;
    // Shares stepped and gathered from copies of their own: other buffers, so within the float64 path-parity
    // bound (a copy scaled by 1.0001 gives about 1e-5).
    EXPECT_TRUE(within(moved.parameters, plain.parameters, kFloat64PathParity, label + " offloaded"));
    EXPECT_TRUE(within(moved.losses, plain.losses, kFloat64PathParity, label + " offloaded losses"));
    EXPECT_TRUE(within(moved.norms, plain.norms, kFloat64PathParity, label + " offloaded norms"));
    if (sharding.forward_prefetch && moved.state.find("(skipped") == std::string::npos) {
      // Over Gloo: the prefetched gathers read the share copies they started with.
      EXPECT_EQ(moved.state.find(", 0 all-gather(s) started ahead"), std::string::npos) << moved.state;
    }

    Strategy recomputing = sharding;
    recomputing.checkpointing = true;
    const auto recomputed = train(recomputing, run);
    recomputing.checkpointing_offload = true;
    recomputing.offload = true;
    const auto both = train(recomputing, run);
    EXPECT_NE(both.state.find("activation checkpointing on (its inputs offloaded to CPU memory)"),
              std::string::npos)
        << both.state;
    EXPECT_EQ(both.recomputed_units, recomputed.recomputed_units) << label;
    EXPECT_GT(both.recomputed_units, 0) << label;
    EXPECT_TRUE(within(both.parameters, recomputed.parameters, kFloat64PathParity,
                       label + " inputs offloaded, against recomputed"));
    EXPECT_TRUE(within(both.parameters, plain.parameters, kFloat64PathParity, label + " inputs offloaded"));
    EXPECT_TRUE(within(both.losses, plain.losses, kFloat64PathParity, label + " inputs offloaded losses"));
  }
  try {
    Strategy alone{"FULL_SHARD"};
    alone.checkpointing_offload = true;
    accelerate::Accelerator accelerator(alone.apply(test_options()));
    FAIL() << "fsdp_activation_checkpointing_offload without fsdp_activation_checkpointing was accepted";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("fsdp_activation_checkpointing_offload='true' (from AcceleratorOptions) conflicts "
                           "with fsdp_activation_checkpointing='false' (from AcceleratorOptions)"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("set fsdp_activation_checkpointing true as well"), std::string::npos) << message;
  }
  outer.wait_for_everyone();
}

/// Prefetch changes when gathers start, never what they gather: forward prefetch and each backward policy,
/// both sharding strategies, tied, frozen, reused and nested units, accumulation with no_sync and clipping,
/// equal to the same strategy without prefetch (within the float64 path-parity bound) and near DDP; and the
/// all-gathers did start ahead. Registered over c10d's Gloo, where they overlap (the shared-memory transport
/// skips prefetch, and says so).
TEST(Fsdp, PrefetchGathersTheSameParameters) {
  accelerate::Accelerator outer(test_options());
  RunSettings run;
  run.shape = Shape{true, true, true, true};
  run.accumulation = 3;
  run.clip = 0.5;
  run.no_sync_first = true;
  const auto ddp = train(kDdp, run);
  for (const auto& sharding : kSharded) {
    const auto plain = train(Strategy{sharding.name, false, "NO_PREFETCH"}, run);
    for (const auto& [forward, backward] : std::vector<std::pair<bool, std::string>>{{true, "BACKWARD_PRE"},
                                                                                     {true, "BACKWARD_POST"},
                                                                                     {false, "BACKWARD_PRE"},
                                                                                     {true, "NO_PREFETCH"}}) {
      Strategy strategy{sharding.name, forward, backward};
      const std::string label =
          sharding.name + " forward prefetch " + (forward ? "on" : "off") + ", backward " + backward;
      const auto fsdp = train(strategy, run);
      expect_near_ddp(fsdp, ddp, label);
      // The same collectives on the same data, started earlier, into other buffers: within the float64
      // path-parity bound of the run without prefetch (a gather of the wrong unit is off by far more).
      EXPECT_TRUE(
          within(fsdp.parameters, plain.parameters, kFloat64PathParity, label + " against no prefetch"));
      EXPECT_TRUE(
          within(fsdp.losses, plain.losses, kFloat64PathParity, label + " losses against no prefetch"));
      const auto at = fsdp.state.find(" all-gather(s) started ahead");
      ASSERT_NE(at, std::string::npos) << label << ": " << fsdp.state;
      const auto from = fsdp.state.rfind(' ', at - 1) + 1;
      const int64_t started = std::stoll(fsdp.state.substr(from, at - from));
      // SHARD_GRAD_OP keeps units gathered from forward to backward: only the forward prefetches there.
      const bool expected = forward || (backward != "NO_PREFETCH" && sharding.name == "FULL_SHARD");
      EXPECT_EQ(started > 0, expected) << label << ": " << started << " started ahead; " << fsdp.state;
    }
  }
}

/// Debug mode: a process that skips a unit (a rank-dependent branch) is named, with the unit, at the first
/// gather it skipped, although the next unit's gather has the same shapes; nothing hangs.
TEST(Fsdp, DebugModeNamesTheProcessThatSkippedAUnit) {
  accelerate::Accelerator accelerator(Strategy{"FULL_SHARD"}.apply(test_options()));
  ASSERT_NE(accelerator.state().find("debug"), std::string::npos)
      << "registered with ACCELERATE_DEBUG_MODE=1";
  auto model = std::make_shared<Model>(Shape{}, torch::kFloat64);
  model->rank = accelerator.process_index();
  model->skip_block2_on_rank = 1;
  accelerator.prepare(model);
  auto [tokens, targets] = batch(0, accelerator.process_index(), accelerator.num_processes());
  try {
    model->forward(tokens);
    FAIL() << "the forward completed although process 1 skipped block2";
  } catch (const std::exception& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("process 1 differs from process 0"), std::string::npos) << message;
    EXPECT_NE(message.find("all-gather of fsdp unit 'block2'"), std::string::npos) << message;
    EXPECT_NE(message.find("all-gather of fsdp unit 'block3'"), std::string::npos) << message;
  }
}

/// In float32, norm-wise within 1e-6 of DDP.
TEST(Fsdp, Float32NormWiseWithinOneMillionth) {
  accelerate::Accelerator outer(test_options());
  RunSettings run;
  run.dtype = torch::kFloat32;
  run.shape = Shape{true, false, false};
  run.accumulation = 2;
  run.clip = 0.5;
  const auto ddp = train(kDdp, run);
  for (const auto& strategy : kSharded) {
    const auto fsdp = train(strategy, run);
    EXPECT_TRUE(within(fsdp.parameters, ddp.parameters, 1e-6, "float32 " + strategy.name));
  }
}

/// fp16: the scaler skips the steps DDP skips when one process's share overflows.
TEST(Fsdp, TheFp16ScalerSkipsTheStepsDdpSkips) {
  accelerate::Accelerator outer(test_options());
  auto run_fp16 = [&](const Strategy& strategy) {
    accelerate_test::set_intra_op_threads();
    accelerate::Accelerator accelerator(strategy.apply(test_options()).mixed_precision("fp16"));
    const int world = accelerator.num_processes();
    const int rank = accelerator.process_index();
    torch::manual_seed(11);
    auto model = std::make_shared<Model>(Shape{true, false, false}, torch::kFloat32);
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
    auto& engine = *accelerate::detail::internal_state(accelerator).engine;
    std::vector<int> skipped;
    for (int step = 0; step < 8; ++step) {
      optimizer.zero_grad();
      auto [tokens, targets] = batch(step, rank, world);
      accelerator.backward(
          torch::cross_entropy_loss(model->forward(tokens).reshape({-1, kVocab}), targets.reshape(-1)));
      if (rank == world - 1 && (step == 2 || step == 5)) {
        torch::NoGradGuard no_grad;
        for (const auto& parameter : model->parameters()) {
          auto share = engine.optimizer_sharding().share(parameter);
          auto gradient = share ? share->gradient : parameter.grad();
          if (gradient.defined() && gradient.numel() > 0) {
            gradient.view(-1)[0].fill_(std::numeric_limits<float>::infinity());
            break;
          }
        }
      }
      optimizer.step();
      if (optimizer.step_was_skipped()) {
        skipped.push_back(step);
      }
    }
    auto whole = accelerator.unshard(model);
    return std::make_pair(flat(*model), skipped);
  };
  const auto [ddp, ddp_skipped] = run_fp16(kDdp);
  EXPECT_EQ(ddp_skipped, (std::vector<int>{2, 5}));
  for (const auto& strategy : kSharded) {
    const auto [fsdp, fsdp_skipped] = run_fp16(strategy);
    EXPECT_EQ(fsdp_skipped, ddp_skipped) << strategy.name;
    EXPECT_LT(relative_difference(fsdp, ddp), 1e-6) << strategy.name;
  }
}

/// bf16 mixed precision (autocast compute over fp32 shards and fp32 gathers): the same arithmetic as DDP's
/// under the same recipe, so within 1e-6 norm-wise (measured: printed).
TEST(Fsdp, Bf16MixedPrecisionMatchesDdp) {
  accelerate::Accelerator outer(test_options());
  auto run_bf16 = [&](const Strategy& strategy) {
    accelerate_test::set_intra_op_threads();
    accelerate::Accelerator accelerator(strategy.apply(test_options()).mixed_precision("bf16"));
    const int world = accelerator.num_processes();
    const int rank = accelerator.process_index();
    torch::manual_seed(13);
    auto model = std::make_shared<Model>(Shape{true, false, false, true}, torch::kFloat32);
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
    for (int step = 0; step < 6; ++step) {
      auto guard = accelerator.accumulate(model);
      optimizer.zero_grad();
      auto [tokens, targets] = batch(step, rank, world);
      accelerator.backward(torch::cross_entropy_loss(
          model->forward(tokens).reshape({-1, kVocab}).to(torch::kFloat32), targets.reshape(-1)));
      optimizer.step();
    }
    auto whole = accelerator.unshard(model);
    return flat(*model);
  };
  const auto ddp = run_bf16(kDdp);
  for (const auto& strategy : kSharded) {
    EXPECT_TRUE(within(run_bf16(strategy), ddp, 1e-6, "bf16 " + strategy.name));
  }
}

// ---- What user code sees -------------------------------------------------------------------------------

/// Outside its forward a unit's parameter keeps its shape and holds no data, and touching it throws;
/// inside unshard() it holds the whole values, the same on every process; evaluation under NoGradGuard
/// gathers without a backward side and leaves nothing gathered.
TEST(Fsdp, UnitParametersHoldNoDataOutsideTheirForward) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(kSharded[0].apply(test_options()));
  torch::manual_seed(1);
  auto model = std::make_shared<Model>(Shape{}, torch::kFloat64);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
  const auto& weight = model->blocks[0]->fc1->weight;
  auto x = torch::ones({2, kWidth}, torch::kFloat64);
  EXPECT_EQ(weight.numel(), 0);
  EXPECT_THROW(torch::nn::functional::linear(x, weight), c10::Error);
  EXPECT_EQ(model->embed->weight.sizes(), (std::vector<int64_t>{kVocab, kWidth}))
      << "the root's parameters stay gathered";
  // save_model on every process: outside unshard it gathers one unit at a time onto the main process, which
  // writes the same files as inside unshard.
  const std::string root = testing::TempDir() + "/fsdp_save_model_" + std::to_string(::getppid());
  accelerator.save_model(*model, root + "/sharded");
  EXPECT_EQ(weight.numel(), 0) << "save_model left a unit gathered";
  {
    auto whole = accelerator.unshard(model);
    EXPECT_NO_THROW(accelerator.save_model(*model, root + "/whole"));
    EXPECT_EQ(weight.sizes(), (std::vector<int64_t>{kHidden, kWidth}));
    if (accelerator.is_main_process()) {
      const auto gathered = accelerate::load_safetensors(root + "/sharded/model.safetensors").tensors;
      const auto whole_files = accelerate::load_safetensors(root + "/whole/model.safetensors").tensors;
      ASSERT_EQ(gathered.size(), whole_files.size());
      // Exact here and below: the files hold copies of the same bytes (gathered, written, read back).
      for (const auto& [name, tensor] : whole_files) {
        EXPECT_TRUE(torch::equal(gathered.at(name), tensor)) << name;
      }
      EXPECT_TRUE(torch::equal(gathered.at("block0.fc1.weight"), weight.detach()));
      Model copy(Shape{}, torch::kFloat64);
      torch::serialize::InputArchive archive;
      archive.load_from(root + "/sharded/model.pt");
      copy.load(archive);
      EXPECT_TRUE(torch::equal(copy.blocks[3]->fc2->weight, model->blocks[3]->fc2->weight.detach()));
      EXPECT_TRUE(torch::equal(copy.head->weight, model->head->weight.detach()));
    }
    auto gathered = accelerator.gather(weight.detach().reshape({1, -1}));
    EXPECT_TRUE(torch::equal(gathered[0], gathered[1]));
    EXPECT_NO_THROW(torch::nn::functional::linear(x, weight));
  }
  EXPECT_EQ(weight.numel(), 0);
  {
    torch::NoGradGuard no_grad;
    auto [tokens, targets] = batch(0, accelerator.process_index(), accelerator.num_processes());
    auto logits = model->forward(tokens);
    EXPECT_FALSE(logits.requires_grad());
  }
  EXPECT_EQ(weight.numel(), 0);
  EXPECT_NE(accelerator.state().find("fsdp: FULL_SHARD"), std::string::npos) << accelerator.state();
}

// ---- Memory ------------------------------------------------------------------------------------------

/// A layer of the memory test: Linear(W, W) and tanh, one unit.
struct WideLayerImpl : torch::nn::Module {
  explicit WideLayerImpl(int64_t width) { fc = register_module("fc", torch::nn::Linear(width, width)); }
  torch::Tensor forward(const torch::Tensor& x) {
    return accelerate::fsdp::unit(*this, x, [&](const torch::Tensor& x) { return torch::tanh(fc(x)); });
  }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(WideLayer);

/// The memory bound, counted exactly: under FULL_SHARD a process's training peak is its share of the
/// replicated state (16 bytes a parameter for fp32 parameters, gradients and AdamW's two moments, over N)
/// plus two unit-sized buffers while a unit's backward runs (its gathered parameters, and its gradients: the
/// ones AccumulateGrad made, staged after the unit is released, into the memory it gave back) and the small
/// activations of a 2-row batch. A third unit-sized buffer (a staging buffer allocated while the gathered
/// parameters and the incoming gradient are alive) breaks it. Every CPU tensor is counted by a counting
/// allocator installed before the model exists (bench/counting_allocator.h); the counts are bytes asked
/// for, the same on every machine.
TEST(Fsdp, AUnitsBackwardHoldsTwoUnitSizedBuffersAtMost) {
  namespace counting = accelerate_bench::counting;
  static counting::CountingAllocator allocator(c10::GetDefaultCPUAllocator());
  c10::Allocator* previous = c10::GetCPUAllocator();
  c10::SetCPUAllocator(&allocator, std::numeric_limits<uint8_t>::max());
  accelerate_test::set_intra_op_threads();
  constexpr int64_t kWide = 384, kLayers = 4, kRows = 2;
  {
    accelerate::Accelerator accelerator(kSharded[0].apply(test_options()));
    const int64_t baseline = counting::live_bytes.load();
    torch::manual_seed(3);
    torch::nn::Sequential model;
    for (int64_t i = 0; i < kLayers; ++i) {
      model->push_back(WideLayer(kWide));
    }
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-3));
    const int world = accelerator.num_processes();
    const int64_t unit_bytes = (kWide * kWide + kWide) * 4;
    const int64_t parameters = kLayers * (kWide * kWide + kWide);
    const auto x = torch::randn({kRows, kWide});
    int64_t peak = 0;
    for (int step = 0; step < 3; ++step) {
      counting::reset_peak();
      optimizer.zero_grad();
      accelerator.backward(model->forward(x).pow(2).mean());
      optimizer.step();
      if (step > 0) { // the first step also makes the optimizer state and the shares' gradients
        peak = std::max(peak, counting::peak_bytes.load() - baseline);
      }
    }
    const int64_t shares = 16 * parameters / world;
    // The activations and the loss: 2.042 units measured in all (24.6 KB over two units; the batch's
    // tensors are 3 KB each); a quarter of a unit leaves room for kernels that keep other temporaries, and
    // a third unit-sized buffer still breaks the bound by three quarters of a unit.
    const int64_t activations = unit_bytes / 4;
    std::printf("[fsdp] training peak over the baseline: %lld bytes = replicated / %d (%lld) + %.3f units "
                "(%lld bytes each)\n",
                static_cast<long long>(peak), world, static_cast<long long>(shares),
                static_cast<double>(peak - shares) / static_cast<double>(unit_bytes),
                static_cast<long long>(unit_bytes));
    EXPECT_LE(peak, shares + 2 * unit_bytes + activations)
        << "a unit's backward holds more than its parameters and its gradients";
    EXPECT_GE(peak, shares + unit_bytes) << "the count missed the gathered unit: the test measures nothing";
  }
  c10::SetCPUAllocator(previous, std::numeric_limits<uint8_t>::max());
}

// ---- Which modules are units (fsdp_auto_wrap_policy) ---------------------------------------------------

/// Collects the warnings libtorch's TORCH_WARN raises on this thread while alive.
struct WarningCollector : c10::WarningHandler {
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;
};

/// What prepare under `wrap` (FULL_SHARD) made of a model of `shape`.
struct Wrapped {
  std::set<std::string> released; // the parameters that hold no data outside their unit's forward
  std::string state;
  std::vector<std::string> warnings;
};

Wrapped wrapped(const Wrap& wrap, const Shape& shape) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(
      Strategy{"FULL_SHARD", false, "NO_PREFETCH", wrap}.apply(test_options()));
  auto model = std::make_shared<Model>(shape, torch::kFloat64);
  Wrapped result;
  WarningCollector warnings;
  {
    c10::WarningUtils::WarningHandlerGuard guard(&warnings);
    accelerator.prepare(model);
  }
  result.warnings = warnings.messages;
  for (const auto& item : model->named_parameters()) {
    if (item.value().numel() == 0) {
      result.released.insert(item.key());
    }
  }
  result.state = accelerator.state();
  return result;
}

/// The names of the model's parameters under the modules `prefixes`.
std::set<std::string> parameters_under(const Shape& shape, const std::vector<std::string>& prefixes) {
  Model model(shape, torch::kFloat64);
  std::set<std::string> names;
  for (const auto& item : model.named_parameters()) {
    for (const auto& prefix : prefixes) {
      if (item.key().rfind(prefix + ".", 0) == 0) {
        names.insert(item.key());
      }
    }
  }
  return names;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Each policy on the 4-block model (blocks and the pair call unit(); the root, Embedding and Linear do
/// not): the modules it makes units (seen as the parameters that hold no data outside a forward), what it
/// says, and training near DDP (float64, rtol 1e-6, atol 1e-12, as the tests above).
TEST(Fsdp, AutoWrapPoliciesChooseTheUnits) {
  accelerate::Accelerator outer(test_options());
  const bool main = outer.is_main_process();
  const Shape plain{};
  const Shape nested{false, false, false, true};
  const std::vector<std::string> blocks = {"block0", "block1", "block2", "block3"};
  const auto block_parameters = parameters_under(plain, blocks);
  // NO_WRAP (the default): every module whose forward calls unit().
  for (const Wrap& wrap : {Wrap{}, Wrap{"no_wrap", "Ignored", 5}}) {
    const auto none = wrapped(wrap, nested);
    EXPECT_EQ(none.released, parameters_under(nested, {"block0", "block1", "block2", "block3", "pair"}));
    EXPECT_TRUE(contains(none.state, "fsdp_auto_wrap_policy: NO_WRAP")) << none.state;
    EXPECT_TRUE(contains(none.state, "8 unit(s)"))
        << none.state; // 4 blocks, the pair, its 2 blocks, the root
  }
  // TRANSFORMER_BASED_WRAP by the class (BlockImpl) and by its TORCH_MODULE holder (Block): only the blocks,
  // the pair's too; the pair is not listed, so its own parameters go to the root.
  for (const std::string classes : {"BlockImpl", " Block ", "Attention,Block"}) {
    if (classes == "Attention,Block") {
      // A listed class no module has: the error names it and the classes the model has.
      try {
        wrapped(Wrap{"TRANSFORMER_BASED_WRAP", classes}, plain);
        ADD_FAILURE() << "a class the model does not have was accepted";
      } catch (const std::invalid_argument& error) {
        const std::string message = error.what();
        for (const char* part :
             {"fsdp_transformer_layer_cls_to_wrap lists Attention, but no module",
              "The model's module classes are Model, EmbeddingImpl, BlockImpl, LinearImpl",
              "Could not find the transformer layer class", "SIZE_BASED_WRAP or NO_WRAP"}) {
          EXPECT_TRUE(contains(message, part)) << part << " in: " << message;
        }
      }
      continue;
    }
    const auto by_class = wrapped(Wrap{"transformer_based_wrap", classes}, nested);
    EXPECT_EQ(by_class.released,
              parameters_under(nested, {"block0", "block1", "block2", "block3", "pair.first", "pair.second"}))
        << classes;
    EXPECT_TRUE(contains(by_class.state, "fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP")) << by_class.state;
    EXPECT_TRUE(contains(by_class.state, "7 unit(s)")) << by_class.state;
    EXPECT_TRUE(by_class.warnings.empty()) << by_class.warnings.front();
  }
  // A listed libtorch class (Linear's forward cannot call unit()): its modules go to the nearest enclosing
  // module that calls unit() (each block), or the root (the head: resident); the main process says so.
  const auto linear = wrapped(Wrap{"TRANSFORMER_BASED_WRAP", "Linear"}, plain);
  EXPECT_EQ(linear.released, block_parameters);
  ASSERT_EQ(linear.warnings.size(), main ? 1u : 0u);
  if (main) {
    const std::string& warning = linear.warnings.front();
    for (const char* part :
         {"fsdp_transformer_layer_cls_to_wrap lists classes whose forward does not call "
          "accelerate::fsdp::unit",
          "'block0.fc1' (torch::nn::LinearImpl) is sharded with the enclosing unit 'block0' "
          "((anonymous namespace)::BlockImpl)",
          "'head' (torch::nn::LinearImpl) is sharded with the root's resident parameters"}) {
      EXPECT_TRUE(contains(warning, part)) << part << " in: " << warning;
    }
  }
  // SIZE_BASED_WRAP, bottom-up: a block holds 377 elements, the pair 110 of its own (864 with its blocks),
  // the model 2632. At 377 the blocks (the pair's too) are units, and the pair's 110 flow up to the root; at
  // 378 no block is, and the pair is, with its blocks; above everything only the root (resident).
  const auto sized = wrapped(Wrap{"SIZE_BASED_WRAP", "", 377}, nested);
  EXPECT_EQ(sized.released,
            parameters_under(nested, {"block0", "block1", "block2", "block3", "pair.first", "pair.second"}));
  EXPECT_EQ(wrapped(Wrap{"SIZE_BASED_WRAP", "", 378}, nested).released, parameters_under(nested, {"pair"}));
  const auto everything = wrapped(Wrap{"SIZE_BASED_WRAP", "", 100000000}, nested);
  EXPECT_TRUE(everything.released.empty());
  EXPECT_TRUE(contains(everything.state, "1 unit(s)")) << everything.state;
  // Training under each policy: near DDP.
  RunSettings run;
  run.shape = Shape{true, false, false, true};
  const auto ddp = train(kDdp, run);
  for (const auto& [label, wrap] : std::vector<std::pair<std::string, Wrap>>{
           {"TRANSFORMER_BASED_WRAP Block", {"TRANSFORMER_BASED_WRAP", "Block"}},
           {"TRANSFORMER_BASED_WRAP Linear", {"TRANSFORMER_BASED_WRAP", "Linear"}},
           {"SIZE_BASED_WRAP 377", {"SIZE_BASED_WRAP", "", 377}},
           {"SIZE_BASED_WRAP 1e8", {"SIZE_BASED_WRAP", "", 100000000}}}) {
    WarningCollector quiet; // the Linear case's warning, said above
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    expect_near_ddp(train(Strategy{"FULL_SHARD", false, "NO_PREFETCH", wrap}, run), ddp, label);
  }
}

// ---- Bad input -----------------------------------------------------------------------------------------

TEST(Fsdp, AUnitOutsideEveryPreparedModelIsRefused) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(kSharded[0].apply(test_options()));
  auto model = std::make_shared<Model>(Shape{}, torch::kFloat32);
  auto tokens = torch::zeros({2, 3}, torch::kInt64);
  try {
    model->forward(tokens); // before prepare
    FAIL() << "a unit's forward before prepare ran";
  } catch (const std::logic_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("belongs to no model prepared under parallel_strategy 'fsdp'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("accelerator.prepare"), std::string::npos) << message;
  }
  accelerator.prepare(model);
  Block stray; // a unit no prepared model holds
  EXPECT_THROW(stray(torch::zeros({2, kWidth})), std::logic_error);
  EXPECT_NO_THROW(model->forward(tokens));
  // Where no gradient can reach its parameters, such a module is a plain call: evaluation, a frozen copy.
  {
    torch::NoGradGuard no_grad;
    EXPECT_NO_THROW(stray(torch::zeros({2, kWidth})));
  }
  for (auto& parameter : stray->parameters()) {
    parameter.requires_grad_(false);
  }
  EXPECT_NO_THROW(stray(torch::zeros({2, kWidth})));
}

// ---- Checkpoints across strategies and world sizes -----------------------------------------------------

std::string checkpoints() {
  const char* directory = std::getenv("ACCEL_FSDP_CHECKPOINTS");
  return directory != nullptr ? directory : "fsdp_checkpoints";
}

/// A strategy and the form its checkpoints take.
struct Saving {
  std::string name; // "ddp", "sharded" (FULL_SHARD, SHARDED_STATE_DICT), "full" (SHARD_GRAD_OP,
                    // FULL_STATE_DICT), "hybrid" (HYBRID_SHARD, SHARDED_STATE_DICT), "offload" ("sharded"
                    // with fsdp_offload_params: its code path where the test hook
                    // ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1 is set, as for the tests below)
  accelerate::AcceleratorOptions apply(accelerate::AcceleratorOptions options) const {
    if (name == "ddp") {
      return options.parallel_strategy("ddp");
    }
    const bool sharded = name == "sharded" || name == "hybrid" || name == "offload";
    return options.parallel_strategy("fsdp")
        .fsdp_offload_params(name == "offload")
        .fsdp_sharding_strategy(name == "hybrid" ? "HYBRID_SHARD"
                                : sharded        ? "FULL_SHARD"
                                                 : "SHARD_GRAD_OP")
        .fsdp_state_dict_type(sharded ? "SHARDED_STATE_DICT" : "FULL_STATE_DICT");
  }
};
const std::vector<Saving> kSavings = {{"ddp"}, {"sharded"}, {"full"}, {"offload"}};

struct Trainer {
  Trainer(const Saving& saving, int seed) : accelerator(saving.apply(test_options())) {
    accelerate_test::set_intra_op_threads();
    torch::manual_seed(seed);
    model = std::make_shared<Model>(Shape{true, true, false, true}, torch::kFloat64);
    accelerator.prepare(model);
    optimizer.emplace(accelerator.prepare(
        torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1))));
  }
  void steps(int first, int last) {
    for (int step = first; step < last; ++step) {
      optimizer->zero_grad();
      auto [tokens, targets] = batch(step, accelerator.process_index(), accelerator.num_processes());
      accelerator.backward(
          torch::cross_entropy_loss(model->forward(tokens).reshape({-1, kVocab}), targets.reshape(-1)));
      optimizer->step();
    }
  }
  torch::Tensor parameters() {
    auto whole = accelerator.unshard(model);
    return flat(*model);
  }
  accelerate::Accelerator accelerator;
  std::shared_ptr<Model> model;
  std::optional<accelerate::Optimizer> optimizer;
};

std::string checkpoint_of(const std::string& saving) {
  return accelerate::detail::join_path(checkpoints(), saving);
}
std::string final_parameters_of(const std::string& saving) {
  return accelerate::detail::join_path(checkpoints(), saving + ".final.pt");
}

/// Loads each saved checkpoint under each strategy at this world size, trains 5 more steps and compares with
/// the uninterrupted 2-process run that saved it: bit-identical when strategy and world size are both kept,
/// else within 1e-10 norm-wise (float64: the sums differ only in order).
void resume_everywhere(int saved_world) {
  for (const auto& saved : kSavings) {
    torch::Tensor expected;
    torch::load(expected, final_parameters_of(saved.name));
    for (const auto& saving : kSavings) {
      Trainer trainer(saving, /*seed=*/99); // other weights: the checkpoint must replace them
      trainer.accelerator.load_state(checkpoint_of(saved.name));
      trainer.steps(5, 10);
      const auto actual = trainer.parameters();
      const double difference = relative_difference(actual, expected);
      if (saving.name == saved.name && trainer.accelerator.num_processes() == saved_world) {
        // Exact: the resumed run repeats the saving run's steps 5-9 with its strategy, world size and
        // threads (the same kernels on the same buffers in the same order).
        EXPECT_TRUE(torch::equal(actual, expected))
            << "saved and resumed under " << saved.name << ": " << difference;
      } else {
        EXPECT_LE(difference, 1e-10) << "saved under " << saved.name << " on " << saved_world
                                     << " processes, resumed under " << saving.name << " on "
                                     << trainer.accelerator.num_processes();
      }
      accelerate_test::report_spread("saved " + saved.name + " resumed " + saving.name + " on " +
                                         std::to_string(trainer.accelerator.num_processes()),
                                     difference, 1e-10);
    }
  }
}

/// fsdp_offload_params on one process, as PyTorch FSDP on one GPU: each unit sharded into one share, kept
/// with its gradient and the optimizer step in CPU memory (here, on the CPU, through the offload code paths
/// of ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1, which the test is registered with), over a group of this process
/// alone. It trains as the run without it (one process: the model replicated, nothing sharded; within the
/// float64 path-parity bound),
/// accumulation (its first micro-steps in no_sync) and clipping included, and so does activation
/// checkpointing alone (units recompute on one process too); a checkpoint saved under offload resumes bit for
/// bit under it, and within 1e-10 without it (float64).
TEST(FsdpCheckpoints, OffloadOnOneProcessShardsIntoOneShare) {
  ASSERT_TRUE(offload_path_on_cpu()) << "registered with ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1";
  accelerate::Accelerator outer(test_options());
  ASSERT_EQ(outer.num_processes(), 1);
  RunSettings run;
  run.shape = Shape{true, true, true, true};
  run.accumulation = 2;
  run.micro_steps = 8;
  run.clip = 0.5;
  run.no_sync_first = true;
  for (const auto& sharding : kSharded) {
    Strategy strategy = sharding;
    const auto plain = train(strategy, run);
    EXPECT_NE(plain.state.find("one process: nothing to shard"), std::string::npos) << plain.state;
    EXPECT_GT(plain.clipped_steps, 0) << "the clip bound never triggers: the test would not test clipping";
    strategy.offload = true;
    strategy.checkpointing = true;
    strategy.checkpointing_offload = true;
    const auto offloaded = train(strategy, run);
    EXPECT_NE(offloaded.state.find("one process: each of 7 unit(s) one share (for fsdp_offload_params)"),
              std::string::npos)
        << offloaded.state;
    EXPECT_NE(
        offloaded.state.find("offload params: on (shards, their gradients and the optimizer step in CPU "
                             "memory)"),
        std::string::npos)
        << offloaded.state;
    EXPECT_GT(offloaded.recomputed_units, 0) << sharding.name;
    // One share of a flat buffer, gathered from a copy and stepped in it, against the model's own separate
    // tensors: other buffers and another norm's reduction, so within the float64 path-parity bound (issue 46:
    // bit-equal on the Intel machine it was written on, 5.5e-17 apart on an AMD EPYC).
    EXPECT_TRUE(
        within(offloaded.parameters, plain.parameters, kFloat64PathParity, sharding.name + " offloaded"));
    EXPECT_TRUE(
        within(offloaded.losses, plain.losses, kFloat64PathParity, sharding.name + " offloaded losses"));
    EXPECT_TRUE(within(offloaded.norms, plain.norms, kFloat64PathParity, sharding.name + " offloaded norms"));
    EXPECT_EQ(offloaded.state_elements, plain.trainable)
        << sharding.name << ": one share holds all the state";
    // Activation checkpointing alone on one process: each unit one share too, and its units recompute.
    Strategy recomputing = sharding;
    recomputing.checkpointing = true;
    const auto recomputed = train(recomputing, run);
    EXPECT_NE(
        recomputed.state.find("one process: each of 7 unit(s) one share (for activation checkpointing)"),
        std::string::npos)
        << recomputed.state;
    EXPECT_EQ(recomputed.recomputed_units, offloaded.recomputed_units) << sharding.name;
    EXPECT_TRUE(
        within(recomputed.parameters, plain.parameters, kFloat64PathParity, sharding.name + " recomputed"));
    EXPECT_TRUE(
        within(recomputed.losses, plain.losses, kFloat64PathParity, sharding.name + " recomputed losses"));
  }
  const std::string directory = accelerate::detail::join_path(checkpoints(), "offload_one_process");
  accelerate::detail::remove_tree(directory);
  accelerate::detail::make_directories(checkpoints());
  const Saving offloading{"offload"};
  torch::Tensor expected;
  {
    Trainer trainer(offloading, /*seed=*/5);
    trainer.steps(0, 5);
    trainer.accelerator.save_state(directory);
    trainer.steps(5, 10);
    expected = trainer.parameters();
  }
  EXPECT_TRUE(accelerate::detail::path_exists(
      accelerate::detail::join_path(directory, "model_shards_0.safetensors")));
  for (const auto& resuming : {offloading, Saving{"sharded"}, Saving{"ddp"}}) {
    Trainer trainer(resuming, /*seed=*/99); // other weights: the checkpoint must replace them
    trainer.accelerator.load_state(directory);
    trainer.steps(5, 10);
    const auto actual = trainer.parameters();
    if (resuming.name == "offload") {
      // Exact: the saving run's steps 5-9 again, on the same code path.
      EXPECT_TRUE(torch::equal(actual, expected)) << relative_difference(actual, expected);
    } else {
      EXPECT_TRUE(within(actual, expected, 1e-10, "saved under offload, resumed under " + resuming.name));
    }
  }
}

/// A unit given an undefined tensor among its inputs (an optional mask left out): checkpointed, with its
/// inputs offloaded (the code path, through the hook), it keeps the undefined input as it is and recomputes;
/// the gradients equal those of the run without checkpointing, on one process (each unit one share).
struct MaskedImpl : torch::nn::Module {
  MaskedImpl() { fc = register_module("fc", torch::nn::Linear(kWidth, kWidth)); }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    return accelerate::fsdp::unit(*this, x, mask, [&](const torch::Tensor& x, const torch::Tensor& mask) {
      auto y = torch::tanh(fc(x));
      return mask.defined() ? y * mask : y;
    });
  }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Masked);

struct MaskedModel : torch::nn::Module {
  MaskedModel() {
    first = register_module("first", Masked());
    second = register_module("second", Masked());
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return second(first(x, torch::Tensor()), torch::ones_like(x));
  }
  Masked first{nullptr}, second{nullptr};
};

TEST(FsdpCheckpoints, ACheckpointedUnitKeepsAnUndefinedInput) {
  ASSERT_TRUE(offload_path_on_cpu()) << "registered with ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1";
  accelerate_test::set_intra_op_threads();
  std::vector<torch::Tensor> results;
  for (const bool checkpointing : {false, true}) {
    accelerate::Accelerator accelerator(test_options()
                                            .parallel_strategy("fsdp")
                                            .fsdp_activation_checkpointing(checkpointing)
                                            .fsdp_activation_checkpointing_offload(checkpointing));
    torch::manual_seed(3);
    auto model = std::make_shared<MaskedModel>();
    model->to(torch::kFloat64);
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
    const auto x = torch::randn({4, kWidth}, torch::kFloat64);
    for (int step = 0; step < 3; ++step) {
      optimizer.zero_grad();
      auto loss = model->forward(x).pow(2).mean();
      if (step == 0) {
        EXPECT_EQ(count_nodes(loss, "accelerate::CheckpointBackward"), checkpointing ? 2 : 0);
      }
      accelerator.backward(loss);
      optimizer.step();
    }
    auto whole = accelerator.unshard(model);
    results.push_back(flat(*model));
  }
  EXPECT_TRUE(within(results[1], results[0], kFloat64PathParity, "undefined input, recomputed"));
}

TEST(FsdpCheckpoints, SavedOnTwoProcesses) {
  accelerate::Accelerator outer(test_options());
  ASSERT_EQ(outer.num_processes(), 2);
  if (outer.is_main_process()) {
    accelerate::detail::remove_tree(checkpoints());
    accelerate::detail::make_directories(checkpoints());
  }
  outer.wait_for_everyone();
  for (const auto& saving : kSavings) {
    Trainer trainer(saving, /*seed=*/5);
    trainer.steps(0, 5);
    trainer.accelerator.save_state(checkpoint_of(saving.name));
    trainer.steps(5, 10);
    const auto parameters = trainer.parameters();
    if (trainer.accelerator.is_main_process()) {
      torch::save(parameters, final_parameters_of(saving.name));
    }
    trainer.accelerator.wait_for_everyone();
  }
  // SHARDED_STATE_DICT: one file of model pieces per process; FULL_STATE_DICT and DDP: one whole model.
  for (const auto& [saving, sharded] :
       {std::pair{"ddp", false}, {"sharded", true}, {"full", false}, {"offload", true}}) {
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(accelerate::detail::path_exists(accelerate::detail::join_path(
                    checkpoint_of(saving), "model_shards_" + std::to_string(rank) + ".safetensors")),
                sharded)
          << saving;
    }
    EXPECT_EQ(accelerate::detail::path_exists(
                  accelerate::detail::join_path(checkpoint_of(saving), "model.safetensors")),
              !sharded)
        << saving;
  }
  resume_everywhere(2);
}

TEST(FsdpCheckpoints, LoadedOnOneProcess) {
  accelerate::Accelerator outer(test_options());
  resume_everywhere(2);
  // Bad input: a process's file of model pieces missing. The program keeps what it had.
  const std::string broken = accelerate::detail::join_path(checkpoints(), "broken");
  accelerate::detail::remove_tree(broken);
  accelerate::detail::make_directories(broken);
  for (const auto& name : accelerate::detail::list_directory(checkpoint_of("sharded"))) {
    const auto bytes =
        accelerate::detail::read_whole_file(accelerate::detail::join_path(checkpoint_of("sharded"), name));
    accelerate::detail::write_file_durably(accelerate::detail::join_path(broken, name), bytes);
  }
  std::remove(accelerate::detail::join_path(broken, "model_shards_1.safetensors").c_str());
  Trainer trainer(Saving{"sharded"}, /*seed=*/99);
  const auto before = trainer.parameters();
  try {
    trainer.accelerator.load_state(broken);
    FAIL() << "a checkpoint missing a process's model file was loaded";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("model_shards_1.safetensors"), std::string::npos)
        << error.what();
  }
  // Exact: a failed load must leave the very bytes it found.
  EXPECT_TRUE(torch::equal(trainer.parameters(), before)) << "a failed load changed the model";
  accelerate::detail::remove_tree(broken);
}

TEST(FsdpCheckpoints, LoadedOnThreeProcesses) {
  accelerate::Accelerator outer(test_options());
  ASSERT_EQ(outer.num_processes(), 3);
  resume_everywhere(2);
}

/// A sharded checkpoint under hybrid sharding, 2 machines x 2 processes: the first machine's processes write
/// the shares, so each element is in the checkpoint once (a loader assembling the pieces refuses elements
/// written twice), and it resumes bit-identically under hybrid sharding and within 1e-10 norm-wise under
/// FULL_SHARD and DDP on the same 4 processes.
TEST(FsdpCheckpoints, HybridShardsAreWrittenOnce) {
  accelerate::Accelerator outer(test_options());
  ASSERT_EQ(outer.num_processes(), 4);
  const std::string directory = accelerate::detail::join_path(checkpoints(), "hybrid");
  if (outer.is_main_process()) {
    accelerate::detail::remove_tree(directory);
    accelerate::detail::make_directories(checkpoints());
  }
  outer.wait_for_everyone();
  torch::Tensor expected;
  {
    Trainer trainer(Saving{"hybrid"}, /*seed=*/5);
    trainer.steps(0, 5);
    trainer.accelerator.save_state(directory);
    trainer.steps(5, 10);
    expected = trainer.parameters();
  }
  for (int rank = 0; rank < 4; ++rank) {
    const auto file =
        accelerate::detail::join_path(directory, "model_shards_" + std::to_string(rank) + ".safetensors");
    ASSERT_TRUE(accelerate::detail::path_exists(file)) << file;
    const auto bytes = accelerate::detail::read_whole_file(file);
    // The first machine's files hold the blocks' pieces; the second machine's hold none.
    EXPECT_EQ(bytes.find("block0.") != std::string::npos, rank < 2) << file;
  }
  for (const auto& saving : {Saving{"hybrid"}, Saving{"sharded"}, Saving{"ddp"}}) {
    Trainer trainer(saving, /*seed=*/99);
    trainer.accelerator.load_state(directory);
    trainer.steps(5, 10);
    const auto actual = trainer.parameters();
    const double difference = relative_difference(actual, expected);
    if (saving.name == "hybrid") {
      // Exact: the saving run's steps 5-9 again, same strategy, processes and threads.
      EXPECT_TRUE(torch::equal(actual, expected))
          << "saved and resumed under hybrid sharding: " << difference;
    } else {
      EXPECT_LE(difference, 1e-10) << "saved under hybrid sharding, resumed under " << saving.name;
    }
    accelerate_test::report_spread("saved hybrid resumed " + saving.name + " on 4", difference, 1e-10);
  }
}

} // namespace
