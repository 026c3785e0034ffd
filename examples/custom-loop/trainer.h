// A regression trainer: owns the model and its hyperparameters; fit() runs the training loop.
#pragma once

#include <torch/torch.h>

#include <cstdint>

struct RegressorImpl : torch::nn::Module {
  RegressorImpl();
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Linear hidden{nullptr}, output{nullptr};
};
TORCH_MODULE(Regressor);

class Trainer {
public:
  Trainer(int64_t batch_size, int64_t steps, double learning_rate);
  /// Trains for the configured number of steps; returns the last step's loss.
  double fit();

private:
  Regressor model_;
  int64_t batch_size_, steps_;
  double learning_rate_;
};
