// passes/PreparedOptimizers.cpp: the facts module's optimizers the prepare pass prepares (TrainingCode.h):
// the declarations it rewrites, the names that hold a prepared optimizer afterwards (by value, a reference
// bound to one, a parameter that only receives prepared ones), and the members of libtorch's optimizer
// reached on them.
#include "passes/Macros.h"
#include "passes/Pass.h"
#include "passes/Templates.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <array>
#include <optional>

namespace accelerate::passes {

using namespace clang::ast_matchers;

namespace {

/// A variable that holds the object itself (not a pointer or a reference).
AST_MATCHER(clang::VarDecl, holdsObjectImpl) {
  clang::QualType Type = Node.getType();
  if (Type->isReferenceType() || Type->isPointerType())
    return false;
  const auto* Record = Type->getAsCXXRecordDecl();
  std::string Name = Record ? Record->getQualifiedNameAsString() : "";
  return Record && Name != "std::shared_ptr" && Name != "std::unique_ptr";
}

AST_MATCHER(clang::VarDecl, trainsANonModuleInSomeInstantiationImpl) {
  return nonModuleInstance(Node, Finder->getASTContext()).has_value();
}

/// An optimizer over the parameters of models (modules in every instantiation of its template).
AST_MATCHER(clang::VarDecl, trainsSomeModelImpl) {
  clang::ASTContext& Context = Finder->getASTContext();
  return Node.getInit() && !modelsTrainedBy(*Node.getInit(), Context).empty() &&
         !nonModuleInstance(Node, Context);
}

/// A by-value optimizer whose declaration this pass rewrites: its name then holds an accelerate::Optimizer.
AST_MATCHER(clang::VarDecl, isPreparedOptimizerObjectImpl) {
  clang::ASTContext& Context = Finder->getASTContext();
  if (!holdsObjectImpl().matches(Node, Finder, Builder))
    return false;
  for (const clang::DynTypedNode& Parent : Context.getParents(Node))
    if (const auto* Declaration = Parent.get<clang::DeclStmt>())
      return isSplitPreparedDeclaration(*Declaration, Context) ||
             !match(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                             declStmt(declarationOf(isOptimizerType()),
                                      hasSingleDecl(varDecl(trainsSomeModelImpl())))),
                    *Declaration, Context)
                  .empty();
  return false;
}

/// A reference parameter of an optimizer type that every call in the main file passes a prepared optimizer
/// (held by value) for: `void update(..., torch::optim::Adam& trainer)` called as `update(..., optimizer)`, a
/// lambda's `[&](torch::optim::Adam& trainer)` called as `step(optimizer)`, or a function handed on as a
/// callback next to a prepared optimizer, `apply(decay, optimizer)` (where a template calls
/// `decay(optimizer)`).
bool receivesOnlyPreparedOptimizers(const clang::ParmVarDecl& Node, clang::ASTContext& Context, int Depth) {
  const auto* Function = llvm::dyn_cast<clang::FunctionDecl>(Node.getDeclContext());
  if (!Function || !Node.getType()->isLValueReferenceType())
    return false;
  const unsigned Index = Node.getFunctionScopeIndex();
  const clang::SourceManager& SM = Context.getSourceManager();
  auto Prepared = expr(ignoringImplicit(declRefExpr(to(varDecl(isPreparedOptimizerObjectImpl())))));
  // A prepared optimizer, or a parameter of a function up to two calls out that only receives one (and is
  // retyped too): `step(optimizer)` inside `fit(torch::optim::Adam& optimizer)`.
  auto IsPrepared = [&](const clang::Expr& Argument) {
    if (!match(traverse(clang::TK_AsIs, Prepared), Argument, Context).empty())
      return true;
    const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(Argument.IgnoreParenImpCasts());
    const auto* Outer = Reference ? llvm::dyn_cast<clang::ParmVarDecl>(Reference->getDecl()) : nullptr;
    return Outer && Outer != &Node && Depth < 2 &&
           !match(qualType(isOptimizerType()), Outer->getType(), Context).empty() &&
           receivesOnlyPreparedOptimizers(*Outer, Context, Depth + 1);
  };
  auto IsFunction = [&](const clang::FunctionDecl* Other) {
    if (!Other)
      return false;
    if (const clang::FunctionDecl* Pattern = Other->getTemplateInstantiationPattern())
      Other = Pattern;
    return Other->getCanonicalDecl() == Function->getCanonicalDecl();
  };
  bool AnyCall = false;
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!isInRewrittenFile(SM, TopLevel->getLocation()))
      continue;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, decl(forEachDescendant(callExpr().bind("call")))), *TopLevel,
               Context)) {
      const auto* Call = Found.getNodeAs<clang::CallExpr>("call");
      if (IsFunction(Call->getDirectCallee())) {
        // A lambda's (or any object's) operator() called as `step(optimizer)`: the object is argument 0.
        const unsigned Shift = firstParameterArgument(*Call);
        if (Index + Shift >= Call->getNumArgs())
          continue;
        AnyCall = true;
        if (!IsPrepared(*Call->getArg(Index + Shift)))
          return false;
        continue;
      }
      // The function handed to another as a callback: only beside a prepared optimizer.
      for (const clang::Expr* Argument : Call->arguments()) {
        const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(Argument->IgnoreParenImpCasts());
        if (!Reference || !IsFunction(llvm::dyn_cast<clang::FunctionDecl>(Reference->getDecl())))
          continue;
        if (std::none_of(Call->arg_begin(), Call->arg_end(),
                         [&](const clang::Expr* Other) { return IsPrepared(*Other); }))
          return false;
        AnyCall = true;
      }
    }
  }
  return AnyCall;
}

