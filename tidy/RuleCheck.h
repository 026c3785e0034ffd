// tidy/RuleCheck.h: a clang-tidy check that runs one Clang Transformer rule (a passes::PassRule): a warning
// with the rule's message at each match in the main file, and the rule's edits as its fix.
#ifndef ACCELERATE_TIDY_RULECHECK_H
#define ACCELERATE_TIDY_RULECHECK_H

#include "passes/Registry.h"

#include "clang-tidy/ClangTidyCheck.h"

namespace accelerate::tidy {

/// Runs `Rule` over what clang-tidy parsed, once clang-tidy's own traversal is over, over the user's code
/// only (rewriter::userDeclarations(), as the rewrite does): matching every node of the library headers would
/// cost each check about a second of a libtorch file. Each match in the main file is a warning whose text is
/// the selected case's metadata; a case whose metadata starts with passes::NoteMarker is a note. The case's
/// edits are the warning's fix-its, unless one of them cannot be made in the main file (a macro expansion,
/// another file): then the warning comes without a fix. A noopEdit is no fix-it.
class RuleCheck : public clang::tidy::ClangTidyCheck {
public:
  RuleCheck(passes::PassRule Rule, llvm::StringRef Name, clang::tidy::ClangTidyContext* Context);

  void registerMatchers(clang::ast_matchers::MatchFinder* Finder) override;
  /// Only remembers the translation unit.
  void check(const clang::ast_matchers::MatchFinder::MatchResult& Result) override;
  void onEndOfTranslationUnit() override;

private:
  /// One match of the rule: its warning and fix.
  void report(const clang::ast_matchers::MatchFinder::MatchResult& Result);

  passes::PassRule Rule;
  clang::ASTContext* Unit = nullptr;
};

} // namespace accelerate::tidy

#endif // ACCELERATE_TIDY_RULECHECK_H
