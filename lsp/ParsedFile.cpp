// lsp/ParsedFile.cpp: a parse as clangd makes one: the preamble precompiled once, the rest of the buffer
// parsed against it, the AST kept.
#include "lsp/ParsedFile.h"

#include "rewriter/Preamble.h"

#include "clang/Basic/DiagnosticOptions.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "clang/Frontend/Utils.h"
#include "clang/Lex/Lexer.h"
#include "clang/Lex/PreprocessorOptions.h"
#include "llvm/Support/MemoryBuffer.h"

namespace accelerate::lsp {
namespace {

/// Keeps the first error (and counts them, as every consumer does).
class FirstErrorConsumer : public clang::DiagnosticConsumer {
public:
  explicit FirstErrorConsumer(FirstError& Out) : Out(Out) {}

  void HandleDiagnostic(clang::DiagnosticsEngine::Level Level, const clang::Diagnostic& Info) override {
    clang::DiagnosticConsumer::HandleDiagnostic(Level, Info);
    if (Level < clang::DiagnosticsEngine::Error || !Out.Text.empty())
      return;
    llvm::SmallString<256> Message;
    Info.FormatDiagnostic(Message);
    std::string Place;
    if (Info.hasSourceManager() && Info.getLocation().isValid()) {
      const clang::SourceManager& SM = Info.getSourceManager();
      clang::SourceLocation At = SM.getFileLoc(Info.getLocation());
      clang::PresumedLoc Presumed = SM.getPresumedLoc(At);
      if (Presumed.isValid())
        Place = std::string(Presumed.getFilename()) + ":" + std::to_string(Presumed.getLine()) + ":" +
                std::to_string(Presumed.getColumn()) + ": ";
      if (SM.isWrittenInMainFile(At)) {
        Out.InMainFile = true;
        Out.Offset = SM.getFileOffset(At);
      }
    }
    Out.Text = Place + "error: " + Message.str().str();
  }

private:
  FirstError& Out;
};

} // namespace

llvm::Expected<std::unique_ptr<ParsedFile>> ParsedFile::parse(const std::vector<std::string>& CommandLine,
                                                              llvm::StringRef Directory, llvm::StringRef Text,
                                                              llvm::StringRef Trailer, PreambleCache& Cache) {
  std::unique_ptr<ParsedFile> File(new ParsedFile());
  File->Files = llvm::vfs::createPhysicalFileSystem();
  if (std::error_code EC = File->Files->setCurrentWorkingDirectory(Directory))
    return llvm::createStringError(EC, "cannot enter the compile command's directory '" + Directory +
                                           "': " + EC.message());

  // The command line's own problems (an unknown flag) are errors of the invocation.
  std::string DriverErrors;
  llvm::raw_string_ostream DriverStream(DriverErrors);
  auto DriverOptions = llvm::makeIntrusiveRefCnt<clang::DiagnosticOptions>();
  auto DriverConsumer = std::make_unique<clang::TextDiagnosticPrinter>(DriverStream, DriverOptions.get());
  llvm::IntrusiveRefCntPtr<clang::DiagnosticsEngine> DriverDiagnostics =
      clang::CompilerInstance::createDiagnostics(DriverOptions.get(), DriverConsumer.get(),
                                                 /*ShouldOwnClient=*/false);
  std::vector<const char*> Arguments;
  for (const std::string& Argument : CommandLine)
    Arguments.push_back(Argument.c_str());
  clang::CreateInvocationOptions Options;
  Options.Diags = DriverDiagnostics;
  Options.VFS = File->Files;
  Options.RecoverOnError = true;
  std::shared_ptr<clang::CompilerInvocation> Invocation = clang::createInvocation(Arguments, Options);
  if (!Invocation || Invocation->getFrontendOpts().Inputs.size() != 1) {
    DriverStream.flush();
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "clang cannot parse with this file's compile command" +
                                       (DriverErrors.empty() ? std::string(".") : ": " + DriverErrors));
  }
  Invocation->getDiagnosticOpts().ShowCarets = false;
  Invocation->getDiagnosticOpts().ShowColors = false;
  File->MainPath = Invocation->getFrontendOpts().Inputs[0].getFile().str();
  File->Invocation = Invocation;

  // The preamble: the last one while it still fits, else a new one, built as accel-rewrite builds one (kept
  // in memory).
  File->Buffer = llvm::MemoryBuffer::getMemBufferCopy(Text, File->MainPath);
  if (Cache.Preamble && Cache.CommandLine == CommandLine && Cache.Preamble->fits(Text, *File->Files)) {
    File->Preamble = Cache.Preamble;
  } else {
    std::string Problem; // Only a cache directory has problems; this builder has none.
    Cache.CommandLine = CommandLine;
    Cache.Preamble =
        rewriter::PreambleCache::inMemory().obtain(*Invocation, Text, Trailer, File->Files, Problem);
    File->Preamble = Cache.Preamble;
    File->BuiltPreamble = true;
  }

  auto ParseInvocation = std::make_shared<clang::CompilerInvocation>(*Invocation);
  llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> ParseFiles = File->Files;
  if (File->Preamble)
    File->Preamble->apply(*ParseInvocation, ParseFiles, File->Buffer.get());
  else
    ParseInvocation->getPreprocessorOpts().addRemappedFile(File->MainPath, File->Buffer.get());
  ParseInvocation->getPreprocessorOpts().RetainRemappedFileBuffers = true; // File->Buffer owns the text.

  File->Diagnostics = std::make_unique<FirstErrorConsumer>(File->Error);
  File->Compiler =
      std::make_unique<clang::CompilerInstance>(std::make_shared<clang::PCHContainerOperations>());
  clang::CompilerInstance& Compiler = *File->Compiler;
  Compiler.setInvocation(std::move(ParseInvocation));
  Compiler.createDiagnostics(File->Diagnostics.get(), /*ShouldOwnClient=*/false);
  Compiler.getDiagnostics().setIgnoreAllWarnings(true);
  Compiler.createFileManager(ParseFiles);
  if (!Compiler.createTarget())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "clang does not know the target of this file's compile command");
  File->Action = std::make_unique<clang::SyntaxOnlyAction>();
  if (File->Preamble)
    File->Action = rewriter::overPreamble(std::move(File->Action));
  if (!File->Action->BeginSourceFile(Compiler, Compiler.getFrontendOpts().Inputs[0])) {
    File->Action.reset();
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "clang could not start parsing this file" +
                                       (File->Error.Text.empty() ? std::string() : ": " + File->Error.Text));
  }
  if (llvm::Error Failed = File->Action->Execute())
    return Failed;
  return File;
}

ParsedFile::~ParsedFile() {
  if (Action)
    Action->EndSourceFile();
}

clang::ASTContext& ParsedFile::context() {
  return Compiler->getASTContext();
}

clang::Preprocessor& ParsedFile::preprocessor() {
  return Compiler->getPreprocessor();
}

bool ParsedFile::hasErrors() const {
  return Compiler->getDiagnostics().hasErrorOccurred();
}

} // namespace accelerate::lsp
