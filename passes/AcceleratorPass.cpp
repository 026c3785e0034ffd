// passes/AcceleratorPass.cpp: the rule that declares `accelerate::Accelerator accelerator;` where training
// runs.
#include "passes/AcceleratorPass.h"

#include "passes/BackwardPass.h"
#include "passes/Insertion.h"
#include "passes/Macros.h"

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

Stencil explainPlacement() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Function = Result.Nodes.getNodeAs<clang::FunctionDecl>(FunctionId);
    std::string Why =
        "one accelerate::Accelerator holds the process group, device and precision settings that "
        "accelerator.backward() and the other rewritten calls use; ";
    if (Function->isMain())
      return Why + "it is declared at the top of main, whose body calls backward";
    return Why + llvm::formatv("it is declared at the top of '{0}', whose body calls backward; if '{0}' runs "
                               "more than once, move the declaration to where training starts and pass the "
                               "accelerator to '{0}' by reference",
                               Function->getQualifiedNameAsString())
                     .str();
  });
}

} // namespace

PassRule acceleratorPass() {
  auto OwnsTrainingStep = functionDecl(isDefinition(), unless(isLambdaCallOperator()),
                                       hasBody(compoundStmt(unless(isInMacroExpansion())).bind(BodyId)),
                                       hasDescendant(rewritableBackwardCall()), unless(fileHasAccelerator()))
                              .bind(FunctionId);
  return makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, OwnsTrainingStep),
                  {insertAtBlockStart(BodyId, "accelerate::Accelerator accelerator;"),
                   addInclude("accelerate/accelerate.h", IncludeFormat::Angled)},
                  explainPlacement());
}

} // namespace accelerate::passes
