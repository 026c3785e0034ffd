// rewriter/ApplyEdits.cpp: turns edits into clang::tooling::Replacements, places includes, checks overlaps.
#include "rewriter/ApplyEdits.h"

#include "clang/Format/Format.h"
#include "clang/Tooling/Core/Replacement.h"
#include "clang/Tooling/Inclusions/HeaderIncludes.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

namespace accelerate::rewriter {
namespace {

/// Our headers sort after every existing include, so the new line lands after the file's last #include
/// instead of in the middle of its system or third-party block.
clang::tooling::IncludeStyle includeStyleForAccelerate() {
  clang::tooling::IncludeStyle Style = clang::format::getLLVMStyle().IncludeStyle;
  Style.IncludeCategories = {{"^[<\"]accelerate/", /*Priority=*/100, /*SortPriority=*/0,
                              /*RegexIsCaseSensitive=*/false},
                             {".*", /*Priority=*/1, /*SortPriority=*/0, /*RegexIsCaseSensitive=*/false}};
  return Style;
}

llvm::Error overlapError(const FileEdit& First, const FileEdit& Second) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "edits from " + First.Origin + " and " + Second.Origin +
                                     " overlap; nothing was rewritten. This is a bug in the passes: please "
                                     "report it with the input file");
}

} // namespace

llvm::Expected<std::vector<PlannedEdit>> planEdits(llvm::StringRef FileName, llvm::StringRef Code,
                                                   llvm::ArrayRef<FileEdit> Edits) {
  std::vector<const FileEdit*> TextEdits;
  std::vector<const FileEdit*> IncludeEdits;
  for (const FileEdit& Edit : Edits)
    (Edit.Header.empty() ? TextEdits : IncludeEdits).push_back(&Edit);

  // At one offset: insertions before the edit that replaces text there, and insertions in pass order (the
  // accelerator's declaration before the statements that use it).
  llvm::stable_sort(TextEdits, [](const FileEdit* A, const FileEdit* B) {
    return std::make_tuple(A->Offset, A->Length != 0, A->PassIndex) <
           std::make_tuple(B->Offset, B->Length != 0, B->PassIndex);
  });
  for (size_t I = 1; I < TextEdits.size(); ++I) {
    const FileEdit& Previous = *TextEdits[I - 1];
    if (TextEdits[I]->Offset < Previous.Offset + Previous.Length)
      return overlapError(Previous, *TextEdits[I]);
  }

  // An insertion right where another edit starts (a statement put before one that changes) is one
  // replacement: Replacements refuses two at one offset, whose order it cannot know.
  std::vector<PlannedEdit> Planned;
  std::string Pending;
  for (size_t I = 0; I < TextEdits.size(); ++I) {
    const FileEdit& Edit = *TextEdits[I];
    if (Edit.Length == 0 && I + 1 < TextEdits.size() && TextEdits[I + 1]->Offset == Edit.Offset) {
      Pending += Edit.Text;
      continue;
    }
    Planned.push_back({clang::tooling::Replacement(FileName, Edit.Offset, Edit.Length, Pending + Edit.Text),
                       Edit.FindingId});
    Pending.clear();
  }

  clang::tooling::HeaderIncludes Includes(FileName, Code, includeStyleForAccelerate());
  std::set<std::string> Added;
  for (const FileEdit* Edit : IncludeEdits) {
    llvm::StringRef Header = Edit->Header;
    if (!Added.insert(Header.str()).second)
      continue;
    bool IsAngled = Header.consume_front("<") && Header.consume_back(">");
    if (!IsAngled)
      Header = Header.trim('"');
    std::optional<clang::tooling::Replacement> Insertion =
        Includes.insert(Header, IsAngled, clang::tooling::IncludeDirective::Include);
    if (Insertion) // Otherwise the file already includes it.
      Planned.push_back({*Insertion, Edit->FindingId});
  }
  return Planned;
}

llvm::Expected<std::string> applyEdits(llvm::StringRef Code, llvm::ArrayRef<PlannedEdit> Edits) {
  clang::tooling::Replacements Replacements;
  for (const PlannedEdit& Edit : Edits)
    if (llvm::Error Err = Replacements.add(Edit.Replacement))
      return Err;
  return clang::tooling::applyAllReplacements(Code, Replacements);
}

} // namespace accelerate::rewriter
