// passes/Templates.h: how passes rewrite code in templates, where a call's meaning depends on the
// instantiation.
#ifndef ACCELERATE_PASSES_TEMPLATES_H
#define ACCELERATE_PASSES_TEMPLATES_H

#include "clang/ASTMatchers/ASTMatchers.h"

#include <functional>
#include <utility>
#include <vector>

namespace accelerate::passes {

/// Passes rewrite a template as written, so an edit must hold for every instantiation. A call that the
/// template spells with a dependent type (`loss.backward()` with `template <class T> void step(T& loss)`) has
/// no callee in the template; this finds what each instantiation made of it.
///
/// True when `Written` (a node in a function template, or in a member function of a class template) has at
/// least one instantiation in this translation unit and `Check` holds for the node each instantiation made of
/// it (the node with the same source range). False when nothing instantiates it: then nobody can tell.
bool holdsInEveryInstantiation(const clang::Stmt& Written, clang::ASTContext& Context,
                               const std::function<bool(const clang::Stmt&)>& Check);

/// What each instantiation of the template around `Written` made of it: (instantiation, node with the same
/// source range, or null where none has it). Empty when nothing instantiates it, or `Written` is in no
/// function.
std::vector<std::pair<const clang::FunctionDecl*, const clang::Stmt*>>
instantiatedNodes(const clang::Stmt& Written, clang::ASTContext& Context);

/// Matches a call written in a template with a dependent callee: `loss.backward()` on a `T& loss`.
clang::ast_matchers::internal::Matcher<clang::CallExpr> isDependentCall();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_TEMPLATES_H
