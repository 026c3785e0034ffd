// passes/TrackingPass.cpp: the rule that starts the `--log-with` trackers around the training loop and logs
// the loss it prints.
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
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"

#include "clang/ASTMatchers/ASTMatchers.h"
#include <optional>
#include <string>

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

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

/// True when the run logs a line at its step counter: a line it logs that it prints at every step, or once
/// per epoch of a loop that keeps no counter.
bool logsAtStepCounter(const clang::Stmt& Run, clang::ASTContext& Context);

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
    if (!existingStepCounter(*Other, Context) && logsAtStepCounter(*Other, Context))
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

/// A value one output statement logs: the name it is logged under, and the expression logged.
struct LoggedValue {
  std::string Tag;
  std::string Text;
};

/// The variable a printed value is computed from: its loss, else its first training number.
std::string variableOf(const PrintedValue& Value) {
  if (!Value.LossReads.empty())
    if (const clang::ValueDecl* Loss = namedDeclaration(Value.LossReads.front()))
      return Loss->getNameAsString();
  if (!Value.Numbers.empty())
    return Value.Numbers.front().first->getDecl()->getNameAsString();
  return "value";
}

/// The values one output statement logs: each training number it prints (printedValues), under the text
/// printed before it (else the variable it is computed from), made global as the printed line makes it.
std::vector<LoggedValue> loggedValues(const clang::Expr& Statement, clang::ASTContext& Context) {
  std::vector<LoggedValue> Logged;
  for (const PrintedValue& Printed : printedValues(Statement, Context)) {
    std::optional<std::string> Text = globalValueText(Printed, Context);
    if (!Text || Printed.SideEffect)
      continue;
    std::string Variable = variableOf(Printed);
    std::string Tag = tagOf(Printed.PrintedBefore.value_or(""));
    auto Taken = [&](const std::string& Name) {
      return llvm::any_of(Logged, [&](const LoggedValue& Entry) { return Entry.Tag == Name; });
    };
    if (Tag.empty() || Taken(Tag))
      Tag = Variable;
    if (!Taken(Tag))
      Logged.push_back({Tag, *Text});
  }
  return Logged;
}

/// The loop counter a line that the run prints once per epoch is logged at: the `for` variable of the
/// training loop around it (`for (int epoch = 0; ...; ++epoch)`), written nowhere else in that loop. Null
/// for a line printed at every step (in the innermost training loop) and for a loop that keeps no counter of
/// its own: such a line is logged at the step counter.
const clang::VarDecl* epochCounter(const clang::Expr& Statement, const clang::Stmt& Run,
                                   clang::ASTContext& Context) {
  std::vector<const clang::Stmt*> Loops = trainingLoopsOf(Run, Context);
  std::vector<const clang::Stmt*> Around = enclosingLoops(Statement, Context);
  if (llvm::is_contained(Around, Loops.back()))
    return nullptr;
  for (const clang::Stmt* Loop : Around)
    if (llvm::is_contained(Loops, Loop)) {
      const clang::VarDecl* Counter = forLoopCounter(*Loop);
      return Counter && writesIn(*Loop, *Counter, Context) == 1 ? Counter : nullptr;
    }
  return nullptr;
}

/// What stops the pass from logging the values an output statement prints, or "" when nothing does
/// (ignoring the step counter: see whyNotLogged).
std::string whyNotLoggedHere(const clang::Expr& Statement, clang::ASTContext& Context) {
  std::vector<PrintedValue> Printed = printedValues(Statement, Context);
  if (Printed.empty())
    return "";
  if (!Printed.front().PrintedBefore)
    return "printf";
  if (isUnderTensorCondition(Statement, Context))
    return "condition";
  for (const PrintedValue& Value : Printed)
    if (!globalValueText(Value, Context))
      return "share";
  for (const PrintedValue& Value : Printed)
    if (Value.SideEffect)
      return "effect";
  return "";
}

/// What stops the pass from logging the values an output statement prints, or "" when nothing does.
std::string whyNotLogged(const clang::Expr& Statement, const clang::Stmt& Run, clang::ASTContext& Context) {
  std::string Why = whyNotLoggedHere(Statement, Context);
  if (Why.empty() && !epochCounter(Statement, Run, Context) && !stepCounter(Run, Context))
    return "counter";
  return Why;
}

