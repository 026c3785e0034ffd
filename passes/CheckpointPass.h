// passes/CheckpointPass.h: files the training loop saves are written by the main process.
#ifndef ACCELERATE_PASSES_CHECKPOINTPASS_H
#define ACCELERATE_PASSES_CHECKPOINTPASS_H

#include "passes/Pass.h"

#include "clang/ASTMatchers/ASTMatchers.h"

namespace accelerate::passes {

/// In training and evaluation code, each `torch::save(...)` statement runs on the main process only, at the
/// user's path, so files that other tools read (the model, sample images, tensors for inspection) are written
/// once, not once per process; and where the training loop saves a model or an optimizer, a checkpoint that
/// resumes training is saved too, by every process (save_state is collective):
///
///   torch::save(model, "model.pt");  →  accelerator.save_state("checkpoint");
///                                        if (accelerator.is_main_process()) torch::save(model, "model.pt");
///   torch::save(samples, "s.pt");    →  if (accelerator.is_main_process()) torch::save(samples, "s.pt");
///
/// Every process holds the same weights after a synchronised step, so the main process's copy is the model.
/// `accelerator.save_state("checkpoint")` (models, optimizers, schedulers, RNG and data position; written to
/// a temporary directory, then renamed) goes before the first such save of its block. It is not added where a
/// condition on a tensor's value decides whether the save runs (a "best loss so far" on a local loss: the
/// processes could disagree, and a collective reached by some would wait forever), nor where the save is not
/// a statement of a block; the explanation says why. The guard alone takes no collective, so it is safe
/// anywhere.
PassRule checkpointPass();

/// Matches the saves checkpointPass() guards (the guard uses `accelerator`).
clang::ast_matchers::StatementMatcher guardedSave();
/// Matches `std::ofstream log(path);` in training code (or a helper it calls, isInTrainingHelper()), which
/// the pass opens without emptying the file on processes other than the main one (it uses `accelerator`).
clang::ast_matchers::StatementMatcher fileStreamOpenedByEveryProcess();
/// `std::fopen(path, "w")` (a mode that empties the file, or a mode computed from such ones) in training or
/// evaluation code or a helper it calls: a C file opened, and so emptied, by every process.
clang::ast_matchers::StatementMatcher cFileOpenedByEveryProcess();

/// Matches every statement checkpointPass() makes use `accelerator` (guardedSave(),
/// fileStreamOpenedByEveryProcess(), cFileOpenedByEveryProcess()): its registry row's
/// PassInfo::UsesAccelerator.
clang::ast_matchers::StatementMatcher checkpointUsesAccelerator();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_CHECKPOINTPASS_H
