// rewriter/Driver.cpp: parse, rewrite, report, check, write — and never write anything after an error.
#include "rewriter/Driver.h"

#include "passes/Registry.h"
#include "passes/TrainingCode.h"
#include "rewriter/CheckCompiles.h"
#include "rewriter/OutputFile.h"
#include "rewriter/PassRunner.h"
#include "rewriter/Preamble.h"
#include "rewriter/TextDiff.h"
#include "rewriter/ToolRunner.h"

#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Tooling/Core/Diagnostic.h"
#include "clang/Tooling/DiagnosticsYaml.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace accelerate::rewriter {
namespace {

constexpr llvm::StringLiteral Tool = "accel-rewrite";

/// A syntax-only parse that also confirms it parsed the texts we gave it, not the files on disk: a compile
/// database that names the file by another path, or an include that reaches a rewritten header through
/// another path, would otherwise make the safety check vacuous.
class CheckTextAction : public clang::SyntaxOnlyAction {
public:
  CheckTextAction(llvm::StringRef Expected, const std::map<std::string, std::string>& Headers,
                  std::string& Mismatch)
      : Expected(Expected), Headers(Headers), Mismatch(Mismatch) {}
  void EndSourceFileAction() override {
    const clang::SourceManager& SM = getCompilerInstance().getSourceManager();
    if (SM.getBufferData(SM.getMainFileID()) != Expected)
      Mismatch = "the input file";
    for (auto File = SM.fileinfo_begin(); File != SM.fileinfo_end() && Mismatch.empty(); ++File) {
      auto Header = Headers.find(passes::realPathOf(File->first));
      if (Header == Headers.end())
        continue;
      clang::FileID Included = SM.translateFile(File->first);
      if (Included.isValid() && SM.getBufferData(Included) != Header->second)
        Mismatch = "the header " + Header->first;
    }
    clang::SyntaxOnlyAction::EndSourceFileAction();
  }

private:
  llvm::StringRef Expected;
  const std::map<std::string, std::string>& Headers;
  std::string& Mismatch;
};

class CheckTextFactory : public clang::tooling::FrontendActionFactory {
public:
  CheckTextFactory(llvm::StringRef Expected, const std::map<std::string, std::string>& Headers,
                   std::string& Mismatch)
      : Expected(Expected), Headers(Headers), Mismatch(Mismatch) {}
  std::unique_ptr<clang::FrontendAction> create() override {
    return std::make_unique<CheckTextAction>(Expected, Headers, Mismatch);
  }

private:
  llvm::StringRef Expected;
  const std::map<std::string, std::string>& Headers;
  std::string& Mismatch;
};

/// The flags both parses of a file add to its compile command: the runtime's include directory, last, so
/// that a directory the command names (a test's mirror headers) is searched first.
CompileFlags runtimeFlags(const DriverOptions& Options) {
  return CompileFlags{Options.ResourceDir, {"-I" + Options.RuntimeIncludeDir}};
}

/// Compiles the rewritten text in memory, with the rewritten headers (real path, text) in place of theirs,
/// with the file's flags plus the runtime's include directory, which goes last so that a directory the
/// command names (a test's mirror headers) is searched first. Over the preamble of the input's parse, where
/// it still fits (no header it read was rewritten), the include the rewrite added among the blank lines that
/// end the preamble is compiled just after it (textOverPreamble), which compiles as the rewrite does.
llvm::Error checkRewriteCompiles(const clang::tooling::CompilationDatabase& Database, llvm::StringRef File,
                                 llvm::StringRef Original, llvm::StringRef Rewritten,
                                 const std::map<std::string, std::string>& Headers,
                                 const DriverOptions& Options, PreambleUse& Preamble) {
  CompileFlags Flags = runtimeFlags(Options);
  std::string Checked = Rewritten.str();
  if (Preamble.Preamble)
    if (std::optional<std::string> Over =
            textOverPreamble(Original, Preamble.Preamble->bounds().Size, Rewritten))
      Checked = std::move(*Over);
  std::string Mismatch;
  CheckTextFactory Factory(Checked, Headers, Mismatch);
  std::vector<std::pair<std::string, std::string>> Overlays(Headers.begin(), Headers.end());
  Preamble.MayObtain = false;
  if (llvm::Error Err =
          runOnFile(Database, File, Flags, Factory, llvm::StringRef(Checked), Overlays, &Preamble))
    return Err;
  if (!Mismatch.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the check of the rewritten " + File + " read " + Mismatch +
                                       " from disk instead of its rewritten text (the compile command or an "
                                       "#include names it by another path, e.g. through a symbolic link); "
                                       "pass the paths as the compile database writes them");
  return llvm::Error::success();
}

std::string place(const Finding& Found) {
  return Found.File + ":" + std::to_string(Found.Line) + ":" + std::to_string(Found.Column);
}

/// The working directory of the compile of `File` (its compile command's), where the file names in its
/// diagnostics are relative to.
std::string compileDirectory(const clang::tooling::CompilationDatabase& Database, llvm::StringRef File) {
  std::vector<clang::tooling::CompileCommand> Commands = Database.getCompileCommands(File);
  return Commands.empty() ? std::string() : Commands.front().Directory;
}

/// The real path of `Name`, a file as a compile in `Directory` names it; "" when it does not exist.
std::string realPathIn(llvm::StringRef Directory, llvm::StringRef Name) {
  llvm::SmallString<256> Path(Name);
  if (!llvm::sys::path::is_absolute(Path) && !Directory.empty()) {
    Path = Directory;
    llvm::sys::path::append(Path, Name);
  }
  llvm::SmallString<256> Real;
  if (llvm::sys::fs::real_path(Path, Real))
    return "";
  return Real.str().str();
}

/// Where a pass changed a header, in any input's rewrite: real path, offset, pass.
using ChangedSites = std::set<std::tuple<std::string, unsigned, std::string>>;

/// Warnings always; changes and notes with Explain; then one summary line when there is anything to say. A
/// finding in a header that an earlier input also reported (`Printed`) is not repeated, and a warning in a
/// header where another input's rewrite changed the code (`Changed`: a template that only that input
/// instantiates) is not given: the header is rewritten once, with that change.
void printFindings(const FileRewrite& Rewrite, bool Explain, bool HeadersGiven, const ChangedSites& Changed,
                   std::set<std::tuple<std::string, unsigned, std::string, std::string>>& Printed) {
  llvm::raw_ostream& OS = llvm::errs();
  unsigned Changes = 0, Warnings = 0, Notes = 0;
  for (const Finding& Found : Rewrite.Findings) {
    // A change is one change however each input explains it (the accelerator's placement names the caller
    // that input sees); warnings and notes differ by what they say.
    std::string Said = Found.What == Finding::Kind::Change ? std::string() : Found.Message;
    if (!Printed.insert({Found.RealFile, Found.Offset, Found.Pass, Said}).second)
      continue;
    if (Found.What == Finding::Kind::NotRewritten &&
        Changed.count({Found.RealFile, Found.Offset, Found.Pass}))
      continue;
    switch (Found.What) {
    case Finding::Kind::NotRewritten:
      ++Warnings;
      OS << describeFinding(Found) << "\n";
      break;
    case Finding::Kind::OutsideMainFile:
      ++Warnings;
      OS << place(Found) << ": warning: not rewritten: this file is not one the rewrite may change ("
         << (HeadersGiven ? "it is outside --headers, or a system header"
                          : "only the input file is rewritten unless --headers names the project's headers")
         << "; accelerate_target() rewrites the headers under the target's source directory); rewrite it "
            "with --headers, or change this by hand: ";
      llvm::interleave(Found.Edits, OS, "; ");
      OS << " (pass '" << Found.Pass << "': " << Found.Message << ")\n";
      break;
    case Finding::Kind::Note:
      ++Notes;
      if (Explain)
        OS << describeFinding(Found) << "\n";
      break;
    case Finding::Kind::Change:
      ++Changes;
      if (Explain)
        OS << describeFinding(Found) << "\n";
      break;
    }
  }
  if (Changes + Warnings + Notes == 0 && !Explain)
    return;
  OS << Tool << ": " << Rewrite.File << ": " << Changes << (Changes == 1 ? " change" : " changes") << ", "
     << Warnings << " not rewritten";
  if (Notes)
    OS << ", " << Notes << " left alone";
  OS << "\n";
}

/// The rewrite's edits as clang-apply-replacements reads them: one diagnostic per change, named after its
/// pass.
llvm::Error writeFixes(llvm::StringRef Path, const FileRewrite& Rewrite) {
  clang::tooling::TranslationUnitDiagnostics Fixes;
  Fixes.MainSourceFile = Rewrite.File;
  for (const Finding& Found : Rewrite.Findings) {
    if (Found.What != Finding::Kind::Change)
      continue;
    clang::tooling::DiagnosticMessage Message;
    Message.Message = Found.Message;
    Message.FilePath = Found.File;
    Message.FileOffset = Found.Offset;
    for (const PlannedEdit& Edit : Rewrite.Edits)
      if (Edit.FindingId == Found.Id)
        llvm::consumeError(Message.Fix[Edit.Replacement.getFilePath()].add(Edit.Replacement));
    Fixes.Diagnostics.emplace_back(("accel-rewrite-" + Found.Pass), Message,
                                   llvm::SmallVector<clang::tooling::DiagnosticMessage, 1>(),
                                   clang::tooling::Diagnostic::Warning, "");
  }
  std::string Text;
  llvm::raw_string_ostream Stream(Text);
  llvm::yaml::Output YAML(Stream);
  YAML << Fixes;
  Stream.flush();
  return writeFileAtomically(Path, Text);
}

/// A Makefile rule `Targets...: <every file the rewrite read>`, for ninja's DEPFILE (spaces escaped).
llvm::Error writeDepFile(llvm::StringRef Path, llvm::ArrayRef<std::string> Targets,
                         llvm::ArrayRef<std::string> Files) {
  auto Escape = [](llvm::StringRef Name) {
    std::string Out;
    for (char C : Name) {
      if (C == ' ' || C == '#')
        Out += '\\';
      if (C == '$')
        Out += '$';
      Out += C;
    }
    return Out;
  };
  std::string Text;
  for (const std::string& Target : Targets)
    Text += (Text.empty() ? "" : " ") + Escape(Target);
  Text += ":";
  for (const std::string& File : Files)
    Text += " \\\n  " + Escape(File);
  return writeFileAtomically(Path, Text + "\n");
}

int fail(llvm::Error Err, llvm::StringRef Context) {
  llvm::handleAllErrors(
      std::move(Err), [](const CompileError& Compile) { llvm::errs() << Compile.diagnostics(); },
      [&](const llvm::ErrorInfoBase& Other) {
        llvm::errs() << Tool << ": error: " << Other.message() << "\n";
      });
  if (!Context.empty())
    llvm::errs() << Tool << ": error: " << Context << "\n";
  return 1;
}

/// `Path` made absolute with its links resolved; fails naming `Option` when it does not exist.
llvm::Expected<std::string> existingRealPath(llvm::StringRef Path, llvm::StringRef Option) {
  llvm::SmallString<256> Real;
  if (std::error_code EC = llvm::sys::fs::real_path(Path, Real))
    return llvm::createStringError(EC, Option + ": cannot find '" + Path + "': " + EC.message());
  return Real.str().str();
}

/// One input file as given, as the compile database is asked for it (absolute), and its real path.
struct Input {
  std::string Given;
  std::string Absolute;
  std::string Real;
};

/// A header of the project that an input read: its text, and the edits of every input merged.
struct MergedHeader {
  std::string Original;
  std::vector<FileEdit> Edits;
  std::string Rewritten;
  bool changed() const { return Rewritten != Original; }
};

} // namespace

