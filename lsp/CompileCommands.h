// lsp/CompileCommands.h: a file's compile command, from the compile_commands.json clangd would use.
#ifndef ACCELERATE_LSP_COMPILECOMMANDS_H
#define ACCELERATE_LSP_COMPILECOMMANDS_H

#include "clang/Tooling/CompilationDatabase.h"
#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace accelerate::lsp {

struct FoundCommand {
  clang::tooling::CompileCommand Command;
  std::string Database; ///< The directory whose compile_commands.json (or compile_flags.txt) gave it.
  std::string Warning;  ///< Something about it the user should know (a compiler that does not exist).
};

class CompileCommands {
public:
  /// With `Directory`, only that directory's database (accel-lsp --compile-commands-dir); without it, as
  /// clangd looks: the file's directory and each parent, and a build/ folder in each.
  explicit CompileCommands(std::string Directory = "") : Fixed(std::move(Directory)) {}

  /// The first command for `File` (an absolute path), or why there is none, in words for the editor.
  llvm::Expected<FoundCommand> find(llvm::StringRef File);

  /// Reads the databases again at the next find() (one may have been regenerated).
  void forget() {
    std::lock_guard<std::mutex> Guard(Lock);
    Loaded.clear();
  }

private:
  /// The database in `Directory`, loaded once; null when it has none.
  clang::tooling::CompilationDatabase* load(const std::string& Directory);

  std::string Fixed;
  std::mutex Lock;
  std::map<std::string, std::unique_ptr<clang::tooling::CompilationDatabase>> Loaded;
};

} // namespace accelerate::lsp

#endif // ACCELERATE_LSP_COMPILECOMMANDS_H
