// passes/BackwardPass.h: `loss.backward(...)` becomes `accelerator.backward(loss, ...)`.
#ifndef ACCELERATE_PASSES_BACKWARDPASS_H
#define ACCELERATE_PASSES_BACKWARDPASS_H

#include "passes/Pass.h"

namespace accelerate::passes {

/// Rewrites every call of `at::Tensor::backward` in the user's code, on any tensor expression, into a call
/// of the accelerator, keeping the arguments as written:
///
///   loss.backward();               →  accelerator.backward(loss);
///   (a + b).backward(grad, true);  →  accelerator.backward(a + b, grad, true);
///   loss_ptr->backward();          →  accelerator.backward(*loss_ptr);
///
/// A call that comes from a macro expansion is left as it is, with a warning naming the macro. Calls of
/// `accelerator.backward` are not tensor calls, so running the pass again changes nothing.
///
/// Only files that train (they construct, take or step an optimizer: see TrainingCode.h) are rewritten, and
/// functions that already use the runtime are left alone. In a template, a call whose tensor is dependent is
/// rewritten when every instantiation calls `at::Tensor::backward`, and reported otherwise.
PassRule backwardPass();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_BACKWARDPASS_H
