// The training loop lives in a class member in its own file, away from main(): accelerate_target() rewrites
// this file (it trains) and leaves main.cpp as it is.
#include "trainer.h"

#include <iomanip>
#include <iostream>

namespace {

/// y = sin(x . w) + 0.1 noise for 8-dimensional x and a fixed random w, drawn once from a seeded generator.
class Waves : public torch::data::datasets::Dataset<Waves> {
public:
  explicit Waves(int64_t size) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
    inputs_ = at::randn({size, 8}, generator);
    auto weights = 0.5 * at::randn({8, 1}, generator);
    targets_ = inputs_.matmul(weights).sin() + 0.1 * at::randn({size, 1}, generator);
  }
  torch::data::Example<> get(size_t index) override { return {inputs_[index], targets_[index]}; }
  torch::optional<size_t> size() const override { return inputs_.size(0); }

private:
  torch::Tensor inputs_, targets_;
};

} // namespace

RegressorImpl::RegressorImpl() {
  hidden = register_module("hidden", torch::nn::Linear(8, 64));
  output = register_module("output", torch::nn::Linear(64, 1));
}

torch::Tensor RegressorImpl::forward(torch::Tensor x) {
  return output->forward(torch::tanh(hidden->forward(x)));
}

Trainer::Trainer(int64_t batch_size, int64_t steps, double learning_rate)
    : batch_size_(batch_size), steps_(steps), learning_rate_(learning_rate) {}

double Trainer::fit() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  model_->to(device);
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      Waves(4096).map(torch::data::transforms::Stack<>()), batch_size_);
  torch::optim::SGD optimizer(model_->parameters(), torch::optim::SGDOptions(learning_rate_).momentum(0.9));

  double last_loss = 0;
  int64_t step = 0;
  while (step < steps_) {
    for (auto& batch : *loader) {
      auto inputs = batch.data.to(device);
      auto targets = batch.target.to(device);
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model_->forward(inputs), targets);
      loss.backward();
      optimizer.step();
      last_loss = loss.item<double>();
      if (++step % 10 == 1) {
        std::cout << "step " << step << " loss " << std::setprecision(8) << loss.item<double>() << std::endl;
      }
      if (step == steps_) {
        break;
      }
    }
  }
  return last_loss;
}
