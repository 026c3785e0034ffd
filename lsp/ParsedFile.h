// lsp/ParsedFile.h: one parse of an editor's buffer with its compile command, kept alive for the passes and
// the lint checks, and the precompiled preamble (the PCH of its includes) reused between parses.
#ifndef ACCELERATE_LSP_PARSEDFILE_H
#define ACCELERATE_LSP_PARSEDFILE_H

#include "rewriter/Preamble.h"

#include "clang/Frontend/CompilerInvocation.h"
#include "llvm/ADT/IntrusiveRefCntPtr.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/VirtualFileSystem.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace clang {
class ASTContext;
class CompilerInstance;
class FrontendAction;
class Preprocessor;
} // namespace clang

namespace accelerate::lsp {

/// The first error of a parse, for a one-line reason.
struct FirstError {
  std::string Text; ///< "<file>:<line>:<col>: error: <message>".
  bool InMainFile = false;
  unsigned Offset = 0; ///< In the main file, when InMainFile.
};

/// The preamble of one file's last parse: reused while the command line and the includes' text stay the
/// same and it still fits (rewriter::ParsePreamble::fits), rebuilt otherwise.
struct PreambleCache {
  std::vector<std::string> CommandLine;
  std::shared_ptr<rewriter::ParsePreamble> Preamble;
};

/// A parsed buffer: its AST and preprocessor, alive as long as this object.
class ParsedFile {
public:
  /// Parses `Text` as the main file of `CommandLine` (a compiler command line, the compiler first, as
  /// rewriter::commandLineFor gives it), in `Directory`, reusing `Cache`'s preamble when it still fits and
  /// storing a new one there when not (built as accel-rewrite builds one, ending with `Trailer`:
  /// rewriter::PreambleCache::obtain). Fails only when no parse could start (a command line clang does not
  /// take); a buffer with errors parses, with hasErrors().
  static llvm::Expected<std::unique_ptr<ParsedFile>> parse(const std::vector<std::string>& CommandLine,
                                                           llvm::StringRef Directory, llvm::StringRef Text,
                                                           llvm::StringRef Trailer, PreambleCache& Cache);
  ~ParsedFile();

  clang::ASTContext& context();
  clang::Preprocessor& preprocessor();
  bool hasErrors() const;
  const FirstError& firstError() const { return Error; }

  /// The parse's options without its preamble, the file system it read (whose working directory is the
  /// compile command's) and the main file's path, for a second compile of a rewritten text.
  const clang::CompilerInvocation& invocation() const { return *Invocation; }
  llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> files() const { return Files; }
  const std::string& mainPath() const { return MainPath; }
  /// The preamble this parse used (none when it could not be built).
  const rewriter::ParsePreamble* preamble() const { return Preamble.get(); }
  /// Whether this parse built its preamble (false: it reused the last one).
  bool builtPreamble() const { return BuiltPreamble; }

private:
  ParsedFile() = default;

  std::shared_ptr<clang::CompilerInvocation> Invocation;
  llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> Files;
  std::string MainPath;
  std::shared_ptr<rewriter::ParsePreamble> Preamble;
  bool BuiltPreamble = false;
  std::unique_ptr<llvm::MemoryBuffer> Buffer;
  std::unique_ptr<clang::DiagnosticConsumer> Diagnostics;
  std::unique_ptr<clang::CompilerInstance> Compiler;
  std::unique_ptr<clang::FrontendAction> Action;
  FirstError Error;
};

} // namespace accelerate::lsp

#endif // ACCELERATE_LSP_PARSEDFILE_H
