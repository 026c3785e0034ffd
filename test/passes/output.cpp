// Where the result goes: stdout by default, -o FILE, or -i (in place, keeping the file's permissions).
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs > %t/stdout.cpp
// RUN: FileCheck %s < %t/stdout.cpp
// RUN: %accel-rewrite %s -o %t/out.cpp -- -std=c++17 -I%S/Inputs > %t/empty
// RUN: count 0 < %t/empty
// RUN: diff %t/stdout.cpp %t/out.cpp
// RUN: cp %s %t/inplace.cpp && chmod 640 %t/inplace.cpp
// RUN: %accel-rewrite %t/inplace.cpp -i -- -std=c++17 -I%S/Inputs > %t/empty
// RUN: count 0 < %t/empty
// RUN: diff %t/stdout.cpp %t/inplace.cpp
// RUN: stat -c %%a %t/inplace.cpp | FileCheck %s --check-prefix=MODE
// MODE: 640
// No temporary file is left behind:
// RUN: ls %t | FileCheck %s --check-prefix=LS --implicit-check-not=accel-rewrite
// LS: empty

#include <torch/torch.h>

void update(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.

int main() {
  torch::Tensor loss;
  loss.backward();
  // CHECK: {{^}}  accelerator.backward(loss);{{$}}
}
