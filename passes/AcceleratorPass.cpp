// passes/AcceleratorPass.cpp: the rule that declares `accelerate::Accelerator accelerator;` where training
// runs.
#include "passes/Pass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/Registry.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/Decl.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Tooling/Transformer/Stencil.h"
#include "llvm/Support/FormatVariadic.h"

#include <optional>
#include <string>
#include <vector>

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// Makes `accelerator` exist in each function that the other passes make use it (lambdas count as part of
/// the function around them), as its first statement, once, and adds `#include <accelerate/accelerate.h>`
/// after the file's includes:
///
/// - in `main`: `accelerate::Accelerator accelerator;` — and `main` gets it even when only other functions of
///   the file use it, since training starts there;
/// - in another function of a file that defines `main`: `auto& accelerator =
///   accelerate::Accelerator::current();`, the one `main` made (no signature changes, no globals);
/// - in a file without `main` (a training function called from another file): `accelerate::Accelerator
///   accelerator;` in the functions that run backward (the explanation asks the user to check that the
///   function runs once), `current()` in the others.
///
/// Nothing is added when the file already declares an `accelerate::Accelerator` (variable, parameter or
/// member) or uses one from a header. The explanation says where the declaration went and why.
PassRule acceleratorPass();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char FunctionId[] = "function";
constexpr char BodyId[] = "body";

/// `accelerate::Accelerator`, through typedefs, references and pointers.
AST_MATCHER(clang::QualType, isAcceleratorType) {
  clang::QualType Type = Node.getNonReferenceType();
  if (Type->isPointerType())
    Type = Type->getPointeeType();
  const auto* Record = Type->getAsCXXRecordDecl();
  return Record && Record->getQualifiedNameAsString() == "accelerate::Accelerator";
}

/// True when the file that holds the function already declares or uses an accelerator anywhere (a variable,
/// parameter or member, or a use of one declared in a header): then the user, or an earlier run, has placed
/// it, and a second one would be wrong. Only that file's top-level declarations are searched, not the whole
/// translation unit with its library headers.
AST_MATCHER(clang::FunctionDecl, fileHasAccelerator) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::SourceManager& SM = Context.getSourceManager();
  clang::FileID File = SM.getFileID(SM.getExpansionLoc(Node.getLocation()));
  auto Declaration =
      decl(anyOf(varDecl(hasType(isAcceleratorType())), fieldDecl(hasType(isAcceleratorType()))));
  auto Use = declRefExpr(to(varDecl(hasType(isAcceleratorType()))));
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (SM.getFileID(SM.getExpansionLoc(TopLevel->getLocation())) != File)
      continue;
    if (!match(traverse(clang::TK_AsIs, findAll(Declaration)), *TopLevel, Context).empty() ||
        !match(traverse(clang::TK_AsIs, decl(hasDescendant(Use))), *TopLevel, Context).empty())
      return true;
  }
  return false;
}

AST_MATCHER(clang::FunctionDecl, isLambdaCallOperator) {
  const auto* Method = llvm::dyn_cast<clang::CXXMethodDecl>(&Node);
  return Method && Method->getParent()->isLambda();
}

/// Everything the other passes rewrite into a use of `accelerator`: the PassInfo::UsesAccelerator of every
/// row of the registry, whether or not the pass runs in this rewrite (each such matcher asks isPassEnabled()
/// itself where it matters).
StatementMatcher usesAccelerator() {
  std::vector<clang::ast_matchers::internal::DynTypedMatcher> Uses;
  for (const PassInfo& Pass : allPasses())
    if (Pass.UsesAccelerator)
      Uses.push_back(Pass.UsesAccelerator());
  if (Uses.empty())
    return stmt(unless(stmt()));
  return stmt(clang::ast_matchers::internal::DynTypedMatcher::constructVariadic(
                  clang::ast_matchers::internal::DynTypedMatcher::VO_AnyOf,
                  clang::ASTNodeKind::getFromNodeKind<clang::Stmt>(), std::move(Uses))
                  .unconditionalConvertTo<clang::Stmt>());
}

