// Input for member-in-header.cpp: a trainer class whose optimizer member is declared in a header and built in
// the file that defines its constructor.
#pragma once
#include <torch/torch.h>

struct HeaderTrainer {
  HeaderTrainer();
  void fit(torch::Tensor x);
  torch::nn::Linear net{4, 1};
  torch::optim::SGD* opt;
};
