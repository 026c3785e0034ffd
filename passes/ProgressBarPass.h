// passes/ProgressBarPass.h: with `--progress-bar`, the training loop shows a progress bar on the main
// process.
#ifndef ACCELERATE_PASSES_PROGRESSBARPASS_H
#define ACCELERATE_PASSES_PROGRESSBARPASS_H

#include "passes/Pass.h"

#include "clang/ASTMatchers/ASTMatchers.h"

namespace accelerate::passes {

/// Off by default; `accel-rewrite --progress-bar` (PassSettings::ProgressBar) switches it on. Each training
/// run (the outermost training loop, as the tracking pass finds it) gets an `accelerate::ProgressBar`, which
/// shows on the main process only and prints plain lines when standard output is not a terminal:
///
/// - a run to a step count, `while (step < steps)` with a counter the loop increments once per step, or
///   `for (int64_t i = 0; i < n; ++i)`:
///
///     int64_t step = 0;                     int64_t step = 0;
///     while (step < steps) {                accelerate::ProgressBar progress(steps, "train");
///       for (auto& batch : *loader) {       accelerator.register_counter("progress", progress);
///         ...                          →    while (step < steps) {
///         if (++step % 10 == 1) { ... }       for (auto& batch : *loader) {
///       }                                       ...
///     }                                         if (++step % 10 == 1) { ... }
///                                               progress.update();
///                                             }
///                                           }
///                                           progress.close();
///
///   The bar advances right after the statement that advances the counter (so its count is the counter's),
///   or, for the loop's own `for` variable, after the last statement of the body that trains. It is
///   registered as a counter under its name, so a `load_state` (a resumed run's) puts it back at the count it
///   had reached.
/// - a run over a prepared data loader, or an epoch loop whose training loop reads one: the loader's batches
///   go through `accelerate::progress_bar(*loader, "epoch " + std::to_string(epoch))` (`"train"` without an
///   epoch variable): one bar per pass over the loader, its total the loader's size on this process. A pass
///   of a loader resumed mid-epoch starts its bar at the batch it starts at (`DataLoader::pass_start`).
/// - anything else: a warning with the line, the reason and the code to write by hand.
PassRule progressBarPass();

/// The runs that get a bar over their step count, whose registration uses `accelerator`
/// (PassInfo::UsesAccelerator).
clang::ast_matchers::StatementMatcher progressBarOverSteps();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_PROGRESSBARPASS_H
