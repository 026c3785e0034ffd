// Single-process tests of mixed precision: the autocast window, the fp16 grad scaler against
// torch.amp.GradScaler, mlp-mnist in fp32/fp16/bf16, accelerate::nn::Linear against torch::nn::Linear, and
// fp8 (emulated on the CPU).
//
// Preconditions: one intra-op thread; the GradScaler oracle (test/data/grad_scaler_sequence.txt) was written
// by test/data/make_grad_scaler_sequence.py with torch 2.11.0, whose CPU kernels are the ones linked here.
#include <accelerate/accelerate.h>

#include "../../runtime/accelerator/state.h"
#include "../../runtime/precision/fp8.h"
#include "../../runtime/precision/precision.h"

#include <gtest/gtest.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#ifndef ACCEL_TEST_DATA_DIR
#error "ACCEL_TEST_DATA_DIR must name test/data (set by test/runtime/precision_tests.cmake)"
#endif

namespace {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::detail::internal_state;

AcceleratorOptions cpu_options(const std::string& precision) {
  return AcceleratorOptions().cpu(true).mixed_precision(precision);
}

/// Collects the warnings raised on this thread while alive (TORCH_WARN goes through c10's handler).
class WarningCapture : public c10::WarningHandler {
public:
  WarningCapture() : guard_(this) {}
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  int count(const std::string& needle) const {
    int n = 0;
    for (const auto& message : messages) {
      n += message.find(needle) != std::string::npos ? 1 : 0;
    }
    return n;
  }
  std::string all() const {
    std::string joined;
    for (const auto& message : messages) {
      joined += message + "\n";
    }
    return joined;
  }
  std::vector<std::string> messages;

private:
  c10::WarningUtils::WarningHandlerGuard guard_;
};

std::string temp_path(const std::string& name) {
  return "/tmp/accelerate_precision_" + std::to_string(getpid()) + "_" + name;
}

// ---- The autocast window
// ------------------------------------------------------------------------------------

/// Records whether autocast is on when its forward and its backward run.
struct ProbeNet : torch::nn::Module {
  ProbeNet() { fc = register_module("fc", accelerate::nn::Linear(4, 2)); }
  torch::Tensor forward(const torch::Tensor& x) {
    forward_autocast = at::autocast::is_autocast_enabled(at::kCPU);
    auto y = fc(x);
    if (!y.requires_grad()) {
      return y;
    }
    y.register_hook([this](torch::Tensor grad) {
      backward_autocast = at::autocast::is_autocast_enabled(at::kCPU);
      return grad;
    });
    return y;
  }
  accelerate::nn::Linear fc{nullptr};
  bool forward_autocast = false;
  bool backward_autocast = true;
};

/// A libtorch optimizer without a fused kernel (so the prepared optimizer calls its step) that records
/// whether autocast was on while it stepped.
class RecordingOptimizer : public torch::optim::Optimizer {
public:
  explicit RecordingOptimizer(std::vector<torch::Tensor> params)
      : Optimizer(std::move(params), std::make_unique<torch::optim::SGDOptions>(0.1)) {}
  torch::Tensor step(LossClosure = nullptr) override {
    step_autocast = at::autocast::is_autocast_enabled(at::kCPU);
    ++steps;
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      for (auto& param : group.params()) {
        if (param.grad().defined()) {
          param.sub_(param.grad(), 0.1);
        }
      }
    }
    return {};
  }
  bool step_autocast = true;
  int steps = 0;
};

