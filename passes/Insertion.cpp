// passes/Insertion.cpp: statement insertion at the start of a block, laid out like the surrounding code.
#include "passes/Insertion.h"

#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/Decl.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/AST/Stmt.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/SourceCode.h"
#include "clang/Tooling/Transformer/Stencil.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <utility>

namespace accelerate::passes {
namespace {

using clang::ast_matchers::MatchFinder;
using namespace clang::ast_matchers;

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

/// The body of `main`, when the main file defines it.
llvm::Expected<const clang::CompoundStmt*> mainBody(const MatchFinder::MatchResult& Result) {
  if (const clang::FunctionDecl* Main = mainFunctionOfMainFile(*Result.Context))
    if (const auto* Body = llvm::dyn_cast<clang::CompoundStmt>(Main->getBody()))
      if (!Body->getLBracLoc().isMacroID())
        return Body;
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "insertAtStartOfMain: the main file defines no main (outside macros)");
}

llvm::Expected<const clang::Stmt*> boundStatement(const MatchFinder::MatchResult& Result,
                                                  llvm::StringRef Id) {
  if (const auto* S = Result.Nodes.getNodeAs<clang::Stmt>(Id)) {
    if (S->getBeginLoc().isMacroID() || S->getEndLoc().isMacroID())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "'" + Id +
                                         "' comes from a macro; match only statements outside macros "
                                         "(isInMacroExpansion())");
    return S;
  }
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "'" + Id + "' is not bound to a statement");
}

/// The statement bound to `Id`, and the text `Statement` gives for `Result`.
llvm::Expected<std::pair<const clang::Stmt*, std::string>>
boundStatementAndText(const MatchFinder::MatchResult& Result, llvm::StringRef Id,
                      const clang::transformer::MatchComputation<std::string>& Statement) {
  auto S = boundStatement(Result, Id);
  if (!S)
    return S.takeError();
  auto Text = Statement.eval(Result);
  if (!Text)
    return Text.takeError();
  return std::make_pair(*S, std::move(*Text));
}

/// The statement's characters, its terminating semicolon included, as a character range.
clang::CharSourceRange rangeWithSemicolon(const clang::Stmt& S, clang::ASTContext& Context) {
  clang::CharSourceRange Range = clang::tooling::maybeExtendRange(
      clang::CharSourceRange::getTokenRange(S.getSourceRange()), clang::tok::semi, Context);
  return clang::Lexer::makeFileCharRange(Range, Context.getSourceManager(), Context.getLangOpts());
}

/// The text between the start of `Loc`'s line and `Loc`.
llvm::StringRef linePrefix(clang::SourceLocation Loc, const clang::SourceManager& SM) {
  auto [File, Offset] = SM.getDecomposedLoc(Loc);
  llvm::StringRef Before = SM.getBufferData(File).take_front(Offset);
  size_t LineStart = Before.find_last_of("\n\r") + 1; // npos + 1 == 0
  return Before.drop_front(LineStart);
}

/// The leading spaces and tabs of `Line`.
llvm::StringRef indentOf(llvm::StringRef Line) {
  return Line.take_while([](char C) { return C == ' ' || C == '\t'; });
}

/// When `S` is the body of an `if`, an `else` or a loop written without braces, the end of the token after
/// which its opening brace would go (the `)` of the condition, `else`, `do`); an invalid location otherwise.
clang::SourceLocation braceLocationBefore(const clang::Stmt& S, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(S);
  if (Parents.empty())
    return {};
  clang::SourceLocation Token;
  unsigned Length = 1;
  if (const auto* If = Parents[0].get<clang::IfStmt>()) {
    if (If->getThen() == &S)
      Token = If->getRParenLoc();
    else if (If->getElse() == &S) {
      Token = If->getElseLoc();
      Length = 4;
    }
  } else if (const auto* For = Parents[0].get<clang::ForStmt>()) {
    if (For->getBody() == &S)
      Token = For->getRParenLoc();
  } else if (const auto* RangeFor = Parents[0].get<clang::CXXForRangeStmt>()) {
    if (RangeFor->getBody() == &S)
      Token = RangeFor->getRParenLoc();
  } else if (const auto* While = Parents[0].get<clang::WhileStmt>()) {
    if (While->getBody() == &S)
      Token = While->getRParenLoc();
  } else if (const auto* Do = Parents[0].get<clang::DoStmt>()) {
    if (Do->getBody() == &S) {
      Token = Do->getDoLoc();
      Length = 2;
    }
  }
  if (Token.isInvalid() || Token.isMacroID())
    return {};
  return Token.getLocWithOffset(Length);
}

/// `Text` with `Indent` after each of its line breaks: a multi-line insertion indented like its place.
std::string indentLines(llvm::StringRef Text, llvm::StringRef Indent) {
  std::string Out;
  for (char C : Text)
    Out += C == '\n' ? "\n" + Indent.str() : std::string(1, C);
  return Out;
}

