// tidy/RuleCheck.cpp: a clang-tidy check over one lint check (see RuleCheck.h).
#include "tidy/RuleCheck.h"

#include "lint/Run.h"
#include "tidy/FixIts.h"

#include "clang/AST/ASTContext.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Tooling/Core/Replacement.h"
#include "llvm/Support/Error.h"

#include <utility>

namespace accelerate::tidy {

RuleCheck::RuleCheck(const lint::LintCheck& Check, llvm::StringRef Name,
                     clang::tidy::ClangTidyContext* Context)
    : ClangTidyCheck(Name, Context), Check(Check) {}

void RuleCheck::registerMatchers(clang::ast_matchers::MatchFinder* Finder) {
  Finder->addMatcher(clang::ast_matchers::translationUnitDecl().bind("unit"), this);
}

void RuleCheck::check(const clang::ast_matchers::MatchFinder::MatchResult& Result) {
  Unit = Result.Context;
}

void RuleCheck::onEndOfTranslationUnit() {
  clang::ASTContext* Context = std::exchange(Unit, nullptr);
  if (!Context)
    return;
  const clang::SourceManager& SM = Context->getSourceManager();
  clang::SourceLocation FileStart = SM.getLocForStartOfFile(SM.getMainFileID());
  llvm::StringRef Code = SM.getBufferData(SM.getMainFileID());
  for (const lint::LintFinding& Finding : lint::runLintChecks(*Context, Check)) {
    auto Diagnostic = diag(FileStart.getLocWithOffset(Finding.Offset), "%0",
                           Finding.IsNote ? clang::DiagnosticIDs::Note : clang::DiagnosticIDs::Warning)
                      << Finding.Message;
    if (!Finding.Fix)
      continue;
    clang::tooling::Replacements Edits;
    for (const clang::tooling::Replacement& Edit : *Finding.Fix)
      if (llvm::Error Conflict = Edits.add(Edit)) // None: runLintChecks made them a Replacements first.
        llvm::consumeError(std::move(Conflict));
    for (const clang::tooling::Replacement& Fix : asFixIts(Edits, Code)) {
      clang::SourceLocation Begin = FileStart.getLocWithOffset(Fix.getOffset());
      if (Fix.getLength() == 0)
        Diagnostic << clang::FixItHint::CreateInsertion(Begin, Fix.getReplacementText());
      else
        Diagnostic << clang::FixItHint::CreateReplacement(
            clang::CharSourceRange::getCharRange(Begin, Begin.getLocWithOffset(Fix.getLength())),
            Fix.getReplacementText());
    }
  }
}

} // namespace accelerate::tidy
