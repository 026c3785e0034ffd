// rewriter/ToolRunner.h: compiles one file with accel-rewrite's flags and runs a Clang front-end action on
// it.
#ifndef ACCELERATE_REWRITER_TOOLRUNNER_H
#define ACCELERATE_REWRITER_TOOLRUNNER_H

#include "clang/Tooling/CompilationDatabase.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace accelerate::rewriter {

struct PreambleUse;

/// What accel-rewrite adds to the file's own compile command.
struct CompileFlags {
  std::string ResourceDir;               ///< Prepended as `-resource-dir=`, so the command can override it.
  std::vector<std::string> AppendedArgs; ///< Appended, so the command's own flags take precedence.
};

/// The file did not compile; holds the compiler's diagnostics, ready to print.
class CompileError : public llvm::ErrorInfo<CompileError> {
public:
  static char ID;
  explicit CompileError(std::string Diagnostics) : Diagnostics(std::move(Diagnostics)) {}
  const std::string& diagnostics() const { return Diagnostics; }
  /// The first line of the diagnostics that is an error, for a one-line reason.
  std::string firstError() const;
  void log(llvm::raw_ostream& OS) const override;
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }

private:
  std::string Diagnostics;
};

/// `Command` as accel-rewrite runs it: syntax only, without output or dependency files, with `Flags`, and
/// without carets in the compiler's own options (so that CompilerInstance prints no "N errors generated."
/// of its own ahead of diagnostics a caller buffers). Every front end that parses a file by its compile
/// command (accel-rewrite, the language server) uses these arguments.
std::vector<std::string> commandLineFor(const clang::tooling::CompileCommand& Command,
                                        const CompileFlags& Flags);

/// Compiles `File` (syntax only) with the first compile command `Database` has for it plus `Flags`, running
/// `Action`. `Contents`, when given, stands in for the file's text on disk, and each of `OtherFiles` (path,
/// text) for that file's: that is how a rewrite, headers included, is checked before it is written. Fails
/// with a CompileError when the file does not compile; diagnostics of a successful compile (warnings) are
/// dropped. With `Preamble`, the parse goes over the file's precompiled preamble (rewriter/Preamble.h): the
/// one `Preamble` holds where it fits, else (when it may) one it obtains and keeps there.
llvm::Error runOnFile(const clang::tooling::CompilationDatabase& Database, llvm::StringRef File,
                      const CompileFlags& Flags, clang::tooling::FrontendActionFactory& Action,
                      std::optional<llvm::StringRef> Contents = std::nullopt,
                      llvm::ArrayRef<std::pair<std::string, std::string>> OtherFiles = {},
                      PreambleUse* Preamble = nullptr);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_TOOLRUNNER_H
