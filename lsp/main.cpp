// lsp/main.cpp: accel-lsp, the language server: `accel-lsp [--compile-commands-dir=DIR]`, spoken to over
// stdin and stdout by an editor's LSP client.
#include "lsp/Server.h"
#include "lsp/Transport.h"
#include "passes/Registry.h"
#include "rewriter/CheckCompiles.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <variant>
#include <vector>

namespace cl = llvm::cl;

static cl::OptionCategory Category("accel-lsp options");
static cl::opt<std::string> CompileCommandsDir(
    "compile-commands-dir",
    cl::desc("The directory of compile_commands.json (default: the file's directory or a parent, or a build/ "
             "folder of one, as clangd looks)"),
    cl::value_desc("DIR"), cl::cat(Category));
static cl::opt<unsigned>
    MaxFileBytes("max-file-bytes", cl::desc("Documents larger than this are not analysed (default 1048576)"),
                 cl::init(1u << 20), cl::value_desc("N"), cl::cat(Category));

int main(int argc, char** argv) {
  llvm::InitLLVM Init(argc, argv);
  cl::HideUnrelatedOptions(Category);
  cl::SetVersionPrinter(
      [](llvm::raw_ostream& OS) { OS << "accel-lsp 0.1 (LLVM " LLVM_VERSION_STRING ")\n"; });
  cl::ParseCommandLineOptions(
      argc, argv,
      "accel-lsp: a language server that offers accel-rewrite's rewrite of a libtorch "
      "training loop as a code action, and the accelerate lint checks as diagnostics. "
      "Editors start it and speak LSP over its stdin and stdout; see docs/ide.md.\n");
  if (!CompileCommandsDir.empty() && !llvm::sys::fs::is_directory(CompileCommandsDir)) {
    llvm::errs() << "accel-lsp: --compile-commands-dir=" << CompileCommandsDir
                 << " is not a directory; name the build directory that holds compile_commands.json\n";
    return 2;
  }
  accelerate::lsp::ServerOptions Options;
  Options.CompileCommandsDir = CompileCommandsDir;
  if (!Options.CompileCommandsDir.empty()) {
    llvm::SmallString<256> Absolute(Options.CompileCommandsDir);
    llvm::sys::fs::make_absolute(Absolute);
    Options.CompileCommandsDir = Absolute.str().str();
  }
  Options.MaxFileBytes = MaxFileBytes;
  Options.ResourceDir = ACCEL_CLANG_RESOURCE_DIR;
  Options.RuntimeIncludeDir = accelerate::rewriter::findRuntimeIncludeDir(
      llvm::sys::fs::getMainExecutable(argv[0], reinterpret_cast<void*>(&main)), ACCEL_RUNTIME_INCLUDE_DIR);
  // The passes on by default (an empty request selects them and has no problem to report).
  Options.Passes = std::get<std::vector<accelerate::passes::PassInfo>>(
      accelerate::passes::selectPasses(accelerate::passes::PassRequest{}));

  try {
    accelerate::lsp::Transport Channel(stdin, stdout);
    accelerate::lsp::Server Server(std::move(Options), Channel);
    int Status = Server.run();
    std::fflush(stdout);
    // A parse still running on the worker thread is abandoned: LSP's `exit` ends the process now.
    std::_Exit(Status);
  } catch (const std::exception& Failure) {
    llvm::errs() << "accel-lsp: stopped by an internal error: " << Failure.what() << "\n";
    std::fflush(stdout);
    std::_Exit(3);
  }
}
