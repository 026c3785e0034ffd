// Memory and step time of one training job under DDP, ZeRO-1, ZeRO-2 and FSDP (FULL_SHARD, SHARD_GRAD_OP),
// measured per process.
//
//   accel launch --cpu --num_processes 2 build/bin/bench_zero_memory
//       --strategy ddp|zero1|zero2|full_shard|shard_grad_op|full_shard_prefetch|shard_grad_op_prefetch|
//                  full_shard_checkpointing
//       [--width W] [--layers L] [--batch B] [--steps N] [--warmup K] [--bucket-cap-mb MB] [--block
//       linear|mlp]
//
// (bench/zero_memory.py runs several strategies alternated and prints the ratios to DDP.)
//
// An MLP of L Linear(W, W) layers (tanh between them; default 8 x 2900 x 2900, 67.3 M parameters, so AdamW's
// two fp32 moments are 0.54 GB replicated; with --block mlp each layer is a residual block
// x + fc2(gelu(fc1(x))) with fc1 Linear(W, 4W) and fc2 Linear(4W, W), whose forward keeps 9 activations of
// the batch's size for backward where a Linear layer keeps 2) trained with the prepared AdamW on a fixed
// batch of B rows (default 4) against an MSE target, one intra-op thread per process, K warm-up and N timed
// steps. Each layer (its Linear and the tanh after it) is a module whose forward is an
// `accelerate::fsdp::unit`: under "fsdp" each layer is a unit (the root holds no parameters of its own),
// under the other strategies the call is a plain call; `full_shard_checkpointing` is FULL_SHARD with
// fsdp_activation_checkpointing (each layer keeps only its input, and computes its body again in backward).
// Every CPU tensor is counted: a counting allocator wrapping libtorch's default CPU allocator is installed
// before any tensor exists and keeps the live bytes and the peak of the live bytes. Each process measures:
//
//   - optimizer state: the live bytes the first `optimizer.step()` leaves behind (live after it minus live
//     before it), and as the cross-check the sum of `nbytes()` of the tensors in the libtorch optimizer's
//     state (`optimizer.unwrap().state()`: exp_avg and exp_avg_sq, max_exp_avg_sq where defined);
//   - gradient peak: the highest live bytes during `accelerator.backward` + `optimizer.step()` minus the live
//     bytes before the first backward and the optimizer state (so gradient memory a strategy keeps between
//     steps counts), the largest over the steps after the first (the first one also allocates the optimizer
//     state), and that peak within backward and within the step apart; the live bytes backward
//     leaves behind (live after it minus live before it); and the bytes of the whole gradients left after
//     backward (the sum of `nbytes()` of the defined `.grad()` of the parameters). Under ZeRO-2 that sum is
//     0: backward reduce-scatters each gradient into this process's share and drops the whole one. The shares
//     are tensors of the runtime's own, made by the same CPU allocator, so they are in the live bytes, in the
//     peak and in what backward leaves live, not in the `.grad()` sum; the gradient peak of ZeRO-2 is the
//     shares plus whatever whole gradients and staging buffers are in flight while backward runs;
//   - the peak live bytes of the whole run, and the peak resident set (VmHWM of /proc/self/status) as the
//     cross-check (it also counts the library code, the shared-memory segment and Gloo's buffers, which
//     are not tensors);
//   - by phase, over the *baseline* (the live bytes once the Accelerator, the batch and the target exist,
//     just before the model is built; VmRSS there for the resident figures): the peak of setup (building
//     the model, preparing it and the optimizer: the whole model exists on every process until prepare
//     shards it), the peak of the steps (every step, the first included: the training peak, which holds
//     parameters or their shares, gradients, optimizer state and the activations of the batch), the live
//     bytes after the last step (what is held between steps), and what forward leaves live (the
//     activations; under SHARD_GRAD_OP also the units it keeps gathered until their backward); VmHWM at the
//     end of setup, and VmHWM of the steps alone (reset after setup by writing 5 to /proc/self/clear_refs);
//   - the largest unit's parameter bytes (one layer's weight and bias, as built), for the FSDP bound;
//   - the median time of one whole step (zero_grad, forward, backward, step) over the timed steps, and of its
//     backward and its optimizer step; the median minor page faults and kernel CPU time of one step
//     (getrusage: freshly allocated large tensors are fresh pages, faulted in on first touch).
//
// Rank 0 gathers the figures of every process and prints a table and one `ZERO_MEMORY_RESULT {json}` line.
#include "arguments.h"
#include "counting_allocator.h"

