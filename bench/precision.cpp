// Mixed-precision checks and benchmarks on a CUDA GPU, one stage per run (scripts/gpu-check.sh runs them
// all).
//
//   bench_precision --stage checks|gpt-86m|gpt-small-losses|fp8-linear|cuda-graph [--quick]
//                   [--data test/data]
//
// - checks: the CPU tests of test/runtime/precision_unit_test.cpp, on the GPU: the autocast window, the grad
//   scaler against torch.amp.GradScaler's stored sequence, mlp-mnist fp32/fp16/bf16, accelerate::nn::Linear
//   against torch::nn::Linear (float64), fp8 against its quantise-dequantise reference and fp32, the fused
//   fp8 cast kernel against ATen's, and a training step (fp32 and bf16, fused AdamW, clipping, a scheduler)
//   that never waits for the device (c10's CUDA sync-debug mode set to error), and the graphed step
//   (cuda_graph) against the eager one. Prints PASS/FAIL per check;
//   exits 1 on any failure.
// - gpt-86m: step time in fp32, bf16, fp16 and fp8 (W warm-up + N timed steps, medians), side by side.
// - gpt-small-losses: 200 training steps per precision; the final loss (mean of the last 20) against fp32's.
// - fp8-linear: accelerate::nn::Linear forward+backward, fp8 against bf16, at 4096 and 8192 (M = N = K).
// - cuda-graph: gpt-small and gpt-86m steps eager against captured in a CUDA graph (Accelerator::graphed_step
//   with AcceleratorOptions().cuda_graph(true)), alternated, medians; the losses of both must match.
// The gpt models are shared/DESIGN.md §6's, written with accelerate::nn::Linear (as accel-rewrite leaves
// them).
#include <accelerate/accelerate.h>

#include "../runtime/accelerator/state.h"
#include "../runtime/precision/fp8.h"
#include "../runtime/precision/precision.h"

#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>

namespace {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using Clock = std::chrono::steady_clock;

// ---- Workloads
// ----------------------------------------------------------------------------------------------

struct GptConfig {
  int64_t vocab = 256, dim = 128, heads = 4, layers = 2, context = 64, batch = 8;
  static GptConfig small() { return {}; }
  static GptConfig gpt_86m() { return {256, 768, 12, 12, 1024, 16}; }
};

/// Pre-norm block: x + proj(sdpa(qkv(ln1(x)))), then x + fc2(gelu(fc(ln2(x)))), causal attention.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptConfig& c) : heads(c.heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
    qkv = register_module("qkv", accelerate::nn::Linear(c.dim, 3 * c.dim));
    proj = register_module("proj", accelerate::nn::Linear(c.dim, c.dim));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
    fc = register_module("fc", accelerate::nn::Linear(c.dim, 4 * c.dim));
    fc2 = register_module("fc2", accelerate::nn::Linear(4 * c.dim, c.dim));
  }
  torch::Tensor forward(torch::Tensor x) {
    const auto batch = x.size(0), time = x.size(1), dim = x.size(2);
    auto parts = qkv(ln1(x)).view({batch, time, 3, heads, dim / heads}).permute({2, 0, 3, 1, 4});
    auto attended =
        at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true);
    x = x + proj(attended.transpose(1, 2).reshape({batch, time, dim}));
    return x + fc2(torch::gelu(fc(ln2(x))));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  accelerate::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& c) {
    token = register_module("token", torch::nn::Embedding(c.vocab, c.dim));
    position = register_module("position", torch::nn::Embedding(c.context, c.dim));
    blocks = register_module("blocks", torch::nn::Sequential());
    for (int64_t i = 0; i < c.layers; ++i) {
      blocks->push_back(Block(c));
    }
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
    head = register_module("head", accelerate::nn::Linear(c.dim, c.vocab));
  }
  torch::Tensor forward(torch::Tensor tokens) {
    auto positions = torch::arange(tokens.size(1), tokens.options());
    auto x = token(tokens) + position(positions);
    return head(ln(blocks->forward(x)));
  }
  torch::nn::Embedding token{nullptr}, position{nullptr};
  torch::nn::Sequential blocks{nullptr};
  torch::nn::LayerNorm ln{nullptr};
  accelerate::nn::Linear head{nullptr};
};
TORCH_MODULE(Gpt);

