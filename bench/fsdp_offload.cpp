// The offloads on the device, side by side in one run: FULL_SHARD as it is, with fsdp_offload_params (each
// process's shards, their gradients and the optimizer step in pinned CPU memory), with activation
// checkpointing, and with both offloads (fsdp_activation_checkpointing_offload: the inputs checkpointed units
// keep, in CPU memory until their backward); and ZeRO-2 as it is, with ZeRO-Offload (offload_optimizer_device
// cpu: each process's share, its gradient and the optimizer state in pinned CPU memory, stepped there) at
// stages 2 and 1, compared with ZeRO-2. ZeRO on one process shards nothing, so there its offload does
// nothing. scripts/gpu-check.sh runs it with one process per GPU, two at most (stage fsdp-offload):
//
//   accel launch --num_processes 2 build/bin/bench_fsdp_offload [--width W] [--layers L] [--batch B]
//       [--steps N] [--rtol R]
//
// On one process FULL_SHARD shards nothing (the model stays whole on the device) and fsdp_offload_params
// makes each unit one share in CPU memory: the device peaks then show what offload saves on one GPU.
//
// The model: L residual blocks x + fc2(gelu(fc1(x))) (fc1 Linear(W, 4W), fc2 Linear(4W, W)), each an
// `accelerate::fsdp::unit`, float32, AdamW, trained N steps on a fixed batch of B rows per process (each
// process its own rows) against an MSE target. Each configuration starts from the same parameters (seed 0).
//
// Each process measures, per configuration: the losses, the median step time, and the peak of the device
// memory the tensors hold during the steps (the CUDA caching allocator's peak of allocated bytes, reset
// before the first step; "n/a" on the CPU). Process 0 gathers the parameters after the last step (unshard)
// and compares each configuration's with FULL_SHARD's: norm-wise relative difference at most R (default 1e-5,
// the fp32 bound the FSDP fixtures use: on a GPU the offloaded optimizer steps with the CPU's fused AdamW,
// which rounds differently from the CUDA kernel). It prints a table and one `FSDP_OFFLOAD_RESULT {json}`
// line, and exits 1 when a configuration is outside the bound or its losses are not finite.
//
// On the CPU every offload is a no-op unless ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1 (a test hook) takes its
// code path (ACCELERATE_ZERO_OFFLOAD_PATH_ON_CPU=1 for ZeRO's); the smoke test (bench.fsdp_offload.smoke)
// runs it that way, where each agrees bit for bit with its base.
#include "../test/support/spread.h"
#include "arguments.h"

#include <accelerate/accelerate.h>

