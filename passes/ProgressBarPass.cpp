// passes/ProgressBarPass.cpp: the rule that gives the training loop a progress bar (`--progress-bar`).
#include "passes/Pass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/Stencil.h"

#include "clang/ASTMatchers/ASTMatchers.h"
#include <optional>

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

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

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char LoopId[] = "loop";
constexpr char RangeId[] = "range";

bool progressBarOn() {
  return isPassEnabled("progress-bar") && passSettings().ProgressBar;
}

/// What the pass does with a training run.
struct BarPlan {
  enum Kind { Steps, Loader, Unsupported } Shape = Unsupported;
  /// Steps: the bar's total (the loop's bound), and the statement the bar advances after.
  std::string Total;
  const clang::Stmt* UpdateAfter = nullptr;
  const clang::VarDecl* Counter = nullptr;
  /// Loader: the range the loader loop iterates, and the bar's label (a C++ expression).
  const clang::Expr* Range = nullptr;
  std::string Description;
  bool AfterIncrement = false; ///< Steps: UpdateAfter increments the counter (else: it runs the step).
  /// Unsupported: why, said in the warning, and what to do (empty: write the bar by hand).
  std::string Reason;
  std::string Fix;
};

std::string sourceText(const clang::Expr& E, clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  return clang::Lexer::getSourceText(SM.getExpansionRange(E.getSourceRange()), SM, Context.getLangOpts())
      .str();
}

bool isZero(const clang::Expr* E) {
  const auto* Literal = E ? llvm::dyn_cast<clang::IntegerLiteral>(E->IgnoreParenImpCasts()) : nullptr;
  return Literal && Literal->getValue() == 0;
}

bool needsParentheses(const clang::Expr& E) {
  const clang::Expr* Bare = E.IgnoreImpCasts();
  return !llvm::isa<clang::DeclRefExpr, clang::IntegerLiteral, clang::MemberExpr, clang::CallExpr,
                    clang::ParenExpr>(Bare);
}

/// True when `E` can be evaluated right before `Run` and gives the value it has in the run's condition: it
/// has no side effects, names only variables declared before the run, and the run writes none of them.
bool isFixedBefore(const clang::Expr& E, const clang::Stmt& Run, clang::ASTContext& Context) {
  if (E.HasSideEffects(Context) || E.isValueDependent() || !E.getType()->isIntegerType())
    return false;
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs,
                      expr(anyOf(declRefExpr().bind("ref"), hasDescendant(declRefExpr().bind("ref"))))),
             E, Context)) {
    const auto* Ref = Found.getNodeAs<clang::DeclRefExpr>("ref");
    if (llvm::isa<clang::EnumConstantDecl, clang::FunctionDecl>(Ref->getDecl()))
      continue;
    const auto* Variable = llvm::dyn_cast<clang::VarDecl>(Ref->getDecl());
    if (!Variable || !SM.isBeforeInTranslationUnit(Variable->getLocation(), Run.getBeginLoc()) ||
        writesIn(Run, *Variable, Context) > 0)
      return false;
  }
  return true;
}

/// The condition of a for, while or do loop; null for a range-for.
const clang::Expr* loopCondition(const clang::Stmt& Loop) {
  if (const auto* For = llvm::dyn_cast<clang::ForStmt>(&Loop))
    return For->getCond();
  if (const auto* While = llvm::dyn_cast<clang::WhileStmt>(&Loop))
    return While->getCond();
  if (const auto* Do = llvm::dyn_cast<clang::DoStmt>(&Loop))
    return Do->getCond();
  return nullptr;
}

const clang::VarDecl* variableOf(const clang::Expr* E) {
  const auto* Ref = E ? llvm::dyn_cast<clang::DeclRefExpr>(E->IgnoreParenImpCasts()) : nullptr;
  return Ref ? llvm::dyn_cast<clang::VarDecl>(Ref->getDecl()) : nullptr;
}

