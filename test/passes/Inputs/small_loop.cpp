// Input for the driver tests: a small training loop.
#include <torch/torch.h>

#include <iostream>

int main() {
  torch::Device device(torch::kCUDA);
  torch::nn::Linear model(4, 1);
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 10; ++step) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4}, device)).sum();
    loss.backward();
    optimizer.step();
  }
}
