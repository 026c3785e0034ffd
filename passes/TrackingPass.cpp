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

bool isLoop(const clang::Stmt& S) {
  return llvm::isa<clang::ForStmt, clang::CXXForRangeStmt, clang::WhileStmt, clang::DoStmt>(S);
}

/// The loops around `S` in its function, innermost first; a lambda's body ends the search (its loops run when
/// it is called, not where it is written).
std::vector<const clang::Stmt*> enclosingLoops(const clang::Stmt& S, clang::ASTContext& Context) {
  std::vector<const clang::Stmt*> Loops;
  clang::DynTypedNodeList Parents = Context.getParents(S);
  while (!Parents.empty() && !Parents[0].get<clang::FunctionDecl>() && !Parents[0].get<clang::LambdaExpr>()) {
    if (const auto* Parent = Parents[0].get<clang::Stmt>(); Parent && isLoop(*Parent))
      Loops.push_back(Parent);
    Parents = Context.getParents(Parents[0]);
  }
  return Loops;
}

bool isInLambda(const clang::Stmt& S, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(S);
  while (!Parents.empty() && !Parents[0].get<clang::FunctionDecl>()) {
    if (Parents[0].get<clang::LambdaExpr>())
      return true;
    Parents = Context.getParents(Parents[0]);
  }
  return false;
}

/// True when `S` calls `Function` (or an instantiation of it), directly or through functions of the main
/// file, `Depth` calls deep at most.
bool calls(const clang::Stmt& S, const clang::FunctionDecl& Function, clang::ASTContext& Context, int Depth) {
  const clang::SourceManager& SM = Context.getSourceManager();
  auto Call = callExpr(callee(functionDecl().bind("callee")));
  for (const BoundNodes& Found : match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Call))), S, Context)) {
    const auto* Callee = Found.getNodeAs<clang::FunctionDecl>("callee");
    if (const clang::FunctionDecl* Pattern = Callee->getTemplateInstantiationPattern())
      Callee = Pattern;
    if (Callee->getCanonicalDecl() == Function.getCanonicalDecl())
      return true;
    if (Depth > 0 && Callee->hasBody() && Callee->getBody() != &S &&
        SM.isWrittenInMainFile(SM.getExpansionLoc(Callee->getLocation())) &&
        calls(*Callee->getBody(), Function, Context, Depth - 1))
      return true;
  }
  return false;
}

/// Every loop written in the main file, in source order.
std::vector<const clang::Stmt*> mainFileLoops(clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  auto Loop = stmt(anyOf(forStmt(), cxxForRangeStmt(), whileStmt(), doStmt())).bind("loop");
  std::vector<const clang::Stmt*> Loops;
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!SM.isWrittenInMainFile(SM.getExpansionLoc(TopLevel->getLocation())))
      continue;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_IgnoreUnlessSpelledInSource, decl(forEachDescendant(Loop))), *TopLevel,
               Context))
      Loops.push_back(Found.getNodeAs<clang::Stmt>("loop"));
  }
  return Loops;
}

/// A training run: a loop that runs a training step (see loopTrains), in no loop of its function that does
/// too, outside lambdas, in a function that no training loop elsewhere in the file calls (a `train_epoch`
/// called once per epoch belongs to its caller's run).
bool isTrainingRun(const clang::Stmt& Loop, clang::ASTContext& Context) {
  if (!isLoop(Loop) || isInLambda(Loop, Context) || !loopTrains(Loop, Context))
    return false;
  for (const clang::Stmt* Outer : enclosingLoops(Loop, Context))
    if (loopTrains(*Outer, Context))
      return false;
  const clang::FunctionDecl* Function = enclosingFunction(Loop, Context);
  if (!Function)
    return false;
  for (const clang::Stmt* Other : mainFileLoops(Context)) {
    const clang::FunctionDecl* Caller = enclosingFunction(*Other, Context);
    if (Caller && Caller->getCanonicalDecl() != Function->getCanonicalDecl() && loopTrains(*Other, Context) &&
        calls(*Other, *Function, Context, /*Depth=*/2))
      return false;
  }
  return true;
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

/// The innermost loop of a run that runs a training step: the run itself, or the first loop in it that
/// trains, and so on down.
const clang::Stmt& innermostTrainingLoop(const clang::Stmt& Run, clang::ASTContext& Context) {
  const clang::Stmt* Current = &Run;
  auto Loop = stmt(anyOf(forStmt(), cxxForRangeStmt(), whileStmt(), doStmt())).bind("loop");
  while (true) {
    const clang::Stmt* Inner = nullptr;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(forEachDescendant(Loop))), *Current,
               Context)) {
      const auto* Candidate = Found.getNodeAs<clang::Stmt>("loop");
      if (!isInLambda(*Candidate, Context) && loopTrains(*Candidate, Context)) {
        Inner = Candidate;
        break;
      }
    }
    if (!Inner)
      return *Current;
    Current = Inner;
  }
}

