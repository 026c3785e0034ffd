// Only the main file is rewritten for now: changes a pass would make in an included header are reported as
// warnings, not applied; code in system headers is not looked at.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>%t.stderr > %t.out
// RUN: diff %s %t.out
// RUN: FileCheck %s < %t.stderr
// RUN: %accel-rewrite %s -- -std=c++17 -isystem %S/Inputs 2>&1 >/dev/null | count 0

#include "train_step.h"

int main() { train_step(torch::Tensor()); }

// CHECK: train_step.h:5:{{[0-9]+}}: warning: not rewritten: only the main file ({{.*}}headers.cpp) is rewritten
// CHECK-SAME: for now; change this by hand: inserted 'accelerate::Accelerator accelerator;'; added #include
// CHECK-SAME: <accelerate/accelerate.h> (pass 'accelerator':
// CHECK: train_step.h:5:46: warning: not rewritten: only the main file ({{.*}}headers.cpp) is rewritten for now;
// CHECK-SAME: change this by hand: 'loss.backward()' -> 'accelerator.backward(loss)' (pass 'backward':
