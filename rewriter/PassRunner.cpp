// rewriter/PassRunner.cpp: matches every pass's rule, turns its Transformer edits into main-file edits and
// findings, then applies them.
#include "rewriter/PassRunner.h"

#include "rewriter/ApplyEdits.h"

#include "passes/SharedObjects.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTConsumer.h"
#include "clang/AST/ASTContext.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendAction.h"
#include "clang/Lex/Lexer.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace accelerate::rewriter {
namespace {

using clang::ast_matchers::MatchFinder;
namespace transformer = clang::transformer;

/// Collapses whitespace so an edit fits on one line of `--explain` output.
std::string oneLine(llvm::StringRef Text) {
  std::string Out;
  for (char C : Text.trim()) {
    bool Space = C == ' ' || C == '\n' || C == '\t' || C == '\r';
    if (!Space)
      Out += C;
    else if (!Out.empty() && Out.back() != ' ')
      Out += ' ';
  }
  return Out;
}

/// What the passes produced while the AST was alive, in plain offsets and strings.
struct Collected {
  std::string MainFile;
  std::string MainText;
  std::vector<std::string> ReadFiles;
  std::vector<Finding> Findings;
  std::vector<FileEdit> MainFileEdits;
  std::map<std::string, std::vector<FileEdit>> HeaderFileEdits; ///< By the header's real path.
  std::map<std::string, std::string> HeaderTexts; ///< Every rewritable header read, by real path.

  std::string PassFailure; ///< Set when a pass's rule failed; the rewrite is then abandoned.

