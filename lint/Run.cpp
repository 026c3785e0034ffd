// lint/Run.cpp: the lint checks over a parsed file (see Run.h).
#include "lint/Run.h"

#include "passes/Registry.h"
#include "passes/TrainingCode.h"
#include "rewriter/PassRunner.h"

#include "clang/AST/ASTContext.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/RewriteRule.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <memory>
#include <tuple>
#include <utility>

namespace accelerate::lint {
namespace {

namespace transformer = clang::transformer;
using clang::ast_matchers::MatchFinder;

/// A finding and the check that made it, for the order of the findings.
struct Found {
  size_t CheckIndex;
  LintFinding Finding;
};

/// The main file's replacements that make `Edits` (see Run.h), or none when the match has no safe fix.
std::optional<std::vector<clang::tooling::Replacement>>
mainFileFix(const llvm::SmallVectorImpl<transformer::Edit>& Edits, const clang::SourceManager& SM,
            const clang::LangOptions& LangOpts) {
  // Transformer drops the edits whose range maps to no single place in the file: then no edit is left, and
  // no fix.
  clang::tooling::Replacements Replacements;
  llvm::StringRef MainFile = SM.getFileEntryRefForID(SM.getMainFileID())->getName();
  llvm::StringRef Code = SM.getBufferData(SM.getMainFileID());
  for (const transformer::Edit& Edit : Edits) {
    std::optional<clang::tooling::Replacement> Replacement;
    if (Edit.Kind == transformer::EditKind::AddInclude) {
      // At the top of the file, unless the file already includes it.
      llvm::StringRef Header = Edit.Replacement;
      std::string Line = "#include " + (Header.starts_with("<") ? Header.str() : "\"" + Header.str() + "\"");
      if (Code.contains(Line))
        continue;
      Replacement.emplace(MainFile, 0, 0, Line + "\n");
    } else {
      clang::CharSourceRange Range = clang::Lexer::makeFileCharRange(Edit.Range, SM, LangOpts);
      if (Range.isInvalid() || !SM.isWrittenInMainFile(Range.getBegin()))
        return std::nullopt;
      unsigned Begin = SM.getFileOffset(Range.getBegin()), End = SM.getFileOffset(Range.getEnd());
      if (Begin == End && Edit.Replacement.empty())
        continue; // A noopEdit only anchors the message.
      Replacement.emplace(MainFile, Begin, End - Begin, Edit.Replacement);
    }
    if (llvm::Error Conflict = Replacements.add(*Replacement)) {
      llvm::consumeError(std::move(Conflict));
      return std::nullopt;
    }
  }
  if (Replacements.empty())
    return std::nullopt;
  return std::vector<clang::tooling::Replacement>(Replacements.begin(), Replacements.end());
}

/// Runs one check's rule on each of its matches and keeps those in the main file as findings.
class CheckCallback : public MatchFinder::MatchCallback {
public:
  CheckCallback(const LintCheck& Check, size_t CheckIndex, std::vector<Found>& Out)
      : Check(Check), CheckIndex(CheckIndex), Rule(Check.MakeRule()), Out(Out) {}

  void registerWith(MatchFinder& Finder) {
    for (const clang::ast_matchers::internal::DynTypedMatcher& Matcher :
         transformer::detail::buildMatchers(Rule))
      Finder.addDynamicMatcher(Matcher, this);
  }

  void run(const MatchFinder::MatchResult& Result) override {
    const clang::SourceManager& SM = *Result.SourceManager;
    clang::SourceLocation At = SM.getExpansionLoc(transformer::detail::getRuleMatchLoc(Result));
    if (!SM.isWrittenInMainFile(At))
      return;
    LintFinding Finding;
    Finding.Check = Check.Name.str();
    Finding.Offset = SM.getFileOffset(At);
    Finding.Line = SM.getExpansionLineNumber(At);
    Finding.Column = SM.getExpansionColumnNumber(At);

    size_t Case = transformer::detail::findSelectedCase(Result, Rule);
    llvm::Expected<llvm::SmallVector<transformer::Edit, 1>> Edits = Rule.Cases[Case].Edits(Result);
    llvm::Expected<std::string> Message = Rule.Metadata[Case]->eval(Result);
    if (!Message) {
      Finding.Message = "this check failed here: " + llvm::toString(Message.takeError());
      if (!Edits)
        llvm::consumeError(Edits.takeError());
      Out.push_back({CheckIndex, std::move(Finding)});
      return;
    }
    if (Edits)
      Finding.Fix = mainFileFix(*Edits, SM, Result.Context->getLangOpts());
    else
      llvm::consumeError(Edits.takeError());
    llvm::StringRef Text = *Message;
    Finding.IsNote = Text.consume_front(passes::NoteMarker);
    Finding.Message = Text.str();
    Out.push_back({CheckIndex, std::move(Finding)});
  }

private:
  const LintCheck& Check;
  size_t CheckIndex;
  passes::PassRule Rule;
  std::vector<Found>& Out;
};

} // namespace

std::vector<LintFinding> runLintChecks(clang::ASTContext& Context, llvm::ArrayRef<LintCheck> Checks) {
  if (Context.getDiagnostics().hasErrorOccurred())
    return {}; // What a file that does not compile means is not known.
  std::vector<Found> Out;
  MatchFinder Finder;
  std::vector<std::unique_ptr<CheckCallback>> Callbacks;
  for (const LintCheck& Check : Checks) {
    Callbacks.push_back(std::make_unique<CheckCallback>(Check, Callbacks.size(), Out));
    Callbacks.back()->registerWith(Finder);
  }
  std::vector<clang::Decl*> Scope = Context.getTraversalScope();
  Context.setTraversalScope(rewriter::userDeclarations(Context));
  passes::forgetTrainingCodeFacts(); // The facts module's caches hold nodes of the last AST matched.
  Finder.matchAST(Context);
  passes::forgetTrainingCodeFacts();
  Context.setTraversalScope(Scope);

  // Source order; at one place, the checks' order, then the order of the matches.
  std::stable_sort(Out.begin(), Out.end(), [](const Found& A, const Found& B) {
    return std::tie(A.Finding.Offset, A.CheckIndex) < std::tie(B.Finding.Offset, B.CheckIndex);
  });
  std::vector<LintFinding> Findings;
  Findings.reserve(Out.size());
  for (Found& F : Out)
    Findings.push_back(std::move(F.Finding));
  return Findings;
}

} // namespace accelerate::lint