void expect_window(const std::string& precision) {
  SCOPED_TRACE("mixed_precision=" + precision);
  Accelerator accelerator(cpu_options(precision));
  auto model = std::make_shared<ProbeNet>();
  accelerator.prepare(model);
  auto recording = std::make_shared<RecordingOptimizer>(model->parameters());
  auto optimizer = accelerator.prepare_optimizer(recording);
  // fp16 skips the first steps (float16 gradients overflow at the initial scale 65536) until the scale backs
  // off.
  for (int step = 0; step < 20; ++step) {
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU)) << "before the accumulate guard";
    {
      auto guard = accelerator.accumulate(model);
      optimizer.zero_grad();
      auto loss = model->forward(torch::randn({3, 4})).to(torch::kFloat32).square().mean();
      EXPECT_TRUE(model->forward_autocast) << "inside forward";
      accelerator.backward(loss);
      EXPECT_FALSE(model->backward_autocast) << "inside backward";
      EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU)) << "between backward and step";
      optimizer.step();
      if (!optimizer.step_was_skipped()) {
        EXPECT_FALSE(recording->step_autocast) << "inside step";
      }
    }
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU)) << "after the accumulate guard";
  }
  EXPECT_GT(recording->steps, 0) << "the optimizer stepped at least once";
}

TEST(Autocast, OnInsideForwardOffInsideBackwardAndStep) {
  expect_window("bf16");
  expect_window("fp16");
}

TEST(Autocast, NeverOnWithoutMixedPrecision) {
  Accelerator accelerator(cpu_options("no"));
  auto model = std::make_shared<ProbeNet>();
  accelerator.prepare(model);
  auto guard = accelerator.accumulate(model);
  model->forward(torch::randn({3, 4}));
  EXPECT_FALSE(model->forward_autocast);
  auto autocast = accelerator.autocast();
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
}

TEST(Autocast, GuardOpensForEvaluationAndRestoresWhatWasThere) {
  Accelerator accelerator(cpu_options("bf16"));
  auto model = std::make_shared<ProbeNet>();
  accelerator.prepare(model);
  {
    auto autocast = accelerator.autocast();
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), torch::kBFloat16);
    torch::NoGradGuard no_grad;
    EXPECT_EQ(model->forward(torch::randn({3, 4})).scalar_type(), torch::kBFloat16);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  // Inside a step the guard neither reopens nor closes the step's window.
  auto step = accelerator.accumulate(model);
  {
    auto autocast = accelerator.autocast();
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
  }
  EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU)) << "the accumulate guard's window stays open";
}

TEST(Autocast, WarnsOnceWhenBackwardFollowsNoAutocastRegion) {
  WarningCapture warnings;
  Accelerator accelerator(cpu_options("bf16"));
  auto model = std::make_shared<ProbeNet>();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  for (int step = 0; step < 3; ++step) { // a loop written by hand, without the guards
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({3, 4})).square().mean();
    EXPECT_FALSE(model->forward_autocast);
    accelerator.backward(loss);
    optimizer.step();
  }
  EXPECT_EQ(warnings.count("outside any autocast region"), 1) << warnings.all();
  EXPECT_EQ(warnings.count("accelerator.accumulate(model)"), 1) << "the warning names the fix";
}

// ---- fp16: the grad scaler
// -----------------------------------------------------------------------------------

/// One run of test/data/grad_scaler_sequence.txt.
struct ScalerRun {
  std::string name, optimizer;
  accelerate::detail::GradScalerOptions options;
  int steps = 0;
  std::map<int, std::pair<int, std::string>> injections;
  std::map<int, std::pair<double, bool>> events; // step -> (scale after update, skipped)
  std::vector<double> final_parameter;
};

std::vector<ScalerRun> read_scaler_runs() {
  const std::string path = std::string(ACCEL_TEST_DATA_DIR) + "/grad_scaler_sequence.txt";
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "cannot read " << path;
  std::vector<ScalerRun> runs;
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "run") {
      ScalerRun run;
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
  return runs;
}