  /// A span of text in the main file ("") or a header (its real path).
  struct Span {
    std::string File;
    unsigned Begin = 0, End = 0;
    std::string Name; ///< The code it is, as a refusal names it ("function 'train'").
    /// Only the function that holds statements of the scope: what is in it goes with its last change.
    bool Holder = false;
    bool contains(const std::string& In, unsigned Offset) const {
      return In == File && Begin <= Offset && Offset < End;
    }
  };
  /// A refusal (passes::RefusalMarker): the finding, the code none of whose changes are made, and its name.
  struct Refusal {
    unsigned FindingId = 0;
    std::vector<Span> Scope;
    std::string ScopeName;
  };
  std::vector<Refusal> Refusals;
  /// Where each change's edits are, by finding id.
  std::map<unsigned, std::vector<std::pair<std::string, unsigned>>> EditPlaces;
};

/// The code a refusal keeps from being rewritten (passes::RefusalMarker): the function the refused object is
/// in (lambdas belong to the function around them), or for a member its class and the member functions of it
/// defined outside it; with the code that shares objects with it (passes::codeSharingObjectsWith: the callers
/// that prepared what it trains, the callees that use what it prepared, and so on both ways), so that no part
/// of the loop is rewritten without the rest. For a variable of static storage (namespace scope, a static
/// member), which any function may use, the main file and the file it is declared in, whole. Empty when the
/// node is in none of these.
Collected::Refusal refusalScope(const clang::DynTypedNode& Node, clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  Collected::Refusal Out;
  if (const auto* Variable = Node.get<clang::VarDecl>();
      Variable && Variable->hasGlobalStorage() && !Variable->isStaticLocal()) {
    const clang::FileID Declared = SM.getFileID(SM.getExpansionLoc(Variable->getLocation()));
    llvm::SmallVector<clang::FileID, 2> Files{SM.getMainFileID()};
    if (Declared != SM.getMainFileID())
      Files.push_back(Declared);
    auto MainEntry = SM.getFileEntryRefForID(SM.getMainFileID());
    Out.ScopeName =
        "file '" + (MainEntry ? llvm::sys::path::filename(MainEntry->getName()).str() : std::string()) + "'";
    for (clang::FileID In : Files) {
      std::string File;
      if (In != SM.getMainFileID()) {
        auto Entry = SM.getFileEntryRefForID(In);
        if (!Entry)
          continue;
        File = passes::realPathOf(*Entry);
      }
      Out.Scope.push_back(
          {File, 0, static_cast<unsigned>(SM.getBufferData(In).size()) + 1, Out.ScopeName, false});
    }
    return Out;
  }
  auto Add = [&](clang::SourceRange Range, std::string Name, bool Holder) {
    clang::SourceLocation Begin = SM.getExpansionLoc(Range.getBegin());
    clang::SourceLocation End = SM.getExpansionLoc(Range.getEnd());
    if (Begin.isInvalid() || End.isInvalid() || SM.getFileID(Begin) != SM.getFileID(End))
      return;
    std::string File;
    if (!SM.isWrittenInMainFile(Begin)) {
      auto Entry = SM.getFileEntryRefForID(SM.getFileID(Begin));
      if (!Entry)
        return;
      File = passes::realPathOf(*Entry);
    }
    // From the start of its line when only indentation precedes it: a removed statement's edit takes its
    // line whole.
    llvm::StringRef Text = SM.getBufferData(SM.getFileID(Begin));
    unsigned From = SM.getFileOffset(Begin);
    while (From > 0 && (Text[From - 1] == ' ' || Text[From - 1] == '\t'))
      --From;
    Out.Scope.push_back({File, From, SM.getFileOffset(End) + 1, std::move(Name), Holder});
  };
  const clang::Decl* Start = nullptr;
  if (const auto* Field = Node.get<clang::FieldDecl>()) {
    const auto* Class = llvm::dyn_cast<clang::CXXRecordDecl>(Field->getParent());
    if (!Class)
      return Out;
    Out.ScopeName = "class '" + Class->getNameAsString() + "'";
    Start = Class;
  } else {
    const clang::FunctionDecl* Function = nullptr;
    if (const auto* S = Node.get<clang::Stmt>()) {
      Function = passes::enclosingFunction(*S, Context);
    } else {
      // A declaration: up to the function it is in, or to the statement that holds it.
      clang::DynTypedNodeList Parents = Context.getParents(Node);
      while (!Parents.empty() && !Function) {
        if (const auto* Found = Parents[0].get<clang::FunctionDecl>()) {
          Function = Found;
        } else if (const auto* Inside = Parents[0].get<clang::Stmt>()) {
          Function = passes::enclosingFunction(*Inside, Context);
          break;
        } else {
          Parents = Context.getParents(Parents[0]);
        }
      }
    }
    if (!Function)
      return Out;
    if (const clang::FunctionDecl* Pattern = Function->getTemplateInstantiationPattern())
      Function = Pattern;
    Out.ScopeName = "function '" + Function->getNameAsString() + "'";
    Start = Function;
  }
  const auto* StartFunction = llvm::dyn_cast<clang::FunctionDecl>(Start);
  const std::string StartName =
      StartFunction ? "function '" + StartFunction->getQualifiedNameAsString() + "'" : Out.ScopeName;
  std::set<std::pair<unsigned, unsigned>> Holders;
  for (passes::SharingPiece& Piece : passes::codeSharingObjectsWith(*Start, Context)) {
    if (Piece.Name == StartName)
      Piece.Name = Out.ScopeName;
    Add(Piece.Range, Piece.Name, false);
    // The function of a statement that shares objects, whole (once): its lookup of the accelerator goes
    // with the last change the function keeps.
    if (Piece.Function.isValid() &&
        Holders.insert({Piece.Function.getBegin().getRawEncoding(), Piece.Function.getEnd().getRawEncoding()})
            .second)
      Add(Piece.Function, Piece.Name, true);
  }
  return Out;
}

/// Runs one pass's rule on each of its matches, as Transformer does, but keeps the match's location so that
/// a case with no edit (a warning) can still be reported at the right place.
class PassCallback : public MatchFinder::MatchCallback {
public:
  PassCallback(const passes::PassInfo& Pass, unsigned PassIndex, Collected& Out)
      : Pass(Pass), PassIndex(PassIndex), Rule(Pass.MakeRule()), Out(Out) {}

  void registerWith(MatchFinder& Finder) {
    for (const auto& Matcher : transformer::detail::buildMatchers(Rule))
      Finder.addDynamicMatcher(Matcher, this);
  }

