// passes/Insertion.h: where passes put new statements in the user's code, and how they lay them out.
#ifndef ACCELERATE_PASSES_INSERTION_H
#define ACCELERATE_PASSES_INSERTION_H

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

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_INSERTION_H
