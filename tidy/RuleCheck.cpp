// tidy/RuleCheck.cpp: a clang-tidy check over one Clang Transformer rule (see RuleCheck.h).
#include "tidy/RuleCheck.h"

#include "passes/TrainingCode.h"
#include "rewriter/PassRunner.h"
#include "tidy/FixIts.h"

#include "clang/AST/ASTContext.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Core/Replacement.h"
#include "clang/Tooling/Transformer/RewriteRule.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace accelerate::tidy {

namespace transformer = clang::transformer;

RuleCheck::RuleCheck(passes::PassRule Rule, llvm::StringRef Name, clang::tidy::ClangTidyContext* Context)
    : ClangTidyCheck(Name, Context), Rule(std::move(Rule)) {}

void RuleCheck::registerMatchers(clang::ast_matchers::MatchFinder* Finder) {
  Finder->addMatcher(clang::ast_matchers::translationUnitDecl().bind("unit"), this);
}

void RuleCheck::check(const clang::ast_matchers::MatchFinder::MatchResult& Result) {
  Unit = Result.Context;
}

namespace {
/// Hands the rule's matches to RuleCheck::report.
class Matches : public clang::ast_matchers::MatchFinder::MatchCallback {
public:
  explicit Matches(std::function<void(const clang::ast_matchers::MatchFinder::MatchResult&)> Report)
      : Report(std::move(Report)) {}
  void run(const clang::ast_matchers::MatchFinder::MatchResult& Result) override { Report(Result); }

private:
  std::function<void(const clang::ast_matchers::MatchFinder::MatchResult&)> Report;
};
} // namespace

void RuleCheck::onEndOfTranslationUnit() {
  clang::ASTContext* Context = std::exchange(Unit, nullptr);
  if (!Context || Context->getDiagnostics().hasErrorOccurred())
    return; // What a file that does not compile means is not known.
  Matches Callback([this](const clang::ast_matchers::MatchFinder::MatchResult& Result) { report(Result); });
  clang::ast_matchers::MatchFinder Finder;
  for (const clang::ast_matchers::internal::DynTypedMatcher& Matcher :
       transformer::detail::buildMatchers(Rule))
    Finder.addDynamicMatcher(Matcher, &Callback);
  std::vector<clang::Decl*> Scope = Context->getTraversalScope();
  Context->setTraversalScope(rewriter::userDeclarations(*Context));
  passes::forgetTrainingCodeFacts(); // The facts module's caches hold nodes of the last AST matched.
  Finder.matchAST(*Context);
  passes::forgetTrainingCodeFacts();
  Context->setTraversalScope(Scope);
}

void RuleCheck::report(const clang::ast_matchers::MatchFinder::MatchResult& Result) {
  const clang::SourceManager& SM = *Result.SourceManager;
  const clang::LangOptions& LangOpts = Result.Context->getLangOpts();
  clang::SourceLocation At = SM.getExpansionLoc(transformer::detail::getRuleMatchLoc(Result));
  if (!SM.isWrittenInMainFile(At))
    return;
  size_t Case = transformer::detail::findSelectedCase(Result, Rule);
  llvm::Expected<llvm::SmallVector<transformer::Edit, 1>> Edits = Rule.Cases[Case].Edits(Result);
  llvm::Expected<std::string> Message = Rule.Metadata[Case]->eval(Result);
  if (!Message) {
    diag(At, "this check failed here: %0") << llvm::toString(Message.takeError());
    if (!Edits)
      llvm::consumeError(Edits.takeError());
    return;
  }
  std::optional<clang::tooling::Replacements> Replacements;
  if (Edits) {
    // Transformer drops the edits whose range maps to no single place in the file: then no fix.
    Replacements.emplace();
    bool HasEdit = false;
    llvm::StringRef MainFile = SM.getFileEntryRefForID(SM.getMainFileID())->getName();
    for (const transformer::Edit& Edit : *Edits) {
      if (Edit.Kind == transformer::EditKind::AddInclude) {
        // At the top of the file, unless the file already includes it.
        llvm::StringRef Header = Edit.Replacement;
        std::string Line =
            "#include " + (Header.starts_with("<") ? Header.str() : "\"" + Header.str() + "\"");
        if (SM.getBufferData(SM.getMainFileID()).contains(Line))
          continue;
        if (llvm::Error Conflict =
                Replacements->add(clang::tooling::Replacement(MainFile, 0, 0, Line + "\n"))) {
          llvm::consumeError(std::move(Conflict));
          Replacements.reset();
          break;
        }
        HasEdit = true;
        continue;
      }
      clang::CharSourceRange Range = clang::Lexer::makeFileCharRange(Edit.Range, SM, LangOpts);
      if (Range.isInvalid() || !SM.isWrittenInMainFile(Range.getBegin())) {
        Replacements.reset();
        break;
      }
      unsigned Begin = SM.getFileOffset(Range.getBegin()), End = SM.getFileOffset(Range.getEnd());
      if (Begin == End && Edit.Replacement.empty())
        continue; // A noopEdit only anchors the message.
      if (llvm::Error Conflict = Replacements->add(
              clang::tooling::Replacement(MainFile, Begin, End - Begin, Edit.Replacement))) {
        llvm::consumeError(std::move(Conflict));
        Replacements.reset();
        break;
      }
      HasEdit = true;
    }
    if (!HasEdit)
      Replacements.reset();
  } else {
    llvm::consumeError(Edits.takeError());
  }

  llvm::StringRef Text = *Message;
  bool IsNote = Text.consume_front(passes::NoteMarker);
  auto Diagnostic = diag(At, "%0", IsNote ? clang::DiagnosticIDs::Note : clang::DiagnosticIDs::Warning)
                    << Text;
  if (!Replacements)
    return;
  clang::SourceLocation FileStart = SM.getLocForStartOfFile(SM.getMainFileID());
  for (const clang::tooling::Replacement& Fix :
       asFixIts(*Replacements, SM.getBufferData(SM.getMainFileID()))) {
    clang::SourceLocation Begin = FileStart.getLocWithOffset(Fix.getOffset());
    if (Fix.getLength() == 0)
      Diagnostic << clang::FixItHint::CreateInsertion(Begin, Fix.getReplacementText());
    else
      Diagnostic << clang::FixItHint::CreateReplacement(
          clang::CharSourceRange::getCharRange(Begin, Begin.getLocWithOffset(Fix.getLength())),
          Fix.getReplacementText());
  }
}

} // namespace accelerate::tidy
