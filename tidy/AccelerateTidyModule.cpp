// tidy/AccelerateTidyModule.cpp: the clang-tidy module (`clang-tidy --load=<module>
// -checks='-*,accelerate-*'`). Its checks are front ends over the rewrite library, as accel-rewrite is: they
// run the same passes, from the same registry, over the translation unit clang-tidy parsed.
#include "lint/Checks.h"
#include "passes/Registry.h"
#include "rewriter/CheckCompiles.h"
#include "rewriter/PassRunner.h"
#include "rewriter/TextDiff.h"
#include "rewriter/ToolRunner.h"
#include "tidy/FixIts.h"
#include "tidy/RuleCheck.h"

#include "clang-tidy/ClangTidyCheck.h"
#include "clang-tidy/ClangTidyModule.h"
#include "clang-tidy/ClangTidyModuleRegistry.h"

#include "clang/AST/ASTContext.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Preprocessor.h"
#include "clang/Tooling/Core/Replacement.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <dlfcn.h>

namespace accelerate::tidy {
namespace {

using clang::ast_matchers::MatchFinder;
using rewriter::Finding;

/// Where this module was loaded from, to find the runtime's headers of the package it belongs to.
std::string modulePath() {
  Dl_info Info;
  if (dladdr(reinterpret_cast<void*>(&modulePath), &Info) && Info.dli_fname)
    return Info.dli_fname;
  return "";
}

/// The compile check's first error (`<file>:<line>:<column>: error: ...`) with a place in the main file given
/// at its line in the file clang-tidy checks (rewriter::atOriginalLines): the check compiles the rewritten
/// text, whose lines the rewrite moves by the lines it inserts above them.
std::string atOriginalLine(const std::string& Error, const rewriter::FileRewrite& Rewrite,
                           const clang::SourceManager& SM) {
  auto Main = SM.getFileEntryRefForID(SM.getMainFileID());
  auto IsMain = [&SM, Main](llvm::StringRef Name) {
    auto Named = SM.getFileManager().getOptionalFileRef(Name);
    return Main && Named && Named->getUniqueID() == Main->getUniqueID();
  };
  return rewriter::atOriginalLines(Error, {{Rewrite.Original, Rewrite.Rewritten, IsMain}});
}

/// accelerate-distribute-loop: on a plain single-device training loop, one warning at the training loop
/// with the whole rewrite accel-rewrite makes as its fix (the passes depend on one another, so the fix is
/// never one pass alone), offered only when the rewritten file compiles; each site the passes recognise but
/// do not rewrite is a warning of its own, with the reason and what to do.
class DistributeLoopCheck : public clang::tidy::ClangTidyCheck {
public:
  DistributeLoopCheck(llvm::StringRef Name, clang::tidy::ClangTidyContext* Context)
      : ClangTidyCheck(Name, Context), Enable(Options.get("Enable", "")),
        Disable(Options.get("Disable", "")) {}

  void storeOptions(clang::tidy::ClangTidyOptions::OptionMap& Map) override {
    Options.store(Map, "Enable", Enable);
    Options.store(Map, "Disable", Disable);
  }

  void registerPPCallbacks(const clang::SourceManager&, clang::Preprocessor* PP,
                           clang::Preprocessor*) override {
    Preprocessor = PP;
  }

  void registerMatchers(MatchFinder* Finder) override {
    Finder->addMatcher(clang::ast_matchers::translationUnitDecl().bind("unit"), this);
  }

  /// Only remembers the translation unit: the rewrite runs once clang-tidy's own traversal is over, since it
  /// narrows the traversal scope to the user's code.
  void check(const MatchFinder::MatchResult& Result) override { Context = Result.Context; }

