// lint/Checks.cpp: the lint checks' rules and their table (see Checks.h). Each rule matches a mistake in code
// distributed by hand that shows only on more than one process; its metadata says what is wrong, why it
// matters there, and the fix; its edit is the fix where one is safe, a noopEdit where there is none.
#include "lint/Checks.h"

#include "lint/Facts.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/Decl.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/Expr.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/RewriteRule.h"
#include "clang/Tooling/Transformer/Stencil.h"

#include <optional>
#include <utility>

namespace accelerate::lint {
namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;
using passes::PassRule;

constexpr char CallId[] = "call";
constexpr char ObjectId[] = "object";

/// A stencil computed by `Compute` from the match and its context.
template <typename Function> Stencil computed(Function Compute) {
  return run([Compute](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    return Compute(Result, *Result.Context);
  });
}

const clang::Expr& boundExpr(const MatchFinder::MatchResult& Result, llvm::StringRef Id) {
  return *Result.Nodes.getNodeAs<clang::Expr>(Id);
}

/// The text of a call's explicit arguments (default arguments left out), from the first to the last.
std::string explicitArguments(const clang::CallExpr& Call, unsigned From, clang::ASTContext& Context) {
  const clang::Expr* First = nullptr;
  const clang::Expr* Last = nullptr;
  for (unsigned I = From; I < Call.getNumArgs(); ++I) {
    if (llvm::isa<clang::CXXDefaultArgExpr>(Call.getArg(I)))
      break;
    First = First ? First : Call.getArg(I);
    Last = Call.getArg(I);
  }
  if (!First)
    return "";
  clang::CharSourceRange Range = clang::Lexer::makeFileCharRange(
      clang::CharSourceRange::getTokenRange(First->getBeginLoc(), Last->getEndLoc()),
      Context.getSourceManager(), Context.getLangOpts());
  return clang::Lexer::getSourceText(Range, Context.getSourceManager(), Context.getLangOpts()).str();
}

std::string quoted(const clang::NamedDecl* Declaration) {
  return Declaration ? "'" + Declaration->getNameAsString() + "'" : "a prepared model";
}

// ---- raw-backward
// -------------------------------------------------------------------------------------------

AST_MATCHER(clang::Expr, computedFromPreparedModel) {
  return preparedModelReachedBy(Node, Finder->getASTContext()) != nullptr;
}

/// The one loss of `torch::autograd::backward({loss})` when no other argument is given; null otherwise.
const clang::Expr* onlyLossOf(const clang::CallExpr& Call, clang::ASTContext& Context) {
  std::vector<const clang::Expr*> Losses = passes::autogradBackwardLosses(Call, Context);
  return Losses.size() == 1 ? Losses.front() : nullptr;
}

AST_MATCHER(clang::CallExpr, backwardOfOneLoss) {
  return onlyLossOf(Node, Finder->getASTContext()) != nullptr;
}

/// The accelerator that prepared the model the loss bound to `LossId` is computed from, as named at the call.
std::string preparingAccelerator(const MatchFinder::MatchResult& Result, llvm::StringRef LossId) {
  clang::ASTContext& Context = *Result.Context;
  const clang::Expr* Preferred = nullptr;
  if (const clang::ValueDecl* Model = preparedModelReachedBy(boundExpr(Result, LossId), Context))
    if (const clang::CXXMemberCallExpr* Prepare = preparingCall(*Model, Context))
      Preferred = Prepare->getImplicitObjectArgument();
  return acceleratorAt(boundExpr(Result, CallId), Preferred, Context);
}

/// `accelerator.backward(loss, args...)` for the `loss.backward(args...)` bound to CallId.
llvm::Expected<std::string> acceleratorBackward(const MatchFinder::MatchResult& Result) {
  clang::ASTContext& Context = *Result.Context;
  const auto& Call = *Result.Nodes.getNodeAs<clang::CXXMemberCallExpr>(CallId);
  llvm::Expected<std::string> Loss = maybeDeref(ObjectId)->eval(Result);
  if (!Loss)
    return Loss.takeError();
  const clang::Expr* Object = boundExpr(Result, ObjectId).IgnoreParenImpCasts();
  if (const auto* Binary = llvm::dyn_cast<clang::BinaryOperator>(Object); Binary && Binary->isCommaOp())
    *Loss = "(" + *Loss + ")";
  std::string Arguments = explicitArguments(Call, 0, Context);
  return preparingAccelerator(Result, ObjectId) + "backward(" + *Loss + (Arguments.empty() ? "" : ", ") +
         Arguments + ")";
}

/// `accelerator.backward(loss)` for the `torch::autograd::backward({loss})` bound to CallId.
llvm::Expected<std::string> acceleratorBackwardOfList(const MatchFinder::MatchResult& Result) {
  const clang::Expr* Loss = onlyLossOf(*Result.Nodes.getNodeAs<clang::CallExpr>(CallId), *Result.Context);
  return preparingAccelerator(Result, ObjectId) + "backward(" + sourceText(*Loss, *Result.Context) + ")";
}

std::string rawBackwardWhy(const MatchFinder::MatchResult& Result) {
  const clang::ValueDecl* Model = preparedModelReachedBy(boundExpr(Result, ObjectId), *Result.Context);
  return "a raw backward of a loss computed from " + quoted(Model) +
         ", a model accelerator.prepare prepared, skips the accelerator: with more than one process the "
         "gradients are never synchronised (the prepared optimizer's step() then throws) and loss scaling "
         "(fp16) and gradient accumulation do not happen";
}

PassRule rawBackwardRule() {
  auto FromPreparedModel = expr(computedFromPreparedModel()).bind(ObjectId);
  auto MemberBackward =
      cxxMemberCallExpr(isExpansionInMainFile(), passes::tensorBackwardCall(), on(FromPreparedModel))
          .bind(CallId);
  auto AutogradBackward =
      callExpr(isExpansionInMainFile(), passes::autogradBackwardCall(), hasArgument(0, FromPreparedModel));
  return applyFirst({
      makeRule(MemberBackward, changeTo(node(CallId), run(acceleratorBackward)),
               computed([](const MatchFinder::MatchResult& Result, clang::ASTContext&) -> std::string {
                 llvm::Expected<std::string> Fix = acceleratorBackward(Result);
                 return rawBackwardWhy(Result) + "; call " +
                        (Fix ? *Fix : (llvm::consumeError(Fix.takeError()), "accelerator.backward(loss)")) +
                        " instead";
               })),
      makeRule(callExpr(AutogradBackward, backwardOfOneLoss()).bind(CallId),
               changeTo(node(CallId), run(acceleratorBackwardOfList)),
               computed([](const MatchFinder::MatchResult& Result, clang::ASTContext&) -> std::string {
                 llvm::Expected<std::string> Fix = acceleratorBackwardOfList(Result);
                 return rawBackwardWhy(Result) + "; call " +
                        (Fix ? *Fix : (llvm::consumeError(Fix.takeError()), "accelerator.backward(loss)")) +
                        " instead";
               })),
      makeRule(callExpr(AutogradBackward).bind(CallId), noopEdit(node(CallId)),
               computed([](const MatchFinder::MatchResult& Result, clang::ASTContext&) -> std::string {
                 return rawBackwardWhy(Result) +
                        "; call accelerator.backward(loss, gradient, retain_graph) for each loss instead "
                        "(it takes one loss, and Tensor::backward's arguments)";
               })),
  });
}

// ---- manual-batch-move
// --------------------------------------------------------------------------------------

AST_MATCHER(clang::Expr, batchOfPreparedLoader) {
  return preparedLoaderOfBatch(Node, Finder->getASTContext()) != nullptr;
}

/// `.cuda()`, or `.to(device)` / `.to(device, non_blocking)` with a device that is not the CPU: a move to a
/// device and nothing else (no dtype, no copy).
AST_MATCHER(clang::CXXMemberCallExpr, isDeviceMove) {
  const clang::CXXMethodDecl* Method = Node.getMethodDecl();
  if (!Method)
    return false;
  auto IsDefault = [&](unsigned I) { return llvm::isa<clang::CXXDefaultArgExpr>(Node.getArg(I)); };
  if (Method->getName() == "cuda") {
    for (unsigned I = 0; I < Node.getNumArgs(); ++I)
      if (!IsDefault(I))
        return false;
    return true;
  }
  if (Method->getName() != "to" || Node.getNumArgs() == 0 || IsDefault(0))
    return false;
  const auto* Options = Method->getParamDecl(0)->getType().getNonReferenceType()->getAsCXXRecordDecl();
  if (!Options || Options->getQualifiedNameAsString() != "c10::TensorOptions")
    return false;
  for (unsigned I = 2; I < Node.getNumArgs(); ++I)
    if (!IsDefault(I))
      return false;
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::Expr* Device = Node.getArg(0)->IgnoreUnlessSpelledInSource();
  if (match(qualType(passes::isDeviceType()), Device->getType(), Context).empty())
    return false;
  llvm::StringRef Text = sourceText(*Device, Context);
  return !Text.contains("kCPU") && !Text.contains("\"cpu");
}

/// The move's result is assigned back to what it moves, as a statement: `batch.data =
/// batch.data.to(device);`.
AST_MATCHER(clang::CXXMemberCallExpr, isMovedBackIntoItself) {
  clang::ASTContext& Context = Finder->getASTContext();
  clang::DynTypedNodeList Parents = Context.getParents(Node);
  while (!Parents.empty() &&
         (Parents[0].get<clang::ImplicitCastExpr>() || Parents[0].get<clang::MaterializeTemporaryExpr>() ||
          Parents[0].get<clang::CXXBindTemporaryExpr>()))
    Parents = Context.getParents(Parents[0]);
  if (Parents.empty())
    return false;
  const clang::Expr* Target = nullptr;
  if (const auto* Operator = Parents[0].get<clang::CXXOperatorCallExpr>();
      Operator && Operator->getOperator() == clang::OO_Equal && Operator->getNumArgs() == 2)
    Target = Operator->getArg(0);
  else if (const auto* Binary = Parents[0].get<clang::BinaryOperator>();
           Binary && Binary->getOpcode() == clang::BO_Assign)
    Target = Binary->getLHS();
  const clang::Expr* Object = Node.getImplicitObjectArgument();
  return Target && Object &&
         sourceText(*Target, Context) == sourceText(*Object->IgnoreParenImpCasts(), Context);
}

std::string batchMoveWhy(const MatchFinder::MatchResult& Result) {
  clang::ASTContext& Context = *Result.Context;
  const clang::Expr& Object = boundExpr(Result, ObjectId);
  const clang::VarDecl* Loader = preparedLoaderOfBatch(Object, Context);
  const auto& Call = *Result.Nodes.getNodeAs<clang::CXXMemberCallExpr>(CallId);
  return "'" + sourceText(Object, Context) + "' is a batch of " + quoted(Loader) +
         ", which accelerator.prepare_data_loader made: the prepared loader already puts every batch on this "
         "process's device, so " +
         (Call.getMethodDecl()->getName() == "cuda" ? ".cuda()" : ".to(...)") +
         " copies it again at best, and with more than one process a fixed device (torch::kCUDA is GPU "
         "0) takes every process's batch away from its own GPU and its model";
}

PassRule manualBatchMoveRule() {
  auto TensorClass = cxxRecordDecl(isSameOrDerivedFrom(hasAnyName("::at::Tensor", "::at::TensorBase")));
  auto Move = cxxMemberCallExpr(isExpansionInMainFile(),
                                callee(cxxMethodDecl(hasAnyName("to", "cuda"), ofClass(TensorClass))),
                                isDeviceMove(), on(expr(batchOfPreparedLoader()).bind(ObjectId)));
  return applyFirst({
      makeRule(cxxMemberCallExpr(Move, isMovedBackIntoItself()).bind(CallId), noopEdit(node(CallId)),
               computed([](const MatchFinder::MatchResult& Result, clang::ASTContext&) {
                 return batchMoveWhy(Result) + "; delete this statement";
               })),
      makeRule(cxxMemberCallExpr(Move).bind(CallId), changeTo(node(CallId), cat(node(ObjectId))),
               computed([](const MatchFinder::MatchResult& Result, clang::ASTContext& Context) {
                 return batchMoveWhy(Result) + "; use '" + sourceText(boundExpr(Result, ObjectId), Context) +
                        "' as it is";
               })),
  });
}

// ---- collective-in-branch
// -----------------------------------------------------------------------------------

/// The members of accelerate::Accelerator that every process must call, each its part in a collective:
/// include/accelerate/accelerator.h says so of each (a process that skips one leaves the others waiting).
llvm::ArrayRef<llvm::StringRef> collectiveMethods() {
  static const llvm::StringRef Names[] = {"prepare",
                                          "prepare_model",
                                          "backward",
                                          "clip_grad_norm_",
                                          "save_state",
                                          "load_state",
                                          "save_model",
                                          "gather",
                                          "gather_for_metrics",
                                          "reduce",
                                          "pad_across_processes",
                                          "broadcast",
                                          "wait_for_everyone",
                                          "check_trigger",
                                          "main_process_first",
                                          "local_main_process_first",
                                          "unshard"};
  return Names;
}

AST_MATCHER(clang::Stmt, runsOnSomeProcesses) {
  return runsOnSomeProcessesOnly(Node, Finder->getASTContext());
}

/// Where `S` is reached by some processes only, for a message: "in the branch of 'if (...)'".
std::string someProcessesPlace(const clang::Stmt& S, clang::ASTContext& Context) {
  bool InElse = false;
  const clang::Stmt* Branch = processBranchAround(S, Context, &InElse);
  if (!Branch)
    return "after a statement that some processes leave at, or in a function only some processes call";
  const clang::Expr* Condition = nullptr;
  llvm::StringRef Kind = "if";
  if (const auto* If = llvm::dyn_cast<clang::IfStmt>(Branch))
    Condition = If->getCond();
  else if (const auto* While = llvm::dyn_cast<clang::WhileStmt>(Branch))
    Condition = While->getCond(), Kind = "while";
  else if (const auto* For = llvm::dyn_cast<clang::ForStmt>(Branch))
    Condition = For->getCond(), Kind = "for";
  else if (const auto* Conditional = llvm::dyn_cast<clang::ConditionalOperator>(Branch))
    Condition = Conditional->getCond(), Kind = "?:";
  std::string Text = Condition ? sourceText(*Condition, Context) : "";
  unsigned Line = Context.getSourceManager().getExpansionLineNumber(Branch->getBeginLoc());
  return std::string(InElse         ? "in the else branch of "
                     : Kind == "if" ? "in the branch of "
                                    : "in the body of ") +
         (Kind == "?:" ? "'" + Text + " ? ... : ...'" : "'" + Kind.str() + " (" + Text + ")'") + " (line " +
         std::to_string(Line) + "), whose condition depends on the process";
}

PassRule collectiveInBranchRule() {
  auto Collective =
      cxxMemberCallExpr(isExpansionInMainFile(), acceleratorCall(collectiveMethods()), runsOnSomeProcesses())
          .bind(CallId);
  return makeRule(Collective, noopEdit(node(CallId)),
                  computed([](const MatchFinder::MatchResult& Result, clang::ASTContext& Context) {
                    const auto& Call = *Result.Nodes.getNodeAs<clang::CXXMemberCallExpr>(CallId);
                    return "accelerator." + Call.getMethodDecl()->getNameAsString() +
                           "() is a collective that every process must call, but this call is " +
                           someProcessesPlace(Call, Context) +
                           ": with more than one process, the processes that reach it wait for the others, "
                           "which never call it, and the job hangs; move the call out of the branch, so that "
                           "every process makes it, and keep in the branch only what one process does";
                  }));
}

// ---- unprepared-optimizer-step
// ------------------------------------------------------------------------------

struct SteppedOptimizer {
  const clang::ValueDecl* Optimizer = nullptr;
  const clang::ValueDecl* Model = nullptr; ///< A model it trains that no accelerator prepares.
};

/// The optimizer `Step` (an optimizerStep()) steps, when it is built in the main file over the parameters of
/// a model that no accelerator prepares, with that model.
std::optional<SteppedOptimizer> unpreparedModelStepped(const clang::CXXMemberCallExpr& Step,
                                                       clang::ASTContext& Context) {
  const clang::Expr* Object = Step.getImplicitObjectArgument();
  if (!Object)
    return std::nullopt;
  Object = Object->IgnoreParenImpCasts();
  if (const auto* Arrow = llvm::dyn_cast<clang::CXXOperatorCallExpr>(Object);
      Arrow && Arrow->getOperator() == clang::OO_Arrow)
    Object = Arrow->getArg(0);
  const clang::ValueDecl* Optimizer = passes::namedDeclaration(Object);
  if (!Optimizer)
    return std::nullopt;
  std::vector<const clang::Expr*> Builds;
  if (const auto* Variable = llvm::dyn_cast<clang::VarDecl>(Optimizer)) {
    if (llvm::isa<clang::ParmVarDecl>(Variable))
      return std::nullopt;
    if (Variable->getInit())
      Builds.push_back(Variable->getInit());
    if (const clang::FunctionDecl* Function = passes::enclosingFunction(Step, Context);
        Function && Variable->hasLocalStorage())
      for (const auto& [Written, Value] : passes::variableWrites(*Function, Context))
        if (Written == Variable && Value != Variable->getInit())
          Builds.push_back(Value);
  } else if (const auto* Field = llvm::dyn_cast<clang::FieldDecl>(Optimizer)) {
    if (Field->hasInClassInitializer() && Field->getInClassInitializer())
      Builds.push_back(Field->getInClassInitializer());
  }
  for (const clang::Expr* Build : Builds)
    for (const clang::Expr* Model : passes::modelsTrainedBy(*Build, Context))
      if (const clang::ValueDecl* Trained = passes::namedDeclaration(Model);
          Trained && !preparingCall(*Trained, Context))
        return SteppedOptimizer{Optimizer, Trained};
  return std::nullopt;
}

AST_MATCHER(clang::CXXMemberCallExpr, stepsUnpreparedModel) {
  clang::ASTContext& Context = Finder->getASTContext();
  return mainFileUsesAccelerator(Context) && unpreparedModelStepped(Node, Context).has_value();
}

PassRule unpreparedOptimizerStepRule() {
  auto Step = cxxMemberCallExpr(isExpansionInMainFile(), passes::optimizerStep(), stepsUnpreparedModel())
                  .bind(CallId);
  return makeRule(Step, noopEdit(node(CallId)),
                  computed([](const MatchFinder::MatchResult& Result, clang::ASTContext& Context) {
                    const auto& Call = *Result.Nodes.getNodeAs<clang::CXXMemberCallExpr>(CallId);
                    SteppedOptimizer Stepped = *unpreparedModelStepped(Call, Context);
                    std::string Model = Stepped.Model->getNameAsString();
                    return quoted(Stepped.Optimizer) +
                           " is a plain torch::optim optimizer over the parameters of '" + Model +
                           "', which is never passed to accelerator.prepare, although this file uses an "
                           "accelerator: nothing synchronises its gradients, so with more than one process "
                           "every process trains its own copy of '" +
                           Model +
                           "' on its own share of the data and the copies drift apart; prepare the model "
                           "(accelerator.prepare(" +
                           Model +
                           ")) and the optimizer (auto optimizer = accelerator.prepare(torch::optim::...(" +
                           Model + "->parameters(), ...)))";
                  }));
}

// ---- unguarded-save
// -----------------------------------------------------------------------------------------

/// The `torch::save(...)` is in a function that calls the accelerator, or it saves a prepared model.
AST_MATCHER(clang::CallExpr, savesInDistributedCode) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::FunctionDecl* Function = passes::enclosingFunction(Node, Context);
  if (Function && callsAccelerator(*Function, Context))
    return true;
  return Node.getNumArgs() > 0 && preparedModelReachedBy(*Node.getArg(0), Context);
}