struct MlpMnist : torch::nn::Module {
  MlpMnist() {
    fc1 = register_module("fc1", accelerate::nn::Linear(784, 512));
    fc2 = register_module("fc2", accelerate::nn::Linear(512, 512));
    fc3 = register_module("fc3", accelerate::nn::Linear(512, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc3(torch::relu(fc2(torch::relu(fc1(x))))); }
  accelerate::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

double mean_of_last(const std::vector<double>& values, size_t count) {
  count = std::min(count, values.size());
  double sum = 0;
  for (size_t i = values.size() - count; i < values.size(); ++i) {
    sum += values[i];
  }
  return sum / static_cast<double>(count);
}

const std::vector<std::string> kPrecisions{"no", "bf16", "fp16", "fp8"};
std::string label(const std::string& precision) {
  return precision == "no" ? "fp32" : precision;
}

// ---- Checks
// ---------------------------------------------------------------------------------------------------

int failures = 0;

void report(bool ok, const std::string& name, const std::string& details) {
  failures += ok ? 0 : 1;
  std::cout << (ok ? "PASS " : "FAIL ") << name << "  (" << details << ")" << std::endl;
}

std::string format(double value) {
  std::ostringstream out;
  out << std::setprecision(4) << value;
  return out.str();
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

double relative_frobenius(const torch::Tensor& actual, const torch::Tensor& expected) {
  auto e = expected.to(torch::kFloat64);
  return (actual.to(torch::kFloat64) - e).norm().item<double>() / e.norm().item<double>();
}

void check_autocast_window() {
  Accelerator accelerator(AcceleratorOptions().mixed_precision("bf16"));
  auto layer = accelerate::nn::Linear(16, 16);
  accelerator.prepare(layer);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(layer->parameters(), 1e-3));
  bool in_forward = false, in_backward = true, before_step = true;
  {
    auto step = accelerator.accumulate(layer);
    optimizer.zero_grad();
    in_forward = at::autocast::is_autocast_enabled(at::kCUDA);
    auto y = layer(torch::randn({8, 16}, torch::kCUDA));
    y.register_hook([&](torch::Tensor grad) {
      in_backward = at::autocast::is_autocast_enabled(at::kCUDA);
      return grad;
    });
    accelerator.backward(y.to(torch::kFloat32).square().mean());
    before_step = at::autocast::is_autocast_enabled(at::kCUDA);
    optimizer.step();
  }
  report(in_forward && !in_backward && !before_step && !at::autocast::is_autocast_enabled(at::kCUDA),
         "autocast window on CUDA",
         "forward " + std::to_string(in_forward) + ", backward " + std::to_string(in_backward) + ", step " +
             std::to_string(before_step));
}

void check_grad_scaler(const std::string& data_dir) {
  std::ifstream file(data_dir + "/grad_scaler_sequence.txt");
  if (!file.good()) {
    report(false, "grad scaler vs torch.amp.GradScaler",
           "cannot read " + data_dir + "/grad_scaler_sequence.txt");
    return;
  }
  struct Run {
    std::string name, optimizer;
    accelerate::detail::GradScalerOptions options;
    int steps = 0;
    std::map<int, std::pair<int, std::string>> injections;
    std::map<int, std::pair<double, bool>> events;
    std::vector<double> final_parameter;
  };
  std::vector<Run> runs;
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "run") {
      Run run;
      in >> run.name >> run.optimizer >> run.options.init_scale >> run.options.growth_factor >>
          run.options.backoff_factor >> run.options.growth_interval >> run.steps;
      runs.push_back(run);
    } else if (kind == "inject") {
      int step = 0, index = 0;
      std::string value;
      in >> step >> index >> value;
      runs.back().injections[step] = {index, value};
    } else if (kind == "event") {
      int step = 0, skipped = 0;
      double scale = 0;
      in >> step >> scale >> skipped;
      runs.back().events[step] = {scale, skipped != 0};
    } else if (kind == "final") {
      double value = 0;
      while (in >> value) {
        runs.back().final_parameter.push_back(value);
      }
    }
  }
  for (const auto& run : runs) {
    Accelerator accelerator(AcceleratorOptions().mixed_precision("fp16"));
    auto& precision = *accelerate::detail::internal_state(accelerator).precision;
    precision.scaler()->reset(run.options);
    auto holder = std::make_shared<torch::nn::Module>();
    auto p = holder->register_parameter("p", torch::linspace(-1, 1, 8, torch::kFloat32));
    accelerator.prepare(holder);
    p = holder->named_parameters()["p"];
    std::shared_ptr<torch::optim::Optimizer> inner;
    if (run.optimizer == "adam") {
      inner = std::make_shared<torch::optim::Adam>(holder->parameters(), torch::optim::AdamOptions(1e-2));
    } else if (run.optimizer == "adamw") {
      inner = std::make_shared<torch::optim::AdamW>(holder->parameters(),
                                                    torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
    } else if (run.optimizer == "sgd") {
      inner = std::make_shared<torch::optim::SGD>(holder->parameters(),
                                                  torch::optim::SGDOptions(1e-2).momentum(0.9));
    } else {
      inner =
          std::make_shared<torch::optim::RMSprop>(holder->parameters(), torch::optim::RMSpropOptions(1e-3));
    }
    auto optimizer = accelerator.prepare_optimizer(inner);
    double expected_scale = run.options.init_scale;
    std::string mismatch;
    for (int step = 0; step < run.steps && mismatch.empty(); ++step) {
      auto guard = accelerator.accumulate(holder);
      optimizer.zero_grad();
      auto x = torch::sin(torch::arange(8, torch::kFloat32) + 0.37 * step).to(torch::kCUDA);
      accelerator.backward((p * x).sum());
      if (auto it = run.injections.find(step); it != run.injections.end()) {
        torch::NoGradGuard no_grad;
        const auto& value = it->second.second;
        p.grad()[it->second.first].fill_(value == "nan"    ? std::numeric_limits<double>::quiet_NaN()
                                         : value == "-inf" ? -std::numeric_limits<double>::infinity()
                                                           : std::numeric_limits<double>::infinity());
      }
      optimizer.step();
      bool expected_skip = false;
      if (auto it = run.events.find(step); it != run.events.end()) {
        expected_scale = it->second.first;
        expected_skip = it->second.second;
      }
      if (precision.scaler()->get_scale() != expected_scale ||
          accelerator.optimizer_step_was_skipped() != expected_skip) {
        mismatch = "step " + std::to_string(step) + ": scale " + format(precision.scaler()->get_scale()) +
                   " (torch " + format(expected_scale) + ")";
      }
    }
    auto expected = torch::tensor(run.final_parameter, torch::kFloat64);
    const double difference = max_difference(p.detach().cpu(), expected);
    report(mismatch.empty() && difference <= 1e-5, "grad scaler vs torch.amp.GradScaler: " + run.name,
           mismatch.empty() ? "final parameter differs by " + format(difference) : mismatch);
  }
}

std::vector<double> train_mlp_mnist(const std::string& precision) {
  Accelerator accelerator(AcceleratorOptions().mixed_precision(precision));
  torch::manual_seed(1);
  torch::nn::Linear teacher(784, 10);
  teacher->to(torch::kCUDA);
  torch::manual_seed(0);
  auto model = std::make_shared<MlpMnist>();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-3));
  std::vector<double> losses;
  for (int step = 0; step < 200; ++step) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(step);
    auto x = at::randn({64, 784}, generator).to(torch::kCUDA);
    torch::Tensor labels;
    {
      torch::NoGradGuard no_grad;
      labels = teacher(x).argmax(1);
    }
    auto guard = accelerator.accumulate(model);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), labels);
    accelerator.backward(loss);
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

