// The reference workloads (shared/DESIGN.md §6) as a plain single-device libtorch training loop: form (a) of
// the side-by-side benchmark when compiled as it is (bench_train_plain), form (b) when accelerate_target()
// rewrites it (bench_train_accel). bench/train_ref.py is the same loop in Python, with and without Hugging
// Face Accelerate; bench/compare.py runs all four side by side.
//
//   train_ref WORKLOAD INPUT_DIR STEPS WARMUP [DTYPE]
//
// WORKLOAD is mlp-mnist, gpt-small or gpt-86m. INPUT_DIR holds WORKLOAD.weights (the initial parameters) and
// WORKLOAD.data (the samples), both written by `bench/compare.py inputs` in the format bench_tensors.h reads.
// Runs WARMUP + STEPS AdamW steps (lr 3e-4) and prints the mean time of the last STEPS steps and every step's
// loss. Times are the wall clock and this process's CPU time (all its threads), per step. DTYPE is float32
// (the default) or float64: the parameters and the floating-point samples are converted to it before training
// (the parity checks use float64, where two programs that compute the same thing agree to rounding).
#include "bench_tensors.h"
#include "workloads.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <sstream>

/// Input/target pairs held in memory: MNIST-shaped images with labels, or token sequences shifted by one.
class Samples : public torch::data::datasets::Dataset<Samples> {
public:
  Samples(torch::Tensor inputs, torch::Tensor targets) : inputs_(inputs), targets_(targets) {}
  torch::data::Example<> get(size_t index) override { return {inputs_[index], targets_[index]}; }
  torch::optional<size_t> size() const override { return inputs_.size(0); }

private:
  torch::Tensor inputs_, targets_;
};

torch::Tensor mlp_loss(accelerate::bench::MlpImpl& model, const torch::Tensor& images,
                       const torch::Tensor& labels) {
  return torch::nn::functional::cross_entropy(model.forward(images), labels);
}

torch::Tensor gpt_loss(accelerate::bench::GptImpl& model, const torch::Tensor& tokens,
                       const torch::Tensor& next) {
  auto logits = model.forward(tokens);
  return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), next.reshape({-1}));
}

template <typename Net, typename LossFn>
int train(std::shared_ptr<Net> model, Samples dataset, int64_t batch_size, int64_t steps, int64_t warmup,
          LossFn compute_loss) {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      dataset.map(torch::data::transforms::Stack<>()), batch_size);
  model->to(device);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-4));

  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  auto cpu_start = std::clock();
  std::vector<torch::Tensor> losses;
  int64_t step = 0;
  while (step < warmup + steps) {
    for (auto& batch : *loader) {
      if (step == warmup) {
        if (torch::cuda::is_available()) {
          torch::cuda::synchronize();
        }
        start = Clock::now();
        cpu_start = std::clock();
      }
      auto inputs = batch.data.to(device);
      auto targets = batch.target.to(device);

      optimizer.zero_grad();
      auto loss = compute_loss(*model, inputs, targets);
      loss.backward();
      optimizer.step();

      losses.push_back(loss.detach());
      if (++step == warmup + steps) {
        break;
      }
    }
  }
  if (torch::cuda::is_available()) {
    torch::cuda::synchronize();
  }
  const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() / steps;
  const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC / steps;

  std::ostringstream curve;
  curve << std::setprecision(17);
  for (const auto& value : losses) {
    curve << ' ' << value.item<double>();
  }
  std::cout << "step_ms " << std::setprecision(6) << step_ms << " cpu_ms " << cpu_ms << " batch "
            << batch_size << std::endl;
  std::cout << "losses" << curve.str() << std::endl;
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::cerr << "usage: " << argv[0]
              << " WORKLOAD INPUT_DIR STEPS WARMUP [DTYPE] (WORKLOAD: mlp-mnist, gpt-small, gpt-86m;"
              << " INPUT_DIR from `bench/compare.py inputs`; DTYPE: float32 (default) or float64)\n";
    return 2;
  }
  const std::string workload = argv[1], dir = argv[2], dtype_name = argc == 6 ? argv[5] : "float32";
  if (dtype_name != "float32" && dtype_name != "float64") {
    std::cerr << argv[0] << ": DTYPE must be float32 or float64 (got '" << dtype_name << "')\n";
    return 2;
  }
  const auto dtype = dtype_name == "float64" ? torch::kFloat64 : torch::kFloat32;
  const int64_t steps = std::atoll(argv[3]), warmup = std::atoll(argv[4]);
  if (steps < 1 || warmup < 0) {
    std::cerr << argv[0] << ": STEPS must be >= 1 and WARMUP >= 0 (got '" << argv[3] << "', '" << argv[4]
              << "')\n";
    return 2;
  }
  auto data = accelerate::bench::read_tensors(dir + "/" + workload + ".data");
  if (workload == "mlp-mnist") {
    auto model = std::make_shared<accelerate::bench::MlpImpl>();
    accelerate::bench::load_parameters(*model, dir + "/" + workload + ".weights");
    model->to(dtype);
    return train(model, Samples(data.at("images").to(dtype), data.at("labels")), 64, steps, warmup, mlp_loss);
  }
  if (workload == "gpt-small" || workload == "gpt-86m") {
    auto config = workload == "gpt-small" ? accelerate::bench::GptConfig::small()
                                          : accelerate::bench::GptConfig::gpt_86m();
    auto model = std::make_shared<accelerate::bench::GptImpl>(config);
    accelerate::bench::load_parameters(*model, dir + "/" + workload + ".weights");
    model->to(dtype);
    auto tokens = data.at("tokens");
    return train(model, Samples(tokens.slice(1, 0, -1).contiguous(), tokens.slice(1, 1).contiguous()),
                 config.batch, steps, warmup, gpt_loss);
  }
  std::cerr << argv[0] << ": unknown workload '" << workload << "' (use mlp-mnist, gpt-small or gpt-86m)\n";
  return 2;
}
