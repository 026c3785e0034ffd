// passes/TrackingPass.cpp: the rule that starts the `--log-with` trackers around the training loop and logs
// the loss it prints.
#include "passes/TrackingPass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/MainProcessPass.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Tooling/Transformer/Stencil.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"

#include <optional>

namespace accelerate::passes {
namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char LoopId[] = "loop";
constexpr char BodyId[] = "body";
constexpr char StatementId[] = "statement";

bool trackingOn() {
  return isPassEnabled("tracking") && !passSettings().LogWith.empty();
}

/// `Text` as the body of a C++ string literal.
std::string escaped(llvm::StringRef Text) {
  std::string Out;
  for (char C : Text) {
    if (C == '"' || C == '\\')
      Out += '\\';
    Out += C;
  }
  return Out;
}

/// A training run that is a statement of a block, where statements can go before and after it.
bool isTrackedRun(const clang::Stmt& Loop, clang::ASTContext& Context) {
  if (!isTrainingRun(Loop, Context))
    return false;
  clang::DynTypedNodeList Parents = Context.getParents(Loop);
  return !Parents.empty() && Parents[0].get<clang::CompoundStmt>();
}

/// The tracked run `S` is in, or null.
const clang::Stmt* enclosingRun(const clang::Stmt& S, clang::ASTContext& Context) {
  for (const clang::Stmt* Loop : enclosingLoops(S, Context))
    if (isTrackedRun(*Loop, Context))
      return Loop;
  return nullptr;
}

/// The step counter of a run, and whether the pass declares it.
struct StepCounter {
  std::string Name;
  bool Introduced = false;
  const clang::Stmt* IncrementAfter = nullptr; ///< Introduced: the optimizer step it is incremented after;
                                               ///< null: first in the innermost training loop's body.
};

/// The loop's body when it is a block, else null.
const clang::CompoundStmt* loopBlock(const clang::Stmt& Loop) {
  return llvm::dyn_cast_or_null<clang::CompoundStmt>(loopBody(Loop));
}

/// The tracked runs of `Function`, in source order.
std::vector<const clang::Stmt*> runsOf(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  std::vector<const clang::Stmt*> Runs;
  for (const clang::Stmt* Loop : mainFileLoops(Context)) {
    const clang::FunctionDecl* Owner = enclosingFunction(*Loop, Context);
    if (Owner && Owner->getCanonicalDecl() == Function.getCanonicalDecl() && isTrackedRun(*Loop, Context))
      Runs.push_back(Loop);
  }
  return Runs;
}

/// True when a run logs something: an output statement in it prints a loss the pass logs.
bool logsSomething(const clang::Stmt& Run, clang::ASTContext& Context);

/// The run's step counter. A counter the pass declares is named `step` (else `global_step`, `step_2`, ...,
/// whichever is free, also of the other runs of the function) and is incremented after the last optimizer
/// step written as a statement of the innermost training loop's body, else first in that body. Null when
/// the run needs one and has no block to count in.
std::optional<StepCounter> stepCounter(const clang::Stmt& Run, clang::ASTContext& Context) {
  if (std::optional<StepCounterFact> Existing = existingStepCounter(Run, Context))
    return StepCounter{Existing->Variable->getNameAsString(), false, nullptr};
  const clang::CompoundStmt* Block = loopBlock(innermostTrainingLoop(Run, Context));
  if (!Block)
    return std::nullopt;
  StepCounter Counter;
  Counter.Introduced = true;
  for (const clang::Stmt* Statement : Block->body())
    if (const auto* E = llvm::dyn_cast<clang::Expr>(Statement);
        E && !match(traverse(clang::TK_AsIs, expr(ignoringImplicit(optimizerStep()))), *E, Context).empty())
      Counter.IncrementAfter = Statement;
  const clang::FunctionDecl* Function = enclosingFunction(Run, Context);
  llvm::StringSet<> Taken = takenNames(*Function, Context);
  auto FreeName = [&] { return freeName(Taken, {"step", "global_step"}, "step"); };
  for (const clang::Stmt* Other : runsOf(*Function, Context)) {
    std::string Name = FreeName();
    if (Other == &Run) {
      Counter.Name = Name;
      return Counter;
    }
    if (!existingStepCounter(*Other, Context) && logsSomething(*Other, Context))
      Taken.insert(Name);
  }
  Counter.Name = FreeName();
  return Counter;
}

/// A TensorBoard tag from what a program prints before a value: the text without the spaces and punctuation
/// around it (`" loss: "` → `loss`), other characters than letters, digits, `_`, `.`, `/` and `-` inside
/// it made `_` (`"train loss"` → `train_loss`).
std::string tagOf(llvm::StringRef Printed) {
  auto IsWord = [](char C) { return llvm::isAlnum(C) || C == '_'; };
  size_t Begin = 0, End = Printed.size();
  while (Begin < End && !IsWord(Printed[Begin]))
    ++Begin;
  while (End > Begin && !IsWord(Printed[End - 1]))
    --End;
  std::string Tag;
  for (char C : Printed.slice(Begin, End)) {
    bool Kept = IsWord(C) || C == '.' || C == '/' || C == '-';
    if (Kept)
      Tag += C;
    else if (!Tag.empty() && Tag.back() != '_')
      Tag += '_';
  }
  return Tag;
}

/// The values one output statement logs: (tag, loss variable) for each loss it prints.
std::vector<std::pair<std::string, std::string>> loggedLosses(const clang::Expr& Statement,
                                                              clang::ASTContext& Context) {
  std::vector<std::pair<std::string, std::string>> Logged;
  for (const PrintedLoss& Printed : printedLosses(Statement, Context)) {
    std::string Variable = Printed.Loss->getNameAsString();
    std::string Tag = tagOf(Printed.PrintedBefore.value_or(""));
    auto Taken = [&](const std::string& Name) {
      return llvm::any_of(Logged, [&](const auto& Entry) { return Entry.first == Name; });
    };
    if (Tag.empty() || Taken(Tag))
      Tag = Variable;
    if (!Taken(Tag))
      Logged.emplace_back(Tag, Variable);
  }
  return Logged;
}

/// What stops the pass from logging the losses an output statement prints, or "" when nothing does.
std::string whyNotLogged(const clang::Expr& Statement, const clang::Stmt& Run, clang::ASTContext& Context) {
  std::vector<PrintedLoss> Printed = printedLosses(Statement, Context);
  if (Printed.empty())
    return "";
  if (!Printed.front().PrintedBefore)
    return "printf";
  if (isUnderTensorCondition(Statement, Context))
    return "condition";
  if (!stepCounter(Run, Context))
    return "counter";
  return "";
}

bool logsSomething(const clang::Stmt& Run, clang::ASTContext& Context) {
  auto Output =
      expr(anyOf(cxxOperatorCallExpr(), binaryOperator(), callExpr()), isWholeStatement()).bind("output");
  for (const BoundNodes& Found : match(
           traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(forEachDescendant(Output))), Run, Context)) {
    const auto* Statement = Found.getNodeAs<clang::Expr>("output");
    if (enclosingRun(*Statement, Context) == &Run && !printedLosses(*Statement, Context).empty() &&
        printedLosses(*Statement, Context).front().PrintedBefore &&
        !isUnderTensorCondition(*Statement, Context))
      return true;
  }
  return false;
}

