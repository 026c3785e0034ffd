// Input for accelerator.cpp: a training function called from another file; its helper reaches the accelerator.
#include <torch/torch.h>

void step(torch::optim::SGD& optimizer, torch::Tensor loss) {
  loss.backward();
  optimizer.step();
}

void train(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  for (int i = 0; i < 3; ++i)
    step(optimizer, model->forward(torch::randn({2, 4})).sum());
}
