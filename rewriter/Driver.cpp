// rewriter/Driver.cpp: parse, rewrite, report, check, write — and never write anything after an error.
#include "rewriter/Driver.h"

#include "passes/Registry.h"
#include "rewriter/OutputFile.h"
#include "rewriter/PassRunner.h"
#include "rewriter/TextDiff.h"
#include "rewriter/ToolRunner.h"

#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Tooling/Core/Diagnostic.h"
#include "clang/Tooling/DiagnosticsYaml.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

namespace accelerate::rewriter {
namespace {

constexpr llvm::StringLiteral Tool = "accel-rewrite";

/// A syntax-only parse that also confirms it parsed the text we gave it, not the file on disk: a compile
/// database that names the file by another path would otherwise make the safety check vacuous.
class CheckTextAction : public clang::SyntaxOnlyAction {
public:
  CheckTextAction(llvm::StringRef Expected, bool& SawExpected)
      : Expected(Expected), SawExpected(SawExpected) {}
  void EndSourceFileAction() override {
    const clang::SourceManager& SM = getCompilerInstance().getSourceManager();
    SawExpected = SM.getBufferData(SM.getMainFileID()) == Expected;
    clang::SyntaxOnlyAction::EndSourceFileAction();
  }

private:
  llvm::StringRef Expected;
  bool& SawExpected;
};

class CheckTextFactory : public clang::tooling::FrontendActionFactory {
public:
  CheckTextFactory(llvm::StringRef Expected, bool& SawExpected)
      : Expected(Expected), SawExpected(SawExpected) {}
  std::unique_ptr<clang::FrontendAction> create() override {
    return std::make_unique<CheckTextAction>(Expected, SawExpected);
  }

private:
  llvm::StringRef Expected;
  bool& SawExpected;
};

/// Compiles the rewritten text in memory with the file's flags plus the runtime's include directory, which
/// goes last so that a directory the command names (a test's mirror headers) is searched first.
llvm::Error checkRewriteCompiles(const clang::tooling::CompilationDatabase& Database, llvm::StringRef File,
                                 llvm::StringRef Rewritten, const DriverOptions& Options) {
  CompileFlags Flags{Options.ResourceDir, {"-I" + Options.RuntimeIncludeDir}};
  bool SawRewrittenText = false;
  CheckTextFactory Factory(Rewritten, SawRewrittenText);
  if (llvm::Error Err = runOnFile(Database, File, Flags, Factory, Rewritten))
    return Err;
  if (!SawRewrittenText)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the check of the rewritten text parsed " + File +
                                       " from disk instead (its compile command names it by another path); "
                                       "pass the path as the compile database writes it");
  return llvm::Error::success();
}

std::string place(const Finding& Found) {
  return Found.File + ":" + std::to_string(Found.Line) + ":" + std::to_string(Found.Column);
}

/// Warnings always; changes and notes with Explain; then one summary line when there is anything to say.
void printFindings(const FileRewrite& Rewrite, bool Explain) {
  llvm::raw_ostream& OS = llvm::errs();
  unsigned Changes = 0, Warnings = 0, Notes = 0;
  for (const Finding& Found : Rewrite.Findings) {
    switch (Found.What) {
    case Finding::Kind::NotRewritten:
      ++Warnings;
      OS << place(Found) << ": warning: " << Found.Message << " [" << Found.Pass << "]\n";
      break;
    case Finding::Kind::OutsideMainFile:
      ++Warnings;
      OS << place(Found) << ": warning: not rewritten: only the main file (" << Rewrite.File
         << ") is rewritten for now; change this by hand: ";
      llvm::interleave(Found.Edits, OS, "; ");
      OS << " (pass '" << Found.Pass << "': " << Found.Message << ")\n";
      break;
    case Finding::Kind::Note:
      ++Notes;
      if (Explain)
        OS << place(Found) << ": note: [" << Found.Pass << "] " << Found.Message << "\n";
      break;
    case Finding::Kind::Change:
      ++Changes;
      if (Explain) {
        OS << place(Found) << ": note: [" << Found.Pass << "] ";
        llvm::interleave(Found.Edits, OS, "; ");
        OS << ": " << Found.Message << "\n";
      }
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

/// A Makefile rule `Target: <every file the rewrite read>`, for ninja's DEPFILE (spaces escaped).
llvm::Error writeDepFile(llvm::StringRef Path, llvm::StringRef Target, llvm::ArrayRef<std::string> Files) {
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
  std::string Text = Escape(Target) + ":";
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

} // namespace

int runDriver(const clang::tooling::CompilationDatabase& Database, const DriverOptions& Options) {
  if (!llvm::sys::fs::exists(Options.InputFile))
    return fail(llvm::createStringError(std::make_error_code(std::errc::no_such_file_or_directory),
                                        "cannot read the input file '" + Options.InputFile +
                                            "': No such file or directory"),
                "");
  llvm::SmallString<256> File(Options.InputFile);
  if (std::error_code EC = llvm::sys::fs::make_absolute(File))
    return fail(llvm::createStringError(EC, "cannot resolve '" + Options.InputFile + "': " + EC.message()),
                "");

  auto Rewrite =
      rewriteFile(Database, File, CompileFlags{Options.ResourceDir, {}}, Options.Passes, Options.Settings);
  if (!Rewrite) {
    bool DoesNotCompile = Rewrite.errorIsA<CompileError>();
    return fail(Rewrite.takeError(),
                DoesNotCompile
                    ? Options.InputFile +
                          " does not compile (diagnostics above), so it was not rewritten and nothing "
                          "was written; fix the errors, or check the flags after '--' or the compile "
                          "database given with -p"
                    : std::string());
  }
  printFindings(*Rewrite, Options.Explain);

  bool Changed = Rewrite->Rewritten != Rewrite->Original;
  if (!Options.ExportFixes.empty())
    if (llvm::Error Err = writeFixes(Options.ExportFixes, *Rewrite))
      return fail(std::move(Err), "");
  if (Options.Check) {
    if (Changed)
      llvm::errs() << Tool << ": " << Options.InputFile << " needs rewriting (run accel-rewrite -i "
                   << Options.InputFile << ", or see --diff)\n";
    return Changed ? 1 : 0;
  }

  if (Changed)
    if (llvm::Error Err = checkRewriteCompiles(Database, File, Rewrite->Rewritten, Options)) {
      std::string Cause = "change the code they point at by hand (an accelerator under another name, say), "
                          "or report this with the input file";
      Err = llvm::handleErrors(std::move(Err), [&](std::unique_ptr<CompileError> Compile) -> llvm::Error {
        if (llvm::Regex("conversion from '(accelerate::)?Optimizer' to '(const )?torch::optim::")
                .match(Compile->diagnostics()))
          Cause = "a prepared optimizer is an accelerate::Optimizer, and here one reaches a "
                  "torch::optim::<type>& the rewriter could not retype (it retypes the parameters of "
                  "functions and lambdas called with the optimizer, and of functions handed on beside it); "
                  "where the errors point, through a std::function, a function pointer or a template, write "
                  "accelerate::Optimizer& (or torch::optim::Optimizer&) and run again";
        return llvm::Error(std::move(Compile));
      });
      return fail(std::move(Err), "the rewritten " + Options.InputFile +
                                      " would not compile (diagnostics above, in the rewritten text); the "
                                      "rewrite was abandoned and nothing was written. The input compiles, "
                                      "so the rewrite caused these errors: " +
                                      Cause + ". The runtime headers checked against are in " +
                                      Options.RuntimeIncludeDir);
    }

  if (Options.Diff) {
    llvm::outs() << unifiedDiff(Options.InputFile, Options.InputFile, Rewrite->Original, Rewrite->Rewritten);
    llvm::outs().flush();
    return 0;
  }
  std::string Output = Options.LineDirectives
                           ? withLineDirectives(File, Rewrite->Original, Rewrite->Rewritten)
                           : Rewrite->Rewritten;
  std::string Target = Options.InPlace ? Options.InputFile : Options.OutputFile;
  if (Options.InPlace) {
    if (Changed)
      if (llvm::Error Err = writeFileAtomically(Options.InputFile, Output))
        return fail(std::move(Err), "");
  } else if (!Options.OutputFile.empty()) {
    if (llvm::Error Err = writeFileAtomically(Options.OutputFile, Output))
      return fail(std::move(Err), "");
  } else {
    llvm::outs() << Output;
    llvm::outs().flush();
  }
  if (!Options.DepFile.empty())
    if (llvm::Error Err = writeDepFile(Options.DepFile, Target, Rewrite->ReadFiles))
      return fail(std::move(Err), "");
  return 0;
}

std::string findRuntimeIncludeDir(llvm::StringRef ExecutablePath, llvm::StringRef BuiltInDir) {
  llvm::SmallString<256> Installed =
      llvm::sys::path::parent_path(llvm::sys::path::parent_path(ExecutablePath));
  llvm::sys::path::append(Installed, "include");
  llvm::SmallString<256> Header(Installed);
  llvm::sys::path::append(Header, "accelerate", "accelerate.h");
  return llvm::sys::fs::exists(Header) ? Installed.str().str() : BuiltInDir.str();
}

} // namespace accelerate::rewriter
