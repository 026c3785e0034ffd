// rewriter/CheckCompiles.h: the safety check every front end runs before it offers a rewrite: the rewritten
// text must compile.
#ifndef ACCELERATE_REWRITER_CHECKCOMPILES_H
#define ACCELERATE_REWRITER_CHECKCOMPILES_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace clang {
class Preprocessor;
} // namespace clang

namespace accelerate::rewriter {

/// Compiles `Rewritten` (syntax only) in place of the main file of the parse `PP` belongs to, with the
/// options of that parse (language, target, include paths, macros: what a clang-tidy check or a language
/// server has instead of a compile command), plus `RuntimeIncludeDir` searched last for
/// accelerate/accelerate.h, and with the same file system, so relative include paths resolve as they did.
/// Fails with a CompileError holding the diagnostics when it does not compile.
llvm::Error checkCompilesLikeParse(const clang::Preprocessor& PP, llvm::StringRef Rewritten,
                                   llvm::StringRef RuntimeIncludeDir);

/// The directory whose accelerate/accelerate.h a rewrite is checked against: `<prefix>/include` when
/// `Installed` is a file of an installed package (accel-rewrite in <prefix>/bin, the clang-tidy module in
/// <prefix>/lib or <prefix>/lib/<multiarch>) and that directory has the header, else `BuiltInDir` (the
/// source tree's include/).
std::string findRuntimeIncludeDir(llvm::StringRef Installed, llvm::StringRef BuiltInDir);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_CHECKCOMPILES_H
