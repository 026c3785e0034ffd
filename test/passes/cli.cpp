// Command-line errors name the problem and the fix.
// RUN: not %accel-rewrite %s -i -o %t.out -- -std=c++17 2>&1 | FileCheck %s --check-prefix=BOTH
// BOTH: accel-rewrite: -i and -o were both given; use -i to rewrite {{.*}}cli.cpp in place, or -o FILE to
// BOTH-SAME: write the result elsewhere
// RUN: not %accel-rewrite %s %s -- -std=c++17 2>&1 | FileCheck %s --check-prefix=TWO
// TWO: accel-rewrite: got 2 input files, and -o or standard output holds one; rewrite several files with -i,
// TWO-SAME: --output-dir=DIR, --diff or --check, or run accel-rewrite once per file
// RUN: not %accel-rewrite %s %s --diff -- -std=c++17 2>&1 | FileCheck %s --check-prefix=TWICE
// TWICE: accel-rewrite: error: the input file {{.*}}cli.cpp is given twice; name each file once
// RUN: not %accel-rewrite -- -std=c++17 2>&1 | FileCheck %s --check-prefix=NONE
// NONE: accel-rewrite: expected an input file; see --help
// RUN: not %accel-rewrite %s --diff --check -- -std=c++17 2>&1 | FileCheck %s --check-prefix=MODES
// MODES: accel-rewrite: choose one of -o, -i, --output-dir, --diff and --check
// RUN: not %accel-rewrite %s -i --line-directives -- -std=c++17 2>&1 | FileCheck %s --check-prefix=LINES
// LINES: accel-rewrite: --line-directives is for a rewritten copy (stdout, -o FILE or --output-dir), not for -i,
// LINES-SAME: --diff or --check
// RUN: not %accel-rewrite %s --depfile %t.d -- -std=c++17 2>&1 | FileCheck %s --check-prefix=DEPFILE
// DEPFILE: accel-rewrite: --depfile needs -o FILE, --output-dir or -i: the rule it writes names the output
// The passes are listed from the table (passes/Registry.cpp) alone: the error names every pass --list-passes
// lists, in its order, and each line of the list reads `name: summary`.
// RUN: not %accel-rewrite %s --passes=backward,bogus -- -std=c++17 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not %accel-rewrite %s --disable=bogus -- -std=c++17 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: accel-rewrite: unknown pass 'bogus' (known: backward, accelerator, {{[a-z-]+(, [a-z-]+)+}})
// RUN: %accel-rewrite --list-passes | sed 's/:.*//' > %t.listed
// RUN: not %accel-rewrite %s --disable=bogus -- -std=c++17 2>&1 | sed -n 's/.*(known: \(.*\))$/\1/p' \
// RUN:   | sed 's/, /\n/g' > %t.known
// RUN: diff %t.listed %t.known
// RUN: %accel-rewrite --list-passes | FileCheck %s --check-prefix=LIST
// LIST:      backward: `X.backward(args...)` on a tensor becomes `accelerator.backward(X, args...)`
// LIST-NEXT: accelerator: declares `accelerator`
// LIST-NOT:  {{^[^:]+$}}
// RUN: %accel-rewrite --help | FileCheck %s --check-prefix=HELP
// HELP: accel-rewrite FILE [-o OUT | -i | --diff | --check] [--explain] [-p BUILD_DIR] [-- compile flags]
// HELP: --check
// HELP: --depfile=<file>
// HELP: --diff
// HELP: --disable=<name,...>
// HELP: --enable=<name,...>
// HELP: --explain
// HELP: --export-fixes=<file>
// HELP: -i
// HELP: --line-directives
// HELP: --list-passes
// HELP: --log-with=<name,...>
// HELP: -o <file>
// HELP: -p <string>
// HELP: --passes=<name,...>
// HELP: --profile
// HELP: --progress-bar

int main() {}