AST_MATCHER(clang::ParmVarDecl, onlyReceivesPreparedOptimizersImpl) {
  return receivesOnlyPreparedOptimizers(Node, Finder->getASTContext(), 0);
}

/// What accelerate::Optimizer itself has of libtorch's optimizer interface; the rest is reached through
/// unwrap().
constexpr std::array<llvm::StringLiteral, 5> PreparedOptimizerMembers = {"step", "zero_grad", "param_groups",
                                                                         "save", "load"};

/// A name that holds a prepared optimizer after the rewrite: a prepared optimizer held by value, a reference
/// bound to one (`decltype(optimizer)& same = optimizer;`), or a reference parameter that only receives
/// prepared ones (retyped, or a template's `Opt&`).
bool holdsPreparedOptimizer(const clang::ValueDecl& Declaration, clang::ASTContext& Context) {
  auto Prepared = declRefExpr(to(varDecl(isPreparedOptimizerObjectImpl())));
  if (const auto* Parameter = llvm::dyn_cast<clang::ParmVarDecl>(&Declaration)) {
    const auto* Function = llvm::dyn_cast<clang::FunctionDecl>(Parameter->getDeclContext());
    if (const clang::FunctionDecl* Pattern = Function ? Function->getTemplateInstantiationPattern() : nullptr)
      Parameter = Pattern->getParamDecl(Parameter->getFunctionScopeIndex());
    return receivesOnlyPreparedOptimizers(*Parameter, Context, 0);
  }
  const auto* Variable = llvm::dyn_cast<clang::VarDecl>(&Declaration);
  if (!Variable)
    return false;
  if (!match(varDecl(isPreparedOptimizerObjectImpl()), *Variable, Context).empty())
    return true;
  return Variable->getType()->isReferenceType() && Variable->getInit() &&
         !match(traverse(clang::TK_AsIs, expr(ignoringImplicit(Prepared))), *Variable->getInit(), Context)
              .empty();
}

AST_MATCHER(clang::ValueDecl, holdsPreparedOptimizerMatcher) {
  return holdsPreparedOptimizer(Node, Finder->getASTContext());
}

AST_MATCHER(clang::CXXMethodDecl, isPreparedOptimizerMember) {
  return Node.getDeclName().isIdentifier() && llvm::is_contained(PreparedOptimizerMembers, Node.getName());
}

/// In a template, `optimizer.defaults()` on a dependent `Opt& optimizer`: every instantiation calls a member
/// of libtorch's optimizer that accelerate::Optimizer does not have, on a parameter that only receives
/// prepared optimizers.
AST_MATCHER(clang::CXXDependentScopeMemberExpr, isLibtorchOnlyMemberOfPreparedParameter) {
  clang::ASTContext& Context = Finder->getASTContext();
  const auto* Base = llvm::dyn_cast_or_null<clang::DeclRefExpr>(
      Node.isImplicitAccess() ? nullptr : Node.getBase()->IgnoreParenImpCasts());
  if (!Base || !Node.getMember().isIdentifier() ||
      llvm::is_contained(PreparedOptimizerMembers, Node.getMember().getAsIdentifierInfo()->getName()) ||
      !holdsPreparedOptimizer(*Base->getDecl(), Context))
    return false;
  auto LibtorchMember = memberExpr(
      member(cxxMethodDecl(ofClass(cxxRecordDecl(isSameOrDerivedFrom("::torch::optim::Optimizer"))))));
  return holdsInEveryInstantiation(Node, Context, [&](const clang::Stmt& Made) {
    return !match(traverse(clang::TK_AsIs, LibtorchMember), Made, Context).empty();
  });
}

} // namespace

