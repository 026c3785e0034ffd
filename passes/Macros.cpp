// passes/Macros.cpp: macro-expansion checks and descriptions shared by all passes.
#include "passes/Macros.h"

#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"

namespace accelerate::passes {
namespace {

AST_MATCHER(clang::Stmt, startsOrEndsInMacro) {
  return Node.getBeginLoc().isMacroID() || Node.getEndLoc().isMacroID();
}

} // namespace

clang::ast_matchers::internal::Matcher<clang::Stmt> isInMacroExpansion() {
  return startsOrEndsInMacro();
}

std::string describeMacroOrigin(clang::SourceRange Range, const clang::SourceManager& SM,
                                const clang::LangOptions& LangOpts) {
  // A token from a macro's body is spelled in its #define; a macro argument's token is spelled at the call
  // site, inside the expansion's range. (isMacroArgExpansion only looks at the innermost expansion, which
  // misleads for nested macros such as TIMED(STEP(loss)).)
  auto InMacroBody = [&](clang::SourceLocation Loc) {
    if (!Loc.isMacroID())
      return false;
    clang::CharSourceRange CallSite = SM.getExpansionRange(Loc);
    return !SM.isPointWithin(SM.getSpellingLoc(Loc), CallSite.getBegin(), CallSite.getEnd());
  };
  // The immediate macro is the innermost expansion: the text the user would edit.
  auto Name = [&](clang::SourceLocation Loc) {
    return "'" + clang::Lexer::getImmediateMacroName(Loc, SM, LangOpts).str() + "'";
  };
  clang::SourceLocation Begin = Range.getBegin(), End = Range.getEnd();
  // `STEP(loss)` with `#define STEP(l) l.backward()`: the call ends in the macro's body.
  if (InMacroBody(End))
    return (Begin.isMacroID() ? "it is written in the body of macro " : "part of it comes from macro ") +
           Name(End);
  if (InMacroBody(Begin)) // `LOSS.backward()` with `#define LOSS loss`.
    return "part of it comes from macro " + Name(Begin);
  if (Begin.isMacroID() && End.isMacroID()) // `CHECK(loss.backward())`.
    return "it is an argument of macro " + Name(Begin);
  if (Begin.isMacroID() || End.isMacroID())
    return "part of it comes from macro " + Name(Begin.isMacroID() ? Begin : End);
  return "it is not in a macro expansion";
}

} // namespace accelerate::passes
