// The cost of an inactive profiler on a training step, on mlp-mnist (CPU, 1 process), side by side.
//
//   bench_profiler_overhead [--runs R] [--steps N] [--warmup W]
//
// Runs alternate: (a) training as it is, then (b) the same steps inside `accelerator.profile(...)` whose
// schedule waits past the run's end (the profiler is built and stepped once per step, `profiler.step()`, but
// never records: what a loop that `accel-rewrite --profile` wrote costs outside its active steps), each from
// the same initial weights and batches. Prints the median step time of each kind of run (the median over runs
// of each run's mean step time), b/a, and the time of one `step()` call measured alone.
#include "overhead_run.h"

#include <accelerate/accelerate.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using accelerate::bench::median;

/// A profile that never records: its schedule waits longer than any run here.
accelerate::ProfileKwargs inactive() {
  accelerate::ProfileSchedule schedule;
  schedule.wait = 1000000000;
  return accelerate::ProfileKwargs().schedule_option(schedule).output_trace_dir("");
}

} // namespace

int main(int argc, char** argv) {
  int runs = 9, steps = 200, warmup = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--runs") {
      runs = std::stoi(value);
    } else if (flag == "--steps") {
      steps = std::stoi(value);
    } else if (flag == "--warmup") {
      warmup = std::stoi(value);
    } else {
      std::cerr << "bench_profiler_overhead: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (runs < 1 || steps < 1 || warmup < 0) {
    std::cerr << "bench_profiler_overhead: --runs and --steps must be >= 1, --warmup >= 0\n";
    return 2;
  }
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));

  const auto batches = accelerate::bench::mlp_mnist_batches(warmup + steps);
  auto run = [&](bool profiled) {
    std::optional<accelerate::Profiler> profiler;
    if (profiled) {
      profiler.emplace(accelerator.profile(inactive()));
    }
    const double mean_ms =
        accelerate::bench::timed_mlp_mnist_run(accelerator, batches, warmup, 3e-4, [&](const torch::Tensor&) {
          if (profiler) {
            profiler->step();
          }
        });
    if (profiler) {
      profiler->stop();
    }
    return mean_ms;
  };
  std::vector<double> plain, profiled;
  for (int r = 0; r < runs; ++r) {
    plain.push_back(run(false));
    profiled.push_back(run(true));
  }
  // One step() call alone, away from the training step's noise.
  constexpr int kCalls = 100000;
  auto profiler = accelerator.profile(inactive());
  const auto calls_start = Clock::now();
  for (int i = 0; i < kCalls; ++i) {
    profiler.step();
  }
  const double per_call_us =
      std::chrono::duration<double, std::micro>(Clock::now() - calls_start).count() / kCalls;
  profiler.stop();
  const double a = median(plain), b = median(profiled);
  std::printf("mlp-mnist, %d alternated runs of %d steps (after %d warm-up), 1 process, 1 thread\n", runs,
              steps, warmup);
  std::printf("  (a) no profiler:                   median step %.4f ms   runs:", a);
  for (double t : plain) {
    std::printf(" %.3f", t);
  }
  std::printf("\n  (b) inactive profiler, step() each: median step %.4f ms   runs:", b);
  for (double t : profiled) {
    std::printf(" %.3f", t);
  }
  std::printf("\n  ratio b/a: %.4f (%+.2f%%)\n", b / a, 100.0 * (b / a - 1.0));
  std::printf("  one step() of an inactive profiler alone: %.3f us, %.4f%% of a step of (a)\n", per_call_us,
              100.0 * per_call_us / 1000.0 / a);
  return 0;
}
