// passes/BackwardPass.cpp: the rule that routes tensor backward calls through the accelerator.
#include "passes/Pass.h"

#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/Expr.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// Rewrites every call of `at::Tensor::backward` in the user's code, on any tensor expression, into a call
/// of the accelerator, keeping the arguments as written:
///
///   loss.backward();               →  accelerator.backward(loss);
///   (a + b).backward(grad, true);  →  accelerator.backward(a + b, grad, true);
///   loss_ptr->backward();          →  accelerator.backward(*loss_ptr);
///
/// A call that comes from a macro expansion is left as it is, with a warning naming the macro. Calls of
/// `accelerator.backward` are not tensor calls, so running the pass again changes nothing.
///
/// Only files that train (they construct, take or step an optimizer: see TrainingCode.h) are rewritten, and
/// functions that already use the runtime are left alone. In a template, a call whose tensor is dependent is
/// rewritten when every instantiation calls `at::Tensor::backward`, and reported otherwise.
PassRule backwardPass();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char CallId[] = "call";
constexpr char TensorId[] = "tensor";
constexpr char FirstArgId[] = "firstArg";
constexpr char DependentCalleeId[] = "dependentCallee";

/// The tensor as the first argument of accelerator.backward: `*p` for a (smart) pointer, parenthesised when
/// it is a comma expression, which would otherwise become two arguments.
Stencil tensorArgument() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    // In a template, `p->backward()` on a dependent `p` has no type to look at: the arrow says it.
    const auto* Dependent = Result.Nodes.getNodeAs<clang::CXXDependentScopeMemberExpr>(DependentCalleeId);
    auto Text = Dependent ? cat(Dependent->isArrow() ? "*" : "", node(TensorId))->eval(Result)
                          : maybeDeref(TensorId)->eval(Result);
    if (!Text)
      return Text.takeError();
    const auto* Tensor = Result.Nodes.getNodeAs<clang::Expr>(TensorId)->IgnoreParenImpCasts();
    bool IsComma = false;
    if (const auto* Binary = llvm::dyn_cast<clang::BinaryOperator>(Tensor))
      IsComma = Binary->isCommaOp();
    else if (const auto* Overloaded = llvm::dyn_cast<clang::CXXOperatorCallExpr>(Tensor))
      IsComma = Overloaded->getOperator() == clang::OO_Comma;
    return IsComma ? "(" + *Text + ")" : *Text;
  });
}

/// `, <arguments as written>` when the call has explicit arguments; just `,` when they start on a new line,
/// so no trailing space is left behind.
Stencil trailingArguments() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    if (!Result.Nodes.getNodeAs<clang::Expr>(FirstArgId))
      return "";
    auto Arguments = callArgs(CallId)(Result);
    if (!Arguments)
      return Arguments.takeError();
    llvm::StringRef Text =
        clang::Lexer::getSourceText(*Arguments, *Result.SourceManager, Result.Context->getLangOpts());
    return (Text.starts_with("\n") || Text.starts_with("\r\n") ? "," : ", ") + Text.str();
  });
}

/// A dependentBackwardCall(), with its tensor, callee, first argument and call bound for the rewrite.
StatementMatcher boundDependentBackwardCall() {
  return callExpr(dependentBackwardCall(),
                  callee(cxxDependentScopeMemberExpr(hasObjectExpression(expr().bind(TensorId)))
                             .bind(DependentCalleeId)),
                  optionally(hasArgument(0, expr().bind(FirstArgId))))
      .bind(CallId);
}

Stencil macroWarning() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Call = Result.Nodes.getNodeAs<clang::Expr>(CallId);
    return "backward call in a macro expansion not rewritten: " +
           describeMacroOrigin(Call->getSourceRange(), *Result.SourceManager, Result.Context->getLangOpts()) +
           "; call accelerator.backward(<tensor>, ...) there by hand";
  });
}

