// passes/MainProcessPass.h: training output is printed, and logged, by the main process only.
#ifndef ACCELERATE_PASSES_MAINPROCESSPASS_H
#define ACCELERATE_PASSES_MAINPROCESSPASS_H

#include "passes/Pass.h"
#include "passes/TrainingCode.h"

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

/// A number an output statement prints that the training computes, as mainProcessPass() classifies it: an
/// operand that reads a loss the function runs backward on (`loss.item<T>()`), or a local computed from the
/// batches (shareOf: a sum or count, a mean of losses, or another number made of them, such as `total / n`,
/// `correct / seen`).
struct PrintedValue {
  const clang::Expr* Operand = nullptr; ///< The operand printed: of the `<<` chain, or a printf argument.
  /// In a `<<` chain, the text of the string literal printed right before it (stream manipulators such as
  /// `std::setprecision(8)` in between skipped), its escapes resolved; "" when what comes before is not a
  /// string literal. None in a `printf`, whose format holds the label.
  std::optional<std::string> PrintedBefore;
  /// The loss objects of its `loss.item<T>()` reads, in source order.
  std::vector<const clang::Expr*> LossReads;
  /// Its uses of locals computed from the batches, with their kind (shareOf).
  std::vector<std::pair<const clang::DeclRefExpr*, Share>> Numbers;
  /// True when the function reads a prepared loader: the Numbers are this process's share, which
  /// mainProcessPass() reduces where they are printed (sums and counts with SUM, means with MEAN), and leaves
  /// the line per process when one is Share::Unknown.
  bool PerProcess = false;
  /// The first call or update in it not known to be pure (see mainProcessPass()), or null.
  const clang::Expr* SideEffect = nullptr;
};

/// The training numbers that `Statement`, a `<<` chain on std::cout, std::cerr or std::clog, or a
/// `printf`/`fprintf` call, prints, in the order printed. Files a program writes are not printing.
std::vector<PrintedValue> printedValues(const clang::Expr& Statement, clang::ASTContext& Context);

/// `Value`'s operand as written, its losses and this process's shares made global as mainProcessPass() makes
/// them where the line prints: `accelerator.reduce(total, accelerate::ReduceOp::MEAN) / n`; a bare
/// `loss.item<T>()` as the 0-d tensor `accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)`. None
/// when a number cannot be made global (Share::Unknown of this process's share) or the operand's text is not
/// all in the file (a macro).
std::optional<std::string> globalValueText(const PrintedValue& Value, clang::ASTContext& Context);

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_MAINPROCESSPASS_H
