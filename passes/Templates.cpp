// passes/Templates.cpp: maps a call in a template instantiation back to the template as written.
#include "passes/Templates.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/Decl.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"

namespace accelerate::passes {
namespace {

using namespace clang::ast_matchers;

/// The function the statement is in, following the parent map up.
const clang::FunctionDecl* enclosingFunction(const clang::Stmt& S, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(S);
  while (!Parents.empty()) {
    if (const auto* Function = Parents[0].get<clang::FunctionDecl>())
      return Function;
    Parents = Context.getParents(Parents[0]);
  }
  return nullptr;
}

AST_MATCHER(clang::CallExpr, isDependentCallInPattern) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::FunctionDecl* Instance = enclosingFunction(Node, Context);
  const clang::FunctionDecl* Pattern = Instance ? Instance->getTemplateInstantiationPattern() : nullptr;
  if (!Pattern || !Pattern->getBody())
    return false;
  // The instantiated call keeps the source range of the call written in the template.
  for (const BoundNodes& Written : match(findAll(callExpr().bind("written")), *Pattern->getBody(), Context)) {
    const auto* Call = Written.getNodeAs<clang::CallExpr>("written");
    if (Call->getBeginLoc() == Node.getBeginLoc() && Call->getEndLoc() == Node.getEndLoc())
      return Call->isTypeDependent() || Call->getCallee()->isTypeDependent();
  }
  return false;
}

} // namespace

clang::ast_matchers::internal::Matcher<clang::CallExpr> isDependentInTemplate() {
  return allOf(isInTemplateInstantiation(), isDependentCallInPattern());
}

} // namespace accelerate::passes