/// The bound `Counter` is compared with in `Condition`: `counter < bound`, `counter != bound`,
/// `bound > counter`; null otherwise.
const clang::Expr* boundOf(const clang::Expr* Condition, const clang::VarDecl& Counter) {
  const auto* Compare =
      Condition ? llvm::dyn_cast<clang::BinaryOperator>(Condition->IgnoreParenImpCasts()) : nullptr;
  if (!Compare)
    return nullptr;
  clang::BinaryOperatorKind Op = Compare->getOpcode();
  if ((Op == clang::BO_LT || Op == clang::BO_NE) && variableOf(Compare->getLHS()) == &Counter)
    return Compare->getRHS();
  if ((Op == clang::BO_GT || Op == clang::BO_NE) && variableOf(Compare->getRHS()) == &Counter)
    return Compare->getLHS();
  return nullptr;
}

/// The last statement of `Body` that runs the training step (an optimizer step, or a backward pass, also in a
/// function it calls); null when none does.
const clang::Stmt* lastTrainingStatement(const clang::CompoundStmt& Body, clang::ASTContext& Context) {
  const clang::Stmt* Last = nullptr;
  for (const clang::Stmt* Statement : Body.body())
    if (containsMatch(optimizerStep(), *Statement, Context) || loopTrains(*Statement, Context))
      Last = Statement;
  return Last;
}

bool inBlock(const clang::Stmt& S, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(S);
  return !Parents.empty() && Parents[0].get<clang::CompoundStmt>();
}

/// A run to a step count (Steps), or why it is not one (Unsupported, Reason set), or nothing when the loop
/// has no counter compared with a bound.
std::optional<BarPlan> stepsPlan(const clang::Stmt& Run, clang::ASTContext& Context) {
  std::optional<StepCounterFact> Counter = existingStepCounter(Run, Context);
  if (!Counter)
    return std::nullopt;
  const clang::Expr* Bound = boundOf(loopCondition(Run), *Counter->Variable);
  if (!Bound)
    return std::nullopt;
  BarPlan Plan;
  if (!isFixedBefore(*Bound, Run, Context)) {
    Plan.Reason = "its bound '" + sourceText(*Bound, Context) +
                  "' cannot be computed before the loop (it has side effects, names a variable declared in "
                  "the loop, or the loop changes it)";
    return Plan;
  }
  if (!inBlock(Run, Context)) {
    Plan.Reason = "this training loop is the body of an if or a loop written without braces, where the bar's "
                  "declaration cannot go beside it";
    Plan.Fix = "put it in braces { ... } and run again";
    return Plan;
  }
  std::string Total = sourceText(*Bound, Context);
  const clang::VarDecl& Variable = *Counter->Variable;
  if (Counter->Increment) {
    // A counter declared before the loop: from 0 when nothing but the loop changes it, else from its value.
    const clang::FunctionDecl* Function = enclosingFunction(Run, Context);
    bool FromZero = isZero(Variable.getInit()) && Function &&
                    writesIn(*Function->getBody(), Variable, Context) == writesIn(Run, Variable, Context);
    if (!FromZero)
      Total = (needsParentheses(*Bound) ? "(" + Total + ")" : Total) + " - " + Variable.getNameAsString();
    Plan.UpdateAfter = Counter->Increment;
    Plan.AfterIncrement = true;
  } else {
    // The loop's own `for` variable.
    const clang::Expr* Start = Variable.getInit();
    if (!Start || !isFixedBefore(*Start, Run, Context)) {
      Plan.Reason = "its variable '" + Variable.getNameAsString() +
                    "' starts at a value that cannot be computed before the loop";
      return Plan;
    }
    if (!isZero(Start))
      Total =
          (needsParentheses(*Bound) ? "(" + Total + ")" : Total) + " - " +
          (needsParentheses(*Start) ? "(" + sourceText(*Start, Context) + ")" : sourceText(*Start, Context));
    const auto* Body = llvm::dyn_cast_or_null<clang::CompoundStmt>(loopBody(Run));
    Plan.UpdateAfter = Body ? lastTrainingStatement(*Body, Context) : nullptr;
    if (!Plan.UpdateAfter) {
      Plan.Reason = "its body is not a block where the bar could advance after the training step";
      Plan.Fix = "put the loop's body in braces { ... } and run again";
      return Plan;
    }
  }
  Plan.Shape = BarPlan::Steps;
  Plan.Total = Total;
  Plan.Counter = &Variable;
  return Plan;
}

