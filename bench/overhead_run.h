// What the overhead benchmarks (bench_tracking_overhead, bench_profiler_overhead) share: mlp-mnist's batches,
// one timed training run on them with a hook after each optimizer step, and the median of the runs' times.
// Each benchmark alternates runs without and with what it measures, from the same initial weights and
// batches.
#pragma once

#include "workloads.h"

#include <accelerate/accelerate.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>
#include <vector>

namespace accelerate::bench {

/// `count` batches of 64 mlp-mnist samples, labelled by a fixed random teacher: the same on every call.
inline std::vector<std::pair<torch::Tensor, torch::Tensor>> mlp_mnist_batches(int count) {
  torch::manual_seed(1);
  auto teacher = torch::nn::Linear(784, 10);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int i = 0; i < count; ++i) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(i);
    auto x = at::randn({64, 784}, generator);
    torch::NoGradGuard no_grad;
    batches.emplace_back(x, teacher->forward(x).argmax(1));
  }
  return batches;
}

/// Trains a freshly seeded Mlp, prepared with AdamW(`lr`), over `batches` and returns the mean time of a step
/// after the first `warmup` steps, in milliseconds. `after_step(loss)` runs right after each optimizer step,
/// inside the timed region: what the benchmark measures goes there.
inline double timed_mlp_mnist_run(Accelerator& accelerator,
                                  const std::vector<std::pair<torch::Tensor, torch::Tensor>>& batches,
                                  int warmup, double lr,
                                  const std::function<void(const torch::Tensor&)>& after_step) {
  using Clock = std::chrono::steady_clock;
  torch::manual_seed(0);
  Mlp model;
  accelerator.prepare(model);
  auto optimizer =
      accelerator.prepare(torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(lr)));
  const int steps = static_cast<int>(batches.size()) - warmup;
  Clock::time_point start = Clock::now();
  for (int i = 0; i < static_cast<int>(batches.size()); ++i) {
    if (i == warmup) {
      start = Clock::now();
    }
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(batches[i].first), batches[i].second);
    accelerator.backward(loss);
    optimizer.step();
    after_step(loss);
  }
  const double mean_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() / steps;
  accelerator.free_memory();
  return mean_ms;
}

/// The median of the runs' times (the mean of the two middle ones for an even count).
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

} // namespace accelerate::bench
