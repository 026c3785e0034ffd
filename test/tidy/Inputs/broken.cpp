// Input for bad-input.cpp: a training loop that does not compile.
#include <torch/torch.h>

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 10; ++step) {
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step()
  }
}
