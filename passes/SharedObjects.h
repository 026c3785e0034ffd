// passes/SharedObjects.h: the code of the rewritten files that shares objects with a function or a class — a
// training loop's extent across calls, for the rule that a loop is rewritten whole or not at all.
#ifndef ACCELERATE_PASSES_SHAREDOBJECTS_H
#define ACCELERATE_PASSES_SHAREDOBJECTS_H

#include "clang/Basic/SourceLocation.h"

#include <string>
#include <vector>

namespace clang {
class ASTContext;
class Decl;
} // namespace clang

namespace accelerate::passes {

/// A piece of code that shares objects with the start: a function or a class whole, one statement of a
/// function's body (at the top of the body: a loop is one piece), or the declaration of a parameter or a
/// variable.
struct SharingPiece {
  clang::SourceRange Range;
  /// How a message names the code: "function 'Trainer::fit'", "class 'Trainer'", "variable 'loader'".
  std::string Name;
  /// For a function only some of whose statements are pieces: its whole range. The edits that only serve
  /// the others (the lookup of the accelerator at its top) go when no other change is left in it.
  clang::SourceRange Function;
};

/// The code of the rewritten files that shares objects with `Start` (a function or a class, taken whole),
/// followed both ways to a fixed point: the callers' statements that made or prepared what it trains, the
/// callees that use what it prepared, the other statements of those callers that use the same objects, and
/// so on. Objects flow
/// - through the variables a statement at the top of a function body names (a loop is one statement: what
///   it reads and writes flows together), parameters and variables of static storage included;
/// - from a call's argument into the callee's parameter, when the argument can hand over an object (anything
///   but a number, an enumeration, a string, a device or tensor options); from a callee's returned object
///   to the call; through a function named as a callback;
/// - into a class: constructing or declaring an object of a class of the rewritten files, calling its
///   methods; a class's methods and members are one piece of state, taken whole.
/// Lambdas belong to the statement they are written in. Code that shares nothing with the start — a
/// function called with numbers only, over objects of its own — is not listed.
std::vector<SharingPiece> codeSharingObjectsWith(const clang::Decl& Start, clang::ASTContext& Context);

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_SHAREDOBJECTS_H
