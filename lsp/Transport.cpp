// lsp/Transport.cpp: Content-Length framing.
#include "lsp/Transport.h"

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace accelerate::lsp {
namespace {

/// One header line without its "\r\n" (a lone "\n" is taken too); nullopt at the end of the input.
std::optional<std::string> readLine(std::FILE* In) {
  std::string Line;
  int C;
  while ((C = std::fgetc(In)) != EOF) {
    if (C == '\n') {
      if (!Line.empty() && Line.back() == '\r')
        Line.pop_back();
      return Line;
    }
    Line += static_cast<char>(C);
    if (Line.size() > 4096) // No header is this long: it is not a header.
      return Line;
  }
  return Line.empty() ? std::nullopt : std::optional<std::string>(Line);
}

} // namespace

Transport::Read Transport::read(std::string& Body, std::string& Problem, size_t MaxBytes) {
  std::optional<size_t> Length;
  bool SawHeader = false;
  Problem.clear();
  while (true) {
    std::optional<std::string> Line = readLine(In);
    if (!Line)
      return Read::End;
    if (Line->empty()) {
      if (!SawHeader)
        continue; // Blank lines between messages.
      break;
    }
    SawHeader = true;
    llvm::StringRef Header(*Line);
    auto [Name, Value] = Header.split(':');
    if (Name.trim().equals_insensitive("Content-Length")) {
      size_t Parsed = 0;
      if (Value.trim().getAsInteger(10, Parsed))
        Problem = "the header 'Content-Length' has no number: '" + Header.str() + "'";
      else
        Length = Parsed;
    } else if (!Name.trim().equals_insensitive("Content-Type") && Problem.empty()) {
      Problem = "unknown header line '" + Header.substr(0, 80).str() + "' (LSP takes Content-Length and " +
                "Content-Type)";
    }
  }
  if (!Length) {
    if (Problem.empty())
      Problem = "a message without a Content-Length header";
    return Read::Malformed;
  }
  Body.clear();
  bool TooLarge = *Length > MaxBytes;
  char Chunk[65536];
  for (size_t Left = *Length; Left > 0;) {
    size_t Got = std::fread(Chunk, 1, std::min(Left, sizeof(Chunk)), In);
    if (Got == 0)
      return Read::End;
    if (!TooLarge)
      Body.append(Chunk, Got);
    Left -= Got;
  }
  if (TooLarge) {
    Problem = "a message of " + std::to_string(*Length) + " bytes, over the limit of " +
              std::to_string(MaxBytes) + " bytes; it was dropped";
    return Read::Malformed;
  }
  return Read::Message;
}

void Transport::write(const std::string& Body) {
  std::lock_guard<std::mutex> Lock(Writing);
  std::fprintf(Out, "Content-Length: %zu\r\n\r\n", Body.size());
  std::fwrite(Body.data(), 1, Body.size(), Out);
  std::fflush(Out);
}

} // namespace accelerate::lsp
