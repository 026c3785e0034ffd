// rewriter/TextDiff.h: line alignment of a file before and after the rewrite: unified diffs, the original
// line of each rewritten line, and a compiler's diagnostics about the rewritten text given at those lines.
// The one home of "which original line does a rewritten line come from" for every front end.
#ifndef ACCELERATE_REWRITER_TEXTDIFF_H
#define ACCELERATE_REWRITER_TEXTDIFF_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <functional>
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

/// A file the rewrite changed, as a compiler's diagnostics about its rewritten text name it: its text before
/// and after the rewrite, and whether a file name in a diagnostic is this file (a front end knows how the
/// compile named it).
struct RewrittenFile {
  llvm::StringRef Original, Rewritten;
  std::function<bool(llvm::StringRef Name)> Names;
};

/// `Diagnostics` (a compiler's, one line or many: the first error of a CompileError, or all of them) with
/// each place in the rewritten text of one of `Files` given at the line of the file as it is: a line
/// `<file>:<line>:<column>: <message>` whose line the rewrite moved (lines it inserted above it: an
/// `#include`, the accelerator, a `prepare`) becomes `<file>:<original line>: <message> (line L, column C of
/// the rewritten text)`. Places in other files, on lines that kept their number, and every other line are
/// kept as they are.
std::string atOriginalLines(llvm::StringRef Diagnostics, llvm::ArrayRef<RewrittenFile> Files);

/// `New` with `#line` directives wherever its lines stop following `Old`'s, so a compiler's diagnostics and
/// `__LINE__` name `FileName` and the original line. Starts with `#line 1 "FileName"`.
std::string withLineDirectives(llvm::StringRef FileName, llvm::StringRef Old, llvm::StringRef New);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_TEXTDIFF_H
