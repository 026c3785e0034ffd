// lsp/Positions.h: LSP positions (line, UTF-16 code unit) and byte offsets in a document's UTF-8 text.
#ifndef ACCELERATE_LSP_POSITIONS_H
#define ACCELERATE_LSP_POSITIONS_H

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace accelerate::lsp {

/// A position as LSP counts it: 0-based line, and 0-based character in UTF-16 code units (a character
/// outside the Basic Multilingual Plane is two).
struct Position {
  unsigned Line = 0;
  unsigned Character = 0;
  bool operator==(const Position& Other) const { return Line == Other.Line && Character == Other.Character; }
};

/// The line starts of one text, to turn byte offsets into positions and back.
class LineTable {
public:
  explicit LineTable(std::string Text);

  /// The position of byte `Offset` (clamped to the text's end).
  Position position(unsigned Offset) const;
  /// The byte offset of `At`: a character past the line's end is its end (as LSP says), a line past the
  /// last is the text's end, and a position inside a UTF-8 sequence's UTF-16 pair rounds down to it.
  unsigned offset(Position At) const;

  const std::string& text() const { return Text; }

private:
  std::string Text;
  std::vector<unsigned> Starts; ///< Byte offset of each line's first character.
};

/// How many UTF-16 code units `Utf8` takes (a malformed byte counts as one).
unsigned utf16Length(llvm::StringRef Utf8);

} // namespace accelerate::lsp

#endif // ACCELERATE_LSP_POSITIONS_H
