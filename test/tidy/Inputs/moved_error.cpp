// Input for bad-input.cpp: a plain optimizer handed to a function pointer, which the rewrite cannot retype, so
// the rewritten file would not compile at the call; the rewrite inserts four lines above it.
#include <torch/torch.h>

void (*hook)(torch::optim::SGD&) = nullptr;

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 10; ++step) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
    hook(optimizer);
  }
}
