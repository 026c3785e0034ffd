// passes/MainProcessPass.cpp: the rule that keeps training output to the main process.
#include "passes/Pass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/Stencil.h"
#include "llvm/ADT/STLExtras.h"

#include "clang/ASTMatchers/ASTMatchers.h"
#include <optional>

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

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

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char StatementId[] = "statement";

std::string sourceText(clang::SourceRange Range, const clang::ASTContext& Context) {
  return clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(Range), Context.getSourceManager(),
                                     Context.getLangOpts())
      .str();
}

/// A `\n`-terminated string literal written as one token: its spelling without the `\n`.
std::optional<std::string> withoutFinalNewline(const clang::Expr* E, const clang::ASTContext& Context) {
  E = E->IgnoreUnlessSpelledInSource()->IgnoreParenImpCasts();
  std::string Text = sourceText(E->getSourceRange(), Context);
  if (llvm::isa<clang::CharacterLiteral>(E) && Text == "'\\n'")
    return std::string();
  if (!llvm::isa<clang::StringLiteral>(E) || !llvm::StringRef(Text).ends_with("\\n\"") ||
      llvm::StringRef(Text).count('"') != 2 || !llvm::StringRef(Text).starts_with("\""))
    return std::nullopt;
  Text = Text.substr(0, Text.size() - 3) + "\"";
  return Text == "\"\"" ? std::string() : Text;
}

/// `std::cout << ... << std::endl;` (or a final "...\n") with no other function manipulator: it fits
/// accelerator.print, which ends the line itself.
bool fitsPrint(const StreamChain& Chain, const clang::ASTContext& Context) {
  if (streamKind(Chain.Stream) != OutputStream::Cout)
    return false;
  const clang::Expr* Last = Chain.Operands.back();
  bool EndsLine = manipulatorName(Last) == "endl" || withoutFinalNewline(Last, Context).has_value();
  return EndsLine && llvm::none_of(llvm::ArrayRef(Chain.Operands).drop_back(), isTemplateManipulator);
}

/// The first operand of an output statement (a stream chain's operands, printf's arguments) with a side
/// effect, or null.
const clang::Expr* outputSideEffect(const clang::Expr& Statement) {
  if (std::optional<StreamChain> Chain = streamChain(&Statement)) {
    for (const clang::Expr* Operand : Chain->Operands)
      if (const clang::Expr* Found = firstSideEffect(*Operand))
        return Found;
    return nullptr;
  }
  if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(Statement.IgnoreUnlessSpelledInSource()))
    for (const clang::Expr* Argument : Call->arguments())
      if (const clang::Expr* Found = firstSideEffect(*Argument))
        return Found;
  return nullptr;
}

AST_MATCHER(clang::Expr, hasSideEffectInOutput) {
  return outputSideEffect(Node) != nullptr;
}

// ---- Numbers computed on this process's share of the data ------------------------------------------------

/// The operands an output statement prints: a stream chain's, or printf's arguments.
std::vector<const clang::Expr*> printedOperands(const clang::Expr& Statement) {
  if (std::optional<StreamChain> Chain = streamChain(&Statement))
    return Chain->Operands;
  std::vector<const clang::Expr*> Operands;
  if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(Statement.IgnoreUnlessSpelledInSource()))
    Operands.assign(Call->arg_begin(), Call->arg_end());
  return Operands;
}

/// The uses, in the printed operands, of numbers computed on this process's share, with their kind.
std::vector<std::pair<const clang::DeclRefExpr*, Share>> sharedNumbers(const clang::Expr& Statement,
                                                                       clang::ASTContext& Context) {
  std::vector<std::pair<const clang::DeclRefExpr*, Share>> Uses;
  const clang::FunctionDecl* Function = enclosingFunction(Statement, Context);
  if (!Function || !readsShardedData(*Function, Context))
    return Uses;
  for (const clang::Expr* Operand : printedOperands(Statement)) {
    auto Reads = shareReads(*Operand, *Function, Context);
    Uses.insert(Uses.end(), Reads.begin(), Reads.end());
  }
  return Uses;
}

