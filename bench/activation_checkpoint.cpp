// Activation memory and step time with and without activation checkpointing by hand (accelerate::checkpoint
// around each transformer block), side by side in one run, on one process.
//
//   build/bin/bench_activation_checkpoint [--steps N] [--warmup K] [--batch B] [--layers L] [--dim D]
//                                         [--context T]
//
// The workload is bench's gpt-small (bench/workloads.h: vocab 256, dim 128, 4 heads, 2 blocks, context 64,
// batch 8) unless the flags change it, trained with AdamW on a fixed random batch of tokens, one intra-op
// thread. The two models are the same Gpt with the same weights; the checkpointed one runs each block through
// `accelerate::checkpoint`, so a block keeps only its input and computes its body again in backward.
// Every CPU tensor is counted (a counting allocator around libtorch's, bench/counting_allocator.h):
//   - activation memory: the peak live bytes of forward + backward minus the live bytes just before forward
//     (the weights, the gradients and the optimizer state exist then: every timed step starts after a first
//     step made them), the largest over the timed steps;
//   - step time: the median of the timed steps (zero_grad, forward, backward, step).
// Prints a table and one `ACTIVATION_CHECKPOINT_RESULT {json}` line with both runs and the ratios.
#include "arguments.h"
#include "counting_allocator.h"
#include "workloads.h"

#include <accelerate/accelerate.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <vector>

namespace {

using accelerate::bench::BlockImpl;
using accelerate::bench::Gpt;
using accelerate::bench::GptConfig;
namespace counting = accelerate_bench::counting;

/// The Gpt's forward, each block through accelerate::checkpoint when `checkpointed`.
torch::Tensor forward(Gpt& gpt, const torch::Tensor& tokens, bool checkpointed) {
  auto positions = torch::arange(tokens.size(1), tokens.options());
  auto x = gpt->token->forward(tokens) + gpt->position->forward(positions);
  for (const auto& child : gpt->blocks->children()) {
    auto* block = child->as<BlockImpl>();
    x = checkpointed
            ? accelerate::checkpoint(*block, x, [block](torch::Tensor x) { return block->forward(x); })
            : block->forward(x);
  }
  return gpt->head->forward(gpt->ln->forward(x));
}

struct Result {
  int64_t activation_bytes = 0;
  double step_seconds = 0;
};

Result measure(const GptConfig& config, bool checkpointed, int warmup, int steps) {
  torch::manual_seed(0);
  Gpt gpt(config);
  torch::optim::AdamW optimizer(gpt->parameters(), torch::optim::AdamWOptions(1e-3));
  auto tokens = torch::randint(config.vocab, {config.batch, config.context}, torch::kLong);
  auto targets = torch::randint(config.vocab, {config.batch, config.context}, torch::kLong);
  Result result;
  std::vector<double> times;
  for (int step = 0; step < warmup + steps; ++step) {
    optimizer.zero_grad(/*set_to_none=*/false);
    const int64_t before = counting::live_bytes.load();
    counting::reset_peak();
    const auto start = std::chrono::steady_clock::now();
    auto logits = forward(gpt, tokens, checkpointed);
    auto loss = torch::cross_entropy_loss(logits.view({-1, config.vocab}), targets.view({-1}));
    loss.backward();
    const int64_t peak = counting::peak_bytes.load();
    optimizer.step();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step >= warmup) {
      result.activation_bytes = std::max(result.activation_bytes, peak - before);
      times.push_back(seconds);
    }
  }
  std::sort(times.begin(), times.end());
  result.step_seconds = times[times.size() / 2];
  return result;
}

int run(int argc, char** argv) {
  static counting::CountingAllocator allocator(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&allocator, std::numeric_limits<uint8_t>::max());
  torch::set_num_threads(1);
  GptConfig config = GptConfig::small();
  int steps = 20, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    if (const char* v = accelerate_bench::option_value(argc, argv, i, "--steps")) {
      steps = std::atoi(v);
    } else if (const char* v = accelerate_bench::option_value(argc, argv, i, "--warmup")) {
      warmup = std::atoi(v);
    } else if (const char* v = accelerate_bench::option_value(argc, argv, i, "--batch")) {
      config.batch = std::atoll(v);
    } else if (const char* v = accelerate_bench::option_value(argc, argv, i, "--layers")) {
      config.layers = std::atoll(v);
    } else if (const char* v = accelerate_bench::option_value(argc, argv, i, "--dim")) {
      config.dim = std::atoll(v);
    } else if (const char* v = accelerate_bench::option_value(argc, argv, i, "--context")) {
      config.context = std::atoll(v);
    } else {
      std::fprintf(stderr, "bench_activation_checkpoint: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (steps < 1) {
    std::fprintf(stderr, "bench_activation_checkpoint: --steps must be at least 1\n");
    return 2;
  }
  // Alternated, so that neither run gets a warmer machine.
  const Result plain = measure(config, false, warmup, steps);
  const Result checkpointed = measure(config, true, warmup, steps);
  const double memory_ratio =
      static_cast<double>(checkpointed.activation_bytes) / static_cast<double>(plain.activation_bytes);
  const double time_ratio = checkpointed.step_seconds / plain.step_seconds;
  std::printf("gpt: dim %lld, %lld blocks, context %lld, batch %lld; %d timed steps, one thread\n",
              static_cast<long long>(config.dim), static_cast<long long>(config.layers),
              static_cast<long long>(config.context), static_cast<long long>(config.batch), steps);
  std::printf("%-14s %18s %14s\n", "run", "activation MiB", "step ms");
  std::printf("%-14s %18.2f %14.2f\n", "plain", plain.activation_bytes / 1048576.0, plain.step_seconds * 1e3);
  std::printf("%-14s %18.2f %14.2f\n", "checkpointed", checkpointed.activation_bytes / 1048576.0,
              checkpointed.step_seconds * 1e3);
  std::printf("%-14s %17.2fx %13.2fx\n", "ratio", memory_ratio, time_ratio);
  std::printf(
      "ACTIVATION_CHECKPOINT_RESULT {\"plain\": {\"activation_bytes\": %lld, \"step_seconds\": %.6f}, "
      "\"checkpointed\": {\"activation_bytes\": %lld, \"step_seconds\": %.6f}, \"memory_ratio\": %.4f, "
      "\"time_ratio\": %.4f}\n",
      static_cast<long long>(plain.activation_bytes), plain.step_seconds,
      static_cast<long long>(checkpointed.activation_bytes), checkpointed.step_seconds, memory_ratio,
      time_ratio);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return accelerate_bench::run_saying_failure("bench_activation_checkpoint", run, argc, argv);
}
