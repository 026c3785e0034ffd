// passes/FactsSupport.h: what the files of the facts module (TrainingCode.h) share among themselves: walks
// over the main file's declarations, and the per-parse caches each file keeps. Not for the passes.
#ifndef ACCELERATE_PASSES_FACTSSUPPORT_H
#define ACCELERATE_PASSES_FACTSSUPPORT_H

#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"

#include <vector>

namespace accelerate::passes::facts {

using namespace clang::ast_matchers;

/// Calls `Visit` with each top-level declaration written in a file the rewrite changes: the main file and
/// the project headers it may change.
template <typename Callback> void forEachMainFileDecl(clang::ASTContext& Context, Callback Visit) {
  const clang::SourceManager& SM = Context.getSourceManager();
  for (clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (isInRewrittenFile(SM, TopLevel->getLocation()))
      Visit(*TopLevel);
}

/// True when `Matcher` (a Decl or Stmt matcher) matches in the main file, top-level declarations included.
template <typename MatcherType> bool mainFileHas(const MatcherType& Matcher, clang::ASTContext& Context) {
  bool Found = false;
  forEachMainFileDecl(Context, [&](clang::Decl& TopLevel) {
    Found = Found ||
            !match(traverse(clang::TK_AsIs, decl(hasDescendant(Matcher))), TopLevel, Context).empty() ||
            !match(traverse(clang::TK_AsIs, Matcher), TopLevel, Context).empty();
  });
  return Found;
}

/// Every node `Matcher` matches in the main file, bound to `Id`.
template <typename NodeType, typename MatcherType>
std::vector<const NodeType*> allInMainFile(const MatcherType& Matcher, llvm::StringRef Id,
                                           clang::ASTContext& Context) {
  std::vector<const NodeType*> Result;
  forEachMainFileDecl(Context, [&](clang::Decl& TopLevel) {
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, decl(forEachDescendant(Matcher))), TopLevel, Context))
      Result.push_back(Found.getNodeAs<NodeType>(Id));
  });
  return Result;
}

/// Forget the per-parse caches of passes/OptimizerFacts.cpp (see forgetTrainingCodeFacts).
void forgetOptimizerFacts();

} // namespace accelerate::passes::facts

#endif // ACCELERATE_PASSES_FACTSSUPPORT_H