#include <accelerate/accelerate.h>

#include <c10/core/CPUAllocator.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using namespace accelerate_bench::counting;
using Clock = std::chrono::steady_clock;

/// Minor page faults of this process so far (each first touch of a page the kernel maps in), and the CPU
/// time its threads spent in the kernel, in seconds (where page faults are served).
std::pair<int64_t, double> faults_and_system_time() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return {usage.ru_minflt, usage.ru_stime.tv_sec + usage.ru_stime.tv_usec * 1e-6};
}

/// A line of /proc/self/status ("VmHWM", the peak resident set; "VmRSS", the resident set now), in bytes;
/// -1 where it cannot be read.
int64_t status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      return std::stoll(line.substr(key.size() + 1)) * 1024; // "VmHWM:   123456 kB"
    }
  }
  return -1;
}

/// Starts VmHWM again from the resident set now (Linux 4.0 and later).
void reset_peak_resident() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

/// One layer, an FSDP unit under "fsdp": Linear(W, W) and tanh (none after the last); or, with `mlp`, the
/// residual block x + fc2(gelu(fc1(x))) through 4W.
struct LayerImpl : torch::nn::Module {
  LayerImpl(int64_t width, bool activation, bool mlp) : activation(activation), mlp(mlp) {
    if (mlp) {
      fc = register_module("fc", torch::nn::Linear(width, 4 * width));
      fc2 = register_module("fc2", torch::nn::Linear(4 * width, width));
    } else {
      fc = register_module("fc", torch::nn::Linear(width, width));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return accelerate::fsdp::unit(*this, x, [&](const torch::Tensor& x) {
      if (mlp) {
        return x + fc2->forward(torch::gelu(fc->forward(x)));
      }
      auto y = fc->forward(x);
      return activation ? torch::tanh(y) : y;
    });
  }
  torch::nn::Linear fc{nullptr}, fc2{nullptr};
  bool activation;
  bool mlp;
};
TORCH_MODULE(Layer);

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t width, int layers, bool mlp) {
    for (int i = 0; i < layers; ++i) {
      this->layers.push_back(register_module("layer" + std::to_string(i), Layer(width, i + 1 < layers, mlp)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& layer : layers) {
      x = layer->forward(x);
    }
    return x;
  }
  std::vector<Layer> layers;
};
TORCH_MODULE(Mlp);

int64_t optimizer_state_nbytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  auto add = [&](const torch::Tensor& tensor) { bytes += tensor.defined() ? tensor.nbytes() : 0; };
  for (const auto& [key, slot] : optimizer.state()) {
    if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(slot.get())) {
      add(adamw->exp_avg());
      add(adamw->exp_avg_sq());
      add(adamw->max_exp_avg_sq());
    } else {
      throw std::runtime_error("bench_zero_memory: an optimizer state entry that is not AdamW's");
    }
  }
  return bytes;
}

int64_t gradient_nbytes(torch::nn::Module& model) {
  int64_t bytes = 0;
  for (const auto& parameter : model.parameters()) {
    bytes += parameter.grad().defined() ? parameter.grad().nbytes() : 0;
  }
  return bytes;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The figures one process reports: name (in the JSON line), column of the printed table, and how the table
// prints it (the JSON line has the raw value: bytes, seconds, counts).
enum class Unit { kMillions, kMegabytes, kMilliseconds, kCount };
struct Field {
  const char* name;
  const char* column;
  Unit unit;
};
constexpr Field kFields[] = {
    {"parameters", "params M", Unit::kMillions},
    {"optimizer_state_bytes", "opt state", Unit::kMegabytes},
    {"optimizer_state_nbytes", "(nbytes)", Unit::kMegabytes},
    {"grad_peak_bytes", "grad peak", Unit::kMegabytes},
    {"grad_peak_backward_bytes", "in backward", Unit::kMegabytes},
    {"grad_peak_step_bytes", "in step", Unit::kMegabytes},
    {"grad_held_after_backward", "held after bw", Unit::kMegabytes},
    {"grad_after_backward", ".grad", Unit::kMegabytes},
    {"peak_live_bytes", "peak live", Unit::kMegabytes},
    {"vmhwm_bytes", "VmHWM", Unit::kMegabytes},
    {"largest_unit_bytes", "largest unit", Unit::kMegabytes},
    {"setup_peak_bytes", "setup peak", Unit::kMegabytes},
    {"train_peak_bytes", "train peak", Unit::kMegabytes},
    {"held_between_steps_bytes", "held", Unit::kMegabytes},
    {"forward_live_bytes", "fwd leaves", Unit::kMegabytes},
    {"rss_baseline_bytes", "RSS base", Unit::kMegabytes},
    {"vmhwm_setup_bytes", "VmHWM setup", Unit::kMegabytes},
    {"vmhwm_train_bytes", "VmHWM steps", Unit::kMegabytes},
    {"step_median_s", "step ms", Unit::kMilliseconds},
    {"backward_median_s", "backward ms", Unit::kMilliseconds},
    {"optimizer_step_median_s", "opt step ms", Unit::kMilliseconds},
    {"minor_faults_per_step", "faults/step", Unit::kCount},
    {"system_cpu_per_step_s", "sys CPU ms", Unit::kMilliseconds},
};
constexpr int kFieldCount = sizeof(kFields) / sizeof(kFields[0]);

} // namespace