/// `a + b + ...` for the losses of the `torch::autograd::backward({a, b, ...})` bound to CallId.
Stencil summedLosses() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Call = Result.Nodes.getNodeAs<clang::CallExpr>(CallId);
    std::string Sum;
    for (const clang::Expr* Loss : autogradBackwardLosses(*Call, *Result.Context)) {
      std::string Text =
          clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(Loss->getSourceRange()),
                                      *Result.SourceManager, Result.Context->getLangOpts())
              .str();
      // A binary or conditional expression (`a * 0.1`, `x ? a : b`) is parenthesised within the sum.
      const clang::Expr* Bare = Loss->IgnoreImpCasts();
      const auto* Operator = llvm::dyn_cast<clang::CXXOperatorCallExpr>(Bare);
      const bool Compound = llvm::isa<clang::BinaryOperator, clang::AbstractConditionalOperator>(Bare) ||
                            (Operator && Operator->isInfixBinaryOp());
      Sum += (Sum.empty() ? "" : " + ") + (Compound ? "(" + Text + ")" : Text);
    }
    return Sum;
  });
}

AST_MATCHER(clang::CallExpr, backwardOfLossList) {
  return !autogradBackwardLosses(Node, Finder->getASTContext()).empty();
}

} // namespace

PassRule backwardPass() {
  auto Call =
      cxxMemberCallExpr(tensorBackwardCall(), on(expr().bind(TensorId)),
                        optionally(hasArgument(0, expr(unless(cxxDefaultArgExpr())).bind(FirstArgId))))
          .bind(CallId);
  auto Replacement = cat("accelerator.backward(", tensorArgument(), trailingArguments(), ")");
  auto InScope = allOf(isInTrainingFile(), unless(isInDistributedFunction()));
  auto Why = cat("accelerator.backward() runs the backward pass and also scales the loss for mixed precision "
                 "and gradient accumulation, and synchronises gradients across processes");
  auto Autograd = callExpr(autogradBackwardCall()).bind(CallId);
  return applyFirst<std::string>({
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource,
                   stmt(anyOf(Call, boundDependentBackwardCall(), Autograd), isInMacroExpansion(), InScope)),
          noopEdit(expansion(node(CallId))), macroWarning()),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, callExpr(Autograd, backwardOfLossList(), InScope)),
          changeTo(node(CallId), cat("accelerator.backward(", summedLosses(), ")")),
          cat("torch::autograd::backward of a list of one-element tensors computes the gradients of their "
              "sum, so it becomes accelerator.backward of the sum, which also scales the loss for mixed "
              "precision and gradient accumulation, and synchronises gradients across processes")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, callExpr(Autograd, InScope)),
          noopEdit(node(CallId)),
          cat("torch::autograd::backward not rewritten: it is given gradients or other arguments (or its "
              "tensors are not a braced list), and accelerator.backward takes one loss; without it the "
              "gradients are not synchronised across processes. Call accelerator.backward(loss, gradient, "
              "retain_graph) by hand, with the losses summed when their gradients are implicit")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource,
                   callExpr(boundDependentBackwardCall(), isTensorBackwardInEveryInstantiation(), InScope)),
          changeTo(node(CallId), Replacement), Why),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, callExpr(boundDependentBackwardCall(), InScope)),
          noopEdit(expansion(node(CallId))),
          cat("backward call in a template not rewritten: the tensor's type depends on a template "
              "parameter, and not every instantiation of the template calls at::Tensor::backward; call "
              "accelerator.backward(<tensor>, ...) there by hand")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(Call, InScope)),
               changeTo(node(CallId), Replacement), Why),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo backwardPassInfo() {
  return {"backward", backwardPass,
          "`X.backward(args...)` on a tensor becomes `accelerator.backward(X, args...)`; "
          "`torch::autograd::backward({a, b})` becomes `accelerator.backward(a + b)`",
          /*OnByDefault=*/true, /*WhenNothingFound=*/{},
          /*LeavesAlone=*/
          "calls from a macro; in a template, calls not every instantiation makes a tensor call; "
          "`torch::autograd::backward` given gradients",
          /*TurnedOnBy=*/{}, /*UsesAccelerator=*/trainingBackwardCall};
}

} // namespace accelerate::passes
