// rewriter/Driver.h: what one `accel-rewrite FILE` run does, from parsing to writing the result.
#ifndef ACCELERATE_REWRITER_DRIVER_H
#define ACCELERATE_REWRITER_DRIVER_H

#include "clang/Tooling/CompilationDatabase.h"

#include <string>

namespace accelerate::rewriter {

struct DriverOptions {
  std::string InputFile;
  std::string OutputFile;        ///< `-o`: write here; empty means stdout (unless InPlace).
  bool InPlace = false;          ///< `-i`: replace InputFile (only when something changed).
  bool Explain = false;          ///< `--explain`: every change, its place and its reason, on stderr.
  std::string ResourceDir;       ///< Clang's resource directory, prepended as `-resource-dir=`.
  std::string RuntimeIncludeDir; ///< Holds accelerate/accelerate.h; appended as `-I` to check the rewrite.
};

/// Rewrites one file: parse it, run every registered pass, report warnings (and, with Explain, every change),
/// check that the rewritten text compiles, then write it. Returns the exit code: 0 on success, 1 when the
/// input does not compile, the rewrite would not compile, or the output cannot be written; in those cases
/// nothing is written.
int runDriver(const clang::tooling::CompilationDatabase& Database, const DriverOptions& Options);

/// The directory whose accelerate/accelerate.h the rewrite is checked against: `<bin>/../include` next to
/// an installed accel-rewrite when it has the header, else `BuiltInDir` (the source tree's include/).
std::string findRuntimeIncludeDir(llvm::StringRef ExecutablePath, llvm::StringRef BuiltInDir);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_DRIVER_H
