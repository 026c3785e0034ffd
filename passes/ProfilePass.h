// passes/ProfilePass.h: with `--profile`, the training loop runs under the profiler, stepped once per
// optimizer step.
#ifndef ACCELERATE_PASSES_PROFILEPASS_H
#define ACCELERATE_PASSES_PROFILEPASS_H

#include "passes/Pass.h"

#include "clang/ASTMatchers/ASTMatchers.h"

namespace accelerate::passes {

/// Off by default; `accel-rewrite --profile` (`accelerate_target(... PROFILE)`) switches it on. Each training
/// run (the outermost training loop, as the tracking pass finds it) runs under `accelerator.profile()`,
/// stepped right after each optimizer step and stopped after the loop, which writes each process's Chrome
/// trace (`<profile_trace_dir>/profile_<process_index>.json`; the schedule and the directory come from the
/// `profile_schedule` and `profile_trace_dir` settings, ACCEL_PROFILE_SCHEDULE and ACCEL_PROFILE_DIR):
///
///     for (auto& batch : *loader) {         auto profiler = accelerator.profile();
///       ...                                 for (auto& batch : *loader) {
///       optimizer.step();              →      ...
///     }                                       optimizer.step();
///                                             profiler.step();
///                                           }
///                                           profiler.stop();
///
/// The profiler steps after the last optimizer step the innermost training loop's body calls (inside the
/// `if` that guards it, when one does), else after the body's last statement that trains (an optimizer step
/// in a function the loop calls). A run written without braces around it, or whose body is not a block, is
/// reported with the code to write by hand.
PassRule profilePass();

/// The runs the pass profiles, whose profiler comes from `accelerator` (PassInfo::UsesAccelerator).
clang::ast_matchers::StatementMatcher profiledTrainingRun();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_PROFILEPASS_H
