// passes/MainProcessPass.h: training output is printed, and logged, by the main process only.
#ifndef ACCELERATE_PASSES_MAINPROCESSPASS_H
#define ACCELERATE_PASSES_MAINPROCESSPASS_H

#include "passes/Registry.h"

#include "clang/ASTMatchers/ASTMatchers.h"

#include <optional>
#include <string>
#include <vector>

namespace accelerate::passes {

/// In training and evaluation code (see TrainingCode.h), output runs on the main process only:
///
///   std::cout << "step " << step << " loss " << loss.item<double>() << std::endl;
///     →  accelerator.print("step ", step, " loss ", accelerator.reduce(loss,
///     accelerate::ReduceOp::MEAN).item<double>());
///   std::printf("loss %f\n", value);   →  if (accelerator.is_main_process()) std::printf("loss %f\n",
///   value); log << epoch << "\n";              →  if (accelerator.is_main_process()) log << epoch << "\n";
///
/// A `std::cout` line that ends with `std::endl` or "\n" becomes `accelerator.print(...)`; any other output
/// (`std::cerr`, a file stream, `printf`, a line without its newline) is guarded. The value of a loss that
/// the function runs backward on, printed with `.item<T>()` in `accelerator.print`, becomes its mean over the
/// processes, so the printed loss is the global batch's; not where a condition on a tensor decides whether
/// it prints (one process could print while another does not, and the mean is a collective).
PassRule mainProcessPass();

/// Matches the output statements mainProcessPass() rewrites (they use `accelerator`).
clang::ast_matchers::StatementMatcher mainProcessOutput();

/// A loss an output statement prints: `loss.item<T>()` (in any operand) of a tensor its function runs
/// backward on, as mainProcessPass() recognises it.
struct PrintedLoss {
  const clang::ValueDecl* Loss = nullptr; ///< The loss variable.
  /// In a `<<` chain, the text of the string literal printed right before the operand that reads the loss
  /// (stream manipulators such as `std::setprecision(8)` in between skipped), its escapes resolved; "" when
  /// what comes before is not a string literal. None in a `printf`, whose format holds the label.
  std::optional<std::string> PrintedBefore;
};

/// The losses that `Statement`, a `<<` chain on std::cout, std::cerr or std::clog, or a `printf`/`fprintf`
/// call, prints, in the order printed (each loss variable once). Files a program writes are not printing.
std::vector<PrintedLoss> printedLosses(const clang::Expr& Statement, clang::ASTContext& Context);

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_MAINPROCESSPASS_H
