// passes/AccumulatePass.h: each training step runs inside an `accelerator.accumulate(...)` guard.
#ifndef ACCELERATE_PASSES_ACCUMULATEPASS_H
#define ACCELERATE_PASSES_ACCUMULATEPASS_H

#include "passes/Pass.h"

#include "clang/ASTMatchers/ASTMatchers.h"

namespace accelerate::passes {

/// Inserts `auto accumulate = accelerator.accumulate(models...);` as the first statement of the innermost
/// loop whose body runs a training step (a backward pass and an optimizer step), so the guard lives across
/// the forward, the backward and the step, whichever side of the forward `zero_grad` is on:
///
///   for (auto& batch : *loader) {         for (auto& batch : *loader) {
///     optimizer.zero_grad();          →     auto accumulate = accelerator.accumulate(model);
///     ...                                   optimizer.zero_grad();
///
/// The models are those the stepped optimizers train (a GAN's two), else the modules the loop calls
/// `forward` on. With `gradient_accumulation_steps` at 1 (the default) the guard changes nothing; with k,
/// gradients are synchronised and the optimizer steps every k-th batch. A loop whose body is not a block, or
/// whose backward and step are in functions it calls, is left as it is.
PassRule accumulatePass();

/// Matches the loops accumulatePass() rewrites (the guard uses `accelerator`).
clang::ast_matchers::StatementMatcher accumulatedLoop();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_ACCUMULATEPASS_H