void check_mlp_mnist() {
  auto fp32 = train_mlp_mnist("no");
  const double start =
      (fp32[0] + fp32[1] + fp32[2] + fp32[3] + fp32[4] + fp32[5] + fp32[6] + fp32[7] + fp32[8] + fp32[9]) /
      10;
  const double end = mean_of_last(fp32, 20);
  report(end <= 0.5 * start, "mlp-mnist fp32 loss falls by half in 200 steps",
         "first 10 steps " + format(start) + ", last 20 " + format(end));
  for (const std::string precision : {"fp16", "bf16"}) {
    const double mixed = mean_of_last(train_mlp_mnist(precision), 20);
    report(std::abs(mixed - end) <= 0.02 * end, "mlp-mnist " + precision + " within 2% of fp32",
           precision + " " + format(mixed) + ", fp32 " + format(end));
  }
}

void check_linear() {
  for (bool bias : {true, false}) {
    torch::manual_seed(3);
    torch::nn::Linear reference(torch::nn::LinearOptions(5, 7).bias(bias));
    torch::manual_seed(3);
    accelerate::nn::Linear layer(torch::nn::LinearOptions(5, 7).bias(bias));
    reference->to(torch::kCUDA, torch::kFloat64);
    layer->to(torch::kCUDA, torch::kFloat64);
    double worst = 0;
    for (auto shape : {std::vector<int64_t>{4, 5}, std::vector<int64_t>{3, 4, 5}}) {
      auto x = torch::randn(shape, torch::TensorOptions(torch::kFloat64).device(torch::kCUDA));
      auto xr = x.clone().requires_grad_(), xl = x.clone().requires_grad_();
      auto yr = reference(xr), yl = layer(xl);
      auto upstream = torch::randn_like(yr);
      yr.backward(upstream);
      yl.backward(upstream);
      worst = std::max({worst, max_difference(yl, yr), max_difference(xl.grad(), xr.grad()),
                        max_difference(layer->weight.grad(), reference->weight.grad())});
      if (bias) {
        worst = std::max(worst, max_difference(layer->bias.grad(), reference->bias.grad()));
      }
      reference->zero_grad();
      layer->zero_grad();
    }
    report(worst <= 1e-12,
           std::string("accelerate::nn::Linear == torch::nn::Linear on CUDA, float64") +
               (bias ? "" : ", no bias"),
           "max difference " + format(worst));
  }
}

