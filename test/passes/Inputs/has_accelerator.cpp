// Input for accelerator.cpp: the accelerator is already declared, at namespace scope.
#include <torch/torch.h>
#include <accelerate/accelerate.h>

accelerate::Accelerator accelerator;

int main() {
  torch::Tensor loss;
  loss.backward();
}