/// True when no output statement in the run prints a loss at all (not even one the pass cannot log).
bool printsNoLoss(const clang::Stmt& Run, clang::ASTContext& Context) {
  auto Output =
      expr(anyOf(cxxOperatorCallExpr(), binaryOperator(), callExpr()), isWholeStatement()).bind("output");
  for (const BoundNodes& Found : match(
           traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(forEachDescendant(Output))), Run, Context)) {
    const auto* Statement = Found.getNodeAs<clang::Expr>("output");
    if (enclosingRun(*Statement, Context) == &Run && !printedLosses(*Statement, Context).empty())
      return false;
  }
  return true;
}

AST_MATCHER(clang::Stmt, isTrackingOn) {
  return trackingOn();
}

AST_MATCHER(clang::Stmt, isTrainingRunMatcher) {
  return isTrainingRun(Node, Finder->getASTContext());
}

AST_MATCHER(clang::Stmt, hasBlockParent) {
  clang::DynTypedNodeList Parents = Finder->getASTContext().getParents(Node);
  return !Parents.empty() && Parents[0].get<clang::CompoundStmt>();
}

/// The body of a tracked run in which no output prints a loss.
AST_MATCHER(clang::Stmt, isBodyOfSilentRun) {
  clang::ASTContext& Context = Finder->getASTContext();
  clang::DynTypedNodeList Parents = Context.getParents(Node);
  const auto* Loop = Parents.empty() ? nullptr : Parents[0].get<clang::Stmt>();
  return Loop && isLoop(*Loop) && loopBody(*Loop) == &Node && isTrackedRun(*Loop, Context) &&
         printsNoLoss(*Loop, Context);
}

