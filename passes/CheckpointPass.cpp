// passes/CheckpointPass.cpp: the rule that writes saved files from the main process only.
#include "passes/CheckpointPass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {
namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char StatementId[] = "statement";

constexpr char SaveState[] = "accelerator.save_state(\"checkpoint\");";

/// `torch::save(...)`, resolved or (in a template, where the lookup holds the function template) not yet.
auto savesWithTorch() {
  auto Save = functionDecl(hasName("::torch::save"));
  auto SaveTemplate = namedDecl(anyOf(Save, functionTemplateDecl(hasName("::torch::save"))));
  return callee(expr(
      ignoringImplicit(anyOf(declRefExpr(to(Save)), unresolvedLookupExpr(hasAnyDeclaration(SaveTemplate))))));
}

StatementMatcher torchSave() {
  return callExpr(savesWithTorch());
}

/// `torch::save(model_or_optimizer, ...)`: training state, not just a file.
StatementMatcher stateSave() {
  return callExpr(savesWithTorch(),
                  hasArgument(0, expr(hasType(qualType(anyOf(isModuleType(), isOptimizerType()))))));
}

AST_MATCHER(clang::Stmt, isInTrainingLoopMatcher) {
  return isInTrainingLoop(Node, Finder->getASTContext());
}

AST_MATCHER(clang::Stmt, isUnderTensorConditionMatcher) {
  return isUnderTensorCondition(Node, Finder->getASTContext());
}

/// The save is a statement of a block, and no earlier statement of that block saves a model or an optimizer:
/// one resumable checkpoint per group of saves.
AST_MATCHER(clang::Stmt, isFirstStateSaveOfBlock) {
  clang::ASTContext& Context = Finder->getASTContext();
  clang::DynTypedNodeList Parents = Context.getParents(Node);
  const clang::Stmt* Child = &Node;
  while (!Parents.empty() && Parents[0].get<clang::ExprWithCleanups>()) {
    Child = Parents[0].get<clang::Stmt>();
    Parents = Context.getParents(Parents[0]);
  }
  const auto* Block = Parents.empty() ? nullptr : Parents[0].get<clang::CompoundStmt>();
  if (!Block)
    return false;
  for (const clang::Stmt* Earlier : Block->body()) {
    // The block may hold the statement wrapped in ExprWithCleanups, which the parent map can skip.
    if (Earlier == Child || Earlier->getBeginLoc() == Node.getBeginLoc())
      return true;
    if (!match(traverse(clang::TK_AsIs, stmt(anyOf(stateSave(), hasDescendant(stateSave())))), *Earlier,
               Context)
             .empty())
      return false;
  }
  return true;
}

} // namespace

StatementMatcher guardedSave() {
  return expr(torchSave(), isWholeStatement(), unless(isInMacroExpansion()), isInTrainingOrEvaluationCode(),
              unless(isInDistributedFunction()))
      .bind(StatementId);
}

PassRule checkpointPass() {
  auto Guard = guardStatement(StatementId, "accelerator.is_main_process()");
  auto StateSaveInLoop = stmt(guardedSave(), stateSave(), isInTrainingLoopMatcher());
  auto Kept =
      cat("every process holds the same weights, so the main process alone writes them, at this path");
  return applyFirst<std::string>({
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource,
                   stmt(StateSaveInLoop, unless(isUnderTensorConditionMatcher()), isFirstStateSaveOfBlock())),
          flatten(editList({insertBeforeStatement(StatementId, cat(SaveState))}), Guard),
          cat(Kept, "; accelerator.save_state(\"checkpoint\") before it saves, from every process, what "
                    "resumes training on any number of processes (models, optimizers, schedulers, RNG "
                    "states, the data position), replacing the last one atomically")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        stmt(StateSaveInLoop, isUnderTensorConditionMatcher())),
               Guard,
               cat(Kept, "; no resumable checkpoint (accelerator.save_state) is added here: a condition on a "
                         "tensor's value decides whether this runs (directly, or through a number computed "
                         "from one, such as a best-so-far loss or accuracy), processes could disagree on it, "
                         "and save_state is collective; decide on a reduced value (accelerator.reduce) and "
                         "call save_state by hand")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(guardedSave(), stateSave())), Guard,
               Kept),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, guardedSave()), Guard,
               cat("the main process alone writes this file, once per job instead of once per process")),
  });
}

} // namespace accelerate::passes
