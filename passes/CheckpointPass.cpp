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
constexpr char PathId[] = "path";
constexpr char StreamId[] = "stream";

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

/// A call that writes a file of its own: an image writer (`cv::imwrite`, `save_image`, `write_image`), an
/// archive's `save_to`, a module's own `save` (a user model's `save(path)`, or libtorch's `save(archive)`
/// that fills an archive the main process then writes).
StatementMatcher fileWrite() {
  auto ImageWriter = callExpr(callee(functionDecl(hasAnyName("imwrite", "save_image", "write_image"))));
  auto ArchiveSave = cxxMemberCallExpr(
      callee(cxxMethodDecl(hasName("save_to"), ofClass(hasName("::torch::serialize::OutputArchive")))));
  auto ModuleSave = cxxMemberCallExpr(
      callee(cxxMethodDecl(hasName("save"))),
      on(expr(anyOf(hasType(isModuleType()), cxxOperatorCallExpr(hasOverloadedOperatorName("->"),
                                                                 hasArgument(0, hasType(isModuleType())))))));
  return expr(anyOf(ImageWriter, ArchiveSave, ModuleSave));
}

} // namespace

StatementMatcher guardedSave() {
  return expr(anyOf(torchSave(), fileWrite()), isWholeStatement(), unless(isInMacroExpansion()),
              isInTrainingOrEvaluationCode(), unless(isInDistributedFunction()))
      .bind(StatementId);
}

/// `std::ofstream log("log.txt");`: a file stream opened, and so emptied, by every process.
StatementMatcher fileStreamOpenedByEveryProcess() {
  auto Stream = hasType(hasUnqualifiedDesugaredType(
      recordType(hasDeclaration(cxxRecordDecl(hasName("::std::basic_ofstream"))))));
  auto OpenedWithPathOnly = cxxConstructExpr(argumentCountIs(1), hasArgument(0, expr().bind(PathId)));
  return declStmt(hasSingleDecl(
                      varDecl(hasLocalStorage(), Stream, hasInitializer(ignoringImplicit(OpenedWithPathOnly)))
                          .bind(StreamId)),
                  unless(isInMacroExpansion()), isInTrainingOrEvaluationCode(),
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
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, fileStreamOpenedByEveryProcess()),
          insertAfter(node(PathId), cat(", accelerator.is_main_process() ? std::ios::out : std::ios::app")),
          cat("only the main process empties '", name(StreamId),
              "' when it opens it; the others open it without "
              "emptying it (append), so a process that starts late cannot wipe what the main process "
              "has written; the main process alone writes to it")),
  });
}

} // namespace accelerate::passes
