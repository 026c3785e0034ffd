// passes/TrackingPass.h: with `--log-with`, training is tracked: trackers started and finished around the
// training loop, and the training numbers it prints logged to them.
#ifndef ACCELERATE_PASSES_TRACKINGPASS_H
#define ACCELERATE_PASSES_TRACKINGPASS_H

#include "passes/Pass.h"

#include "clang/ASTMatchers/ASTMatchers.h"

#include <string>

namespace accelerate::passes {

/// Off by default; `accel-rewrite --log-with tensorboard` (PassSettings::LogWith) switches it on. Before and
/// after each training loop (the outermost loop of a function that runs a training step, unless a training
/// loop elsewhere in the file calls that function), and after each line in it that prints a training number
/// (printedValues(): a loss, or a sum, count or mean over the batches and what is computed from them):
///
///   int step = 0;                                int step = 0;
///   for (auto& batch : *loader) {                accelerator.init_trackers("train");
///     ...                                        for (auto& batch : *loader) {
///     ++step;                               →      ...
///     std::cout << "loss " << loss.item<float>()   ++step;
///               << std::endl;                      std::cout << "loss " << loss.item<float>()
///   }                                                        << std::endl;
///                                                  accelerator.log({{"loss", accelerator.reduce(
///                                                      loss.detach(), accelerate::ReduceOp::MEAN)}},
///                                                      step);
///                                                }
///                                                accelerator.end_training();
///
/// Each value is logged as the main-process pass prints it (globalValueText(): losses as their mean over the
/// processes, this process's sums and counts with SUM, means with MEAN): after `std::cout << "mean loss " <<
/// total / n`, `accelerator.log({{"mean_loss", accelerator.reduce(total, accelerate::ReduceOp::MEAN) / n}},
/// epoch)`. The project is PassSettings::ProjectName, else the file's stem; the name logged is the text
/// printed before the value, trimmed (else the variable it is computed from). A line printed once per epoch
/// (in the run, outside the innermost training loop) is logged at the epoch loop's own `for` counter; any
/// other line at the step counter: a counter the loop already keeps (its own `for` variable, or a variable
/// declared before it and incremented once per step), else `int64_t step` is declared before the loop and
/// incremented after the optimizer step. The accelerator pass adds the trackers to the accelerator's options
/// (trackedAcceleratorOptions()). Reported, not logged: a value printed by printf or under a condition on a
/// tensor; a number of this process's share the rewriter cannot combine over the processes (a ratio of
/// sums); a printed value with a side effect; a training loop that prints no training number, or that is the
/// unbraced body of an `if` or a loop.
PassRule trackingPass();

/// The accelerator's options when the tracking pass runs, `log_with({"..."})` (PassInfo::AcceleratorOptions);
/// empty when it does not.
std::string trackedAcceleratorOptions();

/// Matches the training loops trackingPass() starts trackers around (their function uses `accelerator`).
clang::ast_matchers::StatementMatcher trackedTrainingLoop();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_TRACKINGPASS_H
