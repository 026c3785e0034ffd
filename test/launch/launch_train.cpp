// A tiny data-parallel training run for the launcher tests: the same program under accel launch, torchrun,
// mpirun and Accelerate's launcher must end with bit-identical parameters, which rank 0 prints.
//
//   launch_train [--steps N] [--step-sleep MS] [--crash RANK STEP] [--pause RANK STEP SECONDS]
//                [--prepare-optimizer] [--accumulate] [--save-state DIR] [--save-model DIR]
//                [--max-shard-size SIZE]
//
// Preconditions for bit-identical results (shared/DESIGN.md §5): float64, mean-reduced loss, equal per-rank
// batches (rank r takes slice r of the global batch), no dropout, one intra-op thread.
// Every rank prints `train pid=<pid> rank=<r> world=<n> restart=<TORCHELASTIC_RESTART_COUNT>` first;
// rank 0 ends with `params fnv=<hash of every parameter's bytes> sum=<sum, %.17g>`, then
// `values <every parameter element, %.17g, comma-separated>` (for comparisons across strategies, which are
// not bit for bit).
// --crash RANK STEP makes RANK exit 3 at STEP on the first attempt only (TORCHELASTIC_RESTART_COUNT unset
// or 0), for --max_restarts tests; --step-sleep leaves time to kill a rank mid-run; --pause makes RANK sleep
// SECONDS before STEP, alive (its heartbeat goes on) while the others wait in the step's collective: long
// work on one process, or, longer than the collective timeout, a process that never arrives.
// --accumulate (with --prepare-optimizer) runs each step inside `accelerator.accumulate(model)`, so that
// gradient_accumulation_steps and gradient_clipping apply, and rank 0 prints `loss <step> <its loss, %.17g>`
// for each step and the state's gradient_accumulation_steps, gradient_clipping and mixed_precision lines.
// After training, --save-state DIR runs accelerator.save_state(DIR) and --save-model DIR
// accelerator.save_model(model, DIR) with SaveModelOptions().max_shard_size(SIZE) (--max-shard-size), on
// every process (for `accel merge-weights`' test).
#include <accelerate/accelerate.h>

#include "../support/parameter_hash.h"

#include <torch/torch.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>

namespace {

struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

constexpr int64_t kGlobalBatch = 8;

struct Options {
  int steps = 20;
  int stepSleepMs = 0;
  int crashRank = -1;
  int crashStep = -1;
  bool prepareOptimizer = false; // the fused step (what ZeRO needs), printing the parallel strategy
  bool accumulate = false;
  int pauseRank = -1;
  int pauseStep = -1;
  double pauseSeconds = 0;
  std::string saveState;
  std::string saveModel;
  std::string maxShardSize = "10GB";
};

Options parseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc)
      options.steps = std::atoi(argv[++i]);
    else if (arg == "--step-sleep" && i + 1 < argc)
      options.stepSleepMs = std::atoi(argv[++i]);
    else if (arg == "--prepare-optimizer")
      options.prepareOptimizer = true;
    else if (arg == "--accumulate")
      options.accumulate = options.prepareOptimizer = true;
    else if (arg == "--crash" && i + 2 < argc) {
      options.crashRank = std::atoi(argv[++i]);
      options.crashStep = std::atoi(argv[++i]);
    } else if (arg == "--save-state" && i + 1 < argc) {
      options.saveState = argv[++i];
    } else if (arg == "--save-model" && i + 1 < argc) {
      options.saveModel = argv[++i];
    } else if (arg == "--max-shard-size" && i + 1 < argc) {
      options.maxShardSize = argv[++i];
    } else if (arg == "--pause" && i + 3 < argc) {
      options.pauseRank = std::atoi(argv[++i]);
      options.pauseStep = std::atoi(argv[++i]);
      options.pauseSeconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "launch_train: unknown argument '%s'\n", arg.c_str());
      std::exit(2);
    }
  }
  return options;
}

int restartCount() {
  const char* value = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return value ? std::atoi(value) : 0;
}

} // namespace