  void onEndOfTranslationUnit() override {
    clang::ASTContext* Unit = std::exchange(Context, nullptr);
    if (!Unit || !Preprocessor)
      return;
    const clang::SourceManager& SM = Unit->getSourceManager();
    clang::SourceLocation FileStart = SM.getLocForStartOfFile(SM.getMainFileID());
    if (Unit->getDiagnostics().hasErrorOccurred()) {
      diag(FileStart, "this file does not compile (see the errors), so no rewrite to distribute its training "
                      "is offered; fix the errors, or check the compile command clang-tidy uses for it");
      return;
    }
    std::vector<passes::PassInfo> Passes;
    if (!selectPasses(FileStart, Passes))
      return;
    llvm::Expected<rewriter::FileRewrite> Rewrite = rewriter::rewriteParsedFile(*Unit, Passes);
    if (!Rewrite) {
      diag(FileStart, "accel-rewrite's passes failed on this file, so no rewrite is offered: %0")
          << llvm::toString(Rewrite.takeError());
      return;
    }
    report(*Rewrite, SM);
  }

private:
  /// The registry's passes that run by default, with the check's Enable and Disable options (pass names,
  /// comma-separated, as accel-rewrite's --enable and --disable take them; passes::selectPasses). This check
  /// takes none of accel-rewrite's settings, so a pass that needs one is refused.
  bool selectPasses(clang::SourceLocation At, std::vector<passes::PassInfo>& Selected) {
    llvm::SmallVector<llvm::StringRef> Enabled, Disabled;
    llvm::SplitString(Enable, Enabled, ", ");
    llvm::SplitString(Disable, Disabled, ", ");
    passes::PassRequest Request;
    Request.Enable.assign(Enabled.begin(), Enabled.end());
    Request.Disable.assign(Disabled.begin(), Disabled.end());
    auto Chosen = passes::selectPasses(Request);
    if (auto* Passes = std::get_if<std::vector<passes::PassInfo>>(&Chosen)) {
      Selected = std::move(*Passes);
      return true;
    }
    const passes::PassRequestProblem& Problem = std::get<passes::PassRequestProblem>(Chosen);
    switch (Problem.What) {
    case passes::PassRequestProblem::Kind::UnknownPass:
      diag(At, "the option Enable or Disable of accelerate-distribute-loop names the unknown pass '%0' "
               "(known: %1); no rewrite is offered")
          << Problem.Name << passes::knownPassNames();
      break;
    case passes::PassRequestProblem::Kind::EnabledAndDisabled:
      diag(At, "the options Enable and Disable of accelerate-distribute-loop both name the pass '%0'; no "
               "rewrite is offered: drop it from one of them")
          << Problem.Name;
      break;
    case passes::PassRequestProblem::Kind::SettingButDisabled: // no setting is given here
    case passes::PassRequestProblem::Kind::NeedsItsSetting:
      diag(At, "the option Enable of accelerate-distribute-loop names the pass '%0', which is turned on by "
               "accel-rewrite's %1 and needs what that gives it; this check does not take it, so no rewrite "
               "is offered: run accel-rewrite %1 on this file, or leave '%0' out of Enable")
          << Problem.Name << Problem.Pass->TurnedOnBy;
      break;
    }
    return false;
  }

