// rewriter/ApplyEdits.h: applies the passes' edits to the main file's text, including new #include lines.
#ifndef ACCELERATE_REWRITER_APPLYEDITS_H
#define ACCELERATE_REWRITER_APPLYEDITS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace accelerate::rewriter {

/// One edit to the main file, in byte offsets of its original text.
struct FileEdit {
  unsigned Offset = 0;
  unsigned Length = 0;
  std::string Text;
  std::string
      Header; ///< When set, the edit adds `#include <Header>` (or "Header") instead; Offset is unused.
  std::string Origin; ///< Who asked for it, "file:line:col (pass 'name')", for error messages.
};

/// Returns `Code` with every edit applied. A new `#include` goes after the file's existing includes, once,
/// and not at all when the file already has it. Fails, naming both origins, when two edits overlap.
llvm::Expected<std::string> applyEdits(llvm::StringRef FileName, llvm::StringRef Code,
                                       llvm::ArrayRef<FileEdit> Edits);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_APPLYEDITS_H