/// The save is a statement of its own in a block (so that an `if` can take its place).
AST_MATCHER(clang::CallExpr, isBlockStatement) {
  clang::ASTContext& Context = Finder->getASTContext();
  clang::DynTypedNodeList Parents = Context.getParents(Node);
  while (!Parents.empty() && Parents[0].get<clang::ExprWithCleanups>())
    Parents = Context.getParents(Parents[0]);
  return !Parents.empty() && Parents[0].get<clang::CompoundStmt>();
}

/// The function reads a file back (`torch::load`): the other processes would have to wait for the main
/// process's write.
AST_MATCHER(clang::CallExpr, inFunctionThatLoads) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::FunctionDecl* Function = passes::enclosingFunction(Node, Context);
  auto Load = callExpr(callee(functionDecl(hasName("::torch::load"))));
  return Function && Function->hasBody() && passes::containsMatch(Load, *Function->getBody(), Context);
}

std::string saveWhy() {
  return "torch::save runs on every process here: with more than one process they all write the same file at "
         "once (a torn or clobbered file)";
}

PassRule unguardedSaveRule() {
  auto Save = callExpr(isExpansionInMainFile(), callee(functionDecl(hasName("::torch::save"))),
                       unless(runsOnSomeProcesses()), savesInDistributedCode());
  Stencil Accelerator = computed([](const MatchFinder::MatchResult& Result, clang::ASTContext& Context) {
    return acceleratorAt(boundExpr(Result, CallId), nullptr, Context);
  });
  auto Guarded = [](bool ReadBack) {
    return computed([ReadBack](const MatchFinder::MatchResult& Result, clang::ASTContext& Context) {
      std::string Accelerator = acceleratorAt(boundExpr(Result, CallId), nullptr, Context);
      return saveWhy() + "; write it on the main process only: if (" + Accelerator +
             "is_main_process()) { ... }" +
             (ReadBack ? ", then " + Accelerator + "wait_for_everyone() before any process reads it back"
                       : "") +
             " (a model: " + Accelerator +
             "save_model(model, directory), called on every process, writes it once and also gathers a "
             "sharded model)";
    });
  };
  return applyFirst({
      makeRule(callExpr(Save, isBlockStatement(), unless(inFunctionThatLoads())).bind(CallId),
               changeTo(statement(CallId),
                        cat("if (", Accelerator, "is_main_process()) { ", statement(CallId), " }")),
               Guarded(false)),
      makeRule(callExpr(Save, inFunctionThatLoads()).bind(CallId), noopEdit(node(CallId)), Guarded(true)),
      makeRule(callExpr(Save).bind(CallId), noopEdit(node(CallId)), Guarded(false)),
  });
}

const LintCheck Checks[] = {
    {"raw-backward", rawBackwardRule,
     "`loss.backward()` on a loss of a prepared model, which skips the accelerator: "
     "`accelerator.backward(loss)`"},
    {"manual-batch-move", manualBatchMoveRule,
     "`.to(device)` / `.cuda()` of a batch a prepared loader already placed on the device: removed"},
    {"collective-in-branch", collectiveInBranchRule,
     "a collective of the accelerator (`save_state`, `wait_for_everyone`, `gather`, ...) that only some "
     "processes reach: the job hangs"},
    {"unprepared-optimizer-step", unpreparedOptimizerStepRule,
     "`optimizer.step()` of a plain optimizer over a model never prepared, in a file that uses an "
     "accelerator"},
    {"unguarded-save", unguardedSaveRule,
     "`torch::save(...)` every process runs in distributed code: guarded by `accelerator.is_main_process()`"},
};

} // namespace

llvm::ArrayRef<LintCheck> allLintChecks() {
  return Checks;
}

} // namespace accelerate::lint
