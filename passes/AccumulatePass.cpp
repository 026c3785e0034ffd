// passes/AccumulatePass.cpp: the rule that wraps each training step in an accumulation guard.
#include "passes/Pass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Tooling/Transformer/Stencil.h"
#include "llvm/ADT/STLExtras.h"

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// Inserts `auto accumulate = accelerator.accumulate(models...);` as the first statement of the innermost
/// loop whose body runs a training step (a backward pass and an optimizer step), so the guard lives across
/// the forward, the backward and the step, whichever side of the forward `zero_grad` is on:
///
///   for (auto& batch : *loader) {         for (auto& batch : *loader) {
///     optimizer.zero_grad();          →     auto accumulate = accelerator.accumulate(model);
///     ...                                   optimizer.zero_grad();
///
/// The models are those the stepped optimizers train (a GAN's two), else the modules the loop calls
/// `forward` on. With `gradient_accumulation_steps` at 1 (the default) the guard changes nothing; with k,
/// gradients are synchronised and the optimizer steps every k-th batch. A loop whose body is not a block, or
/// whose backward and step are in functions it calls, is left as it is.
PassRule accumulatePass();

/// Matches the loops accumulatePass() rewrites (the guard uses `accelerator`).
clang::ast_matchers::StatementMatcher accumulatedLoop();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char LoopId[] = "loop";
constexpr char BodyId[] = "body";

auto anyLoop() {
  return stmt(anyOf(forStmt(), cxxForRangeStmt(), whileStmt(), doStmt()));
}

/// A loop with a backward pass and an optimizer step in it.
bool runsTrainingStep(const clang::Stmt& Loop, clang::ASTContext& Context) {
  return loopTrains(Loop, Context) &&
         !match(traverse(clang::TK_AsIs, stmt(hasDescendant(optimizerStep()))), Loop, Context).empty();
}

/// The innermost loop that runs a training step: no loop inside it runs one too.
AST_MATCHER(clang::Stmt, isInnermostTrainingStepLoop) {
  clang::ASTContext& Context = Finder->getASTContext();
  if (!runsTrainingStep(Node, Context))
    return false;
  for (const BoundNodes& Inner :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(anyLoop().bind("inner")))), Node, Context))
    if (runsTrainingStep(*Inner.getNodeAs<clang::Stmt>("inner"), Context))
      return false;
  return true;
}

/// `model` for a module variable or member, `*model` for a raw pointer to one.
std::string modelName(const clang::ValueDecl& Model) {
  return (Model.getType()->isPointerType() ? "*" : "") + Model.getNameAsString();
}

/// The models the loop's step trains: those whose parameters the stepped optimizers were made with, else the
/// modules it calls `forward` on (written `model->forward(x)` or `model.forward(x)`).
std::vector<std::string> steppedModels(const clang::Stmt& Loop, clang::ASTContext& Context) {
  std::vector<const clang::ValueDecl*> Models;
  auto Add = [&](const clang::ValueDecl* Model) {
    if (Model && !llvm::is_contained(Models, Model))
      Models.push_back(Model);
  };
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(stmt(optimizerStep()).bind("step")))), Loop,
             Context)) {
    const auto* Step = Found.getNodeAs<clang::CXXMemberCallExpr>("step");
    const clang::Expr* Object = Step->getImplicitObjectArgument()->IgnoreImplicit();
    if (const auto* Arrow = llvm::dyn_cast<clang::CXXOperatorCallExpr>(Object))
      if (Arrow->getOperator() == clang::OO_Arrow)
        Object = Arrow->getArg(0);
    const auto* Optimizer = llvm::dyn_cast_or_null<clang::VarDecl>(namedDeclaration(Object));
    if (Optimizer && Optimizer->getInit())
      for (const clang::Expr* Model : modelsTrainedBy(*Optimizer->getInit(), Context))
        Add(namedDeclaration(Model));
  }
  if (Models.empty()) {
    auto Forward = memberExpr(member(hasName("forward")), hasObjectExpression(expr().bind("object")));
    auto DependentForward =
        cxxDependentScopeMemberExpr(hasMemberName("forward"), hasObjectExpression(expr().bind("object")));
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, stmt(forEachDescendant(expr(anyOf(Forward, DependentForward))))),
               Loop, Context)) {
      const clang::Expr* Object = Found.getNodeAs<clang::Expr>("object")->IgnoreImplicit();
      if (const auto* Arrow = llvm::dyn_cast<clang::CXXOperatorCallExpr>(Object))
        if (Arrow->getOperator() == clang::OO_Arrow)
          Object = Arrow->getArg(0);
      const clang::ValueDecl* Model = namedDeclaration(Object);
      if (Model &&
          !match(traverse(clang::TK_AsIs, valueDecl(hasType(isModuleType()))), *Model, Context).empty())
        Add(Model);
    }
  }
  std::vector<std::string> Names;
  for (const clang::ValueDecl* Model : Models)
    Names.push_back(modelName(*Model));
  return Names;
}

Stencil accumulateStatement() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    return "auto accumulate = accelerator.accumulate(" +
           llvm::join(steppedModels(*Loop, *Result.Context), ", ") + ");";
  });
}

AST_MATCHER(clang::Stmt, isInTrainingLoopMatcher) {
  return isInTrainingLoop(Node, Finder->getASTContext());
}

AST_MATCHER(clang::Stmt, isUnderTensorConditionMatcher) {
  return isUnderTensorCondition(Node, Finder->getASTContext());
}

/// `break` or `return` in a training loop, under a condition on a value each process computes from its own
/// data.
StatementMatcher rankLocalExit() {
  return stmt(anyOf(breakStmt(), returnStmt()), isInTrainingLoopMatcher(), isUnderTensorConditionMatcher(),
              unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()))
      .bind("exit");
}

} // namespace

StatementMatcher accumulatedLoop() {
  auto Body = hasBody(compoundStmt(unless(isInMacroExpansion())).bind(BodyId));
  return stmt(anyOf(forStmt(Body), cxxForRangeStmt(Body), whileStmt(Body), doStmt(Body)),
              isInnermostTrainingStepLoop(), isInTrainingFile(), unless(isInDistributedFunction()))
      .bind(LoopId);
}

PassRule accumulatePass() {
  return applyFirst<std::string>({
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, accumulatedLoop()),
          insertAtBlockStart(BodyId, accumulateStatement()),
          cat("the accumulation guard spans one training step (forward, backward, optimizer step): with "
              "gradient_accumulation_steps k, gradients are synchronised and the optimizer steps on every "
              "k-th batch only, and the last batch of a prepared loader always completes a step")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, rankLocalExit()), noopEdit(node("exit")),
          cat("training loop exit not made safe: it depends on a value each process computes from its own "
              "batch (a local loss), so processes could stop at different steps and the ones still training "
              "would wait forever for the others' gradients; decide on a value reduced over the processes "
              "(accelerator.reduce) or use accelerator.set_trigger() / check_trigger()")),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo accumulatePassInfo() {
  return {"accumulate",
          accumulatePass,
          "each training step runs inside `auto accumulate = accelerator.accumulate(...)`",
          /*OnByDefault=*/true,
          /*WhenNothingFound=*/{},
          /*LeavesAlone=*/"loops whose step is in a helper, non-block bodies",
          /*TurnedOnBy=*/{},
          /*UsesAccelerator=*/accumulatedLoop};
}

} // namespace accelerate::passes
