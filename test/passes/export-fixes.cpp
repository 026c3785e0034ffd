// The edits --export-fixes writes, applied by clang-apply-replacements, give the file accel-rewrite writes.
// REQUIRES: clang-apply-replacements
// RUN: rm -rf %t && mkdir -p %t/fixes && cp %S/Inputs/small_loop.cpp %t/train.cpp
// RUN: %accel-rewrite %t/train.cpp -- -std=c++17 -I%S/Inputs 2>/dev/null > %t/rewritten.cpp
// RUN: %accel-rewrite %t/train.cpp -o %t/unused.cpp --export-fixes=%t/fixes/train.yaml -- -std=c++17 -I%S/Inputs 2>/dev/null
// RUN: clang-apply-replacements %t/fixes
// RUN: diff %t/rewritten.cpp %t/train.cpp
