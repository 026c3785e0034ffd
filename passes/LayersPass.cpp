// passes/LayersPass.cpp: the rule that swaps torch::nn::Linear for accelerate::nn::Linear in user modules.
#include "passes/LayersPass.h"

#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {
namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char TypeId[] = "type";

AST_MATCHER(clang::TypeLoc, isInRewrittenFileTypeLoc) {
  const clang::SourceManager& SM = Finder->getASTContext().getSourceManager();
  return Node.getBeginLoc().isValid() && !Node.getBeginLoc().isMacroID() &&
         isInRewrittenFile(SM, Node.getBeginLoc());
}

/// `torch::nn::Linear` as spelled in a user module: a member's type, or a construction in its methods.
TypeLocMatcher linearInUserModule() {
  auto Linear = loc(qualType(hasDeclaration(cxxRecordDecl(hasName("::torch::nn::Linear")))));
  auto UserModule = isModuleClass();
  // `torch::nn::Linear` is an elaborated type around the record `Linear`: take the outer one, once.
  return typeLoc(Linear, unless(qualifiedTypeLoc()), unless(hasParent(elaboratedTypeLoc())),
                 isInRewrittenFileTypeLoc(), hasAncestor(UserModule))
      .bind(TypeId);
}

} // namespace

PassRule layersPass() {
  return makeRule(
      traverse(clang::TK_IgnoreUnlessSpelledInSource, linearInUserModule()),
      {changeTo(node(TypeId), cat("accelerate::nn::Linear")),
       addInclude("accelerate/accelerate.h", IncludeFormat::Angled)},
      cat("accelerate::nn::Linear has torch::nn::Linear's options and parameter names, fuses the bias "
          "into the GEMM (at::linear) and runs fp8 under mixed_precision fp8"));
}

} // namespace accelerate::passes