struct ParameterModule : torch::nn::Module {
  ParameterModule() { p = register_parameter("p", torch::linspace(-1, 1, 8, torch::kFloat32)); }
  torch::Tensor p;
};

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind,
                                                        std::vector<torch::Tensor> params) {
  if (kind == "adam") {
    return std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-2));
  }
  if (kind == "adamw") {
    return std::make_shared<torch::optim::AdamW>(params, torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  }
  if (kind == "sgd") {
    return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(1e-2).momentum(0.9));
  }
  if (kind == "rmsprop") {
    return std::make_shared<torch::optim::RMSprop>(params, torch::optim::RMSpropOptions(1e-3));
  }
  ADD_FAILURE() << "unknown optimizer " << kind;
  return nullptr;
}

double parse_injection(const std::string& value) {
  if (value == "nan") {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return value == "-inf" ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

void expect_run_matches_torch(const ScalerRun& run) {
  SCOPED_TRACE("run " + run.name);
  at::set_num_threads(1);
  Accelerator accelerator(cpu_options("fp16"));
  auto& precision = *internal_state(accelerator).precision;
  ASSERT_NE(precision.scaler(), nullptr);
  precision.scaler()->reset(run.options);
  auto module = std::make_shared<ParameterModule>();
  accelerator.prepare(module);
  auto optimizer = accelerator.prepare_optimizer(make_optimizer(run.optimizer, module->parameters()));
  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, /*step_size=*/1, /*gamma=*/1.0));
  double expected_scale = run.options.init_scale;
  int64_t taken = 0;
  for (int step = 0; step < run.steps; ++step) {
    auto guard = accelerator.accumulate(module);
    optimizer.zero_grad();
    auto x = torch::sin(torch::arange(8, torch::kFloat32) + 0.37 * step);
    accelerator.backward((module->p * x).sum());
    if (auto it = run.injections.find(step); it != run.injections.end()) {
      torch::NoGradGuard no_grad;
      module->p.grad()[it->second.first].fill_(parse_injection(it->second.second));
    }
    optimizer.step();
    scheduler.step();
    bool expected_skip = false;
    if (auto it = run.events.find(step); it != run.events.end()) {
      expected_scale = it->second.first;
      expected_skip = it->second.second;
    }
    ASSERT_EQ(precision.scaler()->get_scale(), expected_scale) << "scale after step " << step;
    ASSERT_EQ(accelerator.optimizer_step_was_skipped(), expected_skip) << "skip at step " << step;
    ASSERT_EQ(optimizer.step_was_skipped(), expected_skip) << "skip at step " << step;
    taken += expected_skip ? 0 : 1;
  }
  EXPECT_EQ(accelerator.gradient_state()->optimizer_steps, taken) << "skipped steps are not counted";
  EXPECT_EQ(scheduler.steps(), taken) << "a skipped step does not step the scheduler";
  ASSERT_EQ(run.final_parameter.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const double actual = module->p[i].item<double>();
    EXPECT_NEAR(actual, run.final_parameter[i], 1e-6 * (1 + std::abs(run.final_parameter[i])))
        << "p[" << i << "] after the run";
  }
}

TEST(GradScaler, ScaleAndSkipSequenceMatchesTorchAmpGradScaler) {
  auto runs = read_scaler_runs();
  ASSERT_EQ(runs.size(), 4u);
  for (const auto& run : runs) {
    expect_run_matches_torch(run);
  }
}

TEST(GradScaler, DefaultsAreTorchAmpGradScalers) {
  Accelerator accelerator(cpu_options("fp16"));
  auto* scaler = internal_state(accelerator).precision->scaler();
  ASSERT_NE(scaler, nullptr);
  EXPECT_EQ(scaler->get_scale(), 65536.0);
  EXPECT_EQ(scaler->options().growth_factor, 2.0);
  EXPECT_EQ(scaler->options().backoff_factor, 0.5);
  EXPECT_EQ(scaler->options().growth_interval, 2000);
  Accelerator bf16(cpu_options("bf16"));
  EXPECT_EQ(internal_state(bf16).precision->scaler(), nullptr) << "bf16 has no scaler";
}