AST_MATCHER(clang::Expr, printsSharedNumber) {
  return !sharedNumbers(Node, Finder->getASTContext()).empty();
}

/// Printed numbers that cannot be made global here: of unknown kind, or under a condition the processes could
/// disagree on (the reduction is collective).
AST_MATCHER(clang::Expr, printsUnreducibleNumber) {
  clang::ASTContext& Context = Finder->getASTContext();
  auto Uses = sharedNumbers(Node, Context);
  if (Uses.empty())
    return false;
  return isUnderTensorCondition(Node, Context) ||
         llvm::any_of(Uses, [](const auto& Use) { return Use.second == Share::Unknown; });
}

/// `accelerator.reduce(total, accelerate::ReduceOp::SUM)` around each use of a number computed on this
/// process's share: the printed value is the one the whole data gives.
void addShareReductions(const clang::Expr& Statement, clang::ASTContext& Context,
                        llvm::SmallVector<Edit, 1>& Edits) {
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const auto& [Use, Kind] : sharedNumbers(Statement, Context)) {
    clang::CharSourceRange Range = clang::Lexer::makeFileCharRange(
        clang::CharSourceRange::getTokenRange(Use->getSourceRange()), SM, Context.getLangOpts());
    Edit Before, After;
    Before.Range = clang::CharSourceRange::getCharRange(Range.getBegin(), Range.getBegin());
    Before.Replacement = "accelerator.reduce(";
    After.Range = clang::CharSourceRange::getCharRange(Range.getEnd(), Range.getEnd());
    After.Replacement = Kind == Share::Sum ? ", accelerate::ReduceOp::SUM)" : ", accelerate::ReduceOp::MEAN)";
    Edits.push_back(Before);
    Edits.push_back(After);
  }
}

/// The first printed number that cannot be made global, as written.
std::string unreducibleText(const MatchFinder::MatchResult& Result) {
  const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>("statement");
  for (const auto& [Use, Kind] : sharedNumbers(*Statement, *Result.Context))
    if (Kind == Share::Unknown || isUnderTensorCondition(*Statement, *Result.Context))
      return Use->getDecl()->getNameAsString();
  return "";
}

AST_MATCHER(clang::Expr, isStreamOutput) {
  std::optional<StreamChain> Chain = streamChain(&Node);
  return Chain && streamKind(Chain->Stream) != OutputStream::None;
}

AST_MATCHER(clang::Expr, fitsAcceleratorPrint) {
  std::optional<StreamChain> Chain = streamChain(&Node);
  return Chain && fitsPrint(*Chain, Finder->getASTContext());
}

