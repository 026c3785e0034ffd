// lsp/CompileCommands.cpp: the search for compile_commands.json, as clangd does it.
#include "lsp/CompileCommands.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <vector>

namespace accelerate::lsp {

clang::tooling::CompilationDatabase* CompileCommands::load(const std::string& Directory) {
  auto [Entry, Inserted] = Loaded.try_emplace(Directory);
  if (Inserted) {
    std::string Ignored;
    Entry->second = clang::tooling::CompilationDatabase::loadFromDirectory(Directory, Ignored);
  }
  return Entry->second.get();
}

llvm::Expected<FoundCommand> CompileCommands::find(llvm::StringRef File) {
  std::lock_guard<std::mutex> Guard(Lock);
  std::vector<std::string> Candidates;
  if (!Fixed.empty()) {
    Candidates.push_back(Fixed);
  } else {
    for (llvm::StringRef Directory = llvm::sys::path::parent_path(File); !Directory.empty();
         Directory = llvm::sys::path::parent_path(Directory)) {
      Candidates.push_back(Directory.str());
      llvm::SmallString<256> Build(Directory);
      llvm::sys::path::append(Build, "build");
      Candidates.push_back(Build.str().str());
    }
  }
  for (const std::string& Directory : Candidates) {
    clang::tooling::CompilationDatabase* Database = load(Directory);
    if (!Database)
      continue;
    // The nearest database is the file's project's, as for clangd: one without the file does not send the
    // search further up.
    std::vector<clang::tooling::CompileCommand> Commands = Database->getCompileCommands(File);
    if (Commands.empty())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "the compile database in " + Directory +
              " has no command for this file, so accel-lsp cannot "
              "parse it; add the file to its build (and re-run CMake with CMAKE_EXPORT_COMPILE_COMMANDS=ON), "
              "or "
              "start accel-lsp with --compile-commands-dir=DIR naming a database that has it");
    FoundCommand Found{std::move(Commands.front()), Directory, ""};
    if (!Found.Command.Heuristic.empty())
      // The database lists other files; clangd parses this one with a neighbour's command, and so do we.
      Found.Warning = "the compile database in " + Directory +
                      " does not list this file; accel-lsp parses it " + "with a command " +
                      Found.Command.Heuristic + ", as clangd does; add the file to its " +
                      "build for its own flags";
    // A compiler that does not exist: the flags still say how to parse the file (accel-lsp parses with its
    // own clang), but the build would fail, and the command is probably stale.
    if (Found.Warning.empty() && !Found.Command.CommandLine.empty()) {
      const std::string& Compiler = Found.Command.CommandLine.front();
      bool Exists = llvm::sys::path::has_parent_path(Compiler)
                        ? llvm::sys::fs::exists(llvm::sys::path::is_absolute(Compiler)
                                                    ? Compiler
                                                    : Found.Command.Directory + "/" + Compiler)
                        : static_cast<bool>(llvm::sys::findProgramByName(Compiler));
      if (!Exists)
        Found.Warning =
            "the compile command for this file (in " + Directory + ") names the compiler '" + Compiler +
            "', which does not exist; accel-lsp parses the file with its own clang and "
            "the command's flags, but the database is probably stale: re-run CMake to regenerate it";
    }
    return Found;
  }
  std::string Where = Fixed.empty() ? "in " + llvm::sys::path::parent_path(File).str() +
                                          " or any folder above it, or in a build/ folder of one of them"
                                    : "in " + Fixed + " (--compile-commands-dir)";
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "no compile_commands.json (or compile_flags.txt) for this file " + Where +
          ", so accel-lsp cannot parse it; configure the project with CMAKE_EXPORT_COMPILE_COMMANDS=ON, or "
          "start accel-lsp with --compile-commands-dir=DIR");
}

} // namespace accelerate::lsp
