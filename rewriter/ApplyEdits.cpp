// rewriter/ApplyEdits.cpp: turns edits into clang::tooling::Replacements, places includes, checks overlaps.
#include "rewriter/ApplyEdits.h"

#include "clang/Format/Format.h"
#include "clang/Tooling/Core/Replacement.h"
#include "clang/Tooling/Inclusions/HeaderIncludes.h"

#include <algorithm>
#include <set>
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

llvm::Expected<std::string> applyEdits(llvm::StringRef FileName, llvm::StringRef Code,
                                       llvm::ArrayRef<FileEdit> Edits) {
  std::vector<const FileEdit*> TextEdits;
  std::vector<const FileEdit*> IncludeEdits;
  for (const FileEdit& Edit : Edits)
    (Edit.Header.empty() ? TextEdits : IncludeEdits).push_back(&Edit);

  llvm::stable_sort(TextEdits, [](const FileEdit* A, const FileEdit* B) { return A->Offset < B->Offset; });
  for (size_t I = 1; I < TextEdits.size(); ++I) {
    const FileEdit& Previous = *TextEdits[I - 1];
    if (TextEdits[I]->Offset < Previous.Offset + Previous.Length)
      return overlapError(Previous, *TextEdits[I]);
  }

  clang::tooling::Replacements Replacements;
  for (const FileEdit* Edit : TextEdits)
    if (llvm::Error Err =
            Replacements.add(clang::tooling::Replacement(FileName, Edit->Offset, Edit->Length, Edit->Text)))
      return Err;

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
    if (!Insertion)
      continue; // Already included.
    if (llvm::Error Err = Replacements.add(*Insertion))
      return Err;
  }
  return clang::tooling::applyAllReplacements(Code, Replacements);
}

} // namespace accelerate::rewriter
