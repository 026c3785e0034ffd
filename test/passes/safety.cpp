// The rewrite is compiled in memory before anything is written; when the rewritten text would not compile,
// the rewrite is abandoned with the diagnostics, exit 1, and nothing written. Here the function already has an
// accelerator under another name, so no `accelerator` is declared and `accelerator.backward(loss)` would not
// compile.
// RUN: rm -rf %t && mkdir -p %t && cp %s %t/input.cpp
// RUN: not %accel-rewrite %t/input.cpp -i -- -std=c++17 -I%S/Inputs > %t/stdout 2> %t/stderr
// RUN: count 0 < %t/stdout
// RUN: diff %s %t/input.cpp
// RUN: FileCheck %s < %t/stderr
// RUN: not %accel-rewrite %t/input.cpp -o %t/out.cpp -- -std=c++17 -I%S/Inputs 2>/dev/null
// RUN: not test -e %t/out.cpp

#include <torch/torch.h>
#include <accelerate/accelerate.h>

void update(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.

void step(accelerate::Accelerator& acc, torch::Tensor loss) {
  loss.backward();
}
// CHECK: input.cpp:[[@LINE-2]]:3: error: use of undeclared identifier 'accelerator'
// CHECK: accel-rewrite: error: the rewritten {{.*}}input.cpp would not compile (diagnostics above, each at its
// CHECK-SAME: line in the file as it is{{.*}}); the rewrite was abandoned and nothing was written
