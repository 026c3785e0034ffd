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
//
// Input that is no source file gets one line, exit 2, and nothing written (an -i input left as it was):
// RUN: touch %t/empty.cpp
// RUN: bash -c '%accel-rewrite %t/empty.cpp -i -- -std=c++17 > %t/stdout 2> %t/stderr; test $? -eq 2'
// RUN: count 0 < %t/stdout
// RUN: count 1 < %t/stderr
// RUN: FileCheck %s --check-prefix=EMPTY < %t/stderr
// RUN: count 0 < %t/empty.cpp
// EMPTY: accel-rewrite: error: '{{.*}}empty.cpp' is empty: there is no training loop in it to rewrite; nothing was written
// RUN: printf '\177ELF\002\001\001\000\000\000' > %t/binary.cpp
// RUN: cp %t/binary.cpp %t/binary.before
// RUN: bash -c '%accel-rewrite %t/binary.cpp -i -- -std=c++17 > %t/stdout 2> %t/stderr; test $? -eq 2'
// RUN: count 0 < %t/stdout
// RUN: count 1 < %t/stderr
// RUN: FileCheck %s --check-prefix=BINARY < %t/stderr
// RUN: cmp %t/binary.cpp %t/binary.before
// BINARY: accel-rewrite: error: '{{.*}}binary.cpp' is not a source file: it holds binary data (a NUL byte at offset 7); give the .cpp files of the training loop; nothing was written
// RUN: mkdir -p %t/folder
// RUN: bash -c '%accel-rewrite %t/folder -o %t/out.cpp -- -std=c++17 > %t/stdout 2> %t/stderr; test $? -eq 2'
// RUN: count 1 < %t/stderr
// RUN: not test -e %t/out.cpp
// RUN: FileCheck %s --check-prefix=FOLDER < %t/stderr
// FOLDER: accel-rewrite: error: '{{.*}}folder' is a directory, not a source file; give the .cpp files of the training loop (e.g. {{.*}}folder/train.cpp); nothing was written

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