int run(int argc, char** argv);

int main(int argc, char** argv) {
  // An allocation refused under a memory limit lands in its one-line failure.
  return accelerate_bench::run_saying_failure("bench_zero_memory", run, argc, argv);
}

int run(int argc, char** argv) {
  // Before any tensor: every CPU storage from here on is counted.
  static CountingAllocator counting(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/std::numeric_limits<uint8_t>::max());

  std::string strategy = "ddp";
  int64_t width = 2900, batch = 4;
  int layers = 8, steps = 5, warmup = 2;
  double bucket_cap_mb = 0; // 0: the runtime's default
  std::string block = "linear";
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* name) { return accelerate_bench::option_value(argc, argv, i, name); };
    if (const char* v = value("--strategy")) {
      strategy = v;
    } else if (const char* v = value("--width")) {
      width = std::stoll(v);
    } else if (const char* v = value("--layers")) {
      layers = std::stoi(v);
    } else if (const char* v = value("--batch")) {
      batch = std::stoll(v);
    } else if (const char* v = value("--steps")) {
      steps = std::stoi(v);
    } else if (const char* v = value("--warmup")) {
      warmup = std::stoi(v);
    } else if (const char* v = value("--bucket-cap-mb")) {
      bucket_cap_mb = std::stod(v);
    } else if (const char* v = value("--block")) {
      block = v;
    } else {
      std::cerr
          << "bench_zero_memory: unknown argument '" << argv[i]
          << "' (use --strategy ddp|zero1|zero2|full_shard[_prefetch]|shard_grad_op[_prefetch], --width W, "
             "--layers L, --batch B, "
             "--steps N, --warmup K, --bucket-cap-mb MB, --block linear|mlp)\n";
      return 2;
    }
  }
  if (block != "linear" && block != "mlp") {
    std::cerr << "bench_zero_memory: --block is linear or mlp, not '" << block << "'\n";
    return 2;
  }
  if (steps < 1 || warmup < 0 || warmup + steps < 2 || layers < 1 || width < 1 || batch < 1) {
    std::cerr << "bench_zero_memory: needs --steps >= 1, --warmup >= 0 and at least 2 steps in all\n";
    return 2;
  }
  auto options = accelerate::AcceleratorOptions().cpu(true);
  if (bucket_cap_mb > 0) {
    options.bucket_cap_mb(bucket_cap_mb);
  }
  if (strategy == "ddp") {
    options.parallel_strategy("ddp");
  } else if (strategy == "zero1" || strategy == "zero2") {
    options.parallel_strategy("zero").zero_stage(strategy == "zero1" ? 1 : 2);
  } else if (strategy == "full_shard_checkpointing") {
    options.parallel_strategy("fsdp")
        .fsdp_sharding_strategy("FULL_SHARD")
        .fsdp_backward_prefetch("NO_PREFETCH")
        .fsdp_activation_checkpointing(true);
  } else if (strategy.rfind("full_shard", 0) == 0 || strategy.rfind("shard_grad_op", 0) == 0) {
    // Without the suffix no all-gather starts ahead; with it, forward prefetch and BACKWARD_PRE.
    const bool prefetch = strategy.size() > 9 && strategy.compare(strategy.size() - 9, 9, "_prefetch") == 0;
    const std::string sharding = strategy.substr(0, strategy.size() - (prefetch ? 9 : 0));
    if (sharding != "full_shard" && sharding != "shard_grad_op") {
      std::cerr << "bench_zero_memory: unknown --strategy '" << strategy << "'\n";
      return 2;
    }
    options.parallel_strategy("fsdp")
        .fsdp_sharding_strategy(sharding == "full_shard" ? "FULL_SHARD" : "SHARD_GRAD_OP")
        .fsdp_forward_prefetch(prefetch)
        .fsdp_backward_prefetch(prefetch ? "BACKWARD_PRE" : "NO_PREFETCH");
  } else {
    std::cerr << "bench_zero_memory: --strategy is ddp, zero1, zero2, full_shard, shard_grad_op, "
                 "full_shard_prefetch or shard_grad_op_prefetch, not '"
              << strategy << "'\n";
    return 2;
  }
  at::set_num_threads(1);

  accelerate::Accelerator accelerator(options);
  // One fixed batch per process (each its own rows, as a prepared loader would give).
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + accelerator.process_index());
  const auto input = at::randn({batch, width}, generator);
  const auto target = at::randn({batch, width}, generator);
  // The baseline: what the phases below are measured over.
  const int64_t baseline = live_bytes.load();
  const int64_t rss_baseline = status_bytes("VmRSS");
  reset_peak();
  torch::manual_seed(0);
  Mlp model(width, layers, block == "mlp");
  // Counted before prepare: under "fsdp" a unit's parameters have no elements outside its forward.
  int64_t parameters = 0, largest_unit_bytes = 0;
  for (const auto& layer : model->layers) {
    int64_t bytes = 0;
    for (const auto& parameter : layer->parameters()) {
      parameters += parameter.numel();
      bytes += parameter.nbytes();
    }
    largest_unit_bytes = std::max(largest_unit_bytes, bytes);
  }
  accelerator.prepare(model);
  auto optimizer =
      accelerator.prepare(torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-4)));
  const int64_t setup_peak = peak_bytes.load() - baseline;
  const int64_t vmhwm_setup = status_bytes("VmHWM");
  reset_peak_resident();
  reset_peak();
  int64_t train_peak = 0, forward_live = 0;

  int64_t optimizer_state_bytes = 0, grad_peak_backward = 0, grad_peak_step = 0, grad_held = 0,
          grad_after_backward = 0;
  std::vector<double> step_seconds, backward_seconds, optimizer_step_seconds, faults, system_seconds;
  double first_loss = 0, last_loss = 0;
  // Live bytes before the first backward: no gradient of any kind exists yet (what a strategy keeps for
  // gradients between steps, ZeRO-2's share buffers, comes after), only the model, the input and the
  // forward's activations, as before every later backward. The gradient peaks of later steps are measured
  // from it plus the optimizer state, so gradient memory held across steps counts too.
  int64_t first_before_backward = 0;
  for (int step = 0; step < warmup + steps; ++step) {
    const auto [faults_before, system_before] = faults_and_system_time();
    const auto start = Clock::now();
    optimizer.zero_grad();
    const int64_t before_forward = live_bytes.load();
    auto loss = torch::mse_loss(model->forward(input), target);
    const int64_t before_backward = live_bytes.load();
    forward_live = before_backward - before_forward;
    train_peak = std::max(train_peak, peak_bytes.load() - baseline);
    reset_peak();
    const auto backward_start = Clock::now();
    accelerator.backward(loss);
    const auto backward_end = Clock::now();
    if (step == 0) {
      first_before_backward = before_backward;
    }
    const int64_t backward_peak = peak_bytes.load() - first_before_backward - optimizer_state_bytes;
    grad_after_backward = gradient_nbytes(*model);
    const int64_t before_step = live_bytes.load();
    // What backward leaves live: the whole gradients, or under ZeRO-2 the shares (tensors the runtime holds
    // outside `.grad()`), less the activations backward freed.
    grad_held = before_step - before_backward;
    train_peak = std::max(train_peak, peak_bytes.load() - baseline);
    reset_peak();
    optimizer.step();
    const auto step_end = Clock::now();
    if (step == 0) {
      optimizer_state_bytes = live_bytes.load() - before_step;
    } else { // the first step also makes the optimizer state
      grad_peak_backward = std::max(grad_peak_backward, backward_peak);
      grad_peak_step =
          std::max(grad_peak_step, peak_bytes.load() - first_before_backward - optimizer_state_bytes);
    }
    const double value = loss.item<double>();
    loss = torch::Tensor();
    const auto end = Clock::now();
    const auto [faults_after, system_after] = faults_and_system_time();
    (step == 0 ? first_loss : last_loss) = value;
    if (step >= warmup) {
      step_seconds.push_back(std::chrono::duration<double>(end - start).count());
      backward_seconds.push_back(std::chrono::duration<double>(backward_end - backward_start).count());
      optimizer_step_seconds.push_back(std::chrono::duration<double>(step_end - backward_end).count());
      faults.push_back(static_cast<double>(faults_after - faults_before));
      system_seconds.push_back(system_after - system_before);
    }
  }
  train_peak = std::max(train_peak, peak_bytes.load() - baseline);
  const int64_t held_between_steps = live_bytes.load() - baseline;
  const int64_t vmhwm_train = status_bytes("VmHWM");
  const double figures[kFieldCount] = {static_cast<double>(parameters),
                                       static_cast<double>(optimizer_state_bytes),
                                       static_cast<double>(optimizer_state_nbytes(optimizer.unwrap())),
                                       static_cast<double>(std::max(grad_peak_backward, grad_peak_step)),
                                       static_cast<double>(grad_peak_backward),
                                       static_cast<double>(grad_peak_step),
                                       static_cast<double>(grad_held),
                                       static_cast<double>(grad_after_backward),
                                       static_cast<double>(peak_bytes_overall()),
                                       static_cast<double>(std::max(vmhwm_setup, vmhwm_train)),
                                       static_cast<double>(largest_unit_bytes),
                                       static_cast<double>(setup_peak),
                                       static_cast<double>(train_peak),
                                       static_cast<double>(held_between_steps),
                                       static_cast<double>(forward_live),
                                       static_cast<double>(rss_baseline),
                                       static_cast<double>(vmhwm_setup),
                                       static_cast<double>(vmhwm_train),
                                       median(step_seconds),
                                       median(backward_seconds),
                                       median(optimizer_step_seconds),
                                       median(faults),
                                       median(system_seconds)};
  // The gather's own tensors come after every figure is taken.
  const auto all =
      accelerator.gather(torch::tensor(std::vector<double>(figures, figures + kFieldCount), torch::kFloat64)
                             .reshape({1, kFieldCount}));
  if (!accelerator.is_main_process()) {
    return 0;
  }
  const auto table = all.accessor<double, 2>();
  std::cout << "strategy " << strategy << ", " << accelerator.num_processes()
            << " processes x 1 intra-op thread; " << layers
            << (block == "mlp" ? " x residual MLP block(" : " x Linear(") << width << ", " << width << "), "
            << parameters / 1e6 << " M parameters, batch " << batch << ", AdamW; " << warmup << " warm-up + "
            << steps << " timed steps; loss " << first_loss << " -> " << last_loss
            << " (rank 0); bytes in MB (1e6)\n"
            << std::left << std::setw(5) << "rank" << std::right;
  for (const auto& field : kFields) {
    std::cout << std::setw(14) << field.column;
  }
  std::cout << "\n";
  std::ostringstream json;
  json << std::setprecision(17) << "{\"strategy\": \"" << strategy
       << "\", \"processes\": " << accelerator.num_processes() << ", \"first_loss\": " << first_loss
       << ", \"last_loss\": " << last_loss << ", \"ranks\": [";
  for (int64_t rank = 0; rank < table.size(0); ++rank) {
    std::cout << std::left << std::setw(5) << rank << std::right << std::fixed;
    json << (rank ? ", {" : "{");
    for (int i = 0; i < kFieldCount; ++i) {
      const double value = table[rank][i];
      const Unit unit = kFields[i].unit;
      std::cout << std::setw(14)
                << std::setprecision(unit == Unit::kMilliseconds ? 2
                                     : unit == Unit::kCount      ? 0
                                                                 : 1)
                << value * (unit == Unit::kMilliseconds ? 1e3
                            : unit == Unit::kCount      ? 1
                                                        : 1e-6);
      json << (i ? ", \"" : "\"") << kFields[i].name << "\": " << value;
    }
    std::cout << "\n";
    json << "}";
  }
  json << "]}";
  std::cout << "ZERO_MEMORY_RESULT " << json.str() << std::endl;
  return 0;
}
