// --diff prints a unified diff of the rewrite instead of the rewritten file; --check exits 1 when a file needs
// rewriting and writes nothing; --export-fixes writes the edits for clang-apply-replacements.
// RUN: rm -rf %t && mkdir -p %t && cp %S/Inputs/small_loop.cpp %t/train.cpp
// RUN: %accel-rewrite %t/train.cpp --diff -- -std=c++17 -I%S/Inputs 2>/dev/null > %t/diff
// RUN: FileCheck %s --check-prefix=DIFF < %t/diff
// RUN: cd %t && patch -p0 -o patched.cpp train.cpp < diff > /dev/null
// RUN: %accel-rewrite %t/train.cpp -- -std=c++17 -I%S/Inputs 2>/dev/null > %t/rewritten.cpp
// RUN: diff %t/rewritten.cpp %t/patched.cpp
//
// RUN: not %accel-rewrite %t/train.cpp --check -- -std=c++17 -I%S/Inputs 2> %t/check > %t/check.stdout
// RUN: count 0 < %t/check.stdout
// RUN: FileCheck %s --check-prefix=CHECK-MODE < %t/check
// RUN: %accel-rewrite %t/rewritten.cpp --check -- -std=c++17 -I%S/Inputs
//
// RUN: not %accel-rewrite %t/train.cpp --check --export-fixes=%t/fixes.yaml -- -std=c++17 -I%S/Inputs 2>/dev/null
// RUN: FileCheck %s --check-prefix=FIXES < %t/fixes.yaml
// (export-fixes.cpp applies them with clang-apply-replacements.)

// DIFF:      --- {{.*}}train.cpp
// DIFF-NEXT: +++ {{.*}}train.cpp
// DIFF-NEXT: @@ -2,
// DIFF:      +#include <accelerate/accelerate.h>
// DIFF:      -  torch::Device device(torch::kCUDA);
// DIFF-NEXT: +  accelerate::Accelerator accelerator;
// DIFF-NEXT: +  torch::Device device = accelerator.device();
// DIFF:      -  model->to(device);
// DIFF:      -    loss.backward();
// DIFF-NEXT: +    accelerator.backward(loss);

// CHECK-MODE: accel-rewrite: {{.*}}train.cpp: {{[0-9]+}} changes, 0 not rewritten
// CHECK-MODE: accel-rewrite: {{.*}}train.cpp needs rewriting (run accel-rewrite -i {{.*}}train.cpp, or see --diff)

// FIXES:      MainSourceFile: {{.*}}train.cpp
// FIXES:      DiagnosticName: accel-rewrite-accelerator
// FIXES:      ReplacementText: "#include <accelerate/accelerate.h>\n"
// FIXES:      DiagnosticName: accel-rewrite-device
// FIXES:      ReplacementText: 'torch::Device device = accelerator.device();'
// FIXES:      DiagnosticName: accel-rewrite-backward
// FIXES:      ReplacementText: 'accelerator.backward(loss)'