const clang::Stmt* loopBody(const clang::Stmt& Loop) {
  if (const auto* For = llvm::dyn_cast<clang::ForStmt>(&Loop))
    return For->getBody();
  if (const auto* RangeFor = llvm::dyn_cast<clang::CXXForRangeStmt>(&Loop))
    return RangeFor->getBody();
  if (const auto* While = llvm::dyn_cast<clang::WhileStmt>(&Loop))
    return While->getBody();
  if (const auto* Do = llvm::dyn_cast<clang::DoStmt>(&Loop))
    return Do->getBody();
  return nullptr;
}

bool isIntegerVariable(const clang::VarDecl* Variable) {
  return Variable && Variable->hasLocalStorage() && !llvm::isa<clang::ParmVarDecl>(Variable) &&
         Variable->getType()->isIntegerType() && !Variable->getType()->isBooleanType();
}

/// The variable `S` adds one to, as a statement: `++n`, `n++`, `n += 1`.
const clang::VarDecl* incrementedVariable(const clang::Stmt* S) {
  const auto* E = llvm::dyn_cast_or_null<clang::Expr>(S);
  if (!E)
    return nullptr;
  E = E->IgnoreUnlessSpelledInSource()->IgnoreParens();
  const clang::Expr* Target = nullptr;
  if (const auto* Unary = llvm::dyn_cast<clang::UnaryOperator>(E); Unary && Unary->isIncrementOp())
    Target = Unary->getSubExpr();
  if (const auto* Compound = llvm::dyn_cast<clang::CompoundAssignOperator>(E);
      Compound && Compound->getOpcode() == clang::BO_AddAssign)
    if (const auto* One = llvm::dyn_cast<clang::IntegerLiteral>(Compound->getRHS()->IgnoreParenImpCasts());
        One && One->getValue() == 1)
      Target = Compound->getLHS();
  if (!Target)
    return nullptr;
  const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(Target->IgnoreParenImpCasts());
  const auto* Variable = Reference ? llvm::dyn_cast<clang::VarDecl>(Reference->getDecl()) : nullptr;
  return isIntegerVariable(Variable) ? Variable : nullptr;
}

/// How many times `Loop` writes `Variable` (assignments, increments, decrements).
unsigned writesIn(const clang::Stmt& Loop, const clang::VarDecl& Variable, clang::ASTContext& Context) {
  auto Target = ignoringParenImpCasts(declRefExpr(to(varDecl(equalsNode(&Variable)))));
  auto Write = expr(anyOf(binaryOperator(isAssignmentOperator(), hasLHS(Target)),
                          unaryOperator(hasAnyOperatorName("++", "--"), hasUnaryOperand(Target))));
  return match(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(forEachDescendant(Write.bind("write")))),
               Loop, Context)
      .size();
}

/// The step counter of a run, and whether the pass declares it.
struct StepCounter {
  std::string Name;
  bool Introduced = false;
  const clang::Stmt* IncrementAfter = nullptr; ///< Introduced: the optimizer step it is incremented after;
                                               ///< null: first in the innermost training loop's body.
};