/// `T name(args)`, `T name{args}`, `T name = T(args)`, `auto name = T(args)`, and
/// `auto name = std::make_shared<T>(args)` (or make_unique) for an optimizer or scheduler type T, declared
/// alone in a function.
StatementMatcher declarationOf(clang::ast_matchers::internal::Matcher<clang::QualType> Type) {
  auto Construct = cxxConstructExpr(hasType(Type)).bind(OptimizerConstructId);
  auto Made =
      callExpr(callee(functionDecl(hasAnyName("::std::make_shared", "::std::make_unique"))), hasType(Type))
          .bind(OptimizerFactoryId);
  // In a template, `T name(args)` with dependent arguments has a ParenListExpr for an initializer.
  auto DependentConstruct = parenListExpr().bind(OptimizerConstructId);
  auto Variable = varDecl(hasLocalStorage(), unless(isStaticLocal()),
                          anyOf(allOf(holdsObjectImpl(), hasType(Type),
                                      hasInitializer(anyOf(Construct, DependentConstruct))),
                                hasInitializer(Made)))
                      .bind(OptimizerVariableId);
  return declStmt(hasSingleDecl(Variable), unless(isInMacroExpansion()), isInTrainingFile(),
                  unless(isInDistributedFunction()))
      .bind(OptimizerStatementId);
}

/// The first model the optimizer `Variable` trains that an instantiation of its template makes a non-module.
std::optional<NonModuleInstance> nonModuleInstance(const clang::VarDecl& Variable,
                                                   clang::ASTContext& Context) {
  if (!Variable.getInit())
    return std::nullopt;
  for (const clang::Expr* Model : modelsTrainedBy(*Variable.getInit(), Context)) {
    if (!Model->isTypeDependent())
      continue;
    for (const auto& [Instance, Made] : instantiatedNodes(*Model, Context)) {
      // The node spelled there may be the implicit conversion around the model (a holder seen as its
      // `std::shared_ptr` base for `->`): its type is the model's as written.
      const auto* Instantiated = llvm::dyn_cast_or_null<clang::Expr>(Made);
      if (Instantiated &&
          match(qualType(isModuleType()), Instantiated->IgnoreParenImpCasts()->getType(), Context).empty())
        return NonModuleInstance{Model, Instance, Instantiated->IgnoreParenImpCasts()->getType()};
    }
  }
  return std::nullopt;
}

clang::ast_matchers::internal::Matcher<clang::VarDecl> holdsObject() {
  return holdsObjectImpl();
}
clang::ast_matchers::internal::Matcher<clang::VarDecl> trainsSomeModel() {
  return trainsSomeModelImpl();
}
clang::ast_matchers::internal::Matcher<clang::VarDecl> trainsANonModuleInSomeInstantiation() {
  return trainsANonModuleInSomeInstantiationImpl();
}
clang::ast_matchers::internal::Matcher<clang::VarDecl> isPreparedOptimizerObject() {
  return isPreparedOptimizerObjectImpl();
}
clang::ast_matchers::internal::Matcher<clang::ParmVarDecl> onlyReceivesPreparedOptimizers() {
  return onlyReceivesPreparedOptimizersImpl();
}

/// `optimizer.defaults()`: a member of libtorch's optimizer that accelerate::Optimizer does not have, called
/// on a name that holds a prepared optimizer (holdsPreparedOptimizer), resolved or in a template; the name is
/// bound to SavedId.
StatementMatcher libtorchOnlyMemberOfPreparedOptimizer() {
  auto Holder = declRefExpr(to(valueDecl(holdsPreparedOptimizerMatcher()))).bind(PreparedOptimizerSavedId);
  auto Resolved = cxxMemberCallExpr(
      callee(cxxMethodDecl(ofClass(cxxRecordDecl(isSameOrDerivedFrom("::torch::optim::Optimizer"))),
                           unless(isPreparedOptimizerMember()))),
      on(ignoringImplicit(Holder)));
  auto Dependent = cxxDependentScopeMemberExpr(isLibtorchOnlyMemberOfPreparedParameter(),
                                               hasObjectExpression(ignoringImplicit(Holder)));
  return expr(anyOf(Resolved, Dependent), unless(isInMacroExpansion()), isInTrainingFile(),
              unless(isInDistributedFunction()));
}

} // namespace accelerate::passes