/// An edit that inserts `Text` at `Where`.
clang::transformer::Edit insertionAt(clang::SourceLocation Where, std::string Text) {
  clang::transformer::Edit Edit;
  Edit.Range = clang::CharSourceRange::getCharRange(Where, Where);
  Edit.Replacement = std::move(Text);
  return Edit;
}

AST_MATCHER(clang::Expr, isWholeStatementImpl) {
  clang::ASTContext& Context = Finder->getASTContext();
  clang::DynTypedNodeList Parents = Context.getParents(Node);
  while (!Parents.empty() && Parents[0].get<clang::ExprWithCleanups>())
    Parents = Context.getParents(Parents[0]);
  const auto* Parent = Parents.empty() ? nullptr : Parents[0].get<clang::Stmt>();
  return Parent && !llvm::isa<clang::Expr>(Parent) && !llvm::isa<clang::DeclStmt>(Parent) &&
         !llvm::isa<clang::ReturnStmt>(Parent);
}

/// Inserts `Statement` at the start of the block `FindBlock` finds, as its first statement (placeAfterBrace).
clang::transformer::ASTEdit insertAfterBrace(
    std::function<llvm::Expected<const clang::CompoundStmt*>(const MatchFinder::MatchResult&)> FindBlock,
    clang::transformer::TextGenerator Statement) {
  clang::transformer::RangeSelector InsertionPoint =
      [FindBlock](const MatchFinder::MatchResult& Result) -> llvm::Expected<clang::CharSourceRange> {
    auto Block = FindBlock(Result);
    if (!Block)
      return Block.takeError();
    clang::SourceLocation Where = placeAfterBrace(**Block, *Result.SourceManager, "").Where;
    return clang::CharSourceRange::getCharRange(Where, Where);
  };
  auto Text = [FindBlock, Statement](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    auto Block = FindBlock(Result);
    if (!Block)
      return Block.takeError();
    auto Inserted = Statement->eval(Result);
    if (!Inserted)
      return Inserted.takeError();
    return placeAfterBrace(**Block, *Result.SourceManager, *Inserted).Text;
  };
  return clang::transformer::insertBefore(std::move(InsertionPoint),
                                          clang::transformer::run(std::move(Text)));
}

} // namespace

clang::transformer::ASTEdit insertAtStartOfMain(clang::transformer::TextGenerator Statement) {
  return insertAfterBrace(mainBody, std::move(Statement));
}

clang::ast_matchers::internal::Matcher<clang::Expr> isWholeStatement() {
  return isWholeStatementImpl();
}

clang::transformer::ASTEdit insertAtBlockStart(std::string BlockId, std::string Statement) {
  return insertAtBlockStart(std::move(BlockId), clang::transformer::cat(std::move(Statement)));
}

clang::transformer::ASTEdit insertAtBlockStart(std::string BlockId,
                                               clang::transformer::TextGenerator Statement) {
  return insertAfterBrace(
      [BlockId](const MatchFinder::MatchResult& Result) { return boundBlock(Result, BlockId); },
      std::move(Statement));
}

clang::transformer::RangeSelector statementWithSemicolon(std::string StmtId) {
  return [StmtId](const MatchFinder::MatchResult& Result) -> llvm::Expected<clang::CharSourceRange> {
    auto S = boundStatement(Result, StmtId);
    if (!S)
      return S.takeError();
    return rangeWithSemicolon(**S, *Result.Context);
  };
}

clang::transformer::Edit editInsertingBefore(const clang::Stmt& S, llvm::StringRef Statement,
                                             const clang::SourceManager& SM) {
  llvm::StringRef Prefix = linePrefix(S.getBeginLoc(), SM);
  if (!Prefix.trim().empty())
    return insertionAt(S.getBeginLoc(), Statement.str() + " ");
  // Each line of a multi-line insertion is indented like the statement.
  return insertionAt(S.getBeginLoc(), indentLines(Statement, Prefix) + "\n" + Prefix.str());
}

clang::transformer::ASTEdit insertBeforeStatement(std::string StmtId,
                                                  clang::transformer::TextGenerator Statement) {
  auto Text = [StmtId, Statement](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    auto Found = boundStatementAndText(Result, StmtId, *Statement);
    if (!Found)
      return Found.takeError();
    return editInsertingBefore(*Found->first, Found->second, *Result.SourceManager).Replacement;
  };
  return clang::transformer::insertBefore(clang::transformer::node(StmtId),
                                          clang::transformer::run(std::move(Text)));
}