/// The main file's top-level declarations the other passes make `main` use `accelerator` for: the
/// PassInfo::UsesAcceleratorInMain of every row of the registry. Null when no row has one.
std::optional<DeclarationMatcher> usesAcceleratorInMain() {
  std::vector<clang::ast_matchers::internal::DynTypedMatcher> Uses;
  for (const PassInfo& Pass : allPasses())
    if (Pass.UsesAcceleratorInMain)
      Uses.push_back(Pass.UsesAcceleratorInMain());
  if (Uses.empty())
    return std::nullopt;
  return decl(clang::ast_matchers::internal::DynTypedMatcher::constructVariadic(
                  clang::ast_matchers::internal::DynTypedMatcher::VO_AnyOf,
                  clang::ASTNodeKind::getFromNodeKind<clang::Decl>(), std::move(Uses))
                  .unconditionalConvertTo<clang::Decl>());
}

/// The options the other passes give the accelerator (PassInfo::AcceleratorOptions), chained onto
/// `accelerate::AcceleratorOptions()`; empty when none gives any.
std::string acceleratorOptions() {
  std::string Setters;
  for (const PassInfo& Pass : allPasses())
    if (Pass.AcceleratorOptions) {
      std::string Setter = Pass.AcceleratorOptions();
      if (!Setter.empty())
        Setters += "." + Setter;
    }
  return Setters.empty() ? "" : "accelerate::AcceleratorOptions()" + Setters;
}

AST_MATCHER_P(clang::FunctionDecl, hasUseOfAccelerator, StatementMatcher, Uses) {
  return Node.hasBody() && !match(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(hasDescendant(Uses))),
                                  *Node.getBody(), Finder->getASTContext())
                                .empty();
}

/// The functions of the main file that the other passes make use `accelerator`.
std::vector<const clang::FunctionDecl*> functionsUsingAccelerator(clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  auto Function =
      functionDecl(isDefinition(), unless(isLambdaCallOperator()), hasUseOfAccelerator(usesAccelerator()))
          .bind("function");
  std::vector<const clang::FunctionDecl*> Result;
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!isInRewrittenFile(SM, TopLevel->getLocation()))
      continue;
    for (const BoundNodes& Found : match(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                                                  decl(eachOf(Function, forEachDescendant(Function)))),
                                         *TopLevel, Context))
      Result.push_back(Found.getNodeAs<clang::FunctionDecl>("function"));
  }
  return Result;
}

/// True when `Callee` is `Function` or an instantiation of it.
bool isFunctionOrInstance(const clang::FunctionDecl& Callee, const clang::FunctionDecl& Function) {
  const clang::FunctionDecl* Pattern = Callee.getTemplateInstantiationPattern();
  return Callee.getCanonicalDecl() == Function.getCanonicalDecl() ||
         (Pattern && Pattern->getCanonicalDecl() == Function.getCanonicalDecl());
}

/// True when another function of the main file calls `Function` (or an instantiation of it), or takes its
/// address (a callback, a `std::function`): then that function starts training, not `Function`. In a
/// template, a call that is still dependent (`run_epoch(net, ...)` with a dependent argument,
/// `this->run_epoch()`) counts when it names `Function`.
bool isCalledInMainFile(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  auto Named = functionDecl().bind("callee");
  auto Reference =
      expr(anyOf(declRefExpr(to(Named)), memberExpr(member(Named)), dependentReference())).bind("use");
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!isInRewrittenFile(SM, TopLevel->getLocation()))
      continue;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, decl(forEachDescendant(Reference))), *TopLevel, Context)) {
      const auto* Unresolved = Found.getNodeAs<clang::Expr>("dependent");
      const auto* Callee = Found.getNodeAs<clang::FunctionDecl>("callee");
      if (Unresolved ? !isNamed(Function, spelledName(*Unresolved))
                     : !isFunctionOrInstance(*Callee, Function))
        continue;
      const clang::FunctionDecl* Caller = enclosingFunction(*Found.getNodeAs<clang::Stmt>("use"), Context);
      if (Caller && Caller->getCanonicalDecl() != Function.getCanonicalDecl())
        return true;
    }
  }
  return false;
}

/// True when the function constructs the accelerator rather than reaching another one through current(): it
/// is `main`; or, in a main file without `main`, no other function of the rewritten files calls it (it is
/// where training starts, as far as they show). A header's functions never construct it.
bool ownsAccelerator(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  if (Function.isMain())
    return true;
  if (mainFunctionOfMainFile(Context))
    return false;
  // A header is not where a program starts, and several files include it: its functions reach the one
  // accelerator through current(), whichever file is rewritten.
  const clang::SourceManager& SM = Context.getSourceManager();
  if (!SM.isWrittenInMainFile(SM.getExpansionLoc(Function.getLocation())))
    return false;
  return !isCalledInMainFile(Function, Context);
}

