// The model of the install test's training loop, in a header of its own: a change here re-runs the rewrite.
#pragma once
#include <torch/torch.h>

struct Regressor : torch::nn::Module {
  Regressor() {
    hidden = register_module("hidden", torch::nn::Linear(16, 32));
    out = register_module("out", torch::nn::Linear(32, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return out->forward(torch::tanh(hidden->forward(x))); }
  torch::nn::Linear hidden{nullptr}, out{nullptr};
};