int main(int argc, char** argv) {
  Options options = parseOptions(argc, argv);
  at::set_num_threads(1);
  // 20 s unless the launcher sets the collective timeout (accel launch --timeout, ACCEL_TIMEOUT).
  accelerate::AcceleratorOptions acceleratorOptions = accelerate::AcceleratorOptions().cpu(true);
  if (std::getenv("ACCEL_TIMEOUT") == nullptr)
    acceleratorOptions.init_timeout(std::chrono::seconds(20));
  accelerate::Accelerator accelerator(acceleratorOptions);
  const int rank = accelerator.process_index();
  const int world = accelerator.num_processes();
  std::printf("train pid=%d rank=%d world=%d restart=%d\n", static_cast<int>(::getpid()), rank, world,
              restartCount());
  std::fflush(stdout);

  torch::manual_seed(7 + static_cast<uint64_t>(rank)); // different on each rank: prepare broadcasts rank 0's
  auto model = std::make_shared<Mlp>();
  model->to(torch::kFloat64);
  accelerator.prepare(model);
  torch::optim::SGD plain(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  std::optional<accelerate::Optimizer> prepared;
  if (options.prepareOptimizer) {
    prepared = accelerator.prepare(
        torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)));
    if (rank == 0) {
      std::istringstream state(accelerator.state());
      for (std::string line; std::getline(state, line);) {
        const bool accumulation = line.rfind("gradient_accumulation_steps:", 0) == 0 ||
                                  line.rfind("gradient_clipping:", 0) == 0 ||
                                  line.rfind("mixed_precision:", 0) == 0;
        if (line.rfind("parallel_strategy:", 0) == 0 || line.rfind("zero:", 0) == 0 ||
            line.rfind("fsdp:", 0) == 0 || (options.accumulate && accumulation)) {
          std::printf("%s\n", line.c_str());
        }
      }
    }
  }

  const int64_t perRank = kGlobalBatch / world;
  for (int step = 0; step < options.steps; ++step) {
    if (rank == options.crashRank && step == options.crashStep && restartCount() == 0) {
      std::fprintf(stderr, "launch_train: rank %d crashing at step %d as asked\n", rank, step);
      std::fflush(stderr);
      std::_Exit(3); // at once, as a crash does: no destructors closing the process group politely first
    }
    if (rank == options.pauseRank && step == options.pauseStep) {
      std::printf("launch_train: rank %d pausing %g s before step %d\n", rank, options.pauseSeconds, step);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(options.pauseSeconds));
    }
    auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
    auto x = at::randn({kGlobalBatch, 8}, generator, torch::kFloat64).narrow(0, rank * perRank, perRank);
    auto y = at::randn({kGlobalBatch, 1}, generator, torch::kFloat64).narrow(0, rank * perRank, perRank);
    std::optional<accelerate::Accelerator::AccumulateGuard> accumulating;
    if (options.accumulate)
      accumulating.emplace(accelerator.accumulate(model));
    if (prepared) {
      prepared->zero_grad();
    } else {
      plain.zero_grad();
    }
    const torch::Tensor loss = torch::mse_loss(model->forward(x), y);
    accelerator.backward(loss);
    if (options.accumulate && rank == 0)
      std::printf("loss %d %.17g\n", step, loss.item<double>());
    if (prepared) {
      prepared->step();
    } else {
      plain.step();
    }
    if (options.stepSleepMs > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(options.stepSleepMs));
  }
  accelerator.wait_for_everyone();
  if (!options.saveState.empty())
    accelerator.save_state(options.saveState);
  if (!options.saveModel.empty())
    accelerator.save_model(*model, options.saveModel,
                           accelerate::SaveModelOptions().max_shard_size(options.maxShardSize));
  if (accelerator.is_main_process()) {
    double sum = 0;
    for (const torch::Tensor& parameter : model->parameters())
      sum += parameter.sum().item<double>();
    std::printf("params fnv=%016" PRIx64 " sum=%.17g\n", accelerate_test::parameter_hash(model->parameters()),
                sum);
    std::string values;
    for (const torch::Tensor& parameter : model->parameters()) {
      const auto flat = parameter.detach().reshape(-1).to(torch::kFloat64).contiguous();
      const double* data = flat.data_ptr<double>();
      for (int64_t i = 0; i < flat.numel(); ++i) {
        char number[32];
        std::snprintf(number, sizeof number, "%s%.17g", values.empty() ? "" : ",", data[i]);
        values += number;
      }
    }
    std::printf("values %s\n", values.c_str());
    std::fflush(stdout);
  }
  return 0;
}
