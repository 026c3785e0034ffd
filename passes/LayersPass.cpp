// passes/LayersPass.cpp: the rule that swaps torch::nn::Linear for accelerate::nn::Linear in user modules.
#include "passes/Pass.h"

#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// In the modules the user defines (classes derived from `torch::nn::Module` in the rewritten file),
/// `torch::nn::Linear` becomes `accelerate::nn::Linear`, a drop-in with the same options and parameter names
/// that fuses the bias into the GEMM and runs fp8 under that precision (shared/DESIGN.md §3.9):
///
///   torch::nn::Linear fc1{nullptr};        →  accelerate::nn::Linear fc1{nullptr};
///   register_module("fc1", torch::nn::Linear(784, 512))
///                                          →  register_module("fc1", accelerate::nn::Linear(784, 512))
///
/// Modules the user does not define (a TorchScript model, libtorch's own) are left alone. The pass is off
/// unless named in `--passes=`: the member's type changes, so code elsewhere that takes it as a
/// `torch::nn::Linear` would have to change too (the rewrite is compiled before it is written, so such a file
/// is left as it is, with the compiler's message).
PassRule layersPass();

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

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo layersPassInfo() {
  return {"layers",
          layersPass,
          "`torch::nn::Linear` in the user's modules becomes `accelerate::nn::Linear` (off by default: the "
          "member's type "
          "changes, so code that takes it as a torch::nn::Linear must change too)",
          /*OnByDefault=*/false,
          /*WhenNothingFound=*/{},
          /*LeavesAlone=*/"modules the user does not define",
          /*TurnedOnBy=*/"`--enable=layers`"};
}

} // namespace accelerate::passes
