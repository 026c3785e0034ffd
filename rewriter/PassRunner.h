// rewriter/PassRunner.h: runs the registered passes over one file and collects their edits and findings.
#ifndef ACCELERATE_REWRITER_PASSRUNNER_H
#define ACCELERATE_REWRITER_PASSRUNNER_H

#include "passes/Registry.h"
#include "rewriter/ApplyEdits.h"
#include "rewriter/ToolRunner.h"

#include <string>
#include <vector>

namespace clang {
class ASTContext;
class Decl;
} // namespace clang

namespace accelerate::rewriter {

/// One thing a pass did, or declined to do, at one place.
struct Finding {
  enum class Kind {
    Change,          ///< Rewritten, in the main file or a header the rewrite may change.
    NotRewritten,    ///< Recognised but left alone (e.g. in a macro); Message is the warning.
    Note,            ///< Left alone on purpose (already distributed code); Message says why.
    OutsideMainFile, ///< A change in a file the rewrite may not change (a header outside
                     ///< PassSettings::Headers): reported, not applied.
  };
  Kind What = Kind::Change;
  unsigned Id = 0;                ///< Unique in its FileRewrite; PlannedEdit::FindingId refers to it.
  std::string Pass;               ///< The pass's name in the registry.
  std::string File;               ///< Where, as the compiler names the file.
  std::string RealFile;           ///< The same file's real path (one name for it in every input's parse).
  unsigned Line = 0, Column = 0;  ///< 1-based.
  unsigned Offset = 0;            ///< For ordering findings in one file.
  std::string Message;            ///< The pass's explanation, or its warning.
  std::vector<std::string> Edits; ///< What changed, e.g. "'loss.backward()' -> 'accelerator.backward(loss)'".
};

/// A header of the project the rewrite may change (PassSettings::Headers) that the parse read: its text
/// and the edits the passes made in it, not yet applied (the driver merges the edits of every translation
/// unit that includes it, so that it is rewritten once).
struct HeaderEdits {
  std::string File; ///< Its real path.
  std::string Original;
  std::vector<FileEdit> Edits;
};

/// The passes' result for one file: its text before and after, and what happened, in source order.
struct FileRewrite {
  std::string File; ///< The main file as the compiler named it.
  std::string Original;
  std::string Rewritten;
  std::vector<Finding> Findings;
  std::vector<PlannedEdit> Edits;     ///< What turned Original into Rewritten.
  std::vector<std::string> ReadFiles; ///< Every file the parse read: the main file and its headers.
  std::vector<HeaderEdits> Headers;   ///< The headers it may change, in path order, edited or not.
  /// Where the main file's training runs (outermost training loops) begin, as offsets in Original, in source
  /// order: where an editor shows the rewrite.
  std::vector<unsigned> TrainingRuns;

  /// How many changes the passes made (Change findings).
  unsigned changes() const;
  /// How many sites need the user before the rewrite trains like the original: sites not rewritten, and
  /// changes in headers the rewrite may not change. A front end offers no fix while there is one.
  unsigned sitesLeft() const;
  /// Where an editor shows the rewrite: the first training loop, else the first edit (training code without
  /// a loop of its own, e.g. a step function), as an offset in Original.
  unsigned shownAt() const;
};

/// A finding as accel-rewrite prints it: a change `<file>:<line>:<col>: note: [<pass>] <edits>: <why>` (its
/// --explain line), a note `<file>:<line>:<col>: note: [<pass>] <why>`, a site not rewritten
/// `<file>:<line>:<col>: warning: <message> [<pass>]`. Not for OutsideMainFile findings, whose text depends
/// on the front end's settings.
std::string describeFinding(const Finding& Found);

/// The top-level declarations of the user's code in `Context`: those of the main file and of the headers in
/// its directory tree or that the rewrite may change, outside system headers. Library headers are not the
/// user's even when a build names them with -I (libtorch's are, in CMake builds); every front end matches
/// only these (ASTContext::setTraversalScope), which spares matching tens of thousands of library
/// declarations.
std::vector<clang::Decl*> userDeclarations(clang::ASTContext& Context);

/// Runs `Passes` over a translation unit already parsed (by accel-rewrite, clang-tidy or the language
/// server), with `Settings` (passes::passSettings()), over the user's code only: the main file and the
/// headers of its directory tree, never system or library headers. The main file is rewritten, the headers
/// Settings.Headers names get their edits (FileRewrite::Headers), and a change any other file would need
/// becomes an OutsideMainFile finding. The traversal scope of `Context` is restored before it returns. Fails
/// when the translation unit has errors, when a pass fails, or when two edits overlap.
llvm::Expected<FileRewrite> rewriteParsedFile(clang::ASTContext& Context,
                                              llvm::ArrayRef<passes::PassInfo> Passes,
                                              const passes::PassSettings& Settings = {});

/// Compiles `File` (see runOnFile) and runs `Passes` over it (rewriteParsedFile), with `Settings`
/// (passes::passSettings()). The main file is rewritten, and the headers Settings.Headers names get their
/// edits (FileRewrite::Headers); a change a pass makes in any other file becomes an OutsideMainFile finding,
/// and none of its edits is made. Fails with a CompileError when the file does not compile, or with a message
/// naming the pass and the place when a pass fails or two edits overlap. With `Preamble`, the parse goes over
/// the file's precompiled preamble, which `Preamble` keeps for the check of the rewrite (runOnFile).
llvm::Expected<FileRewrite> rewriteFile(const clang::tooling::CompilationDatabase& Database,
                                        llvm::StringRef File, const CompileFlags& Flags,
                                        llvm::ArrayRef<passes::PassInfo> Passes,
                                        const passes::PassSettings& Settings = {},
                                        PreambleUse* Preamble = nullptr);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_PASSRUNNER_H
