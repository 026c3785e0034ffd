// passes/DistributedPass.cpp: the note on functions that already distribute their work.
#include "passes/Pass.h"

#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// Rewrites nothing. A function that calls the runtime (`accelerate::...`) or c10d itself (a loop that
/// all-reduces its gradients by hand) is already distributed: every pass leaves it alone (see
/// isInDistributedFunction() in TrainingCode.h). When such a function still has code a pass would otherwise
/// rewrite (a tensor `backward()`, a `make_data_loader`), this pass notes once that it was left alone on
/// purpose.
PassRule distributedPass();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char FunctionId[] = "function";

AST_MATCHER(clang::FunctionDecl, isDistributed) {
  return isDistributedFunction(Node, Finder->getASTContext());
}

} // namespace

PassRule distributedPass() {
  auto TensorBackward = cxxMemberCallExpr(callee(
      cxxMethodDecl(hasName("backward"), ofClass(cxxRecordDecl(isSameOrDerivedFrom("::at::TensorBase"))))));
  auto Loader = callExpr(callee(functionDecl(hasName("::torch::data::make_data_loader"))));
  auto LeftAlone = functionDecl(isDefinition(), isExpansionInRewrittenFile(), isDistributed(),
                                hasBody(hasDescendant(stmt(anyOf(TensorBackward, Loader)))))
                       .bind(FunctionId);
  return makeRule(
      traverse(clang::TK_IgnoreUnlessSpelledInSource, LeftAlone), noopEdit(name(FunctionId)),
      cat(std::string(NoteMarker), "'", name(FunctionId),
          "' left alone: it already calls the runtime or c10d, so its training step is taken to be "
          "distributed by hand"));
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo distributedPassInfo() {
  return {"distributed",
          distributedPass,
          "notes functions left alone because they already use the runtime or c10d",
          /*OnByDefault=*/true,
          /*WhenNothingFound=*/{},
          /*LeavesAlone=*/"functions that already call the runtime or c10d (note)"};
}

} // namespace accelerate::passes
