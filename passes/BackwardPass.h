// passes/BackwardPass.h: `loss.backward(...)` becomes `accelerator.backward(loss, ...)`.
#ifndef ACCELERATE_PASSES_BACKWARDPASS_H
#define ACCELERATE_PASSES_BACKWARDPASS_H

#include "passes/Registry.h"

#include "clang/ASTMatchers/ASTMatchers.h"

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
PassRule backwardPass();

/// Matches the calls backwardPass() rewrites: `at::Tensor::backward` (or a class derived from at::Tensor),
/// outside system headers and macro expansions. Other passes use it to find where the training step is.
clang::ast_matchers::StatementMatcher rewritableBackwardCall();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_BACKWARDPASS_H
