// Input for headers.cpp: a user header with a backward call (headers are not rewritten yet).
#pragma once
#include <torch/torch.h>

inline void train_step(torch::Tensor loss, torch::optim::SGD& optimizer) {
  loss.backward();
  optimizer.step();
}
