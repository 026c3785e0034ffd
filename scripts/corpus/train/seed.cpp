// LD_PRELOAD library for scripts/corpus-train.sh: seeds libtorch's default generator before main, in every
// process alike, so that a program that never seeds can be compared step by step with its rewrite.
#include <ATen/Context.h>
__attribute__((constructor)) static void seed_before_main() {
  at::manual_seed(7);
}
