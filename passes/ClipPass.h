// passes/ClipPass.h: gradient clipping goes through the accelerator.
#ifndef ACCELERATE_PASSES_CLIPPASS_H
#define ACCELERATE_PASSES_CLIPPASS_H

#include "passes/Pass.h"

#include "clang/ASTMatchers/ASTMatchers.h"

namespace accelerate::passes {

/// Rewrites libtorch's gradient clipping into the accelerator's, which clips the synchronised gradients (and
/// unscales them first under fp16) on the device, without a host synchronisation:
///
///   torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
///     →  accelerator.clip_grad_norm_(model->parameters(), 1.0);
///   double norm = torch::nn::utils::clip_grad_norm_(params, 0.5, 2);
///     →  double norm = accelerator.clip_grad_norm_(params, 0.5, 2).item<double>();
///   torch::nn::utils::clip_grad_value_(model->parameters(), 0.1);
///     →  accelerator.clip_grad_value_(model->parameters(), 0.1);
///
/// The accelerator's clip_grad_norm_ returns the norm as a tensor; `.item<double>()` is added where the value
/// is used (which synchronises, as libtorch's did). A single tensor argument becomes `{tensor}`. A call with
/// `error_if_nonfinite` is reported and left as it is.
PassRule clipPass();

/// Matches the calls clipPass() rewrites (they use `accelerator`).
clang::ast_matchers::StatementMatcher clipCall();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_CLIPPASS_H