#if __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define ACCEL_BENCH_CUDA_STATS 1
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width) {
    fc1 = register_module("fc1", torch::nn::Linear(width, 4 * width));
    fc2 = register_module("fc2", torch::nn::Linear(4 * width, width));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return accelerate::fsdp::unit(*this, x,
                                  [&](const torch::Tensor& x) { return x + fc2(torch::gelu(fc1(x))); });
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  NetImpl(int64_t width, int layers) {
    for (int i = 0; i < layers; ++i) {
      blocks.push_back(register_module("block" + std::to_string(i), Block(width)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& block : blocks) {
      x = block(x);
    }
    return x;
  }
  std::vector<Block> blocks;
};
TORCH_MODULE(Net);

struct Configuration {
  const char* name;
  bool offload_params;
  bool checkpointing;
  bool checkpointing_offload;
  int zero_stage = 0;             // > 0: parallel_strategy "zero" at this stage instead of FSDP
  bool offload_optimizer = false; // offload_optimizer_device "cpu" (ZeRO-Offload)
};

// Each configuration is compared with the first of its strategy (full_shard; zero2).
const Configuration kConfigurations[] = {
    {"full_shard", false, false, false},
    {"full_shard_offload", true, false, false},
    {"full_shard_checkpointing", false, true, false},
    {"full_shard_checkpointing_offload", true, true, true},
    {"zero2", false, false, false, 2, false},
    {"zero2_offload_optimizer", false, false, false, 2, true},
    {"zero1_offload_optimizer", false, false, false, 1, true},
};

struct Figures {
  std::vector<double> losses;
  double step_seconds = 0;
  int64_t device_peak = -1; // bytes; -1: not measured (the CPU)
  torch::Tensor parameters; // process 0: the whole parameters after the last step
  std::string state;
};

void reset_device_peak(const torch::Device& device) {
#ifdef ACCEL_BENCH_CUDA_STATS
  if (device.is_cuda()) {
    torch::cuda::synchronize(device.index());
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  }
#else
  (void)device;
#endif
}

int64_t device_peak(const torch::Device& device) {
#ifdef ACCEL_BENCH_CUDA_STATS
  if (device.is_cuda()) {
    torch::cuda::synchronize(device.index());
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#else
  (void)device;
#endif
  return -1;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

Figures train(const Configuration& configuration, int64_t width, int layers, int64_t batch, int steps) {
  auto options = configuration.zero_stage > 0
                     ? accelerate::AcceleratorOptions()
                           .parallel_strategy("zero")
                           .zero_stage(configuration.zero_stage)
                           .offload_optimizer_device(configuration.offload_optimizer ? "cpu" : "none")
                     : accelerate::AcceleratorOptions()
                           .parallel_strategy("fsdp")
                           .fsdp_sharding_strategy("FULL_SHARD")
                           .fsdp_offload_params(configuration.offload_params)
                           .fsdp_activation_checkpointing(configuration.checkpointing)
                           .fsdp_activation_checkpointing_offload(configuration.checkpointing_offload);
  accelerate::Accelerator accelerator(options);
  const auto device = accelerator.device();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + accelerator.process_index());
  const auto input = at::randn({batch, width}, generator).to(device);
  const auto target = at::randn({batch, width}, generator).to(device);
  torch::manual_seed(0);
  Net model(width, layers);
  accelerator.prepare(model);
  auto optimizer =
      accelerator.prepare(torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-4)));
  Figures figures;
  std::vector<double> seconds;
  reset_device_peak(device);
  for (int step = 0; step < steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(input), target);
    accelerator.backward(loss);
    optimizer.step();
    figures.losses.push_back(loss.item<double>()); // waits for the step's work
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  figures.device_peak = device_peak(device);
  figures.step_seconds = median(std::vector<double>(seconds.begin() + (steps > 1 ? 1 : 0), seconds.end()));
  {
    auto whole = accelerator.unshard(model);
    std::vector<torch::Tensor> parts;
    for (const auto& parameter : model->parameters()) {
      parts.push_back(parameter.detach().reshape(-1).to(torch::kCPU, torch::kFloat64));
    }
    figures.parameters = torch::cat(parts);
  }
  figures.state = accelerator.state();
  accelerator.wait_for_everyone();
  return figures;
}

int run(int argc, char** argv) {
  int64_t width = 1024, batch = 8;
  int layers = 8, steps = 6;
  double rtol = 1e-5;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* name) { return accelerate_bench::option_value(argc, argv, i, name); };
    if (const char* v = value("--width")) {
      width = std::stoll(v);
    } else if (const char* v = value("--layers")) {
      layers = std::stoi(v);
    } else if (const char* v = value("--batch")) {
      batch = std::stoll(v);
    } else if (const char* v = value("--steps")) {
      steps = std::stoi(v);
    } else if (const char* v = value("--rtol")) {
      rtol = std::stod(v);
    } else {
      std::cerr << "bench_fsdp_offload: unknown argument '" << argv[i]
                << "' (use --width W, --layers L, --batch B, --steps N, --rtol R)\n";
      return 2;
    }
  }
  if (width < 1 || layers < 1 || batch < 1 || steps < 1 || !(rtol >= 0)) {
    std::cerr << "bench_fsdp_offload: needs --width, --layers, --batch, --steps >= 1 and --rtol >= 0\n";
    return 2;
  }
  at::set_num_threads(1);
  accelerate::Accelerator outer; // keeps the process group for the whole run
  std::vector<Figures> results;
  for (const auto& configuration : kConfigurations) {
    results.push_back(train(configuration, width, layers, batch, steps));
  }
  bool ok = true;
  std::ostringstream table, json;
  table << "| configuration | device peak (MB) | vs base | step (ms) | vs base | last loss | "
           "‖Δθ‖/‖θ‖ vs base |\n|---|---|---|---|---|---|---|\n";
  json << "{\"processes\": " << outer.num_processes() << ", \"device\": \"" << outer.device().str()
       << "\", \"width\": " << width << ", \"layers\": " << layers << ", \"batch\": " << batch
       << ", \"steps\": " << steps << ", \"configurations\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    // The base: the first configuration of the same strategy.
    size_t b = 0;
    while (kConfigurations[b].zero_stage > 0 != (kConfigurations[i].zero_stage > 0)) {
      ++b;
    }
    const auto& base = results[b];
    const auto& figures = results[i];
    const double difference =
        outer.is_main_process()
            ? ((figures.parameters - base.parameters).norm() / base.parameters.norm()).item<double>()
            : 0.0;
    const bool finite = std::all_of(figures.losses.begin(), figures.losses.end(),
                                    [](double loss) { return std::isfinite(loss); });
    const bool within = finite && difference <= rtol;
    if (outer.is_main_process() && i != b) {
      accelerate_test::report_spread(
          std::string(kConfigurations[i].name) + " against " + kConfigurations[b].name, difference, rtol);
    }
    ok = ok && within;
    char peak[32] = "n/a", ratio[32] = "n/a", row[512];
    if (figures.device_peak >= 0 && base.device_peak > 0) {
      std::snprintf(peak, sizeof peak, "%.1f", figures.device_peak / 1e6);
      std::snprintf(ratio, sizeof ratio, "%.2fx",
                    static_cast<double>(figures.device_peak) / base.device_peak);
    }
    std::snprintf(row, sizeof row, "| %s | %s | %s | %.1f | %.2fx | %.6g | %.3g%s |\n",
                  kConfigurations[i].name, peak, ratio, figures.step_seconds * 1e3,
                  figures.step_seconds / base.step_seconds, figures.losses.back(), difference,
                  within ? "" : " (OUTSIDE THE BOUND)");
    table << row;
    json << (i ? ", " : "") << "{\"name\": \"" << kConfigurations[i].name
         << "\", \"device_peak_bytes\": " << figures.device_peak
         << ", \"step_seconds\": " << figures.step_seconds << ", \"last_loss\": " << figures.losses.back()
         << ", \"relative_difference\": " << difference << "}";
  }
  json << "], \"rtol\": " << rtol << ", \"ok\": " << (ok ? "true" : "false") << "}";
  if (outer.is_main_process()) {
    std::cout << "bench_fsdp_offload: " << outer.num_processes() << " processes on " << outer.device().str()
              << ", " << layers << " blocks of width " << width << ", batch " << batch << ", " << steps
              << " steps (median step time after the first)\n"
              << table.str();
    // The strategy's line of accelerator.state() where both FSDP offloads ran, and where ZeRO-Offload did.
    for (const auto& [index, prefix] : {std::pair<size_t, const char*>{3, "fsdp: "}, {5, "zero: "}}) {
      std::istringstream state(results[index].state);
      for (std::string line; std::getline(state, line);) {
        if (line.find(prefix) != std::string::npos) {
          std::cout << kConfigurations[index].name << ": " << line.substr(line.find(prefix)) << "\n";
        }
      }
    }
    std::cout << "FSDP_OFFLOAD_RESULT " << json.str() << std::endl;
  }
  outer.wait_for_everyone();
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  return accelerate_bench::run_saying_failure("bench_fsdp_offload", run, argc, argv);
}