  void run(const MatchFinder::MatchResult& Result) override {
    if (Result.Context->getDiagnostics().hasErrorOccurred())
      return; // The file does not compile; the caller reports that and discards everything.
    const clang::SourceManager& SM = *Result.SourceManager;
    const clang::LangOptions& LangOpts = Result.Context->getLangOpts();
    clang::SourceLocation MatchLoc = SM.getExpansionLoc(transformer::detail::getRuleMatchLoc(Result));
    size_t Case = transformer::detail::findSelectedCase(Result, Rule);
    auto Edits = Rule.Cases[Case].Edits(Result);
    auto Explanation = Rule.Metadata[Case]->eval(Result);
    std::string Failure;
    if (!Edits)
      Failure = llvm::toString(Edits.takeError());
    if (!Explanation) {
      std::string Why = llvm::toString(Explanation.takeError());
      Failure = Failure.empty() ? Why : Failure;
    }
    if (!Failure.empty()) {
      if (Out.PassFailure.empty())
        Out.PassFailure =
            llvm::formatv("pass '{0}' failed at {1}: {2}", Pass.Name, MatchLoc.printToString(SM), Failure);
      return;
    }

    Finding Found;
    Found.Pass = Pass.Name.str();
    Found.Message = *Explanation;
    bool IsNote = llvm::StringRef(Found.Message).starts_with(passes::NoteMarker);
    if (IsNote)
      Found.Message = Found.Message.substr(passes::NoteMarker.size());
    const bool IsRefusal = llvm::StringRef(Found.Message).starts_with(passes::RefusalMarker);
    if (IsRefusal)
      Found.Message = Found.Message.substr(passes::RefusalMarker.size());
    if (Edits->empty()) // Transformer drops edits whose range maps to no single place in the file.
      Found.Message = "not rewritten: pass '" + Found.Pass +
                      "' cannot edit this code in place (part of it comes from a macro expansion); change it "
                      "by hand: " +
                      Found.Message;
    clang::SourceLocation Where = MatchLoc;
    bool HasTextEdit = false, InRewrittenFiles = passes::isInRewrittenFile(SM, MatchLoc);
    // Each edit goes to its own file: "" is the main file, else a header's real path. A finding with an edit
    // in a file the rewrite may not change is reported whole and none of its edits is made.
    std::vector<std::pair<std::string, FileEdit>> NewEdits;
    auto FileOf = [&](clang::SourceLocation Loc) -> std::optional<std::string> {
      Loc = SM.getExpansionLoc(Loc);
      if (SM.isWrittenInMainFile(Loc))
        return std::string();
      if (!passes::isInRewrittenFile(SM, Loc))
        return std::nullopt;
      auto Entry = SM.getFileEntryRefForID(SM.getFileID(Loc));
      return passes::realPathOf(*Entry);
    };
    bool AllEditable = true;
    for (const transformer::Edit& Edit : *Edits) {
      if (Edit.Kind == transformer::EditKind::AddInclude) {
        Found.Edits.push_back("added #include " + Edit.Replacement);
        std::optional<std::string> In = FileOf(Edit.Range.getBegin());
        AllEditable = AllEditable && In.has_value();
        NewEdits.push_back({In.value_or(""), {0, 0, "", Edit.Replacement, ""}});
        continue;
      }
      // Transformer hands over file ranges; make them character ranges so offsets are exact.
      clang::CharSourceRange Range = clang::Lexer::makeFileCharRange(Edit.Range, SM, LangOpts);
      clang::SourceLocation Begin = Range.getBegin();
      llvm::StringRef Old = clang::Lexer::getSourceText(Range, SM, LangOpts);
      if (Old.empty() && Edit.Replacement.empty())
        continue; // A no-op edit only anchors the explanation (a warning) at its place.
      if (!HasTextEdit) {
        Where = Begin;
        HasTextEdit = true;
      }
      // Inserted indentation is layout, not a change worth a line of its own.
      if (!Old.empty() || !llvm::StringRef(Edit.Replacement).trim().empty())
        Found.Edits.push_back(Old.empty() ? "inserted '" + oneLine(Edit.Replacement) + "'"
                                          : "'" + oneLine(Old) + "' -> '" + oneLine(Edit.Replacement) + "'");
      std::optional<std::string> In = FileOf(Begin);
      AllEditable = AllEditable && In.has_value();
      unsigned Offset = SM.getFileOffset(Begin);
      NewEdits.push_back(
          {In.value_or(""), {Offset, SM.getFileOffset(Range.getEnd()) - Offset, Edit.Replacement, "", ""}});
    }
    InRewrittenFiles = HasTextEdit ? AllEditable : InRewrittenFiles && AllEditable;

    Found.File = SM.getFilename(Where).str();
    if (auto Entry = SM.getFileEntryRefForID(SM.getFileID(SM.getExpansionLoc(Where))))
      Found.RealFile = passes::realPathOf(*Entry);
    Found.Line = SM.getExpansionLineNumber(Where);
    Found.Column = SM.getExpansionColumnNumber(Where);
    Found.Offset = SM.getFileOffset(Where);
    if (Found.Edits.empty())
      Found.What = IsNote ? Finding::Kind::Note : Finding::Kind::NotRewritten;
    else if (!InRewrittenFiles)
      Found.What = Finding::Kind::OutsideMainFile;
    if (!Seen.insert({Found.File, Found.Offset, Found.Pass, Found.Message}).second)
      return; // The same match twice (e.g. a file parsed twice by one database) is one finding.

    Found.Id = Out.Findings.size();
    if (IsRefusal && Found.What == Finding::Kind::NotRewritten) {
      auto Root = Result.Nodes.getMap().find(transformer::RootID);
      if (Root != Result.Nodes.getMap().end()) {
        Collected::Refusal Refused = refusalScope(Root->second, *Result.Context);
        Refused.FindingId = Found.Id;
        if (!Refused.Scope.empty())
          Out.Refusals.push_back(std::move(Refused));
      }
    }
    // Changes a refusal can withdraw: all but the accelerator pass's construction of the accelerator, which
    // other, rewritten code may reach (its lookups, `Accelerator::current()`, go with the code around them).
    if (Found.What == Finding::Kind::Change)
      for (auto& [In, Edit] : NewEdits)
        if (Edit.Header.empty() &&
            (Found.Pass != "accelerator" || llvm::StringRef(Edit.Text).contains("Accelerator::current()")))
          Out.EditPlaces[Found.Id].push_back({In, Edit.Offset});
    if (Found.What == Finding::Kind::Change)
      for (auto& [In, Edit] : NewEdits) {
        Edit.Origin =
            llvm::formatv("{0}:{1}:{2} (pass '{3}')", Found.File, Found.Line, Found.Column, Found.Pass);
        Edit.FindingId = Found.Id;
        Edit.PassIndex = PassIndex;
        (In.empty() ? Out.MainFileEdits : Out.HeaderFileEdits[In]).push_back(std::move(Edit));
      }
    Out.Findings.push_back(std::move(Found));
  }

private:
  const passes::PassInfo& Pass;
  unsigned PassIndex;
  passes::PassRule Rule;
  Collected& Out;
  std::set<std::tuple<std::string, unsigned, std::string, std::string>> Seen;
};

/// The main file's name and text, and every file the parse read, with the text of those the rewrite may
/// change.
void collectFiles(const clang::SourceManager& SM, Collected& Out) {
  clang::FileID Main = SM.getMainFileID();
  Out.MainText = SM.getBufferData(Main).str();
  if (auto Entry = SM.getFileEntryRefForID(Main))
    Out.MainFile = Entry->getName().str();
  // The files first: translateFile() loads a precompiled preamble's source entries, which adds files to the
  // table being walked.
  std::vector<clang::FileEntryRef> Files;
  for (auto File = SM.fileinfo_begin(); File != SM.fileinfo_end(); ++File)
    Files.push_back(File->first);
  const std::vector<std::string>& MayChange = passes::passSettings().Headers;
  for (clang::FileEntryRef File : Files) {
    std::string Path = passes::realPathOf(File);
    Out.ReadFiles.push_back(Path);
    // translateFile() walks the whole file table: only for the headers the rewrite may change.
    if (!llvm::any_of(MayChange, [&](const std::string& Header) {
          return Path == Header || passes::pathBelow(Path, Header);
        }))
      continue;
    clang::FileID Included = SM.translateFile(File);
    if (Included.isValid() && Included != Main &&
        passes::isInRewrittenFile(SM, SM.getLocForStartOfFile(Included)))
      Out.HeaderTexts[Path] = SM.getBufferData(Included).str();
  }
}

/// Runs rewriteParsedFile once the parse is complete, and keeps its result.
class RewriteConsumer : public clang::ASTConsumer {
public:
  RewriteConsumer(llvm::ArrayRef<passes::PassInfo> Passes, const passes::PassSettings& Settings,
                  std::optional<llvm::Expected<FileRewrite>>& Result)
      : Passes(Passes), Settings(Settings), Result(Result) {}

