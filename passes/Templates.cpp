// passes/Templates.cpp: maps a node written in a template to the nodes its instantiations made of it.
#include "passes/Templates.h"

#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/RecursiveASTVisitor.h"

namespace accelerate::passes {
namespace {

/// Every instantiation of `Pattern` that has a body: the specializations of its function template, or the
/// members made from it in the specializations of its class template.
std::vector<const clang::FunctionDecl*> instantiationsOf(const clang::FunctionDecl& Pattern) {
  std::vector<const clang::FunctionDecl*> Result;
  auto Keep = [&](const clang::FunctionDecl* Candidate) {
    if (Candidate && Candidate->hasBody() && Candidate->getTemplateInstantiationPattern() == &Pattern)
      Result.push_back(Candidate);
  };
  if (const clang::FunctionTemplateDecl* Template = Pattern.getDescribedFunctionTemplate())
    for (const clang::FunctionDecl* Specialization : Template->specializations())
      Keep(Specialization);
  if (const auto* Record = llvm::dyn_cast<clang::CXXRecordDecl>(Pattern.getDeclContext()))
    if (const clang::ClassTemplateDecl* Template = Record->getDescribedClassTemplate())
      for (const clang::ClassTemplateSpecializationDecl* Specialization : Template->specializations())
        for (const clang::Decl* Member : Specialization->decls()) {
          if (const auto* Method = llvm::dyn_cast<clang::FunctionDecl>(Member))
            Keep(Method);
          else if (const auto* MethodTemplate = llvm::dyn_cast<clang::FunctionTemplateDecl>(Member))
            for (const clang::FunctionDecl* Specialization : MethodTemplate->specializations())
              Keep(Specialization);
        }
  return Result;
}

/// Finds, in an instantiated body, the statement spelled at the same place as the written one.
class SameRangeFinder : public clang::RecursiveASTVisitor<SameRangeFinder> {
public:
  SameRangeFinder(const clang::Stmt& Written) : Written(Written) {}
  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitImplicitCode() const { return true; }
  bool VisitStmt(clang::Stmt* S) {
    if (!Found && S->getBeginLoc() == Written.getBeginLoc() && S->getEndLoc() == Written.getEndLoc() &&
        (llvm::isa<clang::CallExpr>(S) == llvm::isa<clang::CallExpr>(&Written)))
      Found = S;
    return !Found;
  }
  const clang::Stmt* Found = nullptr;

private:
  const clang::Stmt& Written;
};

AST_MATCHER(clang::CallExpr, isDependentCallImpl) {
  return Node.isTypeDependent() || (Node.getCallee() && Node.getCallee()->isTypeDependent());
}

} // namespace

std::vector<std::pair<const clang::FunctionDecl*, const clang::Stmt*>>
instantiatedNodes(const clang::Stmt& Written, clang::ASTContext& Context) {
  std::vector<std::pair<const clang::FunctionDecl*, const clang::Stmt*>> Nodes;
  const clang::FunctionDecl* Pattern = enclosingFunction(Written, Context);
  if (!Pattern)
    return Nodes;
  for (const clang::FunctionDecl* Instance : instantiationsOf(*Pattern)) {
    SameRangeFinder Finder(Written);
    Finder.TraverseStmt(Instance->getBody());
    Nodes.emplace_back(Instance, Finder.Found);
  }
  return Nodes;
}

bool holdsInEveryInstantiation(const clang::Stmt& Written, clang::ASTContext& Context,
                               const std::function<bool(const clang::Stmt&)>& Check) {
  auto Nodes = instantiatedNodes(Written, Context);
  return !Nodes.empty() &&
         llvm::all_of(Nodes, [&](const auto& Node) { return Node.second && Check(*Node.second); });
}

clang::ast_matchers::internal::Matcher<clang::CallExpr> isDependentCall() {
  return isDependentCallImpl();
}

} // namespace accelerate::passes
