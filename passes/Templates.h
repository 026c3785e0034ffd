// passes/Templates.h: how passes recognise code they cannot rewrite because a template makes it dependent.
#ifndef ACCELERATE_PASSES_TEMPLATES_H
#define ACCELERATE_PASSES_TEMPLATES_H

#include "clang/ASTMatchers/ASTMatchers.h"

namespace accelerate::passes {

/// Matches a call in a template instantiation that the template, as written, spells as a dependent call:
/// `loss.backward()` with `template <class T> void step(T& loss)`. Passes rewrite templates as written (an
/// edit must hold for every instantiation), and there such a call has no resolved callee, so a pass matches
/// the instantiation (in TK_AsIs traversal) with this to warn about it instead.
clang::ast_matchers::internal::Matcher<clang::CallExpr> isDependentInTemplate();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_TEMPLATES_H