/// The rewritten files have a top-level declaration that makes main use `accelerator` (a global optimizer
/// whose models are prepared at the start of main).
bool hasPreparedGlobal(clang::ASTContext& Context) {
  std::optional<DeclarationMatcher> InMain = usesAcceleratorInMain();
  if (!InMain)
    return false;
  const clang::SourceManager& SM = Context.getSourceManager();
  for (clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (isInRewrittenFile(SM, TopLevel->getLocation()) &&
        !match(traverse(clang::TK_IgnoreUnlessSpelledInSource, decl(anyOf(*InMain, hasDescendant(*InMain)))),
               *TopLevel, Context)
             .empty())
      return true;
  return false;
}

/// A function where training starts (`main`, or in a file without main a function no other function of the
/// file calls) that calls functions that reach the accelerator through current(): it must construct it even
/// when it does not use it itself.
AST_MATCHER(clang::FunctionDecl, isEntryForOtherFunctions) {
  clang::ASTContext& Context = Finder->getASTContext();
  if (!Node.hasBody() || !ownsAccelerator(Node, Context))
    return false;
  std::vector<const clang::FunctionDecl*> Users;
  for (const clang::FunctionDecl* User : functionsUsingAccelerator(Context))
    if (User->getCanonicalDecl() != Node.getCanonicalDecl() && !ownsAccelerator(*User, Context))
      Users.push_back(User);
  if (Users.empty())
    return Node.isMain() && hasPreparedGlobal(Context);
  return Node.isMain() || callsAnyOf(*Node.getBody(), Users, Context);
}

Stencil declarationText() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Function = Result.Nodes.getNodeAs<clang::FunctionDecl>(FunctionId);
    if (!ownsAccelerator(*Function, *Result.Context))
      return "auto& accelerator = accelerate::Accelerator::current();";
    std::string Options = acceleratorOptions();
    return Options.empty() ? "accelerate::Accelerator accelerator;"
                           : "accelerate::Accelerator accelerator(" + Options + ");";
  });
}

Stencil explainPlacement() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Function = Result.Nodes.getNodeAs<clang::FunctionDecl>(FunctionId);
    std::string Why =
        "one accelerate::Accelerator holds the process group, device and precision settings that "
        "the rewritten calls use; ";
    std::string Name = Function->getQualifiedNameAsString();
    if (Function->isMain())
      return Why + "it is declared at the top of main, where training starts";
    if (ownsAccelerator(*Function, *Result.Context) &&
        match(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(hasDescendant(usesAccelerator()))),
              *Function->getBody(), *Result.Context)
            .empty())
      return Why +
             llvm::formatv("this file has no main, and no function of it calls '{0}', so it is declared at "
                           "the top of '{0}', for the functions it calls; if '{0}' runs more than once, or "
                           "another file also constructs one, move the declaration to where training starts",
                           Name)
                 .str();
    if (!ownsAccelerator(*Function, *Result.Context))
      return Why +
             llvm::formatv("'{0}' reaches the one {1} declared through accelerate::Accelerator::current()",
                           Name, mainFunctionOfMainFile(*Result.Context) ? "main" : "its caller")
                 .str();
    return Why +
           llvm::formatv("this file has no main, and no function of it calls '{0}', so it is declared at "
                         "the top of '{0}'; if '{0}' runs more than once, or another file also constructs "
                         "one, move the declaration to where training starts (functions that need it reach "
                         "it with accelerate::Accelerator::current())",
                         Name)
               .str();
  });
}

} // namespace

PassRule acceleratorPass() {
  auto NeedsAccelerator =
      functionDecl(isDefinition(), unless(isLambdaCallOperator()),
                   hasBody(compoundStmt(unless(isInMacroExpansion())).bind(BodyId)),
                   anyOf(hasUseOfAccelerator(usesAccelerator()), isEntryForOtherFunctions()),
                   unless(fileHasAccelerator()))
          .bind(FunctionId);
  return makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, NeedsAccelerator),
                  {insertAtBlockStart(BodyId, declarationText()),
                   addInclude("accelerate/accelerate.h", IncludeFormat::Angled)},
                  explainPlacement());
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo acceleratorPassInfo() {
  return {"accelerator",
          acceleratorPass,
          "declares `accelerator` (in main, or `Accelerator::current()` elsewhere) where the rewritten code "
          "uses it, "
          "and includes <accelerate/accelerate.h>",
          /*OnByDefault=*/true,
          /*WhenNothingFound=*/{},
          /*LeavesAlone=*/"files that already have an accelerator"};
}

} // namespace accelerate::passes
