// Cost of the unprepared-parameter check of `Accelerator::backward` on several processes, side by side.
//
//   accel launch --cpu --num_processes 2 build/bin/bench_backward_check [--calls N] [--reps R]
//
// Two losses of a small MLP (32-64-64-8, batch 16, fp32): `plain` (every leaf belongs to the prepared model:
// the check has nothing to look up) and `fresh-leaf` (the input requires grad, a new leaf at each step as
// WGAN-GP's interpolated inputs: the check looks it up, remembers it and forgets the previous step's). With
// the check, and with it turned off by ACCELERATE_ALLOW_UNPREPARED_PARAMETERS=1 (the reach walk that arms the
// prepared models runs in both), alternating (each first in every other repetition), R repetitions of N calls
// each; rank 0 prints medians of the mean time of one call:
//   1. the walk alone (ReachAnalysis::reached_by, what backward runs before differentiating), in nanoseconds;
//   2. `accelerator.backward` end to end on every process (two Accelerators sharing the process group), in
//      microseconds.
#include "../runtime/accelerator/backward.h"
#include "../runtime/parallel/engine.h"

#include <accelerate/accelerate.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>

namespace {

using Clock = std::chrono::steady_clock;

struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(32, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, 8));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc3->forward(torch::tanh(fc2->forward(torch::tanh(fc1->forward(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

/// One Accelerator with its prepared model and optimizer.
struct Trainer {
  explicit Trainer(bool check) {
    if (!check) {
      setenv("ACCELERATE_ALLOW_UNPREPARED_PARAMETERS", "1", 1);
    }
    accelerator = std::make_unique<accelerate::Accelerator>(accelerate::AcceleratorOptions().cpu(true));
    unsetenv("ACCELERATE_ALLOW_UNPREPARED_PARAMETERS");
    torch::manual_seed(0);
    model = std::make_shared<Mlp>();
    accelerator->prepare(model);
    optimizer = std::make_unique<accelerate::Optimizer>(
        accelerator->prepare(torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(1e-3))));
  }

  /// Mean seconds of one `backward` over `calls` training steps.
  double time_backward(int calls, bool fresh_leaf) {
    double total = 0;
    for (int i = 0; i < calls; ++i) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(i);
      auto x = at::randn({16, 32}, generator);
      auto y = at::randn({16, 8}, generator);
      if (fresh_leaf) {
        x.requires_grad_(true);
      }
      optimizer->zero_grad();
      auto loss = torch::mse_loss(model->forward(x), y);
      const auto start = Clock::now();
      accelerator->backward(loss);
      total += std::chrono::duration<double>(Clock::now() - start).count();
      optimizer->step();
    }
    return total / calls;
  }

  std::unique_ptr<accelerate::Accelerator> accelerator;
  std::shared_ptr<Mlp> model;
  std::unique_ptr<accelerate::Optimizer> optimizer;
};

/// The walk alone, in one process: `reached_by` with and without the check on the same graphs.
struct Walk {
  Walk()
      : prepared(accelerate::detail::make_ddp_engine(
                     {torch::kCPU, {}, {}, std::make_shared<accelerate::detail::BackwardTracker>(), {}})
                     ->prepare_model(model)) {
    checked = std::make_unique<accelerate::detail::ReachAnalysis>();
    setenv("ACCELERATE_ALLOW_UNPREPARED_PARAMETERS", "1", 1);
    unchecked = std::make_unique<accelerate::detail::ReachAnalysis>();
    unsetenv("ACCELERATE_ALLOW_UNPREPARED_PARAMETERS");
    checked->add(prepared.get());
    unchecked->add(prepared.get());
  }

  /// Mean seconds of one `reached_by` over `calls` graphs (each freed before the next is built).
  double time_reached_by(accelerate::detail::ReachAnalysis& reach, int calls, bool fresh_leaf) {
    double total = 0;
    for (int i = 0; i < calls; ++i) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(i);
      auto x = at::randn({16, 32}, generator);
      if (fresh_leaf) {
        x.requires_grad_(true);
      }
      auto loss = torch::mse_loss(model.forward(x), at::randn({16, 8}, generator));
      const auto start = Clock::now();
      reach.reached_by(loss, /*find_unused_parameters=*/false);
      total += std::chrono::duration<double>(Clock::now() - start).count();
    }
    return total / calls;
  }

  Mlp model;
  std::shared_ptr<accelerate::detail::PreparedModel> prepared;
  std::unique_ptr<accelerate::detail::ReachAnalysis> checked, unchecked;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
  int calls = 200, reps = 7;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--calls") && i + 1 < argc) {
      calls = std::stoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else {
      std::cerr << "bench_backward_check: unknown argument '" << argv[i] << "' (use --calls N, --reps R)\n";
      return 2;
    }
  }
  at::set_num_threads(1);
  Trainer checked(/*check=*/true);
  Trainer unchecked(/*check=*/false);
  Walk walk;
  const bool main_process = checked.accelerator->is_main_process();
  if (main_process) {
    std::cout << checked.accelerator->num_processes() << " processes, 1 intra-op thread; " << reps
              << " alternated reps x " << calls << " calls; medians of the mean time of one call\n"
              << std::left << std::setw(34) << "loss" << std::right << std::setw(12) << "check"
              << std::setw(12) << "opt-out" << std::setw(12) << "difference" << "\n";
  }
  auto print = [&](const std::string& what, const char* unit, double scale,
                   const std::vector<double>& with_check, const std::vector<double>& without_check) {
    const double a = median(with_check) * scale, b = median(without_check) * scale;
    if (main_process) {
      std::cout << std::left << std::setw(34) << what + " (" + unit + ")" << std::right << std::fixed
                << std::setprecision(1) << std::setw(12) << a << std::setw(12) << b << std::setw(12) << a - b
                << " (" << std::showpos << (a - b) / b * 100 << std::noshowpos << "%)\n";
    }
  };
  for (bool fresh_leaf : {false, true}) {
    const std::string name = fresh_leaf ? "fresh-leaf" : "plain";
    std::vector<double> with_check, without_check;
    walk.time_reached_by(*walk.checked, 20, fresh_leaf); // warm-up
    walk.time_reached_by(*walk.unchecked, 20, fresh_leaf);
    for (int rep = 0; rep < reps; ++rep) { // which one goes first alternates too
      for (bool check : {rep % 2 == 0, rep % 2 != 0}) {
        (check ? with_check : without_check)
            .push_back(walk.time_reached_by(check ? *walk.checked : *walk.unchecked, calls, fresh_leaf));
      }
    }
    print(name + ", walk alone", "ns", 1e9, with_check, without_check);
    with_check.clear();
    without_check.clear();
    checked.time_backward(20, fresh_leaf); // warm-up
    unchecked.time_backward(20, fresh_leaf);
    for (int rep = 0; rep < reps; ++rep) {
      for (bool check : {rep % 2 == 0, rep % 2 != 0}) {
        (check ? with_check : without_check)
            .push_back((check ? checked : unchecked).time_backward(calls, fresh_leaf));
      }
    }
    print(name + ", backward", "us", 1e6, with_check, without_check);
  }
  return 0;
}
