// rewriter/TextDiff.cpp: a longest-common-subsequence line alignment (files are small: a training loop).
#include "rewriter/TextDiff.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Regex.h"

#include <algorithm>
#include <optional>

namespace accelerate::rewriter {
namespace {

/// The lines of `Text`, each with its line break (the last one may have none).
std::vector<llvm::StringRef> splitLines(llvm::StringRef Text) {
  std::vector<llvm::StringRef> Lines;
  while (!Text.empty()) {
    size_t End = Text.find('\n');
    End = End == llvm::StringRef::npos ? Text.size() : End + 1;
    Lines.push_back(Text.take_front(End));
    Text = Text.drop_front(End);
  }
  return Lines;
}

/// One step of the alignment: a line kept in both, or only in the old text, or only in the new.
struct Step {
  enum Kind { Keep, Remove, Add } What;
  unsigned OldLine, NewLine; ///< 0-based positions before this step.
};

/// The alignment, from a longest common subsequence of lines. The common prefix and suffix are taken first,
/// so the quadratic table only spans the changed middle.
std::vector<Step> align(const std::vector<llvm::StringRef>& Old, const std::vector<llvm::StringRef>& New) {
  unsigned Prefix = 0;
  while (Prefix < Old.size() && Prefix < New.size() && Old[Prefix] == New[Prefix])
    ++Prefix;
  unsigned Suffix = 0;
  while (Suffix < Old.size() - Prefix && Suffix < New.size() - Prefix &&
         Old[Old.size() - 1 - Suffix] == New[New.size() - 1 - Suffix])
    ++Suffix;
  unsigned N = Old.size() - Prefix - Suffix, M = New.size() - Prefix - Suffix;
  // Longest[i][j]: the LCS length of Old[Prefix + i ..] and New[Prefix + j ..] within the middle.
  std::vector<std::vector<unsigned>> Longest(N + 1, std::vector<unsigned>(M + 1, 0));
  for (unsigned I = N; I-- > 0;)
    for (unsigned J = M; J-- > 0;)
      Longest[I][J] = Old[Prefix + I] == New[Prefix + J] ? Longest[I + 1][J + 1] + 1
                                                         : std::max(Longest[I + 1][J], Longest[I][J + 1]);
  std::vector<Step> Steps;
  for (unsigned K = 0; K < Prefix; ++K)
    Steps.push_back({Step::Keep, K, K});
  unsigned I = 0, J = 0;
  while (I < N || J < M) {
    if (I < N && J < M && Old[Prefix + I] == New[Prefix + J]) {
      Steps.push_back({Step::Keep, Prefix + I++, Prefix + J++});
    } else if (I < N && (J == M || Longest[I + 1][J] >= Longest[I][J + 1])) {
      Steps.push_back({Step::Remove, Prefix + I++, Prefix + J});
    } else {
      Steps.push_back({Step::Add, Prefix + I, Prefix + J++});
    }
  }
  for (unsigned K = 0; K < Suffix; ++K)
    Steps.push_back({Step::Keep, Prefix + N + K, Prefix + M + K});
  return Steps;
}

std::string withNewline(llvm::StringRef Line) {
  return Line.ends_with("\n") ? Line.str() : Line.str() + "\n\\ No newline at end of file\n";
}

} // namespace

std::string unifiedDiff(llvm::StringRef OldName, llvm::StringRef NewName, llvm::StringRef Old,
                        llvm::StringRef New) {
  if (Old == New)
    return "";
  std::vector<llvm::StringRef> OldLines = splitLines(Old), NewLines = splitLines(New);
  std::vector<Step> Steps = align(OldLines, NewLines);
  constexpr unsigned Context = 3;
  std::string Out = ("--- " + OldName + "\n+++ " + NewName + "\n").str();
  size_t Index = 0;
  while (Index < Steps.size()) {
    while (Index < Steps.size() && Steps[Index].What == Step::Keep)
      ++Index;
    if (Index == Steps.size())
      break;
    // A hunk: from Context kept lines before the first change to Context kept lines after the last change
    // that is followed by fewer than 2 * Context kept lines.
    size_t Begin = Index >= Context ? Index - Context : 0;
    while (Begin < Index && Steps[Begin].What != Step::Keep)
      ++Begin;
    size_t End = Index;
    while (true) {
      while (End < Steps.size() && Steps[End].What != Step::Keep)
        ++End;
      size_t Kept = End;
      while (Kept < Steps.size() && Steps[Kept].What == Step::Keep)
        ++Kept;
      if (Kept < Steps.size() && Kept - End <= 2 * Context) {
        End = Kept;
        continue;
      }
      End = std::min(End + Context, Kept);
      break;
    }
    unsigned OldCount = 0, NewCount = 0;
    for (size_t K = Begin; K < End; ++K) {
      OldCount += Steps[K].What != Step::Add;
      NewCount += Steps[K].What != Step::Remove;
    }
    unsigned OldStart = Steps[Begin].OldLine + (OldCount ? 1 : 0);
    unsigned NewStart = Steps[Begin].NewLine + (NewCount ? 1 : 0);
    Out += llvm::formatv("@@ -{0},{1} +{2},{3} @@\n", OldStart, OldCount, NewStart, NewCount).str();
    for (size_t K = Begin; K < End; ++K) {
      const Step& S = Steps[K];
      if (S.What == Step::Keep)
        Out += " " + withNewline(OldLines[S.OldLine]);
      else if (S.What == Step::Remove)
        Out += "-" + withNewline(OldLines[S.OldLine]);
      else
        Out += "+" + withNewline(NewLines[S.NewLine]);
    }
    Index = End;
  }
  return Out;
}

std::vector<unsigned> originalLines(llvm::StringRef Old, llvm::StringRef New) {
  std::vector<llvm::StringRef> OldLines = splitLines(Old), NewLines = splitLines(New);
  std::vector<Step> Steps = align(OldLines, NewLines);
  std::vector<unsigned> Result(NewLines.size(), 1);
  unsigned LastOld = OldLines.empty() ? 1 : OldLines.size();
  for (size_t K = 0; K < Steps.size();) {
    if (Steps[K].What == Step::Keep) {
      Result[Steps[K].NewLine] = Steps[K].OldLine + 1;
      ++K;
      continue;
    }
    // A run of changes: the added lines take the removed lines' numbers in order, then the next old line's.
    std::vector<unsigned> Removed, Added;
    size_t Run = K;
    for (; Run < Steps.size() && Steps[Run].What != Step::Keep; ++Run)
      (Steps[Run].What == Step::Remove ? Removed : Added)
          .push_back(Steps[Run].What == Step::Remove ? Steps[Run].OldLine : Steps[Run].NewLine);
    unsigned Next = Run < Steps.size() ? Steps[Run].OldLine + 1 : LastOld;
    for (size_t A = 0; A < Added.size(); ++A)
      Result[Added[A]] = A < Removed.size() ? Removed[A] + 1 : Next;
    K = Run;
  }
  return Result;
}

std::string atOriginalLines(llvm::StringRef Diagnostics, llvm::ArrayRef<RewrittenFile> Files) {
  // `<file>:<line>:<column>: <message>`, after the escape sequences that colour a terminal's diagnostics.
  static const llvm::Regex Place("^((\033\\[[0-9;]*m)*)([^:\033]+):([0-9]+):([0-9]+): (.*)$");
  std::vector<std::optional<std::vector<unsigned>>> Lines(Files.size()); // each file's, when first needed
  std::string Out;
  llvm::StringRef Rest = Diagnostics;
  while (!Rest.empty()) {
    auto [Text, After] = Rest.split('\n');
    bool Newline = Text.size() < Rest.size();
    Rest = After;
    llvm::SmallVector<llvm::StringRef, 7> Parts;
    unsigned Line = 0;
    std::optional<size_t> Named; // the file of Files the place is in
    if (Place.match(Text, &Parts) && !Parts[4].getAsInteger(10, Line) && Line > 0)
      for (size_t K = 0; K < Files.size() && !Named; ++K)
        if (Files[K].Names && Files[K].Names(Parts[3]))
          Named = K;
    unsigned Original = Line;
    if (Named) {
      std::optional<std::vector<unsigned>>& From = Lines[*Named];
      if (!From)
        From = originalLines(Files[*Named].Original, Files[*Named].Rewritten);
      if (Line <= From->size())
        Original = (*From)[Line - 1];
    }
    if (Original != Line)
      Out += (Parts[1] + Parts[3] + ":" + llvm::Twine(Original) + ": " + Parts[6] + " (line " + Parts[4] +
              ", column " + Parts[5] + " of the rewritten text)")
                 .str();
    else
      Out += Text.str();
    if (Newline)
      Out += "\n";
  }
  return Out;
}

std::string withLineDirectives(llvm::StringRef FileName, llvm::StringRef Old, llvm::StringRef New) {
  std::string Quoted;
  for (char C : FileName) {
    if (C == '"' || C == '\\')
      Quoted += '\\';
    Quoted += C;
  }
  std::vector<llvm::StringRef> Lines = splitLines(New);
  std::vector<unsigned> From = originalLines(Old, New);
  std::string Out;
  unsigned Expected = 0; // The line the compiler takes the next line to be; 0 before the first directive.
  for (size_t K = 0; K < Lines.size(); ++K) {
    if (From[K] != Expected)
      Out += llvm::formatv("#line {0} \"{1}\"\n", From[K], Quoted).str();
    Out += Lines[K].str();
    if (!Lines[K].ends_with("\n"))
      Out += "\n";
    Expected = From[K] + 1;
  }
  return Out;
}

} // namespace accelerate::rewriter
