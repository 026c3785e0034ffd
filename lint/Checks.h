// lint/Checks.h: the lint checks for code distributed by hand: each is a Clang Transformer rule (a
// passes::PassRule whose metadata is the message, with an edit where the fix is safe, a noopEdit where there
// is none) that the clang-tidy module registers as `accelerate-<Name>` and the language server runs too.
#ifndef ACCELERATE_LINT_CHECKS_H
#define ACCELERATE_LINT_CHECKS_H

#include "passes/Registry.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace accelerate::lint {

/// One row of the table of lint checks, the one list of them: the clang-tidy module registers each as
/// `accelerate-<Name>`. Adding a check: write its rule in lint/Checks.cpp, add its row there, a test
/// test/tidy/<Name>.cpp and a paragraph in docs/ide.md ("Lint checks").
struct LintCheck {
  llvm::StringRef Name;           ///< The check's name without the `accelerate-` prefix, e.g. "raw-backward".
  passes::PassRule (*MakeRule)(); ///< Builds the check's rule.
  llvm::StringRef Summary;        ///< One line saying what the check finds.
};

/// All lint checks.
llvm::ArrayRef<LintCheck> allLintChecks();

} // namespace accelerate::lint

#endif // ACCELERATE_LINT_CHECKS_H