torch::Tensor quantize_dequantize(const torch::Tensor& tensor, c10::ScalarType fp8_dtype) {
  const double max = fp8_dtype == c10::ScalarType::Float8_e4m3fn ? 448.0 : 57344.0;
  const double amax = std::max(tensor.abs().max().item<double>(), 1e-12);
  const float quant = static_cast<float>(max / amax);
  return (tensor.to(torch::kFloat32) * quant).clamp(-max, max).to(fp8_dtype).to(torch::kFloat64) /
         static_cast<double>(quant);
}

void check_fp8() {
  const auto reason = accelerate::detail::fp8_unsupported_reason(torch::Device(torch::kCUDA, 0));
  if (!reason.empty()) {
    std::cout << "SKIP fp8 checks (" << reason << ")" << std::endl;
    return;
  }
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  // The fused cast kernel (when built) against ATen's ops: bit for bit.
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    auto tensor = (torch::randn({1000, 37}, cuda) * 3).to(dtype);
    auto fused = accelerate::detail::quantize_fp8(tensor, c10::ScalarType::Float8_e4m3fn);
    const double max = 448.0;
    auto amax = tensor.abs().amax().to(torch::kFloat64).clamp_min(1e-12);
    auto quant = (torch::full({}, max, amax.options()) / amax).to(torch::kFloat32);
    auto data = (tensor.to(torch::kFloat32) * quant).clamp(-max, max).to(c10::ScalarType::Float8_e4m3fn);
    const bool same = torch::equal(fused.data.view(torch::kUInt8), data.view(torch::kUInt8)) &&
                      fused.scale.item<float>() == quant.reciprocal().item<float>();
    std::ostringstream name;
    name << "fp8 quantisation (" << dtype << ") equals ATen's amax/scale/saturating cast";
    report(same, name.str(), same ? "bitwise" : "differs");
  }
  torch::manual_seed(0);
  auto x = torch::randn({32, 64}, cuda).requires_grad_();
  auto w = (torch::randn({48, 64}, cuda) * 0.1).requires_grad_();
  auto b = torch::randn({48}, cuda).requires_grad_();
  auto y = accelerate::nn::fp8_linear(x, w, b, torch::kFloat32);
  auto xq = quantize_dequantize(x.detach(), c10::ScalarType::Float8_e4m3fn);
  auto wq = quantize_dequantize(w.detach(), c10::ScalarType::Float8_e4m3fn);
  auto upstream = torch::randn({32, 48}, cuda);
  y.backward(upstream);
  auto gq = quantize_dequantize(upstream, c10::ScalarType::Float8_e5m2);
  const double dy = max_difference(y, xq.matmul(wq.t()) + b.detach().to(torch::kFloat64));
  const double dx = max_difference(x.grad(), gq.matmul(wq));
  const double dw = max_difference(w.grad(), gq.t().matmul(xq));
  report(std::max({dy, dx, dw}) <= 1e-5, "fp8_linear within 1e-5 of quantise-dequantise",
         "output " + format(dy) + ", input grad " + format(dx) + ", weight grad " + format(dw));

  Accelerator accelerator(AcceleratorOptions().mixed_precision("fp8"));
  torch::manual_seed(0);
  accelerate::nn::Linear layer(256, 128);
  layer->to(torch::kCUDA);
  auto input = torch::randn({4, 16, 256}, cuda);
  auto grad = torch::randn({4, 16, 128}, cuda);
  auto x32 = input.clone().requires_grad_();
  layer(x32).backward(grad);
  auto y32 = layer(input).detach();
  auto dx32 = x32.grad().clone(), dw32 = layer->weight.grad().clone();
  layer->zero_grad();
  auto x8 = input.clone().requires_grad_();
  torch::Tensor y8;
  {
    auto step = accelerator.accumulate(layer);
    y8 = layer(x8);
    accelerator.backward(y8, grad.to(y8.scalar_type()));
  }
  const double ey = relative_frobenius(y8, y32), ex = relative_frobenius(x8.grad(), dx32),
               ew = relative_frobenius(layer->weight.grad(), dw32);
  report(ey <= 0.05 && ex <= 0.08 && ew <= 0.08, "fp8 Linear vs fp32 (relative Frobenius)",
         "output " + format(ey) + ", input grad " + format(ex) + ", weight grad " + format(ew));
}