  void report(const rewriter::FileRewrite& Rewrite, const clang::SourceManager& SM) {
    clang::FileID Main = SM.getMainFileID();
    auto At = [&](unsigned Offset) { return SM.getLocForStartOfFile(Main).getLocWithOffset(Offset); };
    // A finding in a header is reported at its place there (clang-tidy shows it when its header filter
    // takes that header).
    auto FindingPlace = [&](const Finding& Found) {
      clang::FileID File = Main;
      if (auto Entry = SM.getFileManager().getOptionalFileRef(Found.File))
        File = SM.translateFile(*Entry);
      return File.isValid() ? SM.getLocForStartOfFile(File).getLocWithOffset(Found.Offset) : At(0);
    };
    // What cannot be rewritten, and why: a warning each, as accel-rewrite gives them.
    for (const Finding& Found : Rewrite.Findings) {
      if (Found.What == Finding::Kind::NotRewritten)
        diag(FindingPlace(Found), "%0 [%1]") << Found.Message << Found.Pass;
      else if (Found.What == Finding::Kind::OutsideMainFile)
        diag(FindingPlace(Found),
             "not rewritten: the fix changes the file clang-tidy checks, not this header; "
             "run accel-rewrite with --headers to rewrite it, or change this by hand: "
             "%0 (pass '%1': %2)")
            << llvm::join(Found.Edits, "; ") << Found.Pass << Found.Message;
    }
    if (Rewrite.Rewritten == Rewrite.Original)
      return;

    unsigned Changes = Rewrite.changes(), Where = Rewrite.shownAt();
    // Without a training loop (a step function, a file whose loop is elsewhere), at the first change.
    llvm::StringRef What = Rewrite.TrainingRuns.empty() ? "code" : "loop";

    // A rewrite that leaves sites for the user (a backward call in a macro, a header it may not change)
    // would not train like the original until they are changed: it is not offered as a fix.
    unsigned Left = Rewrite.sitesLeft();
    if (Left) {
      diag(At(Where), "this training %0 runs on one device; accel-rewrite would distribute it with "
                      "accelerate (%1 %2), but %3 %4 that it cannot rewrite (the other warnings), so no fix "
                      "is offered: change %5 by hand as the warnings say, then apply the fix")
          << What << Changes << (Changes == 1 ? "change" : "changes") << Left
          << (Left == 1 ? "site needs a change" : "sites need changes") << (Left == 1 ? "it" : "them");
      return;
    }

    llvm::Error Compiles = rewriter::checkCompilesLikeParse(
        *Preprocessor, Rewrite.Rewritten,
        rewriter::findRuntimeIncludeDir(modulePath(), ACCEL_RUNTIME_INCLUDE_DIR));
    if (Compiles) {
      std::string Why;
      llvm::handleAllErrors(
          std::move(Compiles),
          [&](const rewriter::CompileError& Compile) {
            Why = atOriginalLine(Compile.firstError(), Rewrite, SM);
          },
          [&](const llvm::ErrorInfoBase& Other) { Why = Other.message(); });
      diag(At(Where),
           "this training %0 runs on one device; accel-rewrite would distribute it with "
           "accelerate (%1 %2), but the rewritten file would not compile, so no fix is offered: %3 "
           "(run accel-rewrite on this file for every diagnostic)")
          << What << Changes << (Changes == 1 ? "change" : "changes") << Why;
      return;
    }

    clang::tooling::Replacements Replacements;
    for (const rewriter::PlannedEdit& Edit : Rewrite.Edits)
      if (llvm::Error Err = Replacements.add(Edit.Replacement)) {
        diag(At(Where), "the rewrite's edits conflict, so no fix is offered: %0")
            << llvm::toString(std::move(Err));
        return;
      }
    std::vector<clang::tooling::Replacement> Fixes = asFixIts(Replacements, Rewrite.Original);
    auto Warning = diag(At(Where), "this training %0 runs on one device; distribute it with accelerate "
                                   "(%1 %2 by accel-rewrite's passes; the fix applies them all)")
                   << What << Changes << (Changes == 1 ? "change" : "changes");
    for (const clang::tooling::Replacement& Edit : Fixes) {
      clang::SourceLocation Begin = At(Edit.getOffset());
      Warning << clang::FixItHint::CreateReplacement(
          clang::CharSourceRange::getCharRange(Begin, Begin.getLocWithOffset(Edit.getLength())),
          Edit.getReplacementText());
    }
  }

  std::string Enable, Disable;
  clang::Preprocessor* Preprocessor = nullptr;
  clang::ASTContext* Context = nullptr;
};

class AccelerateModule : public clang::tidy::ClangTidyModule {
public:
  void addCheckFactories(clang::tidy::ClangTidyCheckFactories& Factories) override {
    Factories.registerCheck<DistributeLoopCheck>("accelerate-distribute-loop");
    // The lint checks for code distributed by hand, one per row of lint::allLintChecks().
    for (const lint::LintCheck& Check : lint::allLintChecks())
      Factories.registerCheckFactory(("accelerate-" + Check.Name).str(),
                                     [&Check](llvm::StringRef Name, clang::tidy::ClangTidyContext* Context) {
                                       return std::make_unique<RuleCheck>(Check, Name, Context);
                                     });
  }
};

} // namespace
} // namespace accelerate::tidy

static clang::tidy::ClangTidyModuleRegistry::Add<accelerate::tidy::AccelerateModule>
    AccelerateModuleRegistration("accelerate-module",
                                 "Checks that distribute libtorch training with accelerate.");
