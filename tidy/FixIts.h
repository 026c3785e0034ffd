// tidy/FixIts.h: edits as the fix-its of one clang-tidy diagnostic, applied exactly as they are.
#ifndef ACCELERATE_TIDY_FIXITS_H
#define ACCELERATE_TIDY_FIXITS_H

#include "clang/Tooling/Core/Replacement.h"
#include "llvm/ADT/StringRef.h"

#include <vector>

namespace accelerate::tidy {

/// The rewrite's edits as fix-its that clang-tidy applies as they are. Clang merges the fix-its of a
/// diagnostic through clang::edit::EditedSource, which widens a pure removal by a space when the removal
/// would leave whitespace on both sides; accel-rewrite removes exactly what the passes say. So edits that
/// touch become one, and a removal that is left keeps the character after it (it replaces it with itself).
inline std::vector<clang::tooling::Replacement> asFixIts(const clang::tooling::Replacements& Edits,
                                                         llvm::StringRef Code) {
  std::vector<clang::tooling::Replacement> Fixes;
  for (const clang::tooling::Replacement& Edit : Edits) {
    if (!Fixes.empty() && Fixes.back().getOffset() + Fixes.back().getLength() == Edit.getOffset()) {
      const clang::tooling::Replacement& Last = Fixes.back();
      Fixes.back() = clang::tooling::Replacement(
          Last.getFilePath(), Last.getOffset(), Last.getLength() + Edit.getLength(),
          (Last.getReplacementText() + Edit.getReplacementText()).str());
      continue;
    }
    Fixes.push_back(Edit);
  }
  for (clang::tooling::Replacement& Fix : Fixes) {
    unsigned End = Fix.getOffset() + Fix.getLength();
    if (!Fix.getReplacementText().empty() || Fix.getLength() == 0 || End >= Code.size())
      continue;
    Fix = clang::tooling::Replacement(Fix.getFilePath(), Fix.getOffset(), Fix.getLength() + 1,
                                      Code.substr(End, 1));
  }
  return Fixes;
}

} // namespace accelerate::tidy

#endif // ACCELERATE_TIDY_FIXITS_H
