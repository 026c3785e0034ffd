// passes/Registry.cpp: the pass table; one row per pass.
#include "passes/Registry.h"

#include "passes/AcceleratorPass.h"
#include "passes/BackwardPass.h"

namespace accelerate::passes {

llvm::ArrayRef<PassInfo> allPasses() {
  static const PassInfo Passes[] = {
      {"backward", backwardPass,
       "`X.backward(args...)` on a tensor becomes `accelerator.backward(X, args...)`"},
      {"accelerator", acceleratorPass,
       "declares `accelerate::Accelerator accelerator;` in the function that runs backward, and includes "
       "<accelerate/accelerate.h>"},
  };
  return Passes;
}

} // namespace accelerate::passes
