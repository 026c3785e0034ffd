// passes/DistributedPass.cpp: the note on functions that already distribute their work.
#include "passes/DistributedPass.h"

#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {
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

} // namespace accelerate::passes
