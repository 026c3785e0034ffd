// A training file that defines no module class (test/passes/fsdp-units.cpp).
#include <torch/torch.h>

void step(torch::optim::SGD& optimizer, torch::Tensor loss) {
  loss.backward();
  optimizer.step();
}
