// Step time of the runtime against the same hand-written libtorch loop, 1 process, side by side.
//
//   bench_step_time [--workload mlp-mnist|gpt-small|all] [--steps N] [--reps R] [--warmup W]
//
// Each repetition runs W warm-up and N timed steps of (a) the plain loop (torch::optim::AdamW,
// loss.backward()) and then of (b) the same loop through the runtime (prepare, prepared AdamW with ATen's
// fused kernel, accelerator.backward), alternating, from the same initial weights and data. Prints the median
// step time of each and the ratio a/b (> 1: the runtime is faster).
#include "workloads.h"

#include <accelerate/accelerate.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>

namespace {

using Clock = std::chrono::steady_clock;
using accelerate::bench::GptConfig;

struct Batch {
  torch::Tensor input, target;
};

struct Workload {
  std::string name;
  std::function<std::shared_ptr<torch::nn::Module>()> make_model;
  std::function<torch::Tensor(torch::nn::Module&, const Batch&)> loss;
  std::function<Batch(int step)> batch;
};

Workload mlp_mnist() {
  torch::manual_seed(1);
  auto teacher = torch::nn::Linear(784, 10);
  return {"mlp-mnist",
          [] {
            torch::manual_seed(0);
            return accelerate::bench::Mlp().ptr();
          },
          [](torch::nn::Module& model, const Batch& b) {
            auto& mlp = static_cast<accelerate::bench::MlpImpl&>(model);
            return torch::nn::functional::cross_entropy(mlp.forward(b.input), b.target);
          },
          [teacher](int step) mutable {
            auto generator = at::make_generator<at::CPUGeneratorImpl>(step);
            auto x = at::randn({64, 784}, generator);
            torch::NoGradGuard no_grad;
            return Batch{x, teacher->forward(x).argmax(1)};
          }};
}

Workload gpt_small() {
  const auto config = GptConfig::small();
  return {"gpt-small",
          [config] {
            torch::manual_seed(0);
            return accelerate::bench::Gpt(config).ptr();
          },
          [config](torch::nn::Module& model, const Batch& b) {
            auto& gpt = static_cast<accelerate::bench::GptImpl&>(model);
            auto logits = gpt.forward(b.input);
            return torch::nn::functional::cross_entropy(logits.view({-1, config.vocab}),
                                                        b.target.reshape({-1}));
          },
          [config](int step) {
            auto generator = at::make_generator<at::CPUGeneratorImpl>(step);
            auto tokens = at::randint(config.vocab, {config.batch, config.context + 1}, generator);
            return Batch{tokens.slice(1, 0, config.context), tokens.slice(1, 1, config.context + 1)};
          }};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

/// Runs `steps` timed steps (after `warmup`) and returns the per-step times in milliseconds.
template <typename Step> std::vector<double> time_steps(int warmup, int steps, Step&& step) {
  std::vector<double> times;
  for (int i = 0; i < warmup + steps; ++i) {
    auto start = Clock::now();
    step(i);
    auto elapsed = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (i >= warmup) {
      times.push_back(elapsed);
    }
  }
  return times;
}

void run(const Workload& workload, accelerate::Accelerator& accelerator, int warmup, int steps, int reps) {
  std::vector<Batch> batches;
  for (int i = 0; i < warmup + steps; ++i) {
    batches.push_back(workload.batch(i));
  }
  std::vector<double> plain_times, runtime_times;
  double plain_loss = 0, runtime_loss = 0;
  for (int rep = 0; rep < reps; ++rep) {
    {
      auto model = workload.make_model();
      torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-4));
      auto times = time_steps(warmup, steps, [&](int i) {
        optimizer.zero_grad();
        auto loss = workload.loss(*model, batches[i]);
        loss.backward();
        optimizer.step();
        plain_loss = loss.item<double>();
      });
      plain_times.insert(plain_times.end(), times.begin(), times.end());
    }
    {
      auto model = workload.make_model();
      accelerator.prepare(model);
      auto optimizer =
          accelerator.prepare(torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(3e-4)));
      auto times = time_steps(warmup, steps, [&](int i) {
        optimizer.zero_grad();
        auto loss = workload.loss(*model, batches[i]);
        accelerator.backward(loss);
        optimizer.step();
        runtime_loss = loss.item<double>();
      });
      runtime_times.insert(runtime_times.end(), times.begin(), times.end());
      accelerator.free_memory();
    }
  }
  const double a = median(plain_times), b = median(runtime_times);
  std::cout << std::left << std::setw(12) << workload.name << std::right << std::fixed << std::setprecision(3)
            << std::setw(14) << a << std::setw(14) << b << std::setw(10) << std::setprecision(3) << a / b
            << "   (final loss " << std::setprecision(5) << plain_loss << " vs " << runtime_loss << ")\n";
}

} // namespace

int main(int argc, char** argv) {
  std::string which = "all";
  int steps = 30, reps = 5, warmup = 3;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) {
      if (i + 1 >= argc) {
        std::cerr << "bench_step_time: " << flag << " needs a value\n";
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (!std::strcmp(argv[i], "--workload")) {
      which = next("--workload");
    } else if (!std::strcmp(argv[i], "--steps")) {
      steps = std::stoi(next("--steps"));
    } else if (!std::strcmp(argv[i], "--reps")) {
      reps = std::stoi(next("--reps"));
    } else if (!std::strcmp(argv[i], "--warmup")) {
      warmup = std::stoi(next("--warmup"));
    } else {
      std::cerr << "bench_step_time: unknown argument '" << argv[i]
                << "' (use --workload mlp-mnist|gpt-small|all, --steps N, --reps R, --warmup W)\n";
      return 2;
    }
  }
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  std::cout << "threads: " << at::get_num_threads() << " intra-op, 1 process; " << reps
            << " alternated reps x " << steps << " steps (+" << warmup << " warm-up); medians in ms\n"
            << std::left << std::setw(12) << "workload" << std::right << std::setw(14) << "(a) plain"
            << std::setw(14) << "(b) runtime" << std::setw(10) << "a/b" << "\n";
  if (which == "all" || which == "mlp-mnist") {
    run(mlp_mnist(), accelerator, warmup, steps, reps);
  }
  if (which == "all" || which == "gpt-small") {
    run(gpt_small(), accelerator, warmup, steps, reps);
  }
  return 0;
}
