// Input for headers.cpp: a header of the project with a backward call.
#pragma once
#include <torch/torch.h>

inline void train_step(torch::Tensor loss, torch::optim::SGD& optimizer) {
  loss.backward();
  optimizer.step();
}
