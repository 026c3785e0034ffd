// The cost of logging every step to TensorBoard, on mlp-mnist (CPU, 1 process), side by side.
//
//   bench_tracking_overhead [--runs R] [--steps N] [--warmup W] [--project-dir DIR] [--log-with NAMES]
//
// Runs alternate: (a) training without logging, then (b) the same steps with `accelerator.log` of the loss (a
// 0-d tensor) and the learning rate after every step, to the trackers of --log-with (default "tensorboard"),
// each from the same initial weights and batches. Prints the median step time of each kind of run (the median
// over runs of each run's mean step time), b/a - 1, the overhead of logging, and the time of one log call
// measured alone.
#include "overhead_run.h"

#include <accelerate/accelerate.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using accelerate::bench::median;

} // namespace

int main(int argc, char** argv) {
  int runs = 9, steps = 200, warmup = 10;
  std::string project_dir = "/tmp/accelerate-bench-tracking";
  std::vector<std::string> log_with = {"tensorboard"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--runs") {
      runs = std::stoi(value);
    } else if (flag == "--steps") {
      steps = std::stoi(value);
    } else if (flag == "--warmup") {
      warmup = std::stoi(value);
    } else if (flag == "--project-dir") {
      project_dir = value;
    } else if (flag == "--log-with") {
      log_with = {value};
    } else {
      std::cerr << "bench_tracking_overhead: unknown flag " << flag << "\n";
      return 2;
    }
  }
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(
      accelerate::AcceleratorOptions().cpu(true).log_with(log_with).project_dir(project_dir));
  accelerator.init_trackers("mlp-mnist");

  const auto batches = accelerate::bench::mlp_mnist_batches(warmup + steps);
  const double lr = 3e-4;
  int64_t logged_step = 0;
  auto run = [&](bool log) {
    return accelerate::bench::timed_mlp_mnist_run(
        accelerator, batches, warmup, lr, [&](const torch::Tensor& loss) {
          if (log) {
            accelerator.log({{"loss", loss.detach()}, {"lr", lr}}, logged_step++);
          }
        });
  };
  std::vector<double> plain, logging;
  for (int r = 0; r < runs; ++r) {
    plain.push_back(run(false));
    logging.push_back(run(true));
  }
  // The cost of one log call alone, away from the training step's noise.
  constexpr int kCalls = 5000;
  const auto loss = torch::tensor(0.25f);
  const auto calls_start = Clock::now();
  for (int i = 0; i < kCalls; ++i) {
    accelerator.log({{"loss", loss}, {"lr", lr}}, logged_step++);
  }
  const double per_call_us =
      std::chrono::duration<double, std::micro>(Clock::now() - calls_start).count() / kCalls;
  accelerator.end_training();
  const double a = median(plain), b = median(logging);
  std::printf("mlp-mnist, %d alternated runs of %d steps (after %d warm-up), 1 process, 1 thread\n", runs,
              steps, warmup);
  std::printf("  (a) no logging:            median step %.4f ms   runs:", a);
  for (double t : plain) {
    std::printf(" %.3f", t);
  }
  std::printf("\n  (b) log every step (%s): median step %.4f ms   runs:", log_with[0].c_str(), b);
  for (double t : logging) {
    std::printf(" %.3f", t);
  }
  std::printf("\n  overhead b/a - 1: %+.2f%%\n", 100.0 * (b / a - 1.0));
  std::printf("  one log call alone (a 0-d tensor and a number): %.2f us, %.3f%% of a step of (a)\n",
              per_call_us, 100.0 * per_call_us / 1000.0 / a);
  return 0;
}