/// The edits that make a `std::cout << a << b << std::endl;` line `accelerator.print(a, b);`: the stream and
/// the
/// `<<` between operands change, the operands stay as written (other passes may edit inside them: a
/// `.cuda()`), and `loss.item<T>()` of a loss the function runs backward on reads the mean loss over the
/// processes.
EditGenerator printEdits() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    clang::ASTContext& Context = *Result.Context;
    const clang::SourceManager& SM = Context.getSourceManager();
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    std::optional<StreamChain> Chain = streamChain(Statement);
    auto Range = [&](const clang::Expr* E) {
      return clang::Lexer::makeFileCharRange(clang::CharSourceRange::getTokenRange(E->getSourceRange()), SM,
                                             Context.getLangOpts());
    };
    auto Change = [](clang::SourceLocation Begin, clang::SourceLocation End, std::string Text) {
      Edit Result;
      Result.Range = clang::CharSourceRange::getCharRange(Begin, End);
      Result.Replacement = std::move(Text);
      return Result;
    };
    std::vector<const clang::ValueDecl*> Losses;
    const clang::FunctionDecl* Function = enclosingFunction(*Statement, Context);
    if (Function && !isUnderTensorCondition(*Statement, Context))
      Losses = lossesOf(*Function, Context);

    // The operands print keeps: all but a final std::endl, and a final "...\n" without its newline.
    std::vector<const clang::Expr*> Kept(Chain->Operands.begin(), Chain->Operands.end() - 1);
    const clang::Expr* Last = Chain->Operands.back();
    std::optional<std::string> LastText = withoutFinalNewline(Last, Context);
    llvm::SmallVector<Edit, 1> Edits;
    if (LastText && !LastText->empty()) {
      Kept.push_back(Last);
      Edits.push_back(Change(Range(Last).getBegin(), Range(Last).getEnd(), *LastText));
    }
    clang::CharSourceRange Whole = Range(Statement);
    if (Kept.empty()) {
      Edits.assign({Change(Whole.getBegin(), Whole.getEnd(), "accelerator.print()")});
      return Edits;
    }
    Edits.push_back(Change(Whole.getBegin(), Range(Kept.front()).getBegin(), "accelerator.print("));
    for (size_t I = 1; I < Kept.size(); ++I)
      Edits.push_back(Change(Range(Kept[I - 1]).getEnd(), Range(Kept[I]).getBegin(), ", "));
    Edits.push_back(Change(Range(Kept.back()).getEnd(), Whole.getEnd(), ")"));
    for (const clang::Expr* Operand : Kept)
      for (const clang::Expr* Loss : lossReads(*Operand, Losses, Context)) {
        clang::CharSourceRange Object = Range(Loss);
        Edits.push_back(Change(Object.getBegin(), Object.getBegin(), "accelerator.reduce("));
        Edits.push_back(Change(Object.getEnd(), Object.getEnd(), ", accelerate::ReduceOp::MEAN)"));
      }
    addShareReductions(*Statement, Context, Edits);
    return Edits;
  };
}

auto inScope() {
  return allOf(unless(isInMacroExpansion()), isInTrainingOrEvaluationCode(),
               unless(isInDistributedFunction()));
}

StatementMatcher printable() {
  return expr(isStreamOutput(), fitsAcceleratorPrint(), isWholeStatement(), inScope()).bind(StatementId);
}

/// Output to a file: a chain on a file stream, or `fprintf` to a `FILE*` other than stdout and stderr.
AST_MATCHER(clang::Expr, writesToAFile) {
  if (std::optional<StreamChain> Chain = streamChain(&Node))
    return streamKind(Chain->Stream) == OutputStream::File;
  const auto* Call = llvm::dyn_cast<clang::CallExpr>(Node.IgnoreUnlessSpelledInSource());
  const clang::FunctionDecl* Callee = Call ? Call->getDirectCallee() : nullptr;
  if (!Callee || !Callee->getDeclName().isIdentifier() || Callee->getName() != "fprintf" ||
      Call->getNumArgs() == 0)
    return false;
  const auto* File = llvm::dyn_cast<clang::DeclRefExpr>(Call->getArg(0)->IgnoreParenImpCasts());
  return !File || (File->getDecl()->getName() != "stdout" && File->getDecl()->getName() != "stderr");
}

StatementMatcher guardable() {
  // A helper that training code calls writes its files on every process too; its console output is left as
  // it is.
  auto HelperWrite = allOf(writesToAFile(), unless(isInMacroExpansion()), isInTrainingHelper(),
                           unless(isInDistributedFunction()));
  return expr(anyOf(expr(isStreamOutput()), printfCall()), isWholeStatement(), anyOf(inScope(), HelperWrite))
      .bind(StatementId);
}

/// The stream of the output statement bound to StatementId, written as
/// `accelerator.main_process_stream(...)`.
EditGenerator streamOnMainProcess() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    std::optional<StreamChain> Chain = streamChain(Statement);
    clang::CharSourceRange Stream = clang::Lexer::makeFileCharRange(
        clang::CharSourceRange::getTokenRange(Chain->Stream->getSourceRange()), *Result.SourceManager,
        Result.Context->getLangOpts());
    Edit Before, After;
    Before.Range = clang::CharSourceRange::getCharRange(Stream.getBegin(), Stream.getBegin());
    Before.Replacement = "accelerator.main_process_stream(";
    After.Range = clang::CharSourceRange::getCharRange(Stream.getEnd(), Stream.getEnd());
    After.Replacement = ")";
    llvm::SmallVector<Edit, 1> Edits{Before, After};
    addShareReductions(*Statement, *Result.Context, Edits);
    return Edits;
  };
}

