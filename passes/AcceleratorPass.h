// passes/AcceleratorPass.h: declares the `accelerator` that the rewritten calls use.
#ifndef ACCELERATE_PASSES_ACCELERATORPASS_H
#define ACCELERATE_PASSES_ACCELERATORPASS_H

#include "passes/Registry.h"

namespace accelerate::passes {

/// In each function whose body has a backward call that backwardPass() rewrites (lambdas count as part of the
/// function around them), inserts `accelerate::Accelerator accelerator;` as the first statement, once, and
/// adds `#include <accelerate/accelerate.h>` after the file's includes. Nothing is added when the file
/// already declares an `accelerate::Accelerator` (variable, parameter or member). The explanation says where
/// the declaration went; outside `main` it asks the user to check that the function runs once.
PassRule acceleratorPass();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_ACCELERATORPASS_H