/// An output statement in a tracked run that prints a loss; bound to StatementId, the run to LoopId.
AST_MATCHER_P(clang::Expr, printsLossIn, std::string, Reason) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::Stmt* Run = enclosingRun(Node, Context);
  if (!Run || printedLosses(Node, Context).empty() || whyNotLogged(Node, *Run, Context) != Reason)
    return false;
  Builder->setBinding(LoopId, clang::DynTypedNode::create(*Run));
  return true;
}

auto inScope() {
  return allOf(isTrackingOn(), unless(isInMacroExpansion()), isInTrainingFile(),
               unless(isInDistributedFunction()));
}

StatementMatcher trainingRun() {
  return stmt(isTrackingOn(), anyOf(forStmt(), cxxForRangeStmt(), whileStmt(), doStmt()), inScope(),
              isTrainingRunMatcher())
      .bind(LoopId);
}

StatementMatcher loggedOutput(std::string Reason) {
  return expr(isTrackingOn(), isWholeStatement(), inScope(), printsLossIn(std::move(Reason)))
      .bind(StatementId);
}

std::string projectName(const clang::SourceManager& SM) {
  if (!passSettings().ProjectName.empty())
    return passSettings().ProjectName;
  auto Main = SM.getFileEntryRefForID(SM.getMainFileID());
  return Main ? llvm::sys::path::stem(Main->getName()).str() : "train";
}

/// `accelerator.init_trackers("<file stem>");`, and the run's counter when the pass declares it (only a run
/// that logs something needs one).
Stencil runStart() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    std::string Text = "accelerator.init_trackers(\"" + escaped(projectName(*Result.SourceManager)) + "\");";
    if (logsSomething(*Loop, *Result.Context))
      if (std::optional<StepCounter> Counter = stepCounter(*Loop, *Result.Context);
          Counter && Counter->Introduced)
        Text += "\nint64_t " + Counter->Name + " = 0;\naccelerator.register_counter(\"" + Counter->Name +
                "\", " + Counter->Name + ");";
    return Text;
  });
}

/// `++step;` for a counter the pass declares: after the optimizer step, or first in the innermost training
/// loop's body.
EditGenerator counterIncrement() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    clang::ASTContext& Context = *Result.Context;
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    llvm::SmallVector<Edit, 1> Edits;
    if (!logsSomething(*Loop, Context))
      return Edits;
    std::optional<StepCounter> Counter = stepCounter(*Loop, Context);
    if (!Counter || !Counter->Introduced)
      return Edits;
    std::string Increment = "++" + Counter->Name + ";";
    if (Counter->IncrementAfter)
      return editsInsertingAfter(*Counter->IncrementAfter, Increment, Context);
    Edits.push_back(editInsertingAtBlockStart(*loopBlock(innermostTrainingLoop(*Loop, Context)), Increment,
                                              *Result.SourceManager));
    return Edits;
  };
}

Stencil explainRun() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    std::string Why = "the trackers of --log-with (" + llvm::join(passSettings().LogWith, ", ") +
                      ") start before the training loop and finish after it (init_trackers, end_training, "
                      "on every process; they write on the main process only, under ./runs/" +
                      projectName(*Result.SourceManager) + ", or $ACCEL_PROJECT_DIR/" +
                      projectName(*Result.SourceManager) + ")";
    if (logsSomething(*Loop, *Result.Context))
      if (std::optional<StepCounter> Counter = stepCounter(*Loop, *Result.Context))
        Why +=
            Counter->Introduced
                ? "; '" + Counter->Name + "' counts the training steps for accelerator.log (incremented " +
                      (Counter->IncrementAfter ? "after the optimizer step" : "at the start of each step") +
                      ")"
                : "; accelerator.log uses the loop's own counter '" + Counter->Name + "' as the step";
    return Why;
  });
}

