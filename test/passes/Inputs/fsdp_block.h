// A module class in a header of the project (test/passes/fsdp-units.cpp).
#pragma once

#include <torch/torch.h>

struct MlpImpl : torch::nn::Module {
  MlpImpl() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
  torch::Tensor forward(torch::Tensor x) {
    return torch::relu(fc->forward(x));
  }
  torch::nn::Linear fc{nullptr};
};
