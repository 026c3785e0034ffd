// tidy/RuleCheck.h: a clang-tidy check that runs one lint check (a row of lint::allLintChecks()): a warning
// with the check's message at each of its findings in the main file, and the finding's fix as its fix-its.
#ifndef ACCELERATE_TIDY_RULECHECK_H
#define ACCELERATE_TIDY_RULECHECK_H

#include "lint/Checks.h"

#include "clang-tidy/ClangTidyCheck.h"

namespace accelerate::tidy {

/// Runs `Check` through lint::runLintChecks over what clang-tidy parsed, once clang-tidy's own traversal is
/// over: over the user's code only (rewriter::userDeclarations(), as the rewrite does), since matching every
/// node of the library headers would cost each check about a second of a libtorch file. Each finding is a
/// warning, or a note when the check says so, with the finding's fix, when it has one, as its fix-its.
class RuleCheck : public clang::tidy::ClangTidyCheck {
public:
  RuleCheck(const lint::LintCheck& Check, llvm::StringRef Name, clang::tidy::ClangTidyContext* Context);

  void registerMatchers(clang::ast_matchers::MatchFinder* Finder) override;
  /// Only remembers the translation unit.
  void check(const clang::ast_matchers::MatchFinder::MatchResult& Result) override;
  void onEndOfTranslationUnit() override;

private:
  lint::LintCheck Check;
  clang::ASTContext* Unit = nullptr;
};

} // namespace accelerate::tidy

#endif // ACCELERATE_TIDY_RULECHECK_H
