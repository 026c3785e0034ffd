// Flags can come from a compile database (-p DIR) instead of after '--'; the database's command may name
// the file relative to its directory, and the rewrite is still checked against the rewritten text.
// RUN: rm -rf %t && mkdir -p %t && cp %s %t/train.cpp
// RUN: echo '[{"directory": "%/t", "command": "/usr/bin/c++ -std=c++17 -I%/S/Inputs -o train.o -c train.cpp", "file": "train.cpp"}]' > %t/compile_commands.json
// RUN: %accel-rewrite -p %t %t/train.cpp | FileCheck %s
//
// The -resource-dir accel-rewrite adds comes first, so the command's own one wins:
// RUN: mkdir -p %t/fake/include && echo '#error the fake resource directory was used' > %t/fake/include/stddef.h
// RUN: not %accel-rewrite %s -- -std=c++17 -I%S/Inputs -resource-dir=%t/fake 2>&1 \
// RUN:   | FileCheck %s --check-prefix=RESOURCE
// RESOURCE: error: the fake resource directory was used

#include <torch/torch.h>
#include <stddef.h>

void update(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.

int main() {
  torch::Tensor loss;
  loss.backward();
  // CHECK: {{^}}  accelerator.backward(loss);{{$}}
}
