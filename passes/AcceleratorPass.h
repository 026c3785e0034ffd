// passes/AcceleratorPass.h: declares the `accelerator` that the rewritten calls use.
#ifndef ACCELERATE_PASSES_ACCELERATORPASS_H
#define ACCELERATE_PASSES_ACCELERATORPASS_H

#include "passes/Pass.h"

namespace accelerate::passes {

/// Makes `accelerator` exist in each function that the other passes make use it (lambdas count as part of
/// the function around them), as its first statement, once, and adds `#include <accelerate/accelerate.h>`
/// after the file's includes:
///
/// - in `main`: `accelerate::Accelerator accelerator;` — and `main` gets it even when only other functions of
///   the file use it, since training starts there;
/// - in another function of a file that defines `main`: `auto& accelerator =
///   accelerate::Accelerator::current();`, the one `main` made (no signature changes, no globals);
/// - in a file without `main` (a training function called from another file): `accelerate::Accelerator
///   accelerator;` in the functions that run backward (the explanation asks the user to check that the
///   function runs once), `current()` in the others.
///
/// Nothing is added when the file already declares an `accelerate::Accelerator` (variable, parameter or
/// member) or uses one from a header. The explanation says where the declaration went and why.
PassRule acceleratorPass();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_ACCELERATORPASS_H
