// Input for bad-input.cpp: the function already has an accelerator under another name, so the rewrite's
// `accelerator.backward(loss)` would not compile.
#include <torch/torch.h>
#include <accelerate/accelerate.h>

void update(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.

void step(accelerate::Accelerator& acc, torch::Tensor loss) {
  loss.backward();
}
