// lint/Run.h: the lint checks run over a file already parsed, and what they found in the main file: the one
// place that turns their matches into findings, for the clang-tidy module and the language server alike.
#ifndef ACCELERATE_LINT_RUN_H
#define ACCELERATE_LINT_RUN_H

#include "lint/Checks.h"

#include "clang/Tooling/Core/Replacement.h"
#include "llvm/ADT/ArrayRef.h"

#include <optional>
#include <string>
#include <vector>

namespace clang {
class ASTContext;
} // namespace clang

namespace accelerate::lint {

/// One match of a lint check in the main file.
struct LintFinding {
  std::string Check;   ///< The check's name without "accelerate-", e.g. "raw-backward".
  unsigned Offset = 0; ///< Byte offset in the main file of the warning's place (expansion location).
  unsigned Line = 0, Column = 0; ///< 1-based, Column in bytes.
  std::string Message;           ///< Without the note marker.
  bool IsNote = false;
  /// The fix, as main-file replacements in offset order (already passed through no conflict); empty optional
  /// when the match has no safe fix.
  std::optional<std::vector<clang::tooling::Replacement>> Fix;
};

/// Runs `Checks` over the user's code of `Context` (rewriter::userDeclarations) in ONE MatchFinder traversal,
/// restoring the traversal scope and clearing the facts caches, and returns the findings in the main file in
/// source order (ties by check order). Returns nothing when the translation unit has errors. A rule whose
/// metadata fails to evaluate gives a finding "this check failed here: <error>".
///
/// A match's message is its case's metadata; one that starts with passes::NoteMarker is a note. Its fix is
/// its case's edits, as the main file's replacements: an AddInclude edit inserts its `#include` line at the
/// top of the file unless the file already has that line, and a noopEdit (an empty edit of an empty range)
/// only anchors the message. The match has no fix when no edit is left, when its edits fail, when one of them
/// cannot be made in the main file (another file, a macro expansion) or when two of them conflict.
std::vector<LintFinding> runLintChecks(clang::ASTContext& Context,
                                       llvm::ArrayRef<LintCheck> Checks = allLintChecks());

} // namespace accelerate::lint

#endif // ACCELERATE_LINT_RUN_H