  void HandleTranslationUnit(clang::ASTContext& Context) override {
    if (Context.getDiagnostics().hasErrorOccurred())
      return; // The file does not compile; the tool run says so with the compiler's diagnostics.
    Result.emplace(rewriteParsedFile(Context, Passes, Settings));
  }

private:
  llvm::ArrayRef<passes::PassInfo> Passes;
  const passes::PassSettings& Settings;
  std::optional<llvm::Expected<FileRewrite>>& Result;
};

class RewriteAction : public clang::ASTFrontendAction {
public:
  RewriteAction(llvm::ArrayRef<passes::PassInfo> Passes, const passes::PassSettings& Settings,
                std::optional<llvm::Expected<FileRewrite>>& Result)
      : Passes(Passes), Settings(Settings), Result(Result) {}

  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance&, llvm::StringRef) override {
    return std::make_unique<RewriteConsumer>(Passes, Settings, Result);
  }

private:
  llvm::ArrayRef<passes::PassInfo> Passes;
  const passes::PassSettings& Settings;
  std::optional<llvm::Expected<FileRewrite>>& Result;
};

class RewriteActionFactory : public clang::tooling::FrontendActionFactory {
public:
  RewriteActionFactory(llvm::ArrayRef<passes::PassInfo> Passes, const passes::PassSettings& Settings,
                       std::optional<llvm::Expected<FileRewrite>>& Result)
      : Passes(Passes), Settings(Settings), Result(Result) {}
  std::unique_ptr<clang::FrontendAction> create() override {
    return std::make_unique<RewriteAction>(Passes, Settings, Result);
  }

private:
  llvm::ArrayRef<passes::PassInfo> Passes;
  const passes::PassSettings& Settings;
  std::optional<llvm::Expected<FileRewrite>>& Result;
};

