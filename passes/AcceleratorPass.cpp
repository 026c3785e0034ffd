// passes/AcceleratorPass.cpp: the rule that declares `accelerate::Accelerator accelerator;` where training
// runs.
#include "passes/AcceleratorPass.h"

#include "passes/AccumulatePass.h"
#include "passes/BackwardPass.h"
#include "passes/CheckpointPass.h"
#include "passes/ClipPass.h"
#include "passes/DataLoaderPass.h"
#include "passes/DevicePass.h"
#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/OutputPass.h"
#include "passes/PreparePass.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/Decl.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Tooling/Transformer/Stencil.h"
#include "llvm/Support/FormatVariadic.h"

namespace accelerate::passes {
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
    if (!match(findAll(Declaration), *TopLevel, Context).empty() ||
        !match(decl(hasDescendant(Use)), *TopLevel, Context).empty())
      return true;
  }
  return false;
}

AST_MATCHER(clang::FunctionDecl, isLambdaCallOperator) {
  const auto* Method = llvm::dyn_cast<clang::CXXMethodDecl>(&Node);
  return Method && Method->getParent()->isLambda();
}

/// Everything the other passes rewrite into a use of `accelerator`.
StatementMatcher usesAccelerator() {
  return stmt(anyOf(rewritableBackwardCall(), preparedDeclaration(), preparedLoaderDeclaration(),
                    deviceSiteUsingAccelerator(), accumulatedLoop(), clipCall(), outputStatement(), guardedSave()));
}

AST_MATCHER_P(clang::FunctionDecl, hasUseOfAccelerator, StatementMatcher, Uses) {
  return Node.hasBody() && !match(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(hasDescendant(Uses))),
                                  *Node.getBody(), Finder->getASTContext())
                                .empty();
}

/// The functions of the main file that the other passes make use `accelerator`.
std::vector<const clang::FunctionDecl*> functionsUsingAccelerator(clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  auto Function = functionDecl(isDefinition(), unless(isLambdaCallOperator()), hasUseOfAccelerator(usesAccelerator()))
                      .bind("function");
  std::vector<const clang::FunctionDecl*> Result;
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!SM.isWrittenInMainFile(SM.getExpansionLoc(TopLevel->getLocation())))
      continue;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_IgnoreUnlessSpelledInSource, decl(eachOf(Function, forEachDescendant(Function)))),
               *TopLevel, Context))
      Result.push_back(Found.getNodeAs<clang::FunctionDecl>("function"));
  }
  return Result;
}

/// `main`, defined in the main file.
const clang::FunctionDecl* mainFunction(clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (const auto* Function = llvm::dyn_cast<clang::FunctionDecl>(TopLevel))
      if (Function->isMain() && Function->hasBody() && SM.isWrittenInMainFile(SM.getExpansionLoc(Function->getLocation())))
        return Function;
  return nullptr;
}

/// True when the function constructs the accelerator rather than reaching the one `main` made: it is `main`,
/// or it runs backward in a file without `main`.
bool ownsAccelerator(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  if (Function.isMain())
    return true;
  if (mainFunction(Context))
    return false;
  return !match(stmt(hasDescendant(rewritableBackwardCall())), *Function.getBody(), Context).empty();
}

/// `main` when another function of the file reaches the accelerator through current().
AST_MATCHER(clang::FunctionDecl, isMainForOtherFunctions) {
  if (!Node.isMain())
    return false;
  for (const clang::FunctionDecl* User : functionsUsingAccelerator(Finder->getASTContext()))
    if (!User->isMain())
      return true;
  return false;
}

Stencil declarationText() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Function = Result.Nodes.getNodeAs<clang::FunctionDecl>(FunctionId);
    return ownsAccelerator(*Function, *Result.Context) ? "accelerate::Accelerator accelerator;"
                                                        : "auto& accelerator = accelerate::Accelerator::current();";
  });
}

Stencil explainPlacement() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Function = Result.Nodes.getNodeAs<clang::FunctionDecl>(FunctionId);
    std::string Why = "one accelerate::Accelerator holds the process group, device and precision settings that "
                      "the rewritten calls use; ";
    std::string Name = Function->getQualifiedNameAsString();
    if (Function->isMain())
      return Why + "it is declared at the top of main, where training starts";
    if (!ownsAccelerator(*Function, *Result.Context))
      return Why + llvm::formatv("'{0}' reaches the one main declared through accelerate::Accelerator::current()",
                                 Name)
                       .str();
    return Why + llvm::formatv("this file has no main, so it is declared at the top of '{0}', whose body calls "
                               "backward; if '{0}' runs more than once, move the declaration to where training "
                               "starts and pass the accelerator to '{0}' by reference",
                               Name)
                     .str();
  });
}

} // namespace

PassRule acceleratorPass() {
  auto NeedsAccelerator =
      functionDecl(isDefinition(), unless(isLambdaCallOperator()),
                   hasBody(compoundStmt(unless(isInMacroExpansion())).bind(BodyId)),
                   anyOf(hasUseOfAccelerator(usesAccelerator()), isMainForOtherFunctions()),
                   unless(fileHasAccelerator()))
          .bind(FunctionId);
  return makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, NeedsAccelerator),
                  {insertAtBlockStart(BodyId, declarationText()),
                   addInclude("accelerate/accelerate.h", IncludeFormat::Angled)},
                  explainPlacement());
}

} // namespace accelerate::passes