/// The call or update an output statement must still run on every process, as written.
std::string sideEffectText(const MatchFinder::MatchResult& Result) {
  const clang::Expr* Effect = outputSideEffect(*Result.Nodes.getNodeAs<clang::Expr>(StatementId));
  return Effect ? sourceText(Effect->getSourceRange(), *Result.Context) : "";
}

} // namespace

StatementMatcher mainProcessOutput() {
  return stmt(anyOf(printable(), guardable()));
}

PassRule mainProcessPass() {
  auto EffectText = run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    return sideEffectText(Result);
  });
  auto NumberText = run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    return unreducibleText(Result);
  });
  auto Unreducible = cat(
      "output not rewritten: '", NumberText,
      "' is computed from this process's share of the data (a prepared loader's batches), so each process "
      "has its own value, and the rewriter cannot tell how to combine it (not a sum or count, nor a mean "
      "of losses, or printed under a condition on a tensor, where a collective could wait forever); every "
      "process prints this line. Reduce its parts before computing it: accelerator.reduce(sum, "
      "accelerate::ReduceOp::SUM) for sums and counts, accelerate::ReduceOp::MEAN for means");
  return applyFirst<std::string>({
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, expr(printable(), printsUnreducibleNumber())),
               noopEdit(node(StatementId)), Unreducible),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, printable()), printEdits(),
               cat("accelerator.print() prints on the main process only, once per job instead of once per "
                   "process; a loss the function runs backward on is printed as its mean over the processes "
                   "(accelerator.reduce), the loss of the global batch, and sums, counts and means computed "
                   "from this process's share of the data as their sum or mean over the processes")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, expr(guardable(), printsUnreducibleNumber())),
               noopEdit(node(StatementId)), Unreducible),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        expr(guardable(), isStreamOutput(), hasSideEffectInOutput())),
               streamOnMainProcess(),
               cat("only the main process writes this output, but every process evaluates it: '", EffectText,
                   "' may change what the processes compute next (a call not known to be pure), so a "
                   "main-process guard around it would let them drift apart")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        expr(guardable(), isStreamOutput(), printsSharedNumber())),
               streamOnMainProcess(),
               cat("only the main process writes this output, but every process evaluates it: the sums, "
                   "counts and means it prints are computed from each process's share of the data and "
                   "reduced over the processes (accelerator.reduce, a collective every process takes)")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, expr(guardable(), hasSideEffectInOutput())),
               noopEdit(node(StatementId)),
               cat("output not rewritten: '", EffectText,
                   "' may change what the processes compute next (a call not known to be pure), and a "
                   "main-process guard would run it on one process only; every process prints this line. "
                   "Evaluate it into a variable on the line before, and accel-rewrite guards the output")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, expr(guardable(), printsSharedNumber())),
          noopEdit(node(StatementId)),
          cat("output not rewritten: it prints numbers computed from this process's share of the data, "
              "which must be reduced over the processes by every process (a collective), and a "
              "main-process guard would leave the others out; every process prints this line. Print with "
              "std::cout, or reduce the numbers into variables on the line before "
              "(accelerator.reduce(total, accelerate::ReduceOp::SUM))")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, guardable()),
               guardStatement(StatementId, "accelerator.is_main_process()"),
               cat("only the main process writes this output, once per job instead of once per process")),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo mainProcessPassInfo() {
  return {"main-process",
          mainProcessPass,
          "training output is printed (`accelerator.print`) or written by the main process only",
          /*OnByDefault=*/true,
          /*WhenNothingFound=*/{},
          /*LeavesAlone=*/"output in other functions",
          /*TurnedOnBy=*/{},
          /*UsesAccelerator=*/mainProcessOutput};
}

} // namespace accelerate::passes