/// The output statements of the run (not of a run inside it) that print a training number.
std::vector<const clang::Expr*> printingStatements(const clang::Stmt& Run, clang::ASTContext& Context) {
  auto Output =
      expr(anyOf(cxxOperatorCallExpr(), binaryOperator(), callExpr()), isWholeStatement()).bind("output");
  std::vector<const clang::Expr*> Statements;
  for (const BoundNodes& Found : match(
           traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(forEachDescendant(Output))), Run, Context)) {
    const auto* Statement = Found.getNodeAs<clang::Expr>("output");
    if (enclosingRun(*Statement, Context) == &Run && !printedValues(*Statement, Context).empty())
      Statements.push_back(Statement);
  }
  return Statements;
}

bool logsAtStepCounter(const clang::Stmt& Run, clang::ASTContext& Context) {
  return llvm::any_of(printingStatements(Run, Context), [&](const clang::Expr* Statement) {
    return whyNotLoggedHere(*Statement, Context).empty() && !epochCounter(*Statement, Run, Context);
  });
}

/// True when no output statement in the run prints a training number at all (not even one the pass cannot
/// log).
bool printsNothingTracked(const clang::Stmt& Run, clang::ASTContext& Context) {
  return printingStatements(Run, Context).empty();
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

/// The body of a tracked run in which no output prints a training number.
AST_MATCHER(clang::Stmt, isBodyOfSilentRun) {
  clang::ASTContext& Context = Finder->getASTContext();
  clang::DynTypedNodeList Parents = Context.getParents(Node);
  const auto* Loop = Parents.empty() ? nullptr : Parents[0].get<clang::Stmt>();
  return Loop && isLoop(*Loop) && loopBody(*Loop) == &Node && isTrackedRun(*Loop, Context) &&
         printsNothingTracked(*Loop, Context);
}

/// An output statement in a tracked run that prints a training number, which `Reason` stops from being
/// logged ("" for none); bound to StatementId, the run to LoopId.
AST_MATCHER_P(clang::Expr, printsValueIn, std::string, Reason) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::Stmt* Run = enclosingRun(Node, Context);
  if (!Run || printedValues(Node, Context).empty() || whyNotLogged(Node, *Run, Context) != Reason)
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
  return expr(isTrackingOn(), isWholeStatement(), inScope(), printsValueIn(std::move(Reason)))
      .bind(StatementId);
}

std::string projectName(const clang::SourceManager& SM) {
  if (!passSettings().ProjectName.empty())
    return passSettings().ProjectName;
  auto Main = SM.getFileEntryRefForID(SM.getMainFileID());
  return Main ? llvm::sys::path::stem(Main->getName()).str() : "train";
}

/// `accelerator.init_trackers("<file stem>");`, and the run's counter when the pass declares it (only a run
/// that logs a line at the step counter needs one).
Stencil runStart() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    std::string Text = "accelerator.init_trackers(\"" + escaped(projectName(*Result.SourceManager)) + "\");";
    if (logsAtStepCounter(*Loop, *Result.Context))
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
    if (!logsAtStepCounter(*Loop, Context))
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
    if (logsAtStepCounter(*Loop, *Result.Context))
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

/// The counter a logged line is logged at: the epoch counter of a line printed once per epoch, else the
/// step counter.
std::string counterOf(const clang::Expr& Statement, const clang::Stmt& Run, clang::ASTContext& Context) {
  if (const clang::VarDecl* Epoch = epochCounter(Statement, Run, Context))
    return Epoch->getNameAsString();
  std::optional<StepCounter> Counter = stepCounter(Run, Context);
  return Counter ? Counter->Name : "";
}

/// `accelerator.log({{"loss", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, step);`, or
/// `accelerator.log({{"mean_loss", accelerator.reduce(total, accelerate::ReduceOp::MEAN) / n}}, epoch);`
Stencil logStatement() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    std::vector<std::string> Values;
    for (const LoggedValue& Value : loggedValues(*Statement, *Result.Context))
      Values.push_back("{\"" + escaped(Value.Tag) + "\", " + Value.Text + "}");
    return "accelerator.log({" + llvm::join(Values, ", ") + "}, " +
           counterOf(*Statement, *Loop, *Result.Context) + ");";
  });
}

Stencil explainLog() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    std::vector<std::string> Tags;
    for (const LoggedValue& Value : loggedValues(*Statement, *Result.Context))
      Tags.push_back("'" + Value.Tag + "'");
    std::string Counter = counterOf(*Statement, *Loop, *Result.Context);
    return "what this line prints is also logged to the trackers, as " + llvm::join(Tags, ", ") +
           " (the text printed before each), at '" + Counter + "'" +
           (epochCounter(*Statement, *Loop, *Result.Context) ? " (the line prints once per epoch)" : "") +
           ": losses as their mean over the processes, and sums, counts and means over this process's share "
           "of "
           "the data reduced over the processes (accelerator.reduce, a collective every process takes), as "
           "the "
           "printed line shows them";
  });
}