/// fp32 and bf16 with a fused optimizer: nothing in the step may wait for the device (docs/precision.md,
/// "Host synchronisation in the step"). c10's sync-debug mode turns every synchronising CUDA call (a
/// device-to-host copy, .item(), a stream or device synchronisation) into an error while the steps run.
void check_step_has_no_host_sync() {
  for (const std::string precision : {"no", "bf16"}) {
    Accelerator accelerator(AcceleratorOptions().mixed_precision(precision));
    torch::manual_seed(0);
    auto model = std::make_shared<MlpMnist>();
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-3));
    auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, /*step_size=*/2, /*gamma=*/0.5));
    // The batches reach the device before the check: a copy from pageable host memory synchronises.
    std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
    for (int i = 0; i < 8; ++i) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(i);
      batches.emplace_back(at::randn({64, 784}, generator).to(torch::kCUDA),
                           at::randint(10, {64}, generator).to(torch::kCUDA));
    }
    torch::Tensor loss;
    auto step = [&](int i) {
      auto guard = accelerator.accumulate(model);
      optimizer.zero_grad();
      loss = torch::nn::functional::cross_entropy(model->forward(batches[i].first), batches[i].second);
      accelerator.backward(loss);
      accelerator.clip_grad_norm_(model->parameters(), 1.0);
      optimizer.step();
      scheduler.step();
    };
    for (int i = 0; i < 2; ++i) {
      step(i); // the first steps create the optimizer state
    }
    torch::cuda::synchronize();
    std::string error;
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    try {
      for (int i = 2; i < 8; ++i) {
        step(i);
      }
    } catch (const std::exception& caught) {
      error = caught.what();
    }
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    report(error.empty() && std::isfinite(loss.item<double>()),
           "training step without a host synchronisation, " + label(precision),
           error.empty() ? "6 steps of zero_grad, forward, backward, clip_grad_norm_, fused AdamW, StepLR"
                         : error.substr(0, error.find('\n')));
  }
}

/// AcceleratorOptions().cuda_graph(true): mlp-mnist through Accelerator::graphed_step, captured and replayed,
/// against the same step run eagerly — same losses and weights, same step counters — with a scheduler
/// stepping between calls and a short last batch (run eagerly); and a step that reads the loss on the host
/// refused at capture with the counters it moved taken back.
void check_graphed_step() {
  struct Run {
    std::vector<double> losses;
    torch::Tensor weights;
    int64_t replays = 0, eager_calls = 0, optimizer_steps = 0, adam_steps = 0;
    bool captured = false;
  };
  for (const std::string precision : {"no", "bf16"}) {
    auto train = [&](bool graphed) {
      Accelerator accelerator(AcceleratorOptions().mixed_precision(precision).cuda_graph(graphed));
      torch::manual_seed(0);
      auto model = std::make_shared<MlpMnist>();
      accelerator.prepare(model);
      auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-3));
      auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, /*step_size=*/3, /*gamma=*/0.5));
      auto step = accelerator.graphed_step([&](const torch::Tensor& x, const torch::Tensor& y) {
        auto guard = accelerator.accumulate(model);
        optimizer.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
        accelerator.backward(loss);
        accelerator.clip_grad_norm_(model->parameters(), 1.0);
        optimizer.step();
        return loss;
      });
      Run run;
      for (int i = 0; i < 12; ++i) {
        auto generator = at::make_generator<at::CPUGeneratorImpl>(100 + i);
        const int64_t rows = i == 11 ? 40 : 64;
        auto x = at::randn({rows, 784}, generator).to(torch::kCUDA);
        auto y = at::randint(10, {rows}, generator).to(torch::kCUDA);
        run.losses.push_back(step(x, y).item<double>());
        scheduler.step();
      }
      std::vector<torch::Tensor> flat;
      for (const auto& p : model->parameters()) {
        flat.push_back(p.detach().reshape({-1}).to(torch::kFloat64).cpu());
      }
      run.weights = torch::cat(flat);
      run.captured = step.captured();
      run.replays = step.replays();
      run.eager_calls = step.eager_calls();
      run.optimizer_steps = accelerate::detail::internal_state(accelerator).gradient_state->optimizer_steps;
      auto& state = optimizer.unwrap().state();
      run.adam_steps = state.empty() ? 0
                                     : static_cast<torch::optim::AdamWParamState&>(
                                           *state.at(model->fc1->weight.unsafeGetTensorImpl()))
                                           .step();
      return run;
    };
    const Run eager = train(false);
    const Run graphed = train(true);
    report(graphed.captured && graphed.replays == 8 && graphed.eager_calls == 4,
           "graphed step: captured and replayed, " + label(precision),
           "replays " + std::to_string(graphed.replays) + " (expected 8: calls 4-11), eager calls " +
               std::to_string(graphed.eager_calls) + " (expected 4: 3 warm-up, 1 short batch)");
    double worst = 0;
    for (size_t i = 0; i < eager.losses.size(); ++i) {
      worst = std::max(worst, std::abs(graphed.losses[i] - eager.losses[i]) / std::abs(eager.losses[i]));
    }
    const double weights = relative_frobenius(graphed.weights, eager.weights);
    report(worst <= 1e-5 && weights <= 1e-5, "graphed step trains as the eager step, " + label(precision),
           "12 steps (StepLR between them, last batch short): losses differ by " + format(worst) +
               " relative at most, weights by " + format(weights));
    report(graphed.optimizer_steps == 12 && graphed.adam_steps == 12 && eager.adam_steps == 12,
           "graphed step keeps the step counters, " + label(precision),
           "optimizer steps " + std::to_string(graphed.optimizer_steps) + ", AdamW step count " +
               std::to_string(graphed.adam_steps) + " (eager " + std::to_string(eager.adam_steps) + ")");
  }

  Accelerator accelerator(AcceleratorOptions().cuda_graph(true));
  torch::manual_seed(0);
  auto model = std::make_shared<MlpMnist>();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-3));
  auto step = accelerator.graphed_step([&](const torch::Tensor& x, const torch::Tensor& y) {
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    accelerator.backward(loss);
    optimizer.step();
    if (loss.item<double>() > 1e9) { // a host read: fine eagerly, impossible inside a capture
      std::cout << "diverged" << std::endl;
    }
    return loss;
  });
  auto x = torch::randn({64, 784}, torch::kCUDA);
  auto y = torch::randint(10, {64}, torch::kCUDA);
  std::string error;
  for (int i = 0; i < 4 && error.empty(); ++i) {
    try {
      step(x, y);
    } catch (const std::exception& caught) {
      error = caught.what();
    }
  }
  const auto steps = accelerate::detail::internal_state(accelerator).gradient_state->optimizer_steps;
  report(error.find("could not be captured") != std::string::npos && steps == 3,
         "graphed step with a host read is refused at capture",
         (error.empty() ? std::string("no error") : error.substr(0, error.find('\n'))) +
             "; optimizer steps after it " + std::to_string(steps) + " (expected 3: the warm-up)");
}

