// rewriter/TextDiff.h: line alignment of a file before and after the rewrite: unified diffs and the original
// line of each rewritten line.
#ifndef ACCELERATE_REWRITER_TEXTDIFF_H
#define ACCELERATE_REWRITER_TEXTDIFF_H

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace accelerate::rewriter {

/// A unified diff (`diff -u` format, 3 lines of context) from `Old` to `New`, with `--- OldName` and
/// `+++ NewName` headers; empty when the texts are equal.
std::string unifiedDiff(llvm::StringRef OldName, llvm::StringRef NewName, llvm::StringRef Old,
                        llvm::StringRef New);

/// For each line of `New` (0-based), the 1-based line of `Old` it comes from: a kept line's own line, a
/// changed line the line it replaced (in order, within its hunk), an inserted line the old line it was
/// inserted before (or, at the end of the file, the last old line).
std::vector<unsigned> originalLines(llvm::StringRef Old, llvm::StringRef New);

/// `New` with `#line` directives wherever its lines stop following `Old`'s, so a compiler's diagnostics and
/// `__LINE__` name `FileName` and the original line. Starts with `#line 1 "FileName"`.
std::string withLineDirectives(llvm::StringRef FileName, llvm::StringRef Old, llvm::StringRef New);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_TEXTDIFF_H
