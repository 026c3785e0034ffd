// rewriter/CheckCompiles.h: the safety check every front end runs before it offers a rewrite: the rewritten
// text must compile.
#ifndef ACCELERATE_REWRITER_CHECKCOMPILES_H
#define ACCELERATE_REWRITER_CHECKCOMPILES_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>

#include "llvm/ADT/IntrusiveRefCntPtr.h"

namespace clang {
class CompilerInvocation;
class Preprocessor;
} // namespace clang

namespace llvm::vfs {
class FileSystem;
} // namespace llvm::vfs

namespace accelerate::rewriter {

class ParsePreamble;

/// Compiles `Rewritten` (syntax only) in place of the main file of the parse `PP` belongs to, with the
/// options of that parse (language, target, include paths, macros: what a clang-tidy check or a language
/// server has instead of a compile command), plus `RuntimeIncludeDir` searched last for
/// accelerate/accelerate.h, and with the same file system, so relative include paths resolve as they did.
/// Fails with a CompileError holding the diagnostics when it does not compile.
llvm::Error checkCompilesLikeParse(const clang::Preprocessor& PP, llvm::StringRef Rewritten,
                                   llvm::StringRef RuntimeIncludeDir);

/// Compiles `Rewritten` (syntax only) as the main file `MainPath` of `Invocation` (whose input and action it
/// replaces), in `Files` with the rewritten text over that file, plus `RuntimeIncludeDir` searched last. When
/// `Preamble` is given (the precompiled preamble of `PreambleSource`, the original text, built with
/// `Invocation`'s options) and the rewritten text begins with the preamble's bytes (textOverPreamble) and
/// still fits (ParsePreamble::fits), its PCH stands in for them, which spares parsing the file's includes
/// again; `ReusedPreamble`, when given, says whether it did. Fails with a CompileError holding the
/// diagnostics when it does not compile. The one home of "does the rewrite compile" for front ends without a
/// compile database.
llvm::Error checkCompilesWith(const clang::CompilerInvocation& Invocation,
                              llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> Files, llvm::StringRef MainPath,
                              llvm::StringRef Rewritten, llvm::StringRef RuntimeIncludeDir,
                              const ParsePreamble* Preamble = nullptr, llvm::StringRef PreambleSource = "",
                              bool* ReusedPreamble = nullptr);

/// `Rewritten` as a text that begins with the first `PreambleSize` bytes of `Original` (its preamble), so
/// that the preamble's PCH can stand for them: `Rewritten` itself when it does; else, when the rewrite only
/// inserted directive lines (the runtime's `#include`) at a line start in the blank lines and comments that
/// end the preamble, the same text with those lines moved to just after the preamble, past nothing but
/// whitespace and comments, so it compiles as `Rewritten` does. nullopt when the rewrite changed the
/// preamble otherwise.
std::optional<std::string> textOverPreamble(llvm::StringRef Original, unsigned PreambleSize,
                                            llvm::StringRef Rewritten);

/// The directory whose accelerate/accelerate.h a rewrite is checked against: `<prefix>/include` when
/// `Installed` is a file of an installed package (accel-rewrite in <prefix>/bin, the clang-tidy module in
/// <prefix>/lib or <prefix>/lib/<multiarch>) and that directory has the header, else `BuiltInDir` (the
/// source tree's include/).
std::string findRuntimeIncludeDir(llvm::StringRef Installed, llvm::StringRef BuiltInDir);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_CHECKCOMPILES_H
