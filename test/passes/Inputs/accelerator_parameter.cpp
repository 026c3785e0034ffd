// Input for accelerator.cpp: the function receives the accelerator.
#include <torch/torch.h>
#include <accelerate/accelerate.h>

void update(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.

void step(accelerate::Accelerator& accelerator, torch::Tensor loss) {
  loss.backward();
}