/// A run over a data loader, or an epoch loop whose training loop reads one (Loader); nothing otherwise.
std::optional<BarPlan> loaderPlan(const clang::Stmt& Run, clang::ASTContext& Context) {
  for (const clang::Stmt* Loop : trainingLoopsOf(Run, Context)) {
    const clang::VarDecl* Loader = iteratedLoader(*Loop, Context);
    if (!Loader)
      continue;
    BarPlan Plan;
    if (!isPassEnabled("data-loader") || !isPreparedLoader(*Loader, Context)) {
      Plan.Reason = "its loader '" + Loader->getNameAsString() +
                    "' is not prepared (accelerate::progress_bar iterates a prepared loader; see the "
                    "data-loader pass)";
      return Plan;
    }
    const auto* RangeFor = llvm::cast<clang::CXXForRangeStmt>(Loop);
    Plan.Shape = BarPlan::Loader;
    Plan.Range = RangeFor->getRangeInit();
    Plan.Description = "\"train\"";
    // An epoch loop around the loader loop labels each pass: `for (int epoch = 0; ...)`.
    if (const auto* Epochs = llvm::dyn_cast<clang::ForStmt>(&Run); Epochs && Loop != &Run) {
      const auto* Init = llvm::dyn_cast_or_null<clang::DeclStmt>(Epochs->getInit());
      const auto* Epoch =
          Init && Init->isSingleDecl() ? llvm::dyn_cast<clang::VarDecl>(Init->getSingleDecl()) : nullptr;
      if (Epoch && Epoch->getType()->isIntegerType() && Epoch->getIdentifier())
        Plan.Description = "\"epoch \" + std::to_string(" + Epoch->getNameAsString() + ")";
    }
    return Plan;
  }
  return std::nullopt;
}

BarPlan planFor(const clang::Stmt& Run, clang::ASTContext& Context) {
  if (std::optional<BarPlan> Plan = stepsPlan(Run, Context))
    return *Plan;
  if (std::optional<BarPlan> Plan = loaderPlan(Run, Context))
    return *Plan;
  BarPlan Plan;
  Plan.Reason = "the loop neither runs to a step count (`while (step < steps)` with a counter it increments "
                "once per step, `for (int64_t i = 0; i < n; ++i)`) nor over a prepared data loader, so the "
                "bar's total is not known here";
  return Plan;
}

/// The name of the bar of a Steps run: `progress`, else `train_progress`, `progress_2`, ..., free in its
/// function and not taken by the bar of an earlier run of the function.
std::string barName(const clang::Stmt& Run, clang::ASTContext& Context) {
  const clang::FunctionDecl* Function = enclosingFunction(Run, Context);
  llvm::StringSet<> Taken = takenNames(*Function, Context);
  auto FreeName = [&] { return freeName(Taken, {"progress", "train_progress"}, "progress"); };
  for (const clang::Stmt* Other : mainFileLoops(Context)) {
    const clang::FunctionDecl* Owner = enclosingFunction(*Other, Context);
    if (Other == &Run || !Owner || Owner->getCanonicalDecl() != Function->getCanonicalDecl() ||
        !isTrainingRun(*Other, Context) || planFor(*Other, Context).Shape != BarPlan::Steps)
      continue;
    if (Context.getSourceManager().isBeforeInTranslationUnit(Other->getBeginLoc(), Run.getBeginLoc()))
      Taken.insert(FreeName());
  }
  return FreeName();
}

AST_MATCHER(clang::Stmt, isProgressBarOn) {
  return progressBarOn();
}

AST_MATCHER(clang::Stmt, isTrainingRunMatcher) {
  return isTrainingRun(Node, Finder->getASTContext());
}

/// A training run whose plan has the shape `Shape`; a Loader run binds its range to RangeId.
AST_MATCHER_P(clang::Stmt, hasBarShape, int, Shape) {
  BarPlan Plan = planFor(Node, Finder->getASTContext());
  if (Plan.Shape != Shape)
    return false;
  if (Plan.Range)
    Builder->setBinding(RangeId, clang::DynTypedNode::create(*Plan.Range));
  return true;
}

StatementMatcher trainingRun(BarPlan::Kind Shape) {
  return stmt(isProgressBarOn(), anyOf(forStmt(), cxxForRangeStmt(), whileStmt(), doStmt()),
              unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()),
              isTrainingRunMatcher(), hasBarShape(Shape))
      .bind(LoopId);
}

