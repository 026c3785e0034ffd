// Headers of the project: without --headers only the input file is rewritten, and the changes a pass would make
// in an included header are warnings; with --headers the header is rewritten too (into --output-dir, or in
// place with -i), once however many inputs include it. System headers are never looked at.
// RUN: rm -rf %t && mkdir -p %t/proj/include && cp %s %t/proj/train.cpp && cp %S/Inputs/second_tu.cpp %t/proj/
// RUN: cp %S/Inputs/train_step.h %t/proj/include/
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>%t.stderr > %t.out
// RUN: diff %s %t.out
// RUN: FileCheck %s < %t.stderr
// RUN: %accel-rewrite %s -- -std=c++17 -isystem %S/Inputs 2>&1 >/dev/null | count 0

// Into an output directory that mirrors --root: the input, and the header beside it in include/.
// RUN: %accel-rewrite %t/proj/train.cpp --headers=%t/proj/include --output-dir=%t/out --root=%t/proj \
// RUN:   -- -std=c++17 -I%t/proj/include -I%S/Inputs 2>&1 | FileCheck --check-prefix=QUIET --allow-empty %s
// RUN: FileCheck --check-prefix=HEADER %s < %t/out/include/train_step.h
// RUN: FileCheck --check-prefix=MAIN %s < %t/out/train.cpp
// RUN: diff %S/Inputs/train_step.h %t/proj/include/train_step.h
// QUIET-NOT: warning
// HEADER: #include <accelerate/accelerate.h>
// HEADER: inline void train_step(torch::Tensor loss, torch::optim::SGD& optimizer) {
// HEADER-NEXT: auto& accelerator = accelerate::Accelerator::current();
// HEADER-NEXT: accelerator.backward(loss);
// MAIN: int main() { accelerate::Accelerator accelerator; train_step(

// Two inputs that include the header: one copy of it, with the edits of both (here the same).
// RUN: %accel-rewrite %t/proj/train.cpp %t/proj/second_tu.cpp --headers=%t/proj/include --output-dir=%t/two \
// RUN:   -- -std=c++17 -I%t/proj/include -I%S/Inputs
// RUN: diff %t/out/include/train_step.h %t/two/include/train_step.h
// RUN: FileCheck --check-prefix=SECOND %s < %t/two/second_tu.cpp
// SECOND: void another_step(torch::Tensor loss) { accelerate::Accelerator accelerator; train_step(

// --diff shows each file that changes, the header once; --check names it.
// RUN: %accel-rewrite %t/proj/train.cpp %t/proj/second_tu.cpp --headers=%t/proj/include --diff \
// RUN:   -- -std=c++17 -I%t/proj/include -I%S/Inputs | FileCheck --check-prefix=DIFF %s
// DIFF: +++ {{.*}}train.cpp
// DIFF: +++ {{.*}}second_tu.cpp
// DIFF: +++ {{.*}}include/train_step.h
// DIFF-NOT: +++
// RUN: not %accel-rewrite %t/proj/train.cpp --headers=%t/proj/include --check \
// RUN:   -- -std=c++17 -I%t/proj/include -I%S/Inputs 2>&1 | FileCheck --check-prefix=CHECKMODE %s
// CHECKMODE: train.cpp needs rewriting
// CHECKMODE: include/train_step.h needs rewriting (a header of --headers)

// In place with -i, a header named by itself; a second run changes nothing.
// RUN: cp -r %t/proj %t/inplace
// RUN: %accel-rewrite -i %t/inplace/train.cpp --headers=%t/inplace/include/train_step.h \
// RUN:   -- -std=c++17 -I%t/inplace/include -I%S/Inputs
// RUN: diff %t/out/include/train_step.h %t/inplace/include/train_step.h
// RUN: %accel-rewrite %t/inplace/train.cpp --headers=%t/inplace/include --check \
// RUN:   -- -std=c++17 -I%t/inplace/include -I%S/Inputs

// A header outside --headers, or a third-party one reached with -isystem, is never touched.
// RUN: mkdir -p %t/other && %accel-rewrite %t/proj/train.cpp --headers=%t/other --output-dir=%t/outside \
// RUN:   --root=%t -- -std=c++17 -I%t/proj/include -I%S/Inputs 2>&1 | FileCheck --check-prefix=OUTSIDE %s
// RUN: not ls %t/outside/proj/include
// OUTSIDE: train_step.h:6:3: warning: not rewritten: this file is not one the rewrite may change (it is outside
// OUTSIDE-SAME: --headers, or a system header;
// RUN: %accel-rewrite %t/proj/train.cpp --headers=%t/proj/include --output-dir=%t/system --root=%t/proj \
// RUN:   -- -std=c++17 -isystem %t/proj/include -I%S/Inputs 2>&1 | count 0
// RUN: not ls %t/system/include
// RUN: diff %t/proj/train.cpp %t/system/train.cpp

// Bad input: a clear error, nothing written.
// RUN: not %accel-rewrite %t/proj/train.cpp --headers=%t/missing -o %t/x.cpp -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck --check-prefix=MISSING %s
// MISSING: accel-rewrite: error: --headers: cannot find '{{.*}}missing':
// RUN: not %accel-rewrite %t/proj/train.cpp --headers=%t/proj/include -o %t/x.cpp \
// RUN:   -- -std=c++17 -I%t/proj/include -I%S/Inputs 2>&1 | FileCheck --check-prefix=NOPLACE %s
// RUN: not ls %t/x.cpp
// NOPLACE: error: the rewrite changes the header {{.*}}train_step.h, and -o or standard output holds one file;
// NOPLACE-SAME: write the headers too with --output-dir=DIR, or in place with -i
// RUN: not %accel-rewrite %t/proj/train.cpp %t/proj/second_tu.cpp -- -std=c++17 2>&1 | FileCheck --check-prefix=TWO %s
// TWO: got 2 input files, and -o or standard output holds one
// RUN: not %accel-rewrite %t/proj/train.cpp --output-dir=%t/o --root=%t/other -- -std=c++17 2>&1 \
// RUN:   | FileCheck --check-prefix=ROOT %s
// ROOT: --output-dir: the input file {{.*}}train.cpp ({{.*}}) is not under the root
// RUN: not %accel-rewrite %t/proj/train.cpp --root=%t -- -std=c++17 2>&1 | FileCheck --check-prefix=ROOTONLY %s
// ROOTONLY: --root is the directory --output-dir mirrors; give --output-dir too

#include "train_step.h"

torch::optim::SGD& optimizer(); // A training file: it mentions an optimizer.
int main() { train_step(torch::Tensor(), optimizer()); }

// CHECK: train_step.h:5:{{[0-9]+}}: warning: not rewritten: this file is not one the rewrite may change (only the
// CHECK-SAME: input file is rewritten unless --headers names the project's headers; accelerate_target() rewrites
// CHECK-SAME: the headers under the target's source directory); rewrite it with --headers, or change this by hand:
// CHECK-SAME: inserted 'auto& accelerator = accelerate::Accelerator::current();'; added #include
// CHECK-SAME: <accelerate/accelerate.h> (pass 'accelerator':
// CHECK: train_step.h:6:3: warning: not rewritten: this file is not one the rewrite may change
// CHECK-SAME: 'loss.backward()' -> 'accelerator.backward(loss)' (pass 'backward':