/// The counter a run already keeps: the run's own `for` variable when the run is the innermost training loop
/// (`for (int step = 0; ...; ++step)`), else a variable declared before the run and incremented (`++n`,
/// `n++`, `n += 1`) as a statement of the innermost training loop's body (or in the condition of an `if`
/// there: `if (++step % 10 == 0)`), and written nowhere else in the run.
const clang::VarDecl* existingCounter(const clang::Stmt& Run, clang::ASTContext& Context) {
  const clang::Stmt& Inner = innermostTrainingLoop(Run, Context);
  if (const auto* For = llvm::dyn_cast<clang::ForStmt>(&Inner); For && &Inner == &Run) {
    const auto* Init = llvm::dyn_cast_or_null<clang::DeclStmt>(For->getInit());
    const auto* Variable =
        Init && Init->isSingleDecl() ? llvm::dyn_cast<clang::VarDecl>(Init->getSingleDecl()) : nullptr;
    if (Variable && incrementedVariable(For->getInc()) == Variable)
      return Variable;
  }
  const auto* Block = llvm::dyn_cast_or_null<clang::CompoundStmt>(loopBody(Inner));
  if (!Block)
    return nullptr;
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const clang::Stmt* Statement : Block->body()) {
    const clang::VarDecl* Variable = incrementedVariable(Statement);
    // `if (++step % 10 == 0)`: the condition runs on every step too.
    if (const auto* If = llvm::dyn_cast<clang::IfStmt>(Statement); If && !Variable)
      for (const BoundNodes& Found :
           match(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                          expr(anyOf(unaryOperator(hasOperatorName("++")).bind("increment"),
                                     hasDescendant(unaryOperator(hasOperatorName("++")).bind("increment"))))),
                 *If->getCond(), Context))
        if ((Variable = incrementedVariable(Found.getNodeAs<clang::Stmt>("increment"))))
          break;
    if (Variable && SM.isBeforeInTranslationUnit(Variable->getLocation(), Run.getBeginLoc()) &&
        writesIn(Run, *Variable, Context) == 1)
      return Variable;
  }
  return nullptr;
}

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

/// The names a new local of `Function` must not take: its variables and parameters, and the main file's
/// top-level names.
llvm::StringSet<> takenNames(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  llvm::StringSet<> Taken;
  for (const clang::ParmVarDecl* Parameter : Function.parameters())
    Taken.insert(Parameter->getName());
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(namedDecl().bind("named")))),
             *Function.getBody(), Context))
    if (const auto* Named = Found.getNodeAs<clang::NamedDecl>("named"); Named->getDeclName().isIdentifier())
      Taken.insert(Named->getName());
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (const auto* Named = llvm::dyn_cast<clang::NamedDecl>(TopLevel))
      if (Named->getDeclName().isIdentifier() &&
          SM.isWrittenInMainFile(SM.getExpansionLoc(TopLevel->getLocation())))
        Taken.insert(Named->getName());
  return Taken;
}

/// True when a run logs something: an output statement in it prints a loss the pass logs.
bool logsSomething(const clang::Stmt& Run, clang::ASTContext& Context);

/// The run's step counter. A counter the pass declares is named `step` (else `global_step`, `step_2`, ...,
/// whichever is free, also of the other runs of the function) and is incremented after the last optimizer
/// step written as a statement of the innermost training loop's body, else first in that body. Null when
/// the run needs one and has no block to count in.
std::optional<StepCounter> stepCounter(const clang::Stmt& Run, clang::ASTContext& Context) {
  if (const clang::VarDecl* Existing = existingCounter(Run, Context))
    return StepCounter{Existing->getNameAsString(), false, nullptr};
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
  auto FreeName = [&] {
    for (std::string Name : {"step", "global_step"})
      if (!Taken.contains(Name))
        return Name;
    for (int Suffix = 2;; ++Suffix)
      if (std::string Name = "step_" + std::to_string(Suffix); !Taken.contains(Name))
        return Name;
  };
  for (const clang::Stmt* Other : runsOf(*Function, Context)) {
    std::string Name = FreeName();
    if (Other == &Run) {
      Counter.Name = Name;
      return Counter;
    }
    if (!existingCounter(*Other, Context) && logsSomething(*Other, Context))
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
        Text += "\nint64_t " + Counter->Name + " = 0;";
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
  return "accelerate::AcceleratorOptions().log_with({" + llvm::join(Names, ", ") + "})";
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
