// passes/CheckpointPass.h: files the training loop saves are written by the main process.
#ifndef ACCELERATE_PASSES_CHECKPOINTPASS_H
#define ACCELERATE_PASSES_CHECKPOINTPASS_H

#include "passes/Registry.h"

#include "clang/ASTMatchers/ASTMatchers.h"

namespace accelerate::passes {

/// In training and evaluation code, each `torch::save(...)` statement runs on the main process only, at the
/// user's path, so files that other tools read (the model, sample images, tensors for inspection) are written
/// once, not once per process:
///
///   torch::save(model, "model.pt");  →  if (accelerator.is_main_process()) torch::save(model, "model.pt");
///
/// Every process holds the same weights after a synchronised step, so the main process's copy is the model.
/// The guard takes no collective, so it is safe under any condition (a "best loss so far" on a local loss).
/// A checkpoint that resumes training (optimizer state, data position) is `accelerator.save_state`, which the
/// runtime does not have yet (RuntimeSupport::SaveState): saves of a model or an optimizer say so in the
/// explanation.
PassRule checkpointPass();

/// Matches the saves checkpointPass() guards (the guard uses `accelerator`).
clang::ast_matchers::StatementMatcher guardedSave();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_CHECKPOINTPASS_H
