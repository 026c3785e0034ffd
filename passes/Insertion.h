// passes/Insertion.h: where passes put new statements in the user's code, and how they lay them out.
#ifndef ACCELERATE_PASSES_INSERTION_H
#define ACCELERATE_PASSES_INSERTION_H

#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Tooling/Transformer/RewriteRule.h"

#include <string>

namespace accelerate::passes {

/// Inserts `Statement` as the first statement of the compound statement bound to `BlockId`, right after its
/// opening brace (and any `//` comment on the brace's line), so a comment that introduces the old first
/// statement stays with it. The statement gets its own line, indented like the line below the brace; a block
/// with code on the brace's line gets it after a space. The block must not come from a macro.
///
///   insertAtBlockStart("body", "accelerate::Accelerator accelerator;")
clang::transformer::ASTEdit insertAtBlockStart(std::string BlockId, std::string Statement);
/// The same, with the statement's text computed from the match.
clang::transformer::ASTEdit insertAtBlockStart(std::string BlockId,
                                               clang::transformer::TextGenerator Statement);

/// Inserts `Statement` as the first statement of `main` (defined in the main file), like insertAtBlockStart.
/// Fails when the main file does not define `main`.
clang::transformer::ASTEdit insertAtStartOfMain(clang::transformer::TextGenerator Statement);

/// Inserts `Statement` on its own line right before the statement bound to `StmtId`, indented like it (each
/// line, when it has several). When code precedes that statement on its line, `Statement` goes right before
/// it, followed by a space.
///
///   insertBeforeStatement("optimizer", "accelerator.prepare(model);")
clang::transformer::ASTEdit insertBeforeStatement(std::string StmtId,
                                                  clang::transformer::TextGenerator Statement);

/// The edit insertBeforeStatement() makes, for a statement at hand (outside macros).
clang::transformer::Edit editInsertingBefore(const clang::Stmt& S, llvm::StringRef Statement,
                                             const clang::SourceManager& SM);

/// Inserts `Statement` on its own line right after the statement bound to `StmtId` (after its semicolon and
/// any `//` comment that ends its line), indented like it. When that statement is the unbraced body of an
/// `if`, an `else` or a loop, the two go in braces, so that the new one runs under the same condition:
///
///   if (step % 10 == 0)                         if (step % 10 == 0) {
///     std::cout << loss.item<float>() << "\n";  →  std::cout << loss.item<float>() << "\n";
///                                                  accelerator.log(...);
///                                                }
clang::transformer::EditGenerator insertAfterStatement(std::string StmtId,
                                                       clang::transformer::TextGenerator Statement);

/// The edits insertAfterStatement() makes, for a statement at hand (outside macros).
llvm::SmallVector<clang::transformer::Edit, 1>
editsInsertingAfter(const clang::Stmt& S, llvm::StringRef Statement, clang::ASTContext& Context);

/// The edit insertAtBlockStart() makes, for a block at hand (its brace outside macros).
clang::transformer::Edit editInsertingAtBlockStart(const clang::CompoundStmt& Block,
                                                   llvm::StringRef Statement, const clang::SourceManager& SM);

/// Removes the statement bound to `StmtId` with its semicolon; when nothing else is on its lines (comments
/// aside, which then go with it), the lines themselves go, so no blank line is left behind.
clang::transformer::ASTEdit removeStatement(std::string StmtId);

/// The range removeStatement() removes, for a statement at hand.
clang::CharSourceRange rangeRemovingStatement(const clang::Stmt& S, clang::ASTContext& Context);

/// The range of the statement bound to `StmtId`, its terminating semicolon included.
clang::transformer::RangeSelector statementWithSemicolon(std::string StmtId);

/// Matches an expression that is a statement of its own (in a block, or the body of an `if` or a loop), not
/// part of a larger expression, a declaration or a return: one that a pass may replace or guard.
clang::ast_matchers::internal::Matcher<clang::Expr> isWholeStatement();

/// Makes the statement bound to `StmtId` run only when `Condition` holds: `if (Condition) <statement>`, in
/// braces when the statement is the `then` branch of an `if` with an `else` (which would otherwise attach to
/// the new `if`).
clang::transformer::EditGenerator guardStatement(std::string StmtId, std::string Condition);

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_INSERTION_H
