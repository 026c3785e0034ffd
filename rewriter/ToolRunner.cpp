// rewriter/ToolRunner.cpp: one compile of one file, with our flags, an optional in-memory text and quiet
// success.
#include "rewriter/ToolRunner.h"

#include "rewriter/Preamble.h"

#include "clang/Basic/DiagnosticOptions.h"
#include "clang/Basic/FileManager.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "clang/Tooling/ArgumentsAdjusters.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/VirtualFileSystem.h"
#include "llvm/Support/raw_ostream.h"

namespace accelerate::rewriter {

char CompileError::ID;

void CompileError::log(llvm::raw_ostream& OS) const {
  OS << Diagnostics;
}

std::string CompileError::firstError() const {
  llvm::SmallVector<llvm::StringRef> Lines;
  llvm::StringRef(Diagnostics).split(Lines, '\n');
  for (llvm::StringRef Line : Lines)
    if (Line.contains("error: "))
      return Line.trim().str();
  return llvm::StringRef(Diagnostics).trim().str();
}

std::vector<std::string> commandLineFor(const clang::tooling::CompileCommand& Command,
                                        const CompileFlags& Flags) {
  namespace tooling = clang::tooling;
  // Ours go first (the command may override them); the caller's appended flags go last. Without carets in the
  // compiler's own options, CompilerInstance does not print "N errors generated." straight to stderr ahead of
  // the diagnostics we buffer; our printer keeps its carets.
  std::vector<std::string> Appended = Flags.AppendedArgs;
  Appended.push_back("-fno-caret-diagnostics");
  tooling::ArgumentsAdjuster Adjust = tooling::getClangStripOutputAdjuster();
  for (tooling::ArgumentsAdjuster Next :
       {tooling::getClangStripDependencyFileAdjuster(), tooling::getClangSyntaxOnlyAdjuster(),
        tooling::getInsertArgumentAdjuster(("-resource-dir=" + Flags.ResourceDir).c_str(),
                                           tooling::ArgumentInsertPosition::BEGIN),
        tooling::getInsertArgumentAdjuster(Appended, tooling::ArgumentInsertPosition::END)})
    Adjust = tooling::combineAdjusters(std::move(Adjust), std::move(Next));
  return Adjust(Command.CommandLine, Command.Filename);
}

llvm::Error runOnFile(const clang::tooling::CompilationDatabase& Database, llvm::StringRef File,
                      const CompileFlags& Flags, clang::tooling::FrontendActionFactory& Action,
                      std::optional<llvm::StringRef> Contents,
                      llvm::ArrayRef<std::pair<std::string, std::string>> OtherFiles, PreambleUse* Preamble) {
  namespace tooling = clang::tooling;
  std::vector<tooling::CompileCommand> Commands = Database.getCompileCommands(File);
  if (Commands.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no compile command for " + File +
                                       " in the compile database; add the file to it, or give its flags "
                                       "after '--' (accel-rewrite FILE -- -std=c++17 -I...)");
  // A database may list a file several times (one entry per target); the first command is enough to parse it.
  const tooling::CompileCommand& Command = Commands.front();

  std::vector<std::string> CommandLine = commandLineFor(Command, Flags);

  auto Overlay = llvm::makeIntrusiveRefCnt<llvm::vfs::OverlayFileSystem>(llvm::vfs::getRealFileSystem());
  auto InMemory = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  Overlay->pushOverlay(InMemory);
  if (Contents)
    InMemory->addFile(File, 0, llvm::MemoryBuffer::getMemBufferCopy(*Contents, File));
  for (const auto& [Path, Text] : OtherFiles)
    InMemory->addFile(Path, 0, llvm::MemoryBuffer::getMemBufferCopy(Text, Path));
  if (std::error_code EC = Overlay->setCurrentWorkingDirectory(Command.Directory))
    return llvm::createStringError(EC, "cannot enter the compile command's directory '" + Command.Directory +
                                           "': " + EC.message());
  auto Files = llvm::makeIntrusiveRefCnt<clang::FileManager>(clang::FileSystemOptions(), Overlay);

  std::string Diagnostics;
  llvm::raw_string_ostream DiagnosticStream(Diagnostics);
  auto DiagnosticOptions = llvm::makeIntrusiveRefCnt<clang::DiagnosticOptions>();
  DiagnosticOptions->ShowColors = llvm::errs().has_colors();
  clang::TextDiagnosticPrinter Printer(DiagnosticStream, DiagnosticOptions.get());

  std::optional<OverPreamble> WithPreamble;
  if (Preamble)
    WithPreamble.emplace(Action, *Preamble);
  tooling::ToolInvocation Invocation(
      std::move(CommandLine), WithPreamble ? static_cast<tooling::ToolAction*>(&*WithPreamble) : &Action,
      Files.get(), std::make_shared<clang::PCHContainerOperations>());
  Invocation.setDiagnosticConsumer(&Printer);
  if (!Invocation.run())
    return llvm::make_error<CompileError>(std::move(Diagnostics));
  return llvm::Error::success();
}

} // namespace accelerate::rewriter