/// A training loop is rewritten whole or not at all: the changes in the code of each refusal are withdrawn
/// (their edits and their findings), and the refusal says so.
void withdrawRefusedChanges(Collected& Out) {
  if (Out.Refusals.empty())
    return;
  std::set<unsigned> Withdrawn;
  for (Collected::Refusal& Refused : Out.Refusals) {
    unsigned Count = 0;
    std::vector<std::string> Sharing; // The other code that had changes, named by its narrowest span.
    auto Withdraw = [&](unsigned Id) {
      if (Withdrawn.insert(Id).second)
        ++Count;
    };
    for (const auto& [Id, Places] : Out.EditPlaces) {
      bool Inside = false;
      for (const auto& [In, Offset] : Places) {
        const Collected::Span* Narrowest = nullptr;
        for (const Collected::Span& Span : Refused.Scope)
          if (!Span.Holder && Span.contains(In, Offset) &&
              (!Narrowest || Span.End - Span.Begin < Narrowest->End - Narrowest->Begin))
            Narrowest = &Span;
        if (!Narrowest)
          continue;
        Inside = true;
        if (Narrowest->Name != Refused.ScopeName && !llvm::is_contained(Sharing, Narrowest->Name))
          Sharing.push_back(Narrowest->Name);
      }
      if (Inside)
        Withdraw(Id);
    }
    // A function only some of whose statements share the objects keeps its lookup of the accelerator while
    // it keeps another change.
    for (const Collected::Span& Holder : Refused.Scope) {
      if (!Holder.Holder)
        continue;
      std::vector<unsigned> Lookups;
      bool KeepsAChange = false;
      for (const auto& [Id, Places] : Out.EditPlaces) {
        if (!llvm::any_of(Places,
                          [&](const auto& Place) { return Holder.contains(Place.first, Place.second); }))
          continue;
        if (Out.Findings[Id].Pass == "accelerator")
          Lookups.push_back(Id);
        else if (!Withdrawn.count(Id))
          KeepsAChange = true;
      }
      if (!KeepsAChange)
        for (unsigned Id : Lookups)
          Withdraw(Id);
    }
    Finding& Found = Out.Findings[Refused.FindingId];
    Found.Message +=
        "; so the training code of " + Refused.ScopeName + " is left as it is" +
        (Sharing.empty() ? std::string()
                         : ", with the code that shares its objects (" + llvm::join(Sharing, ", ") + ")") +
        (Count ? " (" + std::to_string(Count) + " change" + (Count == 1 ? "" : "s") + " not made)"
               : std::string()) +
        ": a training loop is rewritten whole or not at all";
  }
  // Nothing rewritten is left but the accelerator's declaration: it goes too, the file stays as it is.
  const bool OnlyAccelerator = llvm::all_of(Out.Findings, [&](const Finding& Found) {
    return Found.What != Finding::Kind::Change || Withdrawn.count(Found.Id) > 0 ||
           Found.Pass == "accelerator";
  });
  if (OnlyAccelerator)
    for (const Finding& Found : Out.Findings)
      if (Found.What == Finding::Kind::Change && Found.Pass == "accelerator")
        Withdrawn.insert(Found.Id);
  auto Drop = [&](std::vector<FileEdit>& Edits) {
    llvm::erase_if(Edits, [&](const FileEdit& Edit) { return Withdrawn.count(Edit.FindingId) > 0; });
  };
  Drop(Out.MainFileEdits);
  for (auto& [Path, Edits] : Out.HeaderFileEdits)
    Drop(Edits);
  llvm::erase_if(Out.Findings, [&](const Finding& Found) { return Withdrawn.count(Found.Id) > 0; });
}

} // namespace