/// Elementwise model (no autocast-listed op): fp16 runs compute exactly what fp32 runs compute, since the
/// loss scale is a power of two.
struct Elementwise : torch::nn::Module {
  Elementwise() { w = register_parameter("w", torch::linspace(-1, 1, 16, torch::kFloat32)); }
  torch::Tensor forward(const torch::Tensor& x) { return (torch::tanh(w * x) * w).sum(); }
  torch::Tensor w;
};

std::vector<double> train_elementwise(const std::string& precision, int accumulation,
                                      bool clip_every_micro_step, std::vector<double>* norms) {
  Accelerator accelerator(cpu_options(precision).gradient_accumulation_steps(accumulation));
  auto model = std::make_shared<Elementwise>();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
  for (int step = 0; step < 12; ++step) {
    auto guard = accelerator.accumulate(model);
    optimizer.zero_grad();
    accelerator.backward(model->forward(torch::cos(torch::arange(16, torch::kFloat32) * (step + 1))));
    if (clip_every_micro_step || accelerator.sync_gradients()) {
      norms->push_back(accelerator.clip_grad_norm_(model->parameters(), 0.5).item<double>());
    }
    optimizer.step();
  }
  auto w = model->w.detach();
  return std::vector<double>(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
}

TEST(GradScaler, ClipGradNormUnscalesFirst) {
  for (int accumulation : {1, 3}) {
    for (bool every_micro_step : {false, true}) {
      SCOPED_TRACE("accumulation " + std::to_string(accumulation) +
                   (every_micro_step ? ", clip every micro-step" : ""));
      std::vector<double> fp32_norms, fp16_norms;
      auto fp32 = train_elementwise("no", accumulation, every_micro_step, &fp32_norms);
      auto fp16 = train_elementwise("fp16", accumulation, every_micro_step, &fp16_norms);
      ASSERT_EQ(fp32_norms.size(), fp16_norms.size());
      for (size_t i = 0; i < fp32_norms.size(); ++i) {
        EXPECT_NEAR(fp16_norms[i], fp32_norms[i], 1e-6 * fp32_norms[i])
            << "norm " << i << " is of unscaled gradients";
      }
      for (size_t i = 0; i < fp32.size(); ++i) {
        EXPECT_NEAR(fp16[i], fp32[i], 1e-6) << "w[" << i << "]";
      }
    }
  }
}

TEST(GradScaler, SaveAndLoadRestoreScaleAndTracker) {
  Accelerator accelerator(cpu_options("fp16"));
  auto& precision = *internal_state(accelerator).precision;
  precision.scaler()->reset({/*init_scale=*/1024, /*growth_factor=*/2, /*backoff_factor=*/0.5,
                             /*growth_interval=*/3});
  auto module = std::make_shared<ParameterModule>();
  accelerator.prepare(module);
  auto optimizer = accelerator.prepare(torch::optim::SGD(module->parameters(), 1e-2));
  auto train = [&](int steps) {
    for (int step = 0; step < steps; ++step) {
      auto guard = accelerator.accumulate(module);
      optimizer.zero_grad();
      accelerator.backward(module->p.square().sum());
      optimizer.step();
    }
  };
  train(5); // one growth at step 3, tracker 2 of 3 after step 5
  torch::serialize::OutputArchive archive;
  precision.save(archive);
  const auto path = temp_path("scaler.pt");
  archive.save_to(path);

  Accelerator restored(cpu_options("fp16"));
  auto& restored_precision = *internal_state(restored).precision;
  torch::serialize::InputArchive input;
  input.load_from(path);
  restored_precision.load(input);
  std::remove(path.c_str());
  EXPECT_EQ(restored_precision.scaler()->get_scale(), 2048.0);
  EXPECT_EQ(restored_precision.scaler()->options().growth_interval, 3);
  // One more clean step completes the interval in both: the tracker came back too.
  train(1);
  auto found_inf = torch::zeros({});
  restored_precision.scaler()->update(found_inf);
  EXPECT_EQ(precision.scaler()->get_scale(), 4096.0);
  EXPECT_EQ(restored_precision.scaler()->get_scale(), 4096.0);
}

// ---- mlp-mnist (shared/DESIGN.md §6): 784-512-512-10, batch 64, labels from a fixed teacher
// -----------------

struct MlpMnist : torch::nn::Module {
  MlpMnist() {
    fc1 = register_module("fc1", accelerate::nn::Linear(784, 512));
    fc2 = register_module("fc2", accelerate::nn::Linear(512, 512));
    fc3 = register_module("fc3", accelerate::nn::Linear(512, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc3(torch::relu(fc2(torch::relu(fc1(x))))); }
  accelerate::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

/// Per-step losses of 200 AdamW steps (lr 1e-3) on fresh teacher-labelled batches, the same in every run.
std::vector<double> train_mlp_mnist(const std::string& precision) {
  at::set_num_threads(1);
  Accelerator accelerator(cpu_options(precision));
  torch::manual_seed(1);
  torch::nn::Linear teacher(784, 10);
  torch::manual_seed(0);
  auto model = std::make_shared<MlpMnist>();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-3));
  std::vector<double> losses;
  for (int step = 0; step < 200; ++step) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(step);
    auto x = at::randn({64, 784}, generator);
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

double mean(const std::vector<double>& values, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) {
    sum += values[i];
  }
  return sum / static_cast<double>(end - begin);
}

/// The loss a run ends with: the mean of its last 20 steps (each step has a fresh batch).
double final_loss(const std::vector<double>& losses) {
  return mean(losses, losses.size() - 20, losses.size());
}

TEST(MlpMnist, Fp32LossFallsByHalfIn200Steps) {
  auto losses = train_mlp_mnist("no");
  const double start = mean(losses, 0, 10), end = final_loss(losses);
  EXPECT_LE(end, 0.5 * start) << "first 10 steps " << start << ", last 20 steps " << end;
}

void expect_within_2_percent_of_fp32(const std::string& precision) {
  const double fp32 = final_loss(train_mlp_mnist("no"));
  const double mixed = final_loss(train_mlp_mnist(precision));
  EXPECT_LE(std::abs(mixed - fp32), 0.02 * fp32) << precision << " ends at " << mixed << ", fp32 at " << fp32;
}

TEST(MlpMnist, Fp16EndsWithin2PercentOfFp32) {
  expect_within_2_percent_of_fp32("fp16");
}
TEST(MlpMnist, Bf16EndsWithin2PercentOfFp32) {
  expect_within_2_percent_of_fp32("bf16");
}

// ---- accelerate::nn::Linear
// -----------------------------------------------------------------------------------

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const double difference = (actual - expected).abs().max().item<double>();
  EXPECT_LE(difference, tolerance) << what << " differs by " << difference;
}

TEST(Linear, EqualsTorchLinearOn2DAnd3DInputs) {
  for (bool bias : {true, false}) {
    torch::manual_seed(3);
    torch::nn::Linear reference(torch::nn::LinearOptions(5, 7).bias(bias));
    torch::manual_seed(3);
    accelerate::nn::Linear layer(torch::nn::LinearOptions(5, 7).bias(bias));
    reference->to(torch::kFloat64);
    layer->to(torch::kFloat64);
    expect_close(layer->weight, reference->weight, 0, "initial weight (same seed)");
    if (bias) {
      expect_close(layer->bias, reference->bias, 0, "initial bias (same seed)");
    }
    for (auto shape : {std::vector<int64_t>{4, 5}, std::vector<int64_t>{3, 4, 5}}) {
      SCOPED_TRACE("input of rank " + std::to_string(shape.size()) +
                   (bias ? ", with bias" : ", without bias"));
      auto x = torch::randn(shape, torch::kFloat64);
      auto x_reference = x.clone().requires_grad_();
      auto x_layer = x.clone().requires_grad_();
      auto y_reference = reference(x_reference);
      auto y_layer = layer(x_layer);
      expect_close(y_layer, y_reference, 1e-12, "output");
      auto upstream = torch::randn_like(y_reference);
      y_reference.backward(upstream);
      y_layer.backward(upstream);
      expect_close(x_layer.grad(), x_reference.grad(), 1e-12, "input gradient");
      expect_close(layer->weight.grad(), reference->weight.grad(), 1e-12, "weight gradient");
      if (bias) {
        expect_close(layer->bias.grad(), reference->bias.grad(), 1e-12, "bias gradient");
      }
      reference->zero_grad();
      layer->zero_grad();
    }
  }
}

TEST(Linear, SameParameterNamesAndOptions) {
  accelerate::nn::Linear layer(torch::nn::LinearOptions(3, 2).bias(false));
  torch::nn::Linear reference(torch::nn::LinearOptions(3, 2).bias(false));
  EXPECT_EQ(layer->named_parameters().keys(), reference->named_parameters().keys());
  accelerate::nn::Linear with_bias(3, 2);
  EXPECT_EQ(with_bias->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(with_bias->options.in_features(), 3);
  std::ostringstream printed;
  printed << *with_bias;
  EXPECT_EQ(printed.str(), "accelerate::nn::Linear(in_features=3, out_features=2, bias=true)");
  auto copy = std::dynamic_pointer_cast<accelerate::nn::LinearImpl>(with_bias->clone());
  ASSERT_TRUE(copy);
  expect_close(copy->weight, with_bias->weight, 0, "cloned weight");
}

TEST(Linear, LoadsTorchLinearCheckpointsAndTheirsLoadOurs) {
  for (bool bias : {true, false}) {
    torch::nn::Linear reference(torch::nn::LinearOptions(6, 4).bias(bias));
    accelerate::nn::Linear layer(torch::nn::LinearOptions(6, 4).bias(bias));
    const auto path = temp_path("linear.pt");
    torch::save(reference, path);
    torch::load(layer, path);
    expect_close(layer->weight, reference->weight, 0, "weight loaded from torch::nn::Linear");
    if (bias) {
      expect_close(layer->bias, reference->bias, 0, "bias loaded from torch::nn::Linear");
    }
    torch::NoGradGuard no_grad;
    layer->weight.add_(1);
    torch::save(layer, path);
    torch::load(reference, path);
    std::remove(path.c_str());
    expect_close(reference->weight, layer->weight, 0, "weight loaded into torch::nn::Linear");
  }
}

// ---- fp8 (emulated on the CPU by libtorch 2.11's CPU _scaled_mm)
// ----------------------------------------------

/// Quantise-dequantise as the recipe describes, in float64: scale = amax / fp8 max, saturate, round to fp8.
torch::Tensor quantize_dequantize(const torch::Tensor& tensor, c10::ScalarType fp8_dtype) {
  const double max = fp8_dtype == c10::ScalarType::Float8_e4m3fn ? 448.0 : 57344.0;
  const double amax = std::max(tensor.abs().max().item<double>(), 1e-12);
  const float quant = static_cast<float>(max / amax);
  auto fp8 = (tensor.to(torch::kFloat32) * quant).clamp(-max, max).to(fp8_dtype);
  return fp8.to(torch::kFloat64) / static_cast<double>(quant);
}

double relative_frobenius(const torch::Tensor& actual, const torch::Tensor& expected) {
  auto e = expected.to(torch::kFloat64);
  return (actual.to(torch::kFloat64) - e).norm().item<double>() / e.norm().item<double>();
}

class Fp8 : public ::testing::Test {
protected:
  void SetUp() override { accelerate::nn::testing::emulate_fp8_on_cpu(true); }
  void TearDown() override { accelerate::nn::testing::emulate_fp8_on_cpu(false); }
};

TEST_F(Fp8, FunctionalMatchesExplicitQuantizeDequantize) {
  torch::manual_seed(0);
  auto x = torch::randn({32, 64}).requires_grad_();
  auto w = (torch::randn({48, 64}) * 0.1).requires_grad_();
  auto b = torch::randn({48}).requires_grad_();
  auto y = accelerate::nn::fp8_linear(x, w, b, torch::kFloat32);
  auto xq = quantize_dequantize(x.detach(), c10::ScalarType::Float8_e4m3fn);
  auto wq = quantize_dequantize(w.detach(), c10::ScalarType::Float8_e4m3fn);
  expect_close(y.to(torch::kFloat64), xq.matmul(wq.t()) + b.detach().to(torch::kFloat64), 1e-5, "output");

  auto upstream = torch::randn({32, 48});
  y.backward(upstream);
  auto gq = quantize_dequantize(upstream, c10::ScalarType::Float8_e5m2);
  expect_close(x.grad().to(torch::kFloat64), gq.matmul(wq), 1e-5, "input gradient");
  expect_close(w.grad().to(torch::kFloat64), gq.t().matmul(xq), 1e-5, "weight gradient");
  expect_close(b.grad().to(torch::kFloat64), upstream.sum(0).to(torch::kFloat64), 1e-5, "bias gradient");
}

TEST_F(Fp8, QuantizationSaturatesAndSurvivesZeros) {
  auto zeros = accelerate::detail::quantize_fp8(torch::zeros({16, 16}), c10::ScalarType::Float8_e4m3fn);
  EXPECT_TRUE(torch::isfinite(zeros.data.to(torch::kFloat32)).all().item<bool>());
  EXPECT_TRUE(std::isfinite(zeros.scale.item<float>()));
  auto outlier = torch::ones({64}) * 1e-3;
  outlier[5] = 1e6;
  auto q = accelerate::detail::quantize_fp8(outlier, c10::ScalarType::Float8_e4m3fn);
  auto restored = q.data.to(torch::kFloat32) * q.scale;
  EXPECT_TRUE(torch::isfinite(restored).all().item<bool>());
  EXPECT_NEAR(restored[5].item<float>(), 1e6, 1e6 * 0.07) << "amax maps to the largest finite e4m3 value";
}

/// A 3-D input through a model of accelerate::nn::Linear layers, fp8 (emulated) against fp32.
TEST_F(Fp8, LinearIsCloseToFp32) {
  torch::manual_seed(0);
  accelerate::nn::Linear layer(256, 128);
  auto x = torch::randn({4, 16, 256});
  auto upstream = torch::randn({4, 16, 128});

  auto x32 = x.clone().requires_grad_();
  auto y32 = layer(x32);
  y32.backward(upstream);
  auto dx32 = x32.grad().clone(), dw32 = layer->weight.grad().clone(), db32 = layer->bias.grad().clone();
  layer->zero_grad();

  Accelerator accelerator(cpu_options("fp8"));
  ASSERT_TRUE(internal_state(accelerator).precision->fp8_enabled());
  auto x8 = x.clone().requires_grad_();
  torch::Tensor y8;
  {
    auto step = accelerator.accumulate(layer);
    y8 = layer(x8);
    EXPECT_EQ(y8.scalar_type(), torch::kBFloat16) << "the fp8 recipe's outputs are bf16, as autocast's";
    accelerator.backward(y8, upstream.to(torch::kBFloat16));
  }
  EXPECT_LE(relative_frobenius(y8, y32), 0.05) << "output";
  EXPECT_LE(relative_frobenius(x8.grad(), dx32), 0.08) << "input gradient";
  EXPECT_LE(relative_frobenius(layer->weight.grad(), dw32), 0.08) << "weight gradient";
  EXPECT_LE(relative_frobenius(layer->bias.grad(), db32), 0.08) << "bias gradient";
  EXPECT_GT(relative_frobenius(y8, y32), 0) << "the fp8 path ran";
}

struct TwoLayers : torch::nn::Module {
  TwoLayers() {
    even = register_module("even", accelerate::nn::Linear(64, 32));
    odd = register_module("odd", accelerate::nn::Linear(100, 30));
  }
  accelerate::nn::Linear even{nullptr}, odd{nullptr};
};

TEST_F(Fp8, OddShapesFallBackToBf16WithOneWarningNamingTheLayer) {
  WarningCapture warnings;
  Accelerator accelerator(cpu_options("fp8"));
  auto model = std::make_shared<TwoLayers>();
  accelerator.prepare(model);
  for (int step = 0; step < 3; ++step) {
    auto guard = accelerator.accumulate(model);
    auto odd = model->odd(torch::randn({64, 100}));
    EXPECT_EQ(odd.scalar_type(), torch::kBFloat16);
    auto even = model->even(torch::randn({64, 64}));
    EXPECT_EQ(even.scalar_type(), torch::kBFloat16);
    accelerator.backward(odd.to(torch::kFloat32).sum() + even.to(torch::kFloat32).sum());
  }
  EXPECT_EQ(warnings.count("'odd'"), 1) << warnings.all();
  EXPECT_EQ(warnings.count("in_features=100"), 1) << warnings.all();
  EXPECT_EQ(warnings.count("bf16 instead of fp8"), 1) << "only the odd layer warns, once\n" << warnings.all();

  // Rows that are not a multiple of 16 (a short last batch) fall back too, and say so once for the layer.
  auto guard = accelerator.accumulate(model);
  model->even(torch::randn({10, 64}));
  model->even(torch::randn({10, 64}));
  EXPECT_EQ(warnings.count("rows=10"), 1) << warnings.all();
}

TEST(Fp8OnCpu, WithoutEmulationTrainsInBf16AfterOneMessage) {
  WarningCapture warnings;
  Accelerator accelerator(cpu_options("fp8"));
  EXPECT_FALSE(internal_state(accelerator).precision->fp8_enabled());
  EXPECT_EQ(warnings.count("needs a CUDA GPU with compute capability 8.9"), 1) << warnings.all();
  EXPECT_EQ(warnings.count("bf16 instead"), 1) << warnings.all();
  auto model = std::make_shared<TwoLayers>();
  accelerator.prepare(model);
  auto guard = accelerator.accumulate(model);
  EXPECT_EQ(model->odd(torch::randn({8, 100})).scalar_type(), torch::kBFloat16);
  EXPECT_EQ(warnings.messages.size(), 1u) << "no per-layer warnings when fp8 is off: " << warnings.all();
}

TEST(Fp8OnCpu, FunctionalRefusesWithoutEmulationAndNamesWhy) {
  try {
    accelerate::nn::fp8_linear(torch::randn({16, 16}), torch::randn({16, 16}));
    FAIL() << "fp8_linear ran on the CPU without the emulation switch";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("runs on the CPU"), std::string::npos) << error.what();
  }
  accelerate::nn::testing::emulate_fp8_on_cpu(true);
  try {
    accelerate::nn::fp8_linear(torch::randn({16, 20}), torch::randn({16, 20}));
    FAIL() << "fp8_linear accepted in_features=20";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("in_features=20"), std::string::npos) << error.what();
  }
  accelerate::nn::testing::emulate_fp8_on_cpu(false);
}

TEST(BadInput, UnknownPrecisionIsRefusedWithTheAllowedValues) {
  try {
    Accelerator accelerator(cpu_options("fp32"));
    FAIL() << "mixed_precision='fp32' was accepted";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("fp32"), std::string::npos) << message;
    EXPECT_NE(message.find("bf16"), std::string::npos) << "names the allowed values: " << message;
  }
}

TEST(BadInput, Fp16OnTheCpuSaysItIsSlow) {
  WarningCapture warnings;
  Accelerator accelerator(cpu_options("fp16"));
  EXPECT_EQ(warnings.count("fp16' on the CPU"), 1) << warnings.all();
}

} // namespace