int runDriver(const clang::tooling::CompilationDatabase& Database, const DriverOptions& Options) {
  std::vector<Input> Inputs;
  for (const std::string& Given : Options.InputFiles) {
    if (!llvm::sys::fs::exists(Given))
      return fail(
          llvm::createStringError(std::make_error_code(std::errc::no_such_file_or_directory),
                                  "cannot read the input file '" + Given + "': No such file or directory"),
          "");
    llvm::SmallString<256> Absolute(Given);
    if (std::error_code EC = llvm::sys::fs::make_absolute(Absolute))
      return fail(llvm::createStringError(EC, "cannot resolve '" + Given + "': " + EC.message()), "");
    auto Real = existingRealPath(Given, "input file");
    if (!Real)
      return fail(Real.takeError(), "");
    if (llvm::any_of(Inputs, [&](const Input& Other) { return Other.Real == *Real; }))
      return fail(llvm::createStringError(llvm::inconvertibleErrorCode(),
                                          "the input file " + Given + " is given twice; name each file once"),
                  "");
    Inputs.push_back({Given, Absolute.str().str(), *Real});
  }

  passes::PassSettings Settings = Options.Settings;
  for (const std::string& Header : Options.Headers) {
    auto Real = existingRealPath(Header, "--headers");
    if (!Real)
      return fail(Real.takeError(), "");
    Settings.Headers.push_back(*Real);
  }
  std::string Root;
  if (!Options.OutputDir.empty()) {
    auto Real = existingRealPath(
        Options.Root.empty() ? llvm::sys::path::parent_path(Inputs.front().Real).str() : Options.Root,
        "--root");
    if (!Real)
      return fail(Real.takeError(), "");
    Root = *Real;
    for (const Input& In : Inputs)
      if (!passes::pathBelow(In.Real, Root))
        return fail(llvm::createStringError(llvm::inconvertibleErrorCode(),
                                            "--output-dir: the input file " + In.Given + " (" + In.Real +
                                                ") is not under the root " + Root +
                                                ", so it has no place in the output directory; give "
                                                "--root=DIR, a directory that holds every input and header"),
                    "");
    for (size_t K = 0; K < Settings.Headers.size(); ++K)
      if (Settings.Headers[K] != Root && !passes::pathBelow(Settings.Headers[K], Root))
        return fail(llvm::createStringError(llvm::inconvertibleErrorCode(),
                                            "--output-dir: the headers '" + Options.Headers[K] + "' (" +
                                                Settings.Headers[K] + ") are not under the root " + Root +
                                                ", so they have no place in the output directory; give "
                                                "--root=DIR, a directory that holds every input and header"),
                    "");
  }

  // Parse and rewrite every input; the headers' edits are merged, not yet applied.
  std::vector<FileRewrite> Rewrites;
  std::map<std::string, MergedHeader> Headers;
  PreambleCache Preambles(Options.PreambleCache);
  std::vector<PreambleUse> PreambleUses(Inputs.size());
  for (PreambleUse& Use : PreambleUses) {
    Use.Cache = Options.Preamble ? &Preambles : nullptr;
    Use.Trailer = RuntimeHeaderTrailer;
  }
  std::set<std::tuple<std::string, unsigned, std::string, std::string>> Printed;
  for (size_t K = 0; K < Inputs.size(); ++K) {
    const Input& In = Inputs[K];
    auto Rewrite =
        rewriteFile(Database, In.Absolute, runtimeFlags(Options), Options.Passes, Settings, &PreambleUses[K]);
    if (Rewrite && PreambleUses[K].Applied) {
      // The depfile names the headers the preamble read too: the parse over it did not open them.
      for (const std::string& Path : PreambleUses[K].Preamble->readFiles()) {
        llvm::SmallString<256> Real;
        if (!llvm::sys::fs::real_path(Path, Real))
          Rewrite->ReadFiles.push_back(Real.str().str());
      }
      llvm::sort(Rewrite->ReadFiles);
      Rewrite->ReadFiles.erase(std::unique(Rewrite->ReadFiles.begin(), Rewrite->ReadFiles.end()),
                               Rewrite->ReadFiles.end());
    }
    if (!PreambleUses[K].Problem.empty()) {
      llvm::errs() << Tool << ": warning: " << PreambleUses[K].Problem << "\n";
      PreambleUses[K].Problem.clear();
    }
    if (!Rewrite) {
      bool DoesNotCompile = Rewrite.errorIsA<CompileError>();
      return fail(Rewrite.takeError(),
                  DoesNotCompile
                      ? In.Given +
                            " does not compile (diagnostics above), so it was not rewritten and nothing "
                            "was written; fix the errors, or check the flags after '--' or the compile "
                            "database given with -p"
                      : std::string());
    }
    for (HeaderEdits& Header : Rewrite->Headers) {
      MergedHeader& Merged = Headers[Header.File];
      Merged.Original = Header.Original;
      for (FileEdit& Edit : Header.Edits) {
        bool Known = llvm::any_of(Merged.Edits, [&](const FileEdit& Other) {
          return Other.Offset == Edit.Offset && Other.Length == Edit.Length && Other.Text == Edit.Text &&
                 Other.Header == Edit.Header;
        });
        if (Known)
          continue;
        if (Inputs.size() > 1)
          Edit.Origin += " in the rewrite of " + In.Given;
        Merged.Edits.push_back(std::move(Edit));
      }
      Header.Edits.clear();
    }
    Rewrites.push_back(std::move(*Rewrite));
  }
  ChangedSites ChangedAt;
  for (const FileRewrite& Rewrite : Rewrites)
    for (const Finding& Found : Rewrite.Findings)
      if (Found.What == Finding::Kind::Change)
        ChangedAt.insert({Found.RealFile, Found.Offset, Found.Pass});
  for (const FileRewrite& Rewrite : Rewrites)
    printFindings(Rewrite, Options.Explain, !Settings.Headers.empty(), ChangedAt, Printed);
  for (const passes::PassInfo& Pass : Options.Passes) {
    if (Pass.WhenNothingFound.empty())
      continue;
    bool Found = llvm::any_of(Rewrites, [&](const FileRewrite& Rewrite) {
      return llvm::any_of(Rewrite.Findings, [&](const Finding& F) { return F.Pass == Pass.Name; });
    });
    if (!Found)
      llvm::errs() << Tool << ": warning: " << Pass.WhenNothingFound << " [" << Pass.Name << "]\n";
  }
  std::map<std::string, std::string> ChangedHeaders;
  for (auto& [Path, Header] : Headers) {
    auto Planned = planEdits(Path, Header.Original, Header.Edits);
    llvm::Expected<std::string> Rewritten =
        Planned ? applyEdits(Header.Original, *Planned) : llvm::Expected<std::string>(Planned.takeError());
    if (!Rewritten)
      return fail(Rewritten.takeError(),
                  "the header " + Path +
                      (Inputs.size() > 1 ? " is rewritten differently by the input files that include it "
                                           "(the edits above overlap); "
                                         : " could not be rewritten; ") +
                      "nothing was written. Rewrite the files one at a time to see each one's edits, and "
                      "change the header by hand where they differ");
    Header.Rewritten = std::move(*Rewritten);
    if (Header.changed())
      ChangedHeaders[Path] = Header.Rewritten;
  }

  bool Changed = !ChangedHeaders.empty();
  for (const FileRewrite& Rewrite : Rewrites)
    Changed = Changed || Rewrite.Rewritten != Rewrite.Original;
  if (!Options.ExportFixes.empty())
    if (llvm::Error Err = writeFixes(Options.ExportFixes, Rewrites.front()))
      return fail(std::move(Err), "");
  if (Options.Check) {
    for (size_t K = 0; K < Rewrites.size(); ++K)
      if (Rewrites[K].Rewritten != Rewrites[K].Original)
        llvm::errs() << Tool << ": " << Inputs[K].Given << " needs rewriting (run accel-rewrite -i "
                     << Inputs[K].Given << ", or see --diff)\n";
    for (const auto& [Path, Text] : ChangedHeaders)
      llvm::errs() << Tool << ": " << Path << " needs rewriting (a header of --headers)\n";
    return Changed ? 1 : 0;
  }
  if (!ChangedHeaders.empty() && !Options.InPlace && Options.OutputDir.empty() && !Options.Diff)
    return fail(llvm::createStringError(llvm::inconvertibleErrorCode(),
                                        "the rewrite changes the header " + ChangedHeaders.begin()->first +
                                            (ChangedHeaders.size() > 1 ? " and others" : "") +
                                            ", and -o or standard output holds one file; write the headers "
                                            "too with --output-dir=DIR, or in place with -i"),
                "nothing was written");

  for (size_t K = 0; K < Rewrites.size(); ++K) {
    const FileRewrite& Rewrite = Rewrites[K];
    if (Rewrite.Rewritten == Rewrite.Original && ChangedHeaders.empty())
      continue;
    if (llvm::Error Err = checkRewriteCompiles(Database, Inputs[K].Absolute, Rewrite.Original,
                                               Rewrite.Rewritten, ChangedHeaders, Options, PreambleUses[K])) {
      std::string Cause = "change the code they point at by hand (an accelerator under another name, say), "
                          "or report this with the input file";
      // The diagnostics name places in the rewritten texts, whose lines moved by those the rewrite inserted
      // above them: each is given at the line of the file as it is.
      std::string Directory = compileDirectory(Database, Inputs[K].Absolute);
      std::vector<RewrittenFile> Rewritten = {
          {Rewrite.Original, Rewrite.Rewritten,
           [&, K](llvm::StringRef Name) { return realPathIn(Directory, Name) == Inputs[K].Real; }}};
      for (const auto& [Path, Header] : Headers)
        if (Header.changed())
          Rewritten.push_back({Header.Original, Header.Rewritten, [&, Path = Path](llvm::StringRef Name) {
                                 return realPathIn(Directory, Name) == Path;
                               }});
      Err = llvm::handleErrors(std::move(Err), [&](std::unique_ptr<CompileError> Compile) -> llvm::Error {
        if (llvm::Regex("conversion from '(accelerate::)?Optimizer' to '(const )?torch::optim::")
                .match(Compile->diagnostics()))
          Cause = "a prepared optimizer is an accelerate::Optimizer, and here one reaches a "
                  "torch::optim::<type>& the rewriter could not retype (it retypes the parameters of "
                  "functions and lambdas called with the optimizer, and of functions handed on beside it); "
                  "where the errors point, through a std::function, a function pointer or a template, write "
                  "accelerate::Optimizer& (or torch::optim::Optimizer&) and run again";
        return llvm::make_error<CompileError>(atOriginalLines(Compile->diagnostics(), Rewritten));
      });
      return fail(std::move(Err),
                  "the rewritten " + Inputs[K].Given +
                      (ChangedHeaders.empty() ? std::string() : " (with the rewritten headers)") +
                      " would not compile (diagnostics above, each at its line in the file as it is, with "
                      "its line and column in the rewritten text where the rewrite moved it); the rewrite "
                      "was abandoned and nothing was written. The input compiles, so the rewrite caused "
                      "these errors: " +
                      Cause + ". The runtime headers checked against are in " + Options.RuntimeIncludeDir);
    }
  }

  if (Options.Diff) {
    for (size_t K = 0; K < Rewrites.size(); ++K)
      llvm::outs() << unifiedDiff(Inputs[K].Given, Inputs[K].Given, Rewrites[K].Original,
                                  Rewrites[K].Rewritten);
    for (const auto& [Path, Header] : Headers)
      llvm::outs() << unifiedDiff(Path, Path, Header.Original, Header.Rewritten);
    llvm::outs().flush();
    return 0;
  }

  auto Output = [&](llvm::StringRef Path, llvm::StringRef Original, llvm::StringRef Rewritten) {
    return Options.LineDirectives ? withLineDirectives(Path, Original, Rewritten) : Rewritten.str();
  };
  // What goes where: everything is computed before the first file is written.
  std::vector<std::pair<std::string, std::string>> Writes;
  std::vector<std::string> Targets;
  for (size_t K = 0; K < Rewrites.size(); ++K) {
    const FileRewrite& Rewrite = Rewrites[K];
    std::string Text = Output(Inputs[K].Absolute, Rewrite.Original, Rewrite.Rewritten);
    if (Options.InPlace) {
      Targets.push_back(Inputs[K].Given);
      if (Rewrite.Rewritten != Rewrite.Original)
        Writes.push_back({Inputs[K].Given, std::move(Text)});
    } else if (!Options.OutputDir.empty()) {
      llvm::SmallString<256> Path(Options.OutputDir);
      llvm::sys::path::append(Path, *passes::pathBelow(Inputs[K].Real, Root));
      Targets.push_back(Path.str().str());
      Writes.push_back({Path.str().str(), std::move(Text)});
    } else if (!Options.OutputFile.empty()) {
      Targets.push_back(Options.OutputFile);
      Writes.push_back({Options.OutputFile, std::move(Text)});
    } else {
      llvm::outs() << Text;
      llvm::outs().flush();
    }
  }
  // Headers: in place when changed; into the output directory always, so that a copied header's quoted
  // includes find the other copies (a file that did not change is copied, and rewritten only when its text
  // differs, so that what includes it is not rebuilt).
  std::vector<std::pair<std::string, std::string>> HeaderWrites;
  for (const auto& [Path, Header] : Headers) {
    if (Options.InPlace && Header.changed())
      Writes.push_back({Path, Header.Rewritten});
    if (Options.OutputDir.empty())
      continue;
    llvm::SmallString<256> Copy(Options.OutputDir);
    llvm::sys::path::append(Copy, *passes::pathBelow(Path, Root));
    HeaderWrites.push_back({Copy.str().str(), Output(Path, Header.Original, Header.Rewritten)});
  }
  for (auto& [Path, Text] : HeaderWrites) {
    auto Existing = llvm::MemoryBuffer::getFile(Path);
    if (!Existing || (*Existing)->getBuffer() != Text)
      Writes.push_back({Path, std::move(Text)});
  }
  for (const auto& [Path, Text] : Writes) {
    if (!Options.OutputDir.empty())
      if (std::error_code EC = llvm::sys::fs::create_directories(llvm::sys::path::parent_path(Path)))
        return fail(
            llvm::createStringError(EC, "cannot create the directory of " + Path + ": " + EC.message()), "");
    if (llvm::Error Err = writeFileAtomically(Path, Text))
      return fail(std::move(Err), "");
  }
  if (!Options.DepFile.empty()) {
    std::set<std::string> Read;
    for (const FileRewrite& Rewrite : Rewrites)
      Read.insert(Rewrite.ReadFiles.begin(), Rewrite.ReadFiles.end());
    if (llvm::Error Err =
            writeDepFile(Options.DepFile, Targets, std::vector<std::string>(Read.begin(), Read.end())))
      return fail(std::move(Err), "");
  }
  return 0;
}

} // namespace accelerate::rewriter
