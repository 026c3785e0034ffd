// Input for accelerator.cpp: the file uses an accelerator declared in a header.
#include <torch/torch.h>
#include "global_accelerator.h"

void evaluate(accelerate::Accelerator&);
void step(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.

int main() {
  evaluate(accelerator);
  torch::Tensor loss;
  loss.backward();
}
