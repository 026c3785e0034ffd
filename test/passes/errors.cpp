// When the input does not compile, accel-rewrite prints the compiler's diagnostics, exits 1 and writes
// nothing: no stdout, no -o file, and an -i input left as it was.
// RUN: rm -rf %t && mkdir -p %t
// RUN: not %accel-rewrite %s -o %t/out.cpp -- -std=c++17 -I%S/Inputs -DBROKEN > %t/stdout 2> %t/stderr
// RUN: count 0 < %t/stdout
// RUN: not test -e %t/out.cpp
// RUN: FileCheck %s < %t/stderr
//
// RUN: not %accel-rewrite %s -- -std=c++17 -I%S/Inputs -DBROKEN > %t/stdout 2>/dev/null
// RUN: count 0 < %t/stdout
//
// RUN: cp %s %t/inplace.cpp
// RUN: not %accel-rewrite %t/inplace.cpp -i -- -std=c++17 -I%S/Inputs -DBROKEN 2>/dev/null
// RUN: diff %s %t/inplace.cpp
// RUN: ls %t | FileCheck %s --check-prefix=NO-TEMPORARY --implicit-check-not=accel-rewrite
// NO-TEMPORARY: inplace.cpp
//
// A missing input is an error too:
// RUN: not %accel-rewrite %t/missing.cpp -- -std=c++17 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: accel-rewrite: error: cannot read the input file '{{.*}}missing.cpp': No such file or directory

#include <torch/torch.h>

void update(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.

int main() {
  torch::Tensor loss;
  loss.backward();
#ifdef BROKEN
  undeclared_function(loss);
#endif
}
// CHECK: errors.cpp:[[@LINE-3]]:3: error: use of undeclared identifier 'undeclared_function'
// CHECK: accel-rewrite: error: {{.*}}errors.cpp does not compile (diagnostics above), so it was not rewritten
// CHECK-SAME: and nothing was written; fix the errors, or check the flags after '--' or the compile database
// CHECK-SAME: given with -p