/// `accelerator.log({{"loss", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, step);`
Stencil logStatement() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    std::vector<std::string> Values;
    for (const auto& [Tag, Variable] : loggedLosses(*Statement, *Result.Context))
      Values.push_back("{\"" + escaped(Tag) + "\", accelerator.reduce(" + Variable +
                       ".detach(), accelerate::ReduceOp::MEAN)}");
    std::optional<StepCounter> Counter = stepCounter(*Loop, *Result.Context);
    return "accelerator.log({" + llvm::join(Values, ", ") + "}, " + (Counter ? Counter->Name : "") + ");";
  });
}

Stencil explainLog() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    std::vector<std::string> Tags;
    for (const auto& [Tag, Variable] : loggedLosses(*Statement, *Result.Context))
      Tags.push_back("'" + Tag + "'");
    return "the printed loss is also logged to the trackers, as " + llvm::join(Tags, ", ") +
           " (the text printed before it): its mean over the processes (accelerator.reduce, a collective "
           "every process takes), as the printed value is";
  });
}

/// The fix for a loss the pass does not log: the call to write by hand.
Stencil handWrittenLog() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    std::string Variable = printedLosses(*Statement, *Result.Context).front().Loss->getNameAsString();
    return "accelerator.log({{\"" + Variable + "\", accelerator.reduce(" + Variable +
           ".detach(), accelerate::ReduceOp::MEAN)}}, step)";
  });
}

} // namespace

std::string trackedAcceleratorOptions() {
  if (!trackingOn())
    return "";
  std::vector<std::string> Names;
  for (const std::string& Name : passSettings().LogWith)
    Names.push_back("\"" + escaped(Name) + "\"");
  return "log_with({" + llvm::join(Names, ", ") + "})";
}

StatementMatcher trackedTrainingLoop() {
  return stmt(trainingRun(), hasBlockParent());
}

PassRule trackingPass() {
  return applyFirst<std::string>({
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(trainingRun(), unless(hasBlockParent()))),
               noopEdit(node(LoopId)),
               cat("trackers not started: this training loop is the body of an if or a loop written without "
                   "braces, where accelerator.init_trackers() and accelerator.end_training() cannot go "
                   "beside it; put it in braces { ... } and run again")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, trackedTrainingLoop()),
               flatten(insertBeforeStatement(LoopId, runStart()),
                       insertAfterStatement(LoopId, cat("accelerator.end_training();")), counterIncrement()),
               explainRun()),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, loggedOutput("")),
               insertAfterStatement(StatementId, logStatement()), explainLog()),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, loggedOutput("printf")),
          noopEdit(node(StatementId)),
          cat("loss not logged: its label is in a printf format, which the rewriter does not read; log it "
              "by hand after this line: ",
              handWrittenLog())),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, loggedOutput("condition")),
               noopEdit(node(StatementId)),
               cat("loss not logged: this line prints under a condition on a tensor, which the processes "
                   "could disagree on, and the mean over the processes is a collective every process must "
                   "take; log it outside the condition: ",
                   handWrittenLog())),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, loggedOutput("counter")),
               noopEdit(node(StatementId)),
               cat("loss not logged: the loop keeps no step counter, and its body is not a block where one "
                   "could be counted; put the loop's body in braces { ... } and run again")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        stmt(isTrackingOn(), inScope(), isBodyOfSilentRun()).bind(BodyId)),
               noopEdit(node(BodyId)),
               cat("nothing logged from this training loop: it prints no loss (loss.item<T>() of a tensor it "
                   "runs backward on, in a std::cout or std::cerr line), so the trackers were started and "
                   "finished but get no values; log what you watch by hand, e.g. "
                   "accelerator.log({{\"loss\", accelerator.reduce(loss.detach(), "
                   "accelerate::ReduceOp::MEAN)}}, step)")),
  });
}

} // namespace accelerate::passes
