// lsp/Positions.cpp: byte offsets <-> (line, UTF-16 character).
#include "lsp/Positions.h"

#include <algorithm>

namespace accelerate::lsp {
namespace {

/// The length in bytes of the UTF-8 sequence that starts with `Lead` (1 for a byte that starts none).
unsigned sequenceLength(unsigned char Lead) {
  if (Lead < 0xC0)
    return 1; // ASCII, or a stray continuation byte.
  if (Lead < 0xE0)
    return 2;
  if (Lead < 0xF0)
    return 3;
  return Lead < 0xF8 ? 4 : 1;
}

} // namespace

unsigned utf16Length(llvm::StringRef Utf8) {
  unsigned Units = 0;
  for (size_t I = 0; I < Utf8.size();) {
    unsigned Length = std::min<size_t>(sequenceLength(Utf8[I]), Utf8.size() - I);
    Units += Length == 4 ? 2 : 1; // Four bytes encode a code point above U+FFFF: a surrogate pair.
    I += Length;
  }
  return Units;
}

LineTable::LineTable(std::string Text) : Text(std::move(Text)) {
  Starts.push_back(0);
  for (size_t I = 0; I < this->Text.size(); ++I)
    if (this->Text[I] == '\n')
      Starts.push_back(I + 1);
}

Position LineTable::position(unsigned Offset) const {
  Offset = std::min<size_t>(Offset, Text.size());
  unsigned Line = std::upper_bound(Starts.begin(), Starts.end(), Offset) - Starts.begin() - 1;
  return {Line, utf16Length(llvm::StringRef(Text).slice(Starts[Line], Offset))};
}

unsigned LineTable::offset(Position At) const {
  if (At.Line >= Starts.size())
    return Text.size();
  size_t LineEnd = At.Line + 1 < Starts.size() ? Starts[At.Line + 1] - 1 : Text.size();
  if (LineEnd > Starts[At.Line] && Text[LineEnd - 1] == '\r')
    --LineEnd;
  unsigned Units = 0;
  size_t I = Starts[At.Line];
  while (I < LineEnd) {
    unsigned Length = std::min<size_t>(sequenceLength(Text[I]), LineEnd - I);
    unsigned Width = Length == 4 ? 2 : 1;
    if (Units + Width > At.Character)
      break;
    Units += Width;
    I += Length;
  }
  return I;
}

} // namespace accelerate::lsp
