// rewriter/CheckCompiles.cpp: a second compile of a rewritten main file with the options of the first.
#include "rewriter/CheckCompiles.h"

#include "rewriter/Preamble.h"
#include "rewriter/ToolRunner.h"

#include "clang/Basic/FileManager.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Basic/TargetInfo.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "clang/Lex/HeaderSearch.h"
#include "clang/Lex/Preprocessor.h"
#include "clang/Lex/PreprocessorOptions.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/VirtualFileSystem.h"
#include "llvm/Support/raw_ostream.h"

namespace accelerate::rewriter {

llvm::Error checkCompilesLikeParse(const clang::Preprocessor& PP, llvm::StringRef Rewritten,
                                   llvm::StringRef RuntimeIncludeDir) {
  const clang::SourceManager& SM = PP.getSourceManager();
  auto Main = SM.getFileEntryRefForID(SM.getMainFileID());
  if (!Main)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the parse has no main file on disk to check the rewrite against");
  // The main file under the name the parse opened it by, in the parse's file system (whose working
  // directory is the compile command's).
  llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> Base = SM.getFileManager().getVirtualFileSystemPtr();
  llvm::SmallString<256> MainPath(Main->getName());
  if (std::error_code EC = Base->makeAbsolute(MainPath))
    return llvm::createStringError(EC, "cannot resolve " + MainPath + ": " + EC.message());

  clang::CompilerInvocation Invocation;
  Invocation.getLangOpts() = PP.getLangOpts();
  Invocation.getTargetOpts() = PP.getTargetInfo().getTargetOpts();
  Invocation.getHeaderSearchOpts() = PP.getHeaderSearchInfo().getHeaderSearchOpts();
  Invocation.getPreprocessorOpts() = PP.getPreprocessorOpts();
  return checkCompilesWith(Invocation, Base, MainPath, Rewritten, RuntimeIncludeDir);
}

llvm::Error checkCompilesWith(const clang::CompilerInvocation& Original,
                              llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> Files, llvm::StringRef MainPath,
                              llvm::StringRef Rewritten, llvm::StringRef RuntimeIncludeDir,
                              const ParsePreamble* Preamble, llvm::StringRef PreambleSource,
                              bool* ReusedPreamble) {
  if (ReusedPreamble)
    *ReusedPreamble = false;
  std::string Checked = Rewritten.str();
  if (Preamble && !PreambleSource.empty()) {
    if (std::optional<std::string> Over =
            textOverPreamble(PreambleSource, Preamble->bounds().Size, Rewritten))
      Checked = std::move(*Over);
  }
  auto Invocation = std::make_shared<clang::CompilerInvocation>(Original);
  clang::PreprocessorOptions& Preprocessor = Invocation->getPreprocessorOpts();
  Preprocessor.clearRemappedFiles();
  if (Preprocessor.PrecompiledPreambleBytes.first != 0) {
    // The parse's own precompiled preamble (an ASTUnit's) is not this text's.
    Preprocessor.PrecompiledPreambleBytes = {0, false};
    Preprocessor.ImplicitPCHInclude.clear();
  }
  if (!RuntimeIncludeDir.empty())
    Invocation->getHeaderSearchOpts().AddPath(RuntimeIncludeDir, clang::frontend::Angled,
                                              /*IsFramework=*/false, /*IgnoreSysRoot=*/true);
  const clang::LangOptions& Lang = Invocation->getLangOpts();
  clang::FrontendOptions& Frontend = Invocation->getFrontendOpts();
  Frontend.Inputs = {clang::FrontendInputFile(
      MainPath, clang::InputKind(Lang.CPlusPlus ? clang::Language::CXX : clang::Language::C))};
  Frontend.ProgramAction = clang::frontend::ParseSyntaxOnly;
  Invocation->getDiagnosticOpts().ShowCarets = false;
  Invocation->getDiagnosticOpts().ShowColors = false;

  // The rewritten text over the main file, in the caller's file system (its working directory included, so
  // that relative include paths resolve as they did).
  auto Overlay = llvm::makeIntrusiveRefCnt<llvm::vfs::OverlayFileSystem>(Files);
  auto InMemory = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  Overlay->pushOverlay(InMemory);
  InMemory->addFile(MainPath, 0, llvm::MemoryBuffer::getMemBufferCopy(Checked, MainPath));
  if (auto Directory = Files->getCurrentWorkingDirectory())
    Overlay->setCurrentWorkingDirectory(*Directory);
  llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> CheckFiles = Overlay;

  std::unique_ptr<llvm::MemoryBuffer> Text = llvm::MemoryBuffer::getMemBufferCopy(Checked, MainPath);
  bool Reused = false;
  if (Preamble && Preamble->fits(Checked, *CheckFiles)) {
    // The text begins with the preamble's bytes: its PCH stands for them; the main file is `Text`.
    Preamble->apply(*Invocation, CheckFiles, Text.get());
    Invocation->getPreprocessorOpts().RetainRemappedFileBuffers = true;
    Reused = true;
  }

  std::string Diagnostics;
  llvm::raw_string_ostream DiagnosticStream(Diagnostics);
  clang::CompilerInstance Compiler(std::make_shared<clang::PCHContainerOperations>());
  Compiler.setInvocation(std::move(Invocation));
  Compiler.createDiagnostics(
      new clang::TextDiagnosticPrinter(DiagnosticStream, &Compiler.getInvocation().getDiagnosticOpts()),
      /*ShouldOwnClient=*/true);
  Compiler.getDiagnostics().setSuppressSystemWarnings(true);
  Compiler.getDiagnostics().setIgnoreAllWarnings(true);
  Compiler.createFileManager(CheckFiles);
  std::unique_ptr<clang::FrontendAction> Action = std::make_unique<clang::SyntaxOnlyAction>();
  if (Reused)
    Action = overPreamble(std::move(Action));
  bool Parsed = Compiler.ExecuteAction(*Action);
  if (ReusedPreamble)
    *ReusedPreamble = Reused;
  if (!Parsed || Compiler.getDiagnostics().hasErrorOccurred()) {
    DiagnosticStream.flush();
    return llvm::make_error<CompileError>(std::move(Diagnostics));
  }
  return llvm::Error::success();
}

std::optional<std::string> textOverPreamble(llvm::StringRef Original, unsigned PreambleSize,
                                            llvm::StringRef Rewritten) {
  PreambleSize = std::min<size_t>(PreambleSize, Original.size());
  llvm::StringRef Preamble = Original.take_front(PreambleSize);
  if (Rewritten.starts_with(Preamble))
    return Rewritten.str();
  // Where the rewrite first differs: the start of the lines it inserted.
  size_t Common = 0;
  while (Common < PreambleSize && Common < Rewritten.size() && Original[Common] == Rewritten[Common])
    ++Common;
  if (Common > 0 && Original[Common - 1] != '\n')
    return std::nullopt;
  // What the preamble ends with after that point: whitespace and comments only (the preamble ends at the
  // first token that is not a directive, with the comments before it), no directive.
  llvm::StringRef Tail = Preamble.drop_front(Common);
  if (Tail.contains('#'))
    return std::nullopt;
  // The inserted lines: whole lines, each a directive, followed by the same tail.
  for (size_t Length = 1; Length <= 4096 && Common + Length + Tail.size() <= Rewritten.size(); ++Length) {
    if (Rewritten[Common + Length - 1] != '\n' || Rewritten.substr(Common + Length, Tail.size()) != Tail)
      continue;
    llvm::StringRef Inserted = Rewritten.substr(Common, Length);
    llvm::SmallVector<llvm::StringRef> Lines;
    Inserted.drop_back().split(Lines, '\n');
    if (!llvm::all_of(Lines, [](llvm::StringRef Line) { return Line.ltrim().starts_with("#"); }))
      return std::nullopt;
    return (Preamble + Inserted + Rewritten.drop_front(Common + Length + Tail.size())).str();
  }
  return std::nullopt;
}

std::string findRuntimeIncludeDir(llvm::StringRef Installed, llvm::StringRef BuiltInDir) {
  // <prefix>/bin/accel-rewrite, <prefix>/lib/<module>, <prefix>/lib/<multiarch>/<module>.
  llvm::StringRef Directory = llvm::sys::path::parent_path(Installed);
  for (int Up = 0; Up < 3 && !Directory.empty(); ++Up) {
    Directory = llvm::sys::path::parent_path(Directory);
    llvm::SmallString<256> Include(Directory);
    llvm::sys::path::append(Include, "include");
    llvm::SmallString<256> Header(Include);
    llvm::sys::path::append(Header, "accelerate", "accelerate.h");
    if (llvm::sys::fs::exists(Header))
      return Include.str().str();
  }
  return BuiltInDir.str();
}

} // namespace accelerate::rewriter
