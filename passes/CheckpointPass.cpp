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
constexpr char StateId[] = "state";

/// `torch::save(value, ...)`, resolved or (in a template) not yet.
StatementMatcher torchSave() {
  auto Save = functionDecl(hasName("::torch::save"));
  return callExpr(callee(expr(ignoringImplicit(anyOf(declRefExpr(to(Save)),
                                                     unresolvedLookupExpr(hasAnyDeclaration(Save)))))),
                  optionally(hasArgument(0, expr(hasType(qualType(anyOf(isModuleType(), isOptimizerType()))))
                                                .bind(StateId))));
}

} // namespace

StatementMatcher guardedSave() {
  return expr(torchSave(), isWholeStatement(), unless(isInMacroExpansion()), isInTrainingOrEvaluationCode(),
              unless(isInDistributedFunction()))
      .bind(StatementId);
}

PassRule checkpointPass() {
  return makeRule(
      traverse(clang::TK_IgnoreUnlessSpelledInSource, guardedSave()),
      guardStatement(StatementId, "accelerator.is_main_process()"),
      ifBound(StateId,
              cat("every process holds the same weights, so the main process alone writes them, at this path; "
                  "a checkpoint that resumes training on any number of processes (optimizer state, data "
                  "position) needs accelerator.save_state, which this runtime does not have yet"),
              cat("the main process alone writes this file, once per job instead of once per process")));
}

} // namespace accelerate::passes
