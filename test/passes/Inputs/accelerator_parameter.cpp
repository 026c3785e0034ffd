// Input for accelerator.cpp: the function receives the accelerator.
#include <torch/torch.h>
#include <accelerate/accelerate.h>

void step(accelerate::Accelerator& accelerator, torch::Tensor loss) {
  loss.backward();
}
