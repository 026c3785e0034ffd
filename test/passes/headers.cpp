// Only the main file is rewritten for now: changes a pass would make in an included header are reported as
// warnings, not applied; code in system headers is not looked at.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>%t.stderr > %t.out
// RUN: diff %s %t.out
// RUN: FileCheck %s < %t.stderr
// RUN: %accel-rewrite %s -- -std=c++17 -isystem %S/Inputs 2>&1 >/dev/null | count 0

#include "train_step.h"

torch::optim::SGD& optimizer(); // A training file: it mentions an optimizer.
int main() { train_step(torch::Tensor(), optimizer()); }

// CHECK: train_step.h:5:{{[0-9]+}}: warning: not rewritten: only the main file ({{.*}}headers.cpp) is rewritten
// CHECK-SAME: for now; change this by hand: inserted 'auto& accelerator = accelerate::Accelerator::current();'; added #include
// CHECK-SAME: <accelerate/accelerate.h> (pass 'accelerator':
// CHECK: train_step.h:6:3: warning: not rewritten: only the main file ({{.*}}headers.cpp) is rewritten for now;
// CHECK-SAME: change this by hand: 'loss.backward()' -> 'accelerator.backward(loss)' (pass 'backward':