int run_checks(const std::string& data_dir) {
  check_autocast_window();
  check_grad_scaler(data_dir);
  check_mlp_mnist();
  check_linear();
  check_fp8();
  check_step_has_no_host_sync();
  check_graphed_step();
  std::cout << (failures == 0 ? "all checks passed" : std::to_string(failures) + " check(s) failed")
            << std::endl;
  return failures == 0 ? 0 : 1;
}

// ---- Benchmarks
// -----------------------------------------------------------------------------------------------

struct TrainResult {
  std::vector<double> step_ms, losses;
};

TrainResult train_gpt(const GptConfig& config, const std::string& precision, int warmup, int steps,
                      bool record_losses, bool graphed = false) {
  Accelerator accelerator(AcceleratorOptions().mixed_precision(precision).cuda_graph(graphed));
  torch::manual_seed(0);
  auto model = Gpt(config);
  accelerator.prepare(model);
  auto optimizer =
      accelerator.prepare(torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(3e-4)));
  // Without cuda_graph the graphed step runs as written: the same loop either way.
  auto train_step = accelerator.graphed_step([&](const torch::Tensor& input, const torch::Tensor& target) {
    auto guard = accelerator.accumulate(model);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(input).view({-1, config.vocab}),
                                                     target.reshape({-1}));
    accelerator.backward(loss);
    optimizer.step();
    return loss;
  });
  TrainResult result;
  for (int i = 0; i < warmup + steps; ++i) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(i);
    auto tokens = at::randint(config.vocab, {config.batch, config.context + 1}, generator).to(torch::kCUDA);
    auto input = tokens.slice(1, 0, config.context), target = tokens.slice(1, 1, config.context + 1);
    torch::cuda::synchronize();
    const auto start = Clock::now();
    torch::Tensor loss = train_step(input, target);
    torch::cuda::synchronize();
    if (i >= warmup) {
      result.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    if (record_losses) {
      result.losses.push_back(loss.item<double>());
    }
  }
  return result;
}