unsigned FileRewrite::changes() const {
  return llvm::count_if(Findings, [](const Finding& Found) { return Found.What == Finding::Kind::Change; });
}

unsigned FileRewrite::sitesLeft() const {
  return llvm::count_if(Findings, [](const Finding& Found) {
    return Found.What == Finding::Kind::NotRewritten || Found.What == Finding::Kind::OutsideMainFile;
  });
}

unsigned FileRewrite::shownAt() const {
  if (!TrainingRuns.empty())
    return TrainingRuns.front();
  return Edits.empty() ? 0 : Edits.front().Replacement.getOffset();
}

std::string describeFinding(const Finding& Found) {
  std::string Place = Found.File + ":" + std::to_string(Found.Line) + ":" + std::to_string(Found.Column);
  switch (Found.What) {
  case Finding::Kind::NotRewritten:
    return Place + ": warning: " + Found.Message + " [" + Found.Pass + "]";
  case Finding::Kind::Note:
    return Place + ": note: [" + Found.Pass + "] " + Found.Message;
  case Finding::Kind::Change:
  case Finding::Kind::OutsideMainFile:
    break;
  }
  return Place + ": note: [" + Found.Pass + "] " + llvm::join(Found.Edits, "; ") + ": " + Found.Message;
}

std::vector<clang::Decl*> userDeclarations(clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  llvm::StringRef MainDirectory;
  if (auto Main = SM.getFileEntryRefForID(SM.getMainFileID()))
    MainDirectory = Main->getDir().getName();
  llvm::DenseMap<clang::FileID, bool> IsUserFile;
  auto UserFile = [&](clang::SourceLocation Loc) {
    clang::FileID File = SM.getFileID(Loc);
    auto [Entry, Inserted] = IsUserFile.try_emplace(File, false);
    if (Inserted) {
      auto Ref = SM.getFileEntryRefForID(File);
      Entry->second =
          passes::isInRewrittenFile(SM, Loc) || (Ref && !SM.isInSystemHeader(Loc) && !MainDirectory.empty() &&
                                                 Ref->getDir().getName().starts_with(MainDirectory));
    }
    return Entry->second;
  };
  std::vector<clang::Decl*> UserDecls;
  for (clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (UserFile(SM.getExpansionLoc(TopLevel->getLocation())))
      UserDecls.push_back(TopLevel);
  return UserDecls;
}

llvm::Expected<FileRewrite> rewriteParsedFile(clang::ASTContext& Context,
                                              llvm::ArrayRef<passes::PassInfo> Passes,
                                              const passes::PassSettings& Settings) {
  if (Context.getDiagnostics().hasErrorOccurred())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the file does not compile (see the compiler's errors); nothing was "
                                   "rewritten. Fix the errors, then rewrite it");
  passes::EnabledPasses Enabled(Passes, Settings);
  Collected Out;
  MatchFinder Finder;
  std::vector<std::unique_ptr<PassCallback>> Callbacks;
  for (const passes::PassInfo& Pass : Passes) {
    Callbacks.push_back(std::make_unique<PassCallback>(Pass, Callbacks.size(), Out));
    Callbacks.back()->registerWith(Finder);
  }
  std::vector<clang::Decl*> Scope = Context.getTraversalScope();
  Context.setTraversalScope(userDeclarations(Context));
  passes::forgetTrainingCodeFacts();
  Finder.matchAST(Context);
  const clang::SourceManager& SM = Context.getSourceManager();
  std::vector<unsigned> TrainingRuns;
  for (const clang::Stmt* Loop : passes::mainFileLoops(Context))
    if (passes::isTrainingRun(*Loop, Context))
      TrainingRuns.push_back(SM.getFileOffset(SM.getExpansionLoc(Loop->getBeginLoc())));
  passes::forgetTrainingCodeFacts();
  Context.setTraversalScope(Scope);
  collectFiles(SM, Out);
  if (!Out.PassFailure.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   Out.PassFailure +
                                       "; nothing was rewritten. This is a bug in the pass: please "
                                       "report it with the input file");

  withdrawRefusedChanges(Out);

  FileRewrite Result;
  Result.File = Out.MainFile;
  Result.Original = Out.MainText;
  auto Planned = planEdits(Out.MainFile, Out.MainText, Out.MainFileEdits);
  if (!Planned)
    return Planned.takeError();
  auto Rewritten = applyEdits(Out.MainText, *Planned);
  if (!Rewritten)
    return Rewritten.takeError();
  Result.Rewritten = std::move(*Rewritten);
  Result.Edits = std::move(*Planned);
  Result.ReadFiles = std::move(Out.ReadFiles);
  llvm::sort(Result.ReadFiles);
  for (const auto& [Path, Edits] : Out.HeaderFileEdits)
    if (!Out.HeaderTexts.count(Path))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "the passes changed the header " + Path +
              ", whose text the parse did not keep; nothing was rewritten. This is "
              "a bug: please report it with the input file");
  for (auto& [Path, Text] : Out.HeaderTexts)
    Result.Headers.push_back({Path, std::move(Text), std::move(Out.HeaderFileEdits[Path])});
  Result.TrainingRuns = std::move(TrainingRuns);
  Result.Findings = std::move(Out.Findings);
  llvm::stable_sort(Result.Findings, [](const Finding& A, const Finding& B) {
    return std::tie(A.File, A.Offset) < std::tie(B.File, B.Offset);
  });
  return Result;
}

llvm::Expected<FileRewrite> rewriteFile(const clang::tooling::CompilationDatabase& Database,
                                        llvm::StringRef File, const CompileFlags& Flags,
                                        llvm::ArrayRef<passes::PassInfo> Passes,
                                        const passes::PassSettings& Settings, PreambleUse* Preamble) {
  std::optional<llvm::Expected<FileRewrite>> Result;
  RewriteActionFactory Factory(Passes, Settings, Result);
  if (llvm::Error Err = runOnFile(Database, File, Flags, Factory, std::nullopt, {}, Preamble)) {
    if (Result)
      llvm::consumeError(Result->takeError());
    return Err;
  }
  if (!Result)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the parse of " + File + " ended before the passes could run");
  return std::move(*Result);
}

} // namespace accelerate::rewriter
