// passes/Insertion.cpp: statement insertion at the start of a block, laid out like the surrounding code.
#include "passes/Insertion.h"

#include "clang/AST/Stmt.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Tooling/Transformer/Stencil.h"
#include "llvm/Support/Error.h"

namespace accelerate::passes {
namespace {

using clang::ast_matchers::MatchFinder;

llvm::Expected<const clang::CompoundStmt*> boundBlock(const MatchFinder::MatchResult& Result,
                                                      llvm::StringRef BlockId) {
  if (const auto* Block = Result.Nodes.getNodeAs<clang::CompoundStmt>(BlockId)) {
    if (Block->getLBracLoc().isMacroID())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "insertAtBlockStart: the block's brace comes from a macro; match only "
                                     "blocks outside macros (isInMacroExpansion())");
    return Block;
  }
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "insertAtBlockStart: '" + BlockId +
                                     "' is not bound to a compound statement");
}

/// Where the new statement goes and the text to insert there. When the brace ends its line (perhaps after a
/// `//` comment), the statement goes on a new line at the end of that line, indented like the line below;
/// when code follows the brace on its line, it goes right after the brace, after a space.
struct Placement {
  clang::SourceLocation Where;
  std::string Text;
};

Placement placeAfterBrace(const clang::CompoundStmt& Block, const clang::SourceManager& SM,
                          llvm::StringRef Statement) {
  clang::SourceLocation Brace = Block.getLBracLoc();
  auto [File, BraceOffset] = SM.getDecomposedLoc(Brace);
  llvm::StringRef Buffer = SM.getBufferData(File);
  auto IsNewline = [](char C) { return C == '\n' || C == '\r'; };
  llvm::StringRef Rest = Buffer.drop_front(BraceOffset + 1);
  llvm::StringRef SameLine = Rest.take_until(IsNewline);
  if (!SameLine.trim().empty() && !SameLine.ltrim().starts_with("//"))
    return {Brace.getLocWithOffset(1), " " + Statement.str()};

  auto IndentOf = [](llvm::StringRef Line) {
    return Line.take_while([](char C) { return C == ' ' || C == '\t'; });
  };
  llvm::StringRef NextLine = Rest.drop_front(SameLine.size()).drop_while(IsNewline);
  std::string Indent = IndentOf(NextLine).str();
  if (NextLine.drop_front(Indent.size())
          .starts_with("}")) { // An empty block: one level past the brace's line.
    size_t LineStart = Buffer.take_front(BraceOffset).find_last_of("\n\r") + 1; // npos + 1 == 0
    Indent = IndentOf(Buffer.drop_front(LineStart)).str() + "  ";
  }
  return {Brace.getLocWithOffset(1 + SameLine.size()), "\n" + Indent + Statement.str()};
}

} // namespace

clang::transformer::ASTEdit insertAtBlockStart(std::string BlockId, std::string Statement) {
  clang::transformer::RangeSelector InsertionPoint =
      [BlockId](const MatchFinder::MatchResult& Result) -> llvm::Expected<clang::CharSourceRange> {
    auto Block = boundBlock(Result, BlockId);
    if (!Block)
      return Block.takeError();
    clang::SourceLocation Where = placeAfterBrace(**Block, *Result.SourceManager, "").Where;
    return clang::CharSourceRange::getCharRange(Where, Where);
  };
  auto Text = [BlockId, Statement](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    auto Block = boundBlock(Result, BlockId);
    if (!Block)
      return Block.takeError();
    return placeAfterBrace(**Block, *Result.SourceManager, Statement).Text;
  };
  return clang::transformer::insertBefore(std::move(InsertionPoint),
                                          clang::transformer::run(std::move(Text)));
}

} // namespace accelerate::passes
