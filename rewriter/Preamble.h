// rewriter/Preamble.h: the parse of a file's #include block, precompiled once and shared by the rewrite's
// parse and its compile check, and kept between runs in a preamble cache.
#ifndef ACCELERATE_REWRITER_PREAMBLE_H
#define ACCELERATE_REWRITER_PREAMBLE_H

#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/Support/VirtualFileSystem.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace clang {
class CompilerInvocation;
class PrecompiledPreamble;
} // namespace clang

namespace accelerate::rewriter {

/// Where a main file's preamble ends: clang's preamble (the directives and comments at the top of the file),
/// cut after its last #include line, so that the #include a rewrite adds after the file's last one, and the
/// lines it may add below, leave the preamble's bytes as they are: a parse of the rewritten text can reuse
/// it.
clang::PreambleBounds preambleBounds(const clang::LangOptions& Lang, const llvm::MemoryBuffer& MainText);

/// A precompiled preamble (clang's: the PCH of the directives at the top of a main file, as clangd builds
/// one) on disk: in a preamble cache, or a temporary file for this run.
class ParsePreamble {
public:
  ~ParsePreamble();
  /// Whether `MainText` begins with the preamble's bytes and every file the preamble read is as it was (size
  /// and modification time, in `Files`): a parse of `MainText` may then skip those bytes and read the PCH.
  bool fits(llvm::StringRef MainText, llvm::vfs::FileSystem& Files) const;
  /// Makes `Invocation` parse its main file over this preamble, in `Files`. A preamble kept in memory is put
  /// into an overlay of `Files` (which then names the overlay), and the main file is read from `Main`, which
  /// must then be given and outlive the parse; a preamble in a file leaves both as they are.
  void apply(clang::CompilerInvocation& Invocation, llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem>& Files,
             llvm::MemoryBuffer* Main = nullptr) const;
  /// Where the preamble's bytes end in the main file.
  const clang::PreambleBounds& bounds() const { return Bounds; }
  /// The files the preamble's parse read (absolute paths, as the parse's file system names them); a parse
  /// over the preamble does not read them again.
  std::vector<std::string> readFiles() const;

private:
  friend class PreambleCache;
  struct ReadFile {
    std::string Path; ///< Absolute, as the parse's file system names it.
    uint64_t Size = 0;
    int64_t Modified = 0; ///< Nanoseconds since the epoch.
  };
  ParsePreamble() = default;

  std::string PCH;
  std::string Text; ///< The preamble's bytes.
  clang::PreambleBounds Bounds{0, false};
  std::vector<ReadFile> Files;
  std::unique_ptr<clang::PrecompiledPreamble> Built; ///< Owns the temporary PCH when it is not cached.
  bool InMemory = false;                             ///< `Built` keeps the PCH in memory.
};

/// Where one run's preambles come from: a cache directory (`accel-rewrite --preamble-cache=DIR`; what
/// accelerate_target() gives, in the build tree), or none (each preamble is built for this run only).
class PreambleCache {
public:
  explicit PreambleCache(std::string Directory = "") : Directory(std::move(Directory)) {}
  /// No cache directory, and each preamble kept in memory rather than in a temporary file, as a language
  /// server keeps them (a process that ends without unwinding leaves no file behind).
  static PreambleCache inMemory() {
    PreambleCache Cache;
    Cache.InMemory = true;
    return Cache;
  }
  /// The preamble for a parse of `MainText` with `Invocation` in `Files`: the cached one when one fits (same
  /// compile options, same working and main-file directories, same preamble bytes, none of the files it
  /// read changed), else a new one, cached when there is a cache. Files in one directory whose #include
  /// blocks are the same share one. Null when the file has no preamble or it does not compile (the parse
  /// goes on without one and reports the errors); `Problem` then says why, when it is not the file's fault.
  ///
  /// `Trailer`, directive lines (each ending with a newline), is compiled into the PCH after the preamble's
  /// bytes although the main file does not have it there: a parse over the preamble skips only the file's
  /// bytes and sees what `Trailer` declared. Where the preamble with `Trailer` does not compile, the
  /// preamble is built without it.
  std::shared_ptr<ParsePreamble> obtain(const clang::CompilerInvocation& Invocation, llvm::StringRef MainText,
                                        llvm::StringRef Trailer,
                                        llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> Files,
                                        std::string& Problem) const;
  const std::string& directory() const { return Directory; }

private:
  std::string Directory;
  bool InMemory = false;
};

/// The line a rewrite adds after the file's last #include (the passes' addInclude of the runtime's header).
/// The preambles of accel-rewrite and accel-lsp end with it (PreambleUse::Trailer): the check of a rewrite
/// does not parse the runtime's headers again, and the parse of the file sees what they declare, as the
/// rewritten file will. Their parses search the runtime's include directory last.
constexpr llvm::StringLiteral RuntimeHeaderTrailer = "#include <accelerate/accelerate.h>\n";

/// One input file's preamble: obtained by its parse, reused by the compile check of its rewrite.
struct PreambleUse {
  const PreambleCache* Cache = nullptr; ///< Null: parse without a preamble.
  bool MayObtain = true;                ///< False: use `Preamble` where it fits, never build one.
  /// Compiled into the preamble after the file's bytes (PreambleCache::obtain): the #include the rewrite
  /// adds after the file's last one, so that its check does not parse the runtime's headers again.
  std::string Trailer;
  std::shared_ptr<ParsePreamble> Preamble;
  bool Applied = false; ///< Whether the last parse ran over `Preamble`.
  std::string Problem;  ///< Why a preamble could not be built or cached, if it could not.
};

/// `Action` for a parse over a precompiled preamble: the implicit instantiations the preamble's headers left
/// pending (their own uses of their templates and the virtual members of the vtables they use, which no code
/// after the preamble changes) are not performed again at the end of the parse; what the main file's code
/// instantiates is, with every instantiation that needs in turn. Every front end that parses over a preamble
/// (accel-rewrite, accel-lsp) does it, so that they see the same translation unit.
std::unique_ptr<clang::FrontendAction> overPreamble(std::unique_ptr<clang::FrontendAction> Action);

/// Runs `Inner`'s actions over the preamble of `Use` (obtained, or reused where it fits): the main file's
/// preamble bytes are read from the PCH (overPreamble). Without a preamble that fits, the parse is a plain
/// one.
class OverPreamble : public clang::tooling::FrontendActionFactory {
public:
  OverPreamble(clang::tooling::FrontendActionFactory& Inner, PreambleUse& Use) : Inner(Inner), Use(Use) {}
  bool runInvocation(std::shared_ptr<clang::CompilerInvocation> Invocation, clang::FileManager* Files,
                     std::shared_ptr<clang::PCHContainerOperations> PCHContainerOps,
                     clang::DiagnosticConsumer* DiagConsumer) override;
  std::unique_ptr<clang::FrontendAction> create() override;

private:
  clang::tooling::FrontendActionFactory& Inner;
  PreambleUse& Use;
};

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_PREAMBLE_H
