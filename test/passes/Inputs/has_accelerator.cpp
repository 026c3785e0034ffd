// Input for accelerator.cpp: the accelerator is already declared, at namespace scope.
#include <torch/torch.h>
#include <accelerate/accelerate.h>

accelerate::Accelerator accelerator;

void step(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.

int main() {
  torch::Tensor loss;
  loss.backward();
}