int bench_gpt_86m(bool quick) {
  const int warmup = 5, steps = quick ? 20 : 50;
  std::cout << "gpt-86m (16 x 1024 tokens, AdamW): " << warmup << " warm-up + " << steps
            << " timed steps per precision, median step time" << std::endl;
  std::cout << std::left << std::setw(10) << "precision" << std::right << std::setw(12) << "step ms"
            << std::setw(14) << "fp32 / this" << std::endl;
  double fp32 = 0;
  for (const auto& precision : kPrecisions) {
    const double ms = median(train_gpt(GptConfig::gpt_86m(), precision, warmup, steps, false).step_ms);
    fp32 = precision == "no" ? ms : fp32;
    std::cout << std::left << std::setw(10) << label(precision) << std::right << std::fixed
              << std::setprecision(2) << std::setw(12) << ms << std::setw(14) << fp32 / ms << std::endl;
  }
  return 0;
}

int bench_gpt_small_losses() {
  std::cout
      << "gpt-small (8 x 64 tokens, AdamW 3e-4): 200 steps per precision; final loss = mean of the last 20"
      << std::endl;
  double fp32 = 0;
  int failed = 0;
  for (const auto& precision : kPrecisions) {
    const double loss = mean_of_last(train_gpt(GptConfig::small(), precision, 0, 200, true).losses, 20);
    fp32 = precision == "no" ? loss : fp32;
    const double relative = std::abs(loss - fp32) / fp32;
    const bool ok = relative <= 0.03;
    failed += ok ? 0 : 1;
    std::cout << (ok ? "PASS " : "FAIL ") << std::left << std::setw(6) << label(precision) << " final loss "
              << std::fixed << std::setprecision(4) << loss << "  (" << std::setprecision(2) << 100 * relative
              << "% from fp32, goal <= 3%)" << std::endl;
  }
  return failed == 0 ? 0 : 1;
}

/// Eager against graphed steps (AcceleratorOptions().cuda_graph), alternated, medians: gpt-small and gpt-86m.
int bench_cuda_graph(bool quick) {
  const int warmup = 8, steps = quick ? 20 : 50, reps = quick ? 2 : 3;
  std::cout << "cuda_graph: eager against graphed training steps (AdamW), " << reps << " alternated reps x "
            << steps << " timed steps (+" << warmup << " warm-up, which includes the capture), medians"
            << std::endl;
  std::cout << std::left << std::setw(12) << "workload" << std::setw(10) << "precision" << std::right
            << std::setw(12) << "eager ms" << std::setw(14) << "graphed ms" << std::setw(16)
            << "eager / graphed" << std::endl;
  int failed = 0;
  for (const auto& [name, config] : std::vector<std::pair<std::string, GptConfig>>{
           {"gpt-small", GptConfig::small()}, {"gpt-86m", GptConfig::gpt_86m()}}) {
    for (const std::string precision : {"bf16", "no"}) {
      if (name == "gpt-86m" && precision == "no" && quick) {
        continue;
      }
      std::vector<double> eager, graphed;
      std::vector<double> eager_losses, graphed_losses;
      for (int rep = 0; rep < reps; ++rep) {
        auto a = train_gpt(config, precision, warmup, steps, rep == 0);
        auto b = train_gpt(config, precision, warmup, steps, rep == 0, /*graphed=*/true);
        eager.push_back(median(a.step_ms));
        graphed.push_back(median(b.step_ms));
        if (rep == 0) {
          eager_losses = a.losses;
          graphed_losses = b.losses;
        }
      }
      double worst = 0;
      for (size_t i = 0; i < eager_losses.size(); ++i) {
        worst = std::max(worst, std::abs(graphed_losses[i] - eager_losses[i]) / std::abs(eager_losses[i]));
      }
      const double a = median(eager), b = median(graphed);
      const bool same = worst <= 1e-4;
      failed += same ? 0 : 1;
      std::cout << std::left << std::setw(12) << name << std::setw(10) << label(precision) << std::right
                << std::fixed << std::setprecision(2) << std::setw(12) << a << std::setw(14) << b
                << std::setw(16) << a / b << "   losses " << (same ? "match" : "DIFFER") << " ("
                << std::scientific << std::setprecision(1) << worst << " relative)" << std::defaultfloat
                << std::endl;
    }
  }
  return failed == 0 ? 0 : 1;
}

/// Median milliseconds of one forward+backward of `layer` on `input` inside `accelerator`'s autocast window.
double time_linear(Accelerator& accelerator, accelerate::nn::Linear& layer, const torch::Tensor& input,
                   const torch::Tensor& upstream, int iterations) {
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    torch::cuda::synchronize();
    const auto start = Clock::now();
    torch::Tensor output;
    {
      auto autocast = accelerator.autocast();
      output = layer(input);
    }
    output.backward(upstream.to(output.scalar_type()));
    torch::cuda::synchronize();
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return median(times);
}