llvm::SmallVector<clang::transformer::Edit, 1>
editsInsertingAfter(const clang::Stmt& S, llvm::StringRef Statement, clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  clang::CharSourceRange Range = rangeWithSemicolon(S, Context);
  llvm::StringRef Prefix = linePrefix(Range.getBegin(), SM);
  std::string Indent = indentOf(Prefix).str();
  auto Indented = [&](llvm::StringRef Text) { return indentLines(Text, Indent); };
  llvm::SmallVector<clang::transformer::Edit, 1> Edits;
  clang::SourceLocation Brace = braceLocationBefore(S, Context);
  if (Brace.isValid()) {
    Edits.push_back(insertionAt(Brace, " {"));
    if (!Prefix.trim().empty()) // `if (c) statement;` on one line stays on one line.
      Edits.push_back(insertionAt(Range.getEnd(), " " + Statement.str() + " }"));
    else
      Edits.push_back(insertionAt(Range.getEnd(), "\n" + Indent + Indented(Statement) + "\n" +
                                                      indentOf(linePrefix(Brace, SM)).str() + "}"));
    return Edits;
  }
  // After the statement; when a `//` comment ends its line, after the comment.
  auto [File, EndOffset] = SM.getDecomposedLoc(Range.getEnd());
  llvm::StringRef Rest =
      SM.getBufferData(File).drop_front(EndOffset).take_until([](char C) { return C == '\n' || C == '\r'; });
  llvm::StringRef Trimmed = Rest.ltrim(" \t");
  if (!Prefix.trim().empty() || (!Trimmed.empty() && !Trimmed.starts_with("//")))
    Edits.push_back(insertionAt(Range.getEnd(), " " + Statement.str()));
  else
    Edits.push_back(
        insertionAt(Range.getEnd().getLocWithOffset(Rest.size()), "\n" + Indent + Indented(Statement)));
  return Edits;
}

clang::transformer::Edit editInsertingAtBlockStart(const clang::CompoundStmt& Block,
                                                   llvm::StringRef Statement,
                                                   const clang::SourceManager& SM) {
  Placement Place = placeAfterBrace(Block, SM, Statement);
  return insertionAt(Place.Where, std::move(Place.Text));
}

clang::transformer::EditGenerator insertAfterStatement(std::string StmtId,
                                                       clang::transformer::TextGenerator Statement) {
  return [StmtId, Statement](const MatchFinder::MatchResult& Result)
             -> llvm::Expected<llvm::SmallVector<clang::transformer::Edit, 1>> {
    auto Found = boundStatementAndText(Result, StmtId, *Statement);
    if (!Found)
      return Found.takeError();
    return editsInsertingAfter(*Found->first, Found->second, *Result.Context);
  };
}

clang::CharSourceRange rangeRemovingStatement(const clang::Stmt& S, clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  clang::CharSourceRange Range = rangeWithSemicolon(S, Context);
  clang::SourceLocation Begin = Range.getBegin();
  llvm::StringRef Prefix = linePrefix(Begin, SM);
  if (!Prefix.trim().empty())
    return Range;
  // Nothing but indentation before it: take the rest of its last line too, when that is only spaces or a
  // `//` comment, and then the line break, so the whole line goes.
  auto [File, EndOffset] = SM.getDecomposedLoc(Range.getEnd());
  llvm::StringRef After = SM.getBufferData(File).drop_front(EndOffset);
  llvm::StringRef Rest = After.take_until([](char C) { return C == '\n' || C == '\r'; });
  llvm::StringRef Trimmed = Rest.ltrim(" \t");
  if (!Trimmed.empty() && !Trimmed.starts_with("//"))
    return Range;
  unsigned Length = Rest.size();
  if (After.drop_front(Length).starts_with("\r\n"))
    Length += 2;
  else if (Length < After.size())
    Length += 1;
  return clang::CharSourceRange::getCharRange(Begin.getLocWithOffset(-static_cast<int>(Prefix.size())),
                                              Range.getEnd().getLocWithOffset(Length));
}

clang::transformer::ASTEdit removeStatement(std::string StmtId) {
  clang::transformer::RangeSelector WholeLines =
      [StmtId](const MatchFinder::MatchResult& Result) -> llvm::Expected<clang::CharSourceRange> {
    auto S = boundStatement(Result, StmtId);
    if (!S)
      return S.takeError();
    return rangeRemovingStatement(**S, *Result.Context);
  };
  return clang::transformer::changeTo(std::move(WholeLines), clang::transformer::cat(""));
}

clang::transformer::EditGenerator guardStatement(std::string StmtId, std::string Condition) {
  return [StmtId, Condition](const MatchFinder::MatchResult& Result)
             -> llvm::Expected<llvm::SmallVector<clang::transformer::Edit, 1>> {
    auto S = boundStatement(Result, StmtId);
    if (!S)
      return S.takeError();
    clang::CharSourceRange Range = rangeWithSemicolon(**S, *Result.Context);
    bool NeedsBraces = false;
    clang::DynTypedNodeList Parents = Result.Context->getParents(**S);
    if (!Parents.empty())
      if (const auto* If = Parents[0].get<clang::IfStmt>())
        NeedsBraces = If->getThen() == *S && If->getElse();
    clang::transformer::Edit Before, After;
    Before.Range = clang::CharSourceRange::getCharRange(Range.getBegin(), Range.getBegin());
    Before.Replacement = (NeedsBraces ? "{ if (" : "if (") + Condition + ") ";
    llvm::SmallVector<clang::transformer::Edit, 1> Edits{Before};
    if (NeedsBraces) {
      After.Range = clang::CharSourceRange::getCharRange(Range.getEnd(), Range.getEnd());
      After.Replacement = " }";
      Edits.push_back(After);
    }
    return Edits;
  };
}

} // namespace accelerate::passes
