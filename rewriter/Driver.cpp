// rewriter/Driver.cpp: parse, rewrite, report, check, write — and never write anything after an error.
#include "rewriter/Driver.h"

#include "passes/Registry.h"
#include "rewriter/OutputFile.h"
#include "rewriter/PassRunner.h"
#include "rewriter/ToolRunner.h"

#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
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

void printFindings(const FileRewrite& Rewrite, bool Explain) {
  llvm::raw_ostream& OS = llvm::errs();
  for (const Finding& Found : Rewrite.Findings) {
    std::string Where = Found.File + ":" + std::to_string(Found.Line) + ":" + std::to_string(Found.Column);
    switch (Found.What) {
    case Finding::Kind::NotRewritten:
      OS << Where << ": warning: " << Found.Message << "\n";
      break;
    case Finding::Kind::OutsideMainFile:
      OS << Where << ": warning: not rewritten: only the main file (" << Rewrite.File
         << ") is rewritten for now; change this by hand: ";
      llvm::interleave(Found.Edits, OS, "; ");
      OS << " (pass '" << Found.Pass << "': " << Found.Message << ")\n";
      break;
    case Finding::Kind::Change:
      if (Explain) {
        OS << Where << ": note: [" << Found.Pass << "] ";
        llvm::interleave(Found.Edits, OS, "; ");
        OS << ": " << Found.Message << "\n";
      }
      break;
    }
  }
  if (!Explain)
    return;
  unsigned Changes = 0, Left = 0;
  for (const Finding& Found : Rewrite.Findings)
    ++(Found.What == Finding::Kind::Change ? Changes : Left);
  OS << Tool << ": " << Rewrite.File << ": " << Changes << (Changes == 1 ? " change" : " changes") << ", "
     << Left << " not rewritten\n";
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

  auto Rewrite = rewriteFile(Database, File, CompileFlags{Options.ResourceDir, {}}, passes::allPasses());
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
  if (Changed)
    if (llvm::Error Err = checkRewriteCompiles(Database, File, Rewrite->Rewritten, Options))
      return fail(std::move(Err),
                  "the rewritten " + Options.InputFile +
                      " would not compile (diagnostics above, in the rewritten text); the "
                      "rewrite was abandoned and nothing was written. The input compiles, so "
                      "the rewrite caused these errors: change the code they point at by hand "
                      "(an accelerator under another name, say), or report this with the input "
                      "file. The runtime headers checked against are in " +
                      Options.RuntimeIncludeDir);

  if (Options.InPlace) {
    if (Changed)
      if (llvm::Error Err = writeFileAtomically(Options.InputFile, Rewrite->Rewritten))
        return fail(std::move(Err), "");
  } else if (!Options.OutputFile.empty()) {
    if (llvm::Error Err = writeFileAtomically(Options.OutputFile, Rewrite->Rewritten))
      return fail(std::move(Err), "");
  } else {
    llvm::outs() << Rewrite->Rewritten;
    llvm::outs().flush();
  }
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
