// accelerate-distribute-loop: one warning at the training loop, whose fix is accel-rewrite's whole rewrite;
// `clang-tidy --fix --format-style=none` writes exactly what accel-rewrite writes. A file that is already
// distributed gets nothing.
// RUN: rm -rf %t && mkdir -p %t && cp %s %t/train.cpp && cp %s %t/reference.cpp
// RUN: %tidy %t/train.cpp -- -std=c++17 -I%passes_inputs 2>&1 | FileCheck %s
// accel-clang-tidy is clang-tidy-19 with the module loaded.
// RUN: %accel-clang-tidy -checks=-*,accelerate-* %t/train.cpp -- -std=c++17 -I%passes_inputs 2>&1 | FileCheck %s
// RUN: %tidy --fix --format-style=none %t/train.cpp -- -std=c++17 -I%passes_inputs > %t/fix.log 2>&1
// RUN: %accel-rewrite %t/reference.cpp -i -- -std=c++17 -I%passes_inputs 2>/dev/null
// RUN: diff %t/reference.cpp %t/train.cpp
// The rewritten file is distributed code: a second run finds nothing to do.
// RUN: %tidy %t/train.cpp -- -std=c++17 -I%passes_inputs 2>&1 | FileCheck %s --check-prefix=AGAIN --allow-empty
// Training code without a loop of its own gets the warning at its first change.
// RUN: %tidy %passes_inputs/uses_accelerator.cpp -- -std=c++17 -I%passes_inputs 2>&1 | FileCheck %s --check-prefix=STEP

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
    std::cout << "loss " << loss.item<float>() << "\n";
  }
}
// CHECK: train.cpp:[[@LINE-8]]:3: warning: this training loop runs on one device; distribute it with accelerate
// CHECK-SAME: changes by accel-rewrite's passes; the fix applies them all) [accelerate-distribute-loop]
// CHECK-NOT: warning:
// AGAIN-NOT: warning:
// STEP: uses_accelerator.cpp:11:3: warning: this training code runs on one device; distribute it with accelerate (1 change by