/// `accelerate::ProgressBar progress(steps, "train");` and the bar registered as a counter under its name, so
/// that a `load_state` (a resumed run's) puts it back at the count it had reached.
Stencil barDeclaration() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    std::string Name = barName(*Loop, *Result.Context);
    return "accelerate::ProgressBar " + Name + "(" + planFor(*Loop, *Result.Context).Total +
           ", \"train\");\naccelerator.register_counter(\"" + Name + "\", " + Name + ");";
  });
}

Stencil barClose() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    return barName(*Result.Nodes.getNodeAs<clang::Stmt>(LoopId), *Result.Context) + ".close();";
  });
}

/// `progress.update();` after the statement that advances the step.
EditGenerator barUpdate() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    BarPlan Plan = planFor(*Loop, *Result.Context);
    return editsInsertingAfter(*Plan.UpdateAfter, barName(*Loop, *Result.Context) + ".update();",
                               *Result.Context);
  };
}

Stencil explainSteps() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    BarPlan Plan = planFor(*Loop, *Result.Context);
    return "a progress bar over the training loop's steps, '" + Plan.Total +
           "' in all (accelerate::ProgressBar '" + barName(*Loop, *Result.Context) +
           "', shown by the main process: in place on a terminal, else in plain lines at every tenth), " +
           (Plan.AfterIncrement
                ? "advanced right after the statement that increments '" + Plan.Counter->getNameAsString() +
                      "', so that its count is the counter's"
                : std::string("advanced after the training step")) +
           ", and closed after the loop; it is registered with the accelerator (register_counter), so a "
           "run resumed by load_state goes on from the count it had reached instead of from 0";
  });
}

Stencil loaderRange() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    BarPlan Plan = planFor(*Loop, *Result.Context);
    return "accelerate::progress_bar(" + sourceText(*Plan.Range, *Result.Context) + ", " + Plan.Description +
           ")";
  });
}

Stencil explainLoader() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    BarPlan Plan = planFor(*Loop, *Result.Context);
    return "the loader's batches go through accelerate::progress_bar, labelled " + Plan.Description +
           ": a bar over each pass over the loader (its size() batches on this process), shown by the main "
           "process, on a terminal in place, else in plain lines at every tenth; a pass that a resumed "
           "loader "
           "starts after the batches the checkpoint had consumed starts its bar there";
  });
}

Stencil whyNoBar() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    BarPlan Plan = planFor(*Loop, *Result.Context);
    std::string Fix =
        !Plan.Fix.empty()
            ? Plan.Fix
            : "write it by hand: 'accelerate::ProgressBar progress(total_steps, \"train\");' before "
              "the loop and 'progress.update();' after each training step, or iterate a prepared "
              "loader through 'accelerate::progress_bar(*loader, \"train\")'";
    return "progress bar not added: " + Plan.Reason + "; " + Fix;
  });
}

} // namespace

StatementMatcher progressBarOverSteps() {
  return trainingRun(BarPlan::Steps);
}

PassRule progressBarPass() {
  auto Include = edit(addInclude("accelerate/accelerate.h", IncludeFormat::Angled));
  return applyFirst<std::string>({
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, trainingRun(BarPlan::Steps)),
               flatten(insertBeforeStatement(LoopId, barDeclaration()),
                       insertAfterStatement(LoopId, barClose()), barUpdate(), Include),
               explainSteps()),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, trainingRun(BarPlan::Loader)),
               flatten(edit(changeTo(node(RangeId), loaderRange())), Include), explainLoader()),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, trainingRun(BarPlan::Unsupported)),
               noopEdit(node(LoopId)), whyNoBar()),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo progressBarPassInfo() {
  return {
      "progress-bar",
      progressBarPass,
      "with `--progress-bar`: the training loop shows an `accelerate::ProgressBar` on the main process, "
      "over "
      "its step count or its data loader",
      /*OnByDefault=*/false,
      /*WhenNothingFound=*/{},
      /*LeavesAlone=*/"loops whose length is not known, loaders left unprepared, unbraced loops (warnings)",
      /*TurnedOnBy=*/"`--progress-bar`",
      /*UsesAccelerator=*/progressBarOverSteps,
      /*UsesAcceleratorInMain=*/nullptr,
      /*AcceleratorOptions=*/nullptr,
      /*Setting=*/"--progress-bar"};
}

} // namespace accelerate::passes
