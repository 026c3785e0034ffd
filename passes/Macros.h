// passes/Macros.h: how passes recognise, and explain, code that comes out of a macro expansion.
#ifndef ACCELERATE_PASSES_MACROS_H
#define ACCELERATE_PASSES_MACROS_H

#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Basic/SourceLocation.h"

#include <string>

namespace clang {
class LangOptions;
class SourceManager;
} // namespace clang

namespace accelerate::passes {

/// Matches a statement whose first or last token comes from a macro expansion (a macro body or a macro
/// argument). Passes never rewrite such code: the same text may expand elsewhere, and an edit would have to
/// change the macro, not the call site. They report it instead, with describeMacroOrigin().
clang::ast_matchers::internal::Matcher<clang::Stmt> isInMacroExpansion();

/// Says, for a warning, which macro the range comes from and how:
/// "it is written in the body of macro 'STEP'", "it is an argument of macro 'CHECK'".
std::string describeMacroOrigin(clang::SourceRange Range, const clang::SourceManager& SM,
                                const clang::LangOptions& LangOpts);

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_MACROS_H
