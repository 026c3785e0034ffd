// passes/ClipPass.cpp: the rule that routes gradient clipping through the accelerator.
#include "passes/Pass.h"

#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// Rewrites libtorch's gradient clipping into the accelerator's, which clips the synchronised gradients (and
/// unscales them first under fp16) on the device, without a host synchronisation:
///
///   torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
///     →  accelerator.clip_grad_norm_(model->parameters(), 1.0);
///   double norm = torch::nn::utils::clip_grad_norm_(params, 0.5, 2);
///     →  double norm = accelerator.clip_grad_norm_(params, 0.5, 2).item<double>();
///   torch::nn::utils::clip_grad_value_(model->parameters(), 0.1);
///     →  accelerator.clip_grad_value_(model->parameters(), 0.1);
///
/// The accelerator's clip_grad_norm_ returns the norm as a tensor; `.item<double>()` is added where the value
/// is used (which synchronises, as libtorch's did). A single tensor argument becomes `{tensor}`. A call with
/// `error_if_nonfinite` is reported and left as it is.
PassRule clipPass();

/// Matches the calls clipPass() rewrites (they use `accelerator`).
clang::ast_matchers::StatementMatcher clipCall();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char CallId[] = "call";
constexpr char CalleeId[] = "callee";
constexpr char ParametersId[] = "parameters";
constexpr char SingleTensorId[] = "single";
constexpr char UsedId[] = "used";

/// The call's value is used: it is not a statement of its own nor cast to void.
AST_MATCHER(clang::Expr, valueIsUsed) {
  clang::ASTContext& Context = Finder->getASTContext();
  clang::DynTypedNodeList Parents = Context.getParents(Node);
  while (!Parents.empty() &&
         (Parents[0].get<clang::ExprWithCleanups>() || Parents[0].get<clang::ImplicitCastExpr>() ||
          Parents[0].get<clang::ParenExpr>()))
    Parents = Context.getParents(Parents[0]);
  if (Parents.empty())
    return false;
  if (const auto* Cast = Parents[0].get<clang::CStyleCastExpr>())
    return !Cast->getType()->isVoidType();
  if (const auto* Cast = Parents[0].get<clang::CXXStaticCastExpr>())
    return !Cast->getType()->isVoidType();
  const auto* Statement = Parents[0].get<clang::Stmt>();
  return !Statement || llvm::isa<clang::Expr>(Statement) || llvm::isa<clang::DeclStmt>(Statement) ||
         llvm::isa<clang::ReturnStmt>(Statement);
}

auto clipFunction() {
  return functionDecl(
      hasAnyName("::torch::nn::utils::clip_grad_norm_", "::torch::nn::utils::clip_grad_value_"));
}

StatementMatcher clipCallWith(clang::ast_matchers::internal::Matcher<clang::CallExpr> Extra) {
  auto SingleTensor = hasParameter(0, parmVarDecl(hasType(cxxRecordDecl(hasName("::at::Tensor")))));
  return callExpr(callee(expr(ignoringImplicit(declRefExpr(to(clipFunction())).bind(CalleeId)))),
                  optionally(callee(functionDecl(SingleTensor).bind(SingleTensorId))),
                  hasArgument(0, expr().bind(ParametersId)), optionally(expr(valueIsUsed()).bind(UsedId)),
                  Extra, unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()))
      .bind(CallId);
}

/// error_if_nonfinite, libtorch's fourth argument, has no counterpart in the accelerator.
AST_MATCHER(clang::CallExpr, hasNonfiniteCheck) {
  return Node.getNumArgs() > 3 && !llvm::isa<clang::CXXDefaultArgExpr>(Node.getArg(3));
}

} // namespace

StatementMatcher clipCall() {
  return clipCallWith(unless(hasNonfiniteCheck()));
}

PassRule clipPass() {
  auto Name = run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Callee = Result.Nodes.getNodeAs<clang::DeclRefExpr>(CalleeId);
    return "accelerator." + Callee->getDecl()->getNameAsString();
  });
  return applyFirst<std::string>({
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, clipCall()),
          flatten(changeTo(node(CalleeId), Name),
                  ifBound(SingleTensorId, changeTo(node(ParametersId), cat("{", node(ParametersId), "}"))),
                  ifBound(UsedId, insertAfter(node(CallId), cat(".item<double>()")))),
          cat("accelerator.", run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
                return Result.Nodes.getNodeAs<clang::DeclRefExpr>(CalleeId)->getDecl()->getNameAsString();
              }),
              "() clips the gradients after they are synchronised (and unscaled under fp16), on the "
              "device; the norm comes back as a tensor")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, clipCallWith(hasNonfiniteCheck())),
               noopEdit(node(CallId)),
               cat("gradient clipping not rewritten: accelerator.clip_grad_norm_ has no error_if_nonfinite; "
                   "drop that argument and check the returned norm with torch::isfinite instead")),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo clipPassInfo() {
  return {"clip",
          clipPass,
          "`torch::nn::utils::clip_grad_norm_/value_` become the accelerator's",
          /*OnByDefault=*/true,
          /*WhenNothingFound=*/{},
          /*LeavesAlone=*/"calls with `error_if_nonfinite`",
          /*TurnedOnBy=*/{},
          /*UsesAccelerator=*/clipCall};
}

} // namespace accelerate::passes
