// Command-line errors name the problem and the fix.
// RUN: not %accel-rewrite %s -i -o %t.out -- -std=c++17 2>&1 | FileCheck %s --check-prefix=BOTH
// BOTH: accel-rewrite: -i and -o were both given; use -i to rewrite {{.*}}cli.cpp in place, or -o FILE to
// BOTH-SAME: write the result elsewhere
// RUN: not %accel-rewrite %s %s -- -std=c++17 2>&1 | FileCheck %s --check-prefix=TWO
// TWO: accel-rewrite: expected one input file (got 2); run accel-rewrite once per file, see --help
// RUN: not %accel-rewrite -- -std=c++17 2>&1 | FileCheck %s --check-prefix=NONE
// NONE: accel-rewrite: expected one input file (got 0)
// RUN: %accel-rewrite --list-passes | FileCheck %s --check-prefix=LIST
// LIST: backward: `X.backward(args...)` on a tensor becomes `accelerator.backward(X, args...)`
// LIST-NEXT: accelerator: declares `accelerate::Accelerator accelerator;`
// RUN: %accel-rewrite --help | FileCheck %s --check-prefix=HELP
// HELP: accel-rewrite FILE [-o OUT | -i] [--explain] [-p BUILD_DIR] [-- compile flags]
// HELP: --explain
// HELP: -i
// HELP: -o <file>
// HELP: -p <string>

int main() {}