int bench_fp8_linear(bool quick) {
  const auto reason = accelerate::detail::fp8_unsupported_reason(torch::Device(torch::kCUDA, 0));
  if (!reason.empty()) {
    std::cout << "SKIP fp8 Linear throughput: " << reason << std::endl;
    return 0;
  }
  Accelerator bf16(AcceleratorOptions().mixed_precision("bf16"));
  Accelerator fp8(AcceleratorOptions().mixed_precision("fp8"));
  const int reps = quick ? 3 : 7, iterations = quick ? 10 : 20;
  std::cout << "accelerate::nn::Linear forward+backward (M = N = K), " << reps << " alternated reps x "
            << iterations << " iterations, medians; TFLOP/s counts 3 GEMMs" << std::endl;
  std::cout << std::setw(6) << "size" << std::setw(12) << "bf16 ms" << std::setw(12) << "fp8 ms"
            << std::setw(12) << "bf16 TF/s" << std::setw(12) << "fp8 TF/s" << std::setw(12) << "fp8 speedup"
            << std::endl;
  for (int64_t n : {4096, 8192}) {
    torch::manual_seed(0);
    accelerate::nn::Linear layer(n, n);
    layer->to(torch::kCUDA);
    auto input = torch::randn({n, n}, torch::kCUDA).requires_grad_();
    auto upstream = torch::randn({n, n}, torch::kCUDA);
    std::vector<double> bf16_ms, fp8_ms;
    time_linear(bf16, layer, input, upstream, 3); // warm-up: cuBLAS heuristics, allocator
    time_linear(fp8, layer, input, upstream, 3);
    for (int rep = 0; rep < reps; ++rep) {
      bf16_ms.push_back(time_linear(bf16, layer, input, upstream, iterations));
      fp8_ms.push_back(time_linear(fp8, layer, input, upstream, iterations));
      layer->zero_grad();
      input.mutable_grad() = torch::Tensor();
    }
    const double a = median(bf16_ms), b = median(fp8_ms);
    const double flop = 3 * 2.0 * static_cast<double>(n) * n * n;
    std::cout << std::setw(6) << n << std::fixed << std::setprecision(3) << std::setw(12) << a
              << std::setw(12) << b << std::setprecision(1) << std::setw(12) << flop / a / 1e9
              << std::setw(12) << flop / b / 1e9 << std::setprecision(2) << std::setw(12) << a / b
              << (n == 8192 ? "   (goal >= 1.3x on an H200)" : "") << std::endl;
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string stage, data_dir = "test/data";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) {
      if (i + 1 >= argc) {
        std::cerr << "bench_precision: " << flag << " needs a value\n";
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (!std::strcmp(argv[i], "--stage")) {
      stage = next("--stage");
    } else if (!std::strcmp(argv[i], "--data")) {
      data_dir = next("--data");
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else {
      std::cerr
          << "bench_precision: unknown argument '" << argv[i]
          << "' (use --stage checks|gpt-86m|gpt-small-losses|fp8-linear|cuda-graph, --quick, --data DIR)\n";
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::cerr
        << "bench_precision: no CUDA device is visible; these checks and benchmarks need a GPU (the CPU "
           "versions are the precision and graphed-step unit tests: ctest -R "
           "'runtime\\.(Autocast|GradScaler|MlpMnist|Linear|Fp8|GraphedStep)')\n";
    return 3;
  }
  at::set_num_threads(1);
  torch::cuda::synchronize(); // initialise CUDA before the first timing
  const auto capability = accelerate::detail::cuda_capability(0);
  const auto fp8 = accelerate::detail::fp8_unsupported_reason(torch::Device(torch::kCUDA, 0));
  std::cout << "torch " << TORCH_VERSION << "; cuda:0 compute capability "
            << (capability ? std::to_string(capability->first) + "." + std::to_string(capability->second)
                           : std::string("unknown (built without the CUDA kernels)"))
            << "; fp8 " << (fp8.empty() ? std::string("available") : "unavailable: " + fp8) << std::endl;
  if (stage == "checks") {
    return run_checks(data_dir);
  }
  if (stage == "gpt-86m") {
    return bench_gpt_86m(quick);
  }
  if (stage == "gpt-small-losses") {
    return bench_gpt_small_losses();
  }
  if (stage == "fp8-linear") {
    return bench_fp8_linear(quick);
  }
  if (stage == "cuda-graph") {
    return bench_cuda_graph(quick);
  }
  std::cerr
      << "bench_precision: --stage must be checks, gpt-86m, gpt-small-losses, fp8-linear or cuda-graph (got '"
      << stage << "')\n";
  return 2;
}