/// The fix for a value the pass does not log: the call to write by hand, for the first value the line prints.
Stencil handWrittenLog() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    PrintedValue First = printedValues(*Statement, *Result.Context).front();
    std::string Variable = variableOf(First);
    std::string Counter = counterOf(*Statement, *Loop, *Result.Context);
    return "accelerator.log({{\"" + escaped(Variable) + "\", " +
           globalValueText(First, *Result.Context).value_or(Variable) + "}}, " +
           (Counter.empty() ? "step" : Counter) + ")";
  });
}

/// What the line bound to StatementId prints: "loss" when its first training number reads a loss, else
/// "value".
Stencil notLogged() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    return printedValues(*Statement, *Result.Context).front().LossReads.empty() ? "value" : "loss";
  });
}

/// The first printed number of the line bound to StatementId that is this process's share in a way the
/// rewriter cannot combine over the processes (Share::Unknown).
Stencil unreducibleNumber() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    for (const PrintedValue& Value : printedValues(*Statement, *Result.Context))
      for (const auto& [Use, Kind] : Value.Numbers)
        if (Value.PerProcess && Kind == Share::Unknown)
          return Use->getDecl()->getNameAsString();
    return std::string();
  });
}

/// The first call or update in a printed value of the line bound to StatementId, as written.
Stencil sideEffect() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    for (const PrintedValue& Value : printedValues(*Statement, *Result.Context))
      if (Value.SideEffect)
        return clang::Lexer::getSourceText(
                   clang::CharSourceRange::getTokenRange(Value.SideEffect->getSourceRange()),
                   *Result.SourceManager, Result.Context->getLangOpts())
            .str();
    return std::string();
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
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, loggedOutput("printf")),
               noopEdit(node(StatementId)),
               cat(notLogged(),
                   " not logged: its label is in a printf format, which the rewriter does not read; log it "
                   "by hand after this line: ",
                   handWrittenLog())),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, loggedOutput("condition")),
               noopEdit(node(StatementId)),
               cat(notLogged(),
                   " not logged: this line prints under a condition on a tensor, which the processes "
                   "could disagree on, and the mean over the processes is a collective every process must "
                   "take; log it outside the condition: ",
                   handWrittenLog())),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, loggedOutput("share")), noopEdit(node(StatementId)),
          cat("not logged: '", unreducibleNumber(),
              "' is computed from this process's share of the data, and the rewriter cannot tell how to "
              "combine it over the processes (the main-process pass leaves this line to every process "
              "too); logged as it is, it would be the main process's share only. Reduce its parts before "
              "computing it (accelerator.reduce(sum, accelerate::ReduceOp::SUM) for sums and counts) and "
              "run again")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, loggedOutput("effect")),
               noopEdit(node(StatementId)),
               cat("not logged: '", sideEffect(),
                   "' may change what the program computes next, and logging what this line prints would run "
                   "it a second time; evaluate it into a variable on the line before, and run again")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, loggedOutput("counter")),
               noopEdit(node(StatementId)),
               cat(notLogged(),
                   " not logged: the loop keeps no step counter, and its body is not a block where one "
                   "could be counted; put the loop's body in braces { ... } and run again")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        stmt(isTrackingOn(), inScope(), isBodyOfSilentRun()).bind(BodyId)),
               noopEdit(node(BodyId)),
               cat("nothing logged from this training loop: it prints no loss (loss.item<T>() of a tensor it "
                   "runs backward on) and no number computed from its batches (a sum, count or mean over "
                   "steps), in a std::cout or std::cerr line, so the trackers were started and finished but "
                   "get no values; log what you watch by hand, e.g. "
                   "accelerator.log({{\"loss\", accelerator.reduce(loss.detach(), "
                   "accelerate::ReduceOp::MEAN)}}, step)")),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo trackingPassInfo() {
  return {"tracking", trackingPass,
          "with `--log-with NAME,...`: the accelerator logs to those trackers; `init_trackers` before the "
          "training loop, `end_training` after it, and each printed loss, mean, sum or count is also logged "
          "(`accelerator.log`) under its printed label, made global as the printed line makes it",
          /*OnByDefault=*/false, /*WhenNothingFound=*/{},
          /*LeavesAlone=*/
          "values in `printf` or under a tensor condition, ratios of this process's sums, loops that "
          "print no training number, unbraced loops (warnings)",
          /*TurnedOnBy=*/"`--log-with`", /*UsesAccelerator=*/trackedTrainingLoop,
          /*UsesAcceleratorInMain=*/nullptr,
          /*AcceleratorOptions=*/trackedAcceleratorOptions, /*Setting=*/"--log-with"};
}

} // namespace accelerate::passes
