// rewriter/ApplyEdits.h: applies the passes' edits to the main file's text, including new #include lines.
#ifndef ACCELERATE_REWRITER_APPLYEDITS_H
#define ACCELERATE_REWRITER_APPLYEDITS_H

#include "clang/Tooling/Core/Replacement.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace accelerate::rewriter {

/// One edit to the main file, in byte offsets of its original text.
struct FileEdit {
  unsigned Offset = 0;
  unsigned Length = 0;
  std::string Text;
  std::string
      Header; ///< When set, the edit adds `#include <Header>` (or "Header") instead; Offset is unused.
  std::string Origin;     ///< Who asked for it, "file:line:col (pass 'name')", for error messages.
  unsigned FindingId = 0; ///< The finding (PassRunner.h) the edit belongs to.
  unsigned PassIndex = 0; ///< The pass's place in the run: insertions at one place go in this order.
};

/// An edit as a replacement of the original text, with the finding it belongs to.
struct PlannedEdit {
  clang::tooling::Replacement Replacement;
  unsigned FindingId = 0;
};

/// The edits as replacements of `Code`: text edits as they are, each new `#include` after the file's existing
/// includes, once, and not at all when the file already has it. Fails, naming both origins, when two edits
/// overlap.
llvm::Expected<std::vector<PlannedEdit>> planEdits(llvm::StringRef FileName, llvm::StringRef Code,
                                                   llvm::ArrayRef<FileEdit> Edits);

/// Returns `Code` with every planned edit applied.
llvm::Expected<std::string> applyEdits(llvm::StringRef Code, llvm::ArrayRef<PlannedEdit> Edits);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_APPLYEDITS_H
