// rewriter/Preamble.cpp: a file's #include block precompiled once (clang's PrecompiledPreamble), kept in a
// cache directory between runs, and parses over it that skip the instantiations its headers left pending.
#include "rewriter/Preamble.h"

#include "clang/Basic/DiagnosticOptions.h"
#include "clang/Basic/FileManager.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Basic/Version.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/FrontendAction.h"
#include "clang/Frontend/MultiplexConsumer.h"
#include "clang/Frontend/PrecompiledPreamble.h"
#include "clang/Lex/PreprocessorOptions.h"
#include "clang/Sema/ExternalSemaSource.h"
#include "clang/Sema/Sema.h"
#include "clang/Sema/SemaConsumer.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

namespace accelerate::rewriter {
namespace {

constexpr llvm::StringLiteral FormatLine = "accel-rewrite preamble 2";

/// Prints nothing: a preamble with errors is not used (a parse over it would not report them: they are the
/// PCH's), and the parse without it reports them.
class IgnoreDiagnostics : public clang::DiagnosticConsumer {
  void HandleDiagnostic(clang::DiagnosticsEngine::Level, const clang::Diagnostic&) override {}
};

/// Collects the files the preamble's parse read, before the action ends.
class RecordReadFiles : public clang::PreambleCallbacks {
public:
  void AfterExecute(clang::CompilerInstance& CI) override {
    const clang::SourceManager& SM = CI.getSourceManager();
    for (auto File = SM.fileinfo_begin(); File != SM.fileinfo_end(); ++File)
      Paths.push_back(File->first.getName().str());
  }
  std::vector<std::string> Paths;
};

/// The key of a preamble in the cache: what the PCH depends on besides the files it read.
std::string cacheKey(const clang::CompilerInvocation& Invocation, llvm::StringRef GivenPath,
                     llvm::StringRef MainPath, llvm::StringRef WorkingDirectory, llvm::StringRef PreambleText,
                     const clang::PreambleBounds& Bounds, llvm::StringRef Trailer) {
  llvm::SHA256 Hash;
  auto Add = [&](llvm::StringRef Part) {
    Hash.update(Part);
    Hash.update(llvm::ArrayRef<uint8_t>{0});
  };
  Add(clang::getClangFullVersion());
  // The compile options, less the main file's own name: files of one directory share a preamble.
  std::vector<std::string> Arguments = Invocation.getCC1CommandLine();
  for (size_t K = 0; K < Arguments.size(); ++K) {
    if (Arguments[K] == "-main-file-name") {
      ++K;
      continue;
    }
    if (Arguments[K] == MainPath || Arguments[K] == GivenPath)
      continue;
    Add(Arguments[K]);
  }
  Add(WorkingDirectory);
  Add(llvm::sys::path::parent_path(MainPath));
  Add(PreambleText);
  Add(Bounds.PreambleEndsAtStartOfLine ? "1" : "0");
  Add(Trailer);
  std::array<uint8_t, 32> Digest = Hash.final();
  return llvm::toHex(llvm::ArrayRef<uint8_t>(Digest.data(), 16), /*LowerCase=*/true);
}

/// The second line of a cache record (after FormatLine): the preamble's bounds.
std::string boundsLine(const clang::PreambleBounds& Bounds) {
  return std::to_string(Bounds.Size) + " " + (Bounds.PreambleEndsAtStartOfLine ? "1" : "0");
}

/// How many preambles a cache keeps: the least recently used go first (a torch preamble is about 120 MB).
constexpr size_t CacheEntries = 32;

/// Removes the least recently used preambles beyond CacheEntries (a record's modification time is its last
/// use), and the temporary PCH files of builds that died more than a day ago.
void pruneCache(llvm::StringRef Directory) {
  namespace fs = llvm::sys::fs;
  std::vector<std::pair<llvm::sys::TimePoint<>, std::string>> Entries;
  const auto DayAgo = std::chrono::system_clock::now() - std::chrono::hours(24);
  std::error_code EC;
  for (fs::directory_iterator It(Directory, EC), End; It != End && !EC; It.increment(EC)) {
    llvm::StringRef Path = It->path();
    llvm::StringRef Name = llvm::sys::path::filename(Path);
    fs::file_status Status;
    if (fs::status(Path, Status))
      continue;
    if (Name.ends_with(".files"))
      Entries.push_back({Status.getLastModificationTime(), Path.drop_back(6).str()});
    else if ((Name.starts_with("preamble-") || Name.contains(".pch.tmp")) &&
             Status.getLastModificationTime() < DayAgo)
      fs::remove(Path);
  }
  if (Entries.size() <= CacheEntries)
    return;
  llvm::sort(Entries);
  for (size_t K = 0; K + CacheEntries < Entries.size(); ++K) {
    fs::remove(Entries[K].second + ".files");
    fs::remove(Entries[K].second + ".pch");
  }
}

/// Marks a cache record used now.
void touch(llvm::StringRef Path) {
  int FD;
  if (llvm::sys::fs::openFileForWrite(Path, FD, llvm::sys::fs::CD_OpenExisting, llvm::sys::fs::OF_Append))
    return;
  (void)llvm::sys::fs::setLastAccessAndModificationTime(FD, std::chrono::system_clock::now());
  llvm::sys::Process::SafelyCloseFileDescriptor(FD);
}

int64_t modifiedNanoseconds(const llvm::vfs::Status& Status) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Status.getLastModificationTime().time_since_epoch())
      .count();
}

/// Skips the implicit instantiations a precompiled preamble left pending: those its headers' own code
/// asked for, whose template arguments no code after the preamble can change. Two lists: the function
/// templates' specializations the headers used, and the classes whose vtables they used (at the end of the
/// translation unit each such class's virtual members are instantiated: every module holder libtorch's
/// headers name). Both are drained when the parse begins, before the main file's code adds to them; what that
/// code instantiates, and the vtables it uses, are performed as in any parse, with every instantiation that
/// needs in turn.
class SkipPreambleInstantiations : public clang::SemaConsumer {
public:
  void InitializeSema(clang::Sema& S) override {
    // The PCH's reader is the context's external source; it becomes Sema's only after this call.
    auto* Source = llvm::dyn_cast_or_null<clang::ExternalSemaSource>(S.getASTContext().getExternalSource());
    if (!Source)
      return;
    llvm::SmallVector<std::pair<clang::ValueDecl*, clang::SourceLocation>> Pending;
    Source->ReadPendingInstantiations(Pending);
    // Those without external linkage (a header's template used with its own lambda) are performed still: no
    // other translation unit could define them, and the end of this one says so when it is left undefined.
    for (const auto& [Decl, At] : Pending)
      if (!Decl->isExternallyVisible() || S.isExternalWithNoLinkageType(Decl)) {
        if (auto* Function = llvm::dyn_cast<clang::FunctionDecl>(Decl))
          Function->setInstantiationIsPending(true);
        S.PendingInstantiations.push_back({Decl, At});
      }
    llvm::SmallVector<clang::ExternalVTableUse> VTables;
    Source->ReadUsedVTables(VTables);
  }
};

class OverPreambleAction : public clang::WrapperFrontendAction {
public:
  using clang::WrapperFrontendAction::WrapperFrontendAction;

protected:
  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance& CI,
                                                        llvm::StringRef InFile) override {
    std::unique_ptr<clang::ASTConsumer> Wrapped = clang::WrapperFrontendAction::CreateASTConsumer(CI, InFile);
    if (!Wrapped)
      return nullptr;
    std::vector<std::unique_ptr<clang::ASTConsumer>> Consumers;
    Consumers.push_back(std::make_unique<SkipPreambleInstantiations>());
    Consumers.push_back(std::move(Wrapped));
    return std::make_unique<clang::MultiplexConsumer>(std::move(Consumers));
  }
};

} // namespace

clang::PreambleBounds preambleBounds(const clang::LangOptions& Lang, const llvm::MemoryBuffer& MainText) {
  clang::PreambleBounds Full = clang::ComputePreambleBounds(Lang, MainText, 0);
  // The lexer reads up to a NUL: a copy of the preamble's bytes ends with one.
  std::string Bytes = MainText.getBuffer().take_front(Full.Size).str();
  llvm::StringRef Text = Bytes;
  // The preamble's directives, from raw tokens: each runs from its '#' to the next token at the start of a
  // line. The cut goes after the last #include outside conditionals (an include guard, `#ifndef X` then
  // `#define X` as the first two directives, is not one), where a rewrite adds its own #include.
  clang::Lexer Lex(clang::SourceLocation::getFromRawEncoding(1), Lang, Text.begin(), Text.begin(),
                   Text.end());
  auto LineStart = [&](const clang::Token& Tok) {
    return unsigned(Text.take_front(Tok.getLocation().getRawEncoding() - 1).rfind('\n') + 1);
  };
  unsigned End = 0;
  int Depth = 0;
  int Directives = 0;
  llvm::StringRef Directive; // The directive whose line(s) the lexer is in.
  llvm::StringRef FirstArgument, GuardName;
  auto Ended = [&](unsigned At) {
    if (Directive.empty())
      return;
    ++Directives;
    if (Directives == 1 && Directive == "ifndef")
      GuardName = FirstArgument;
    if (Directives == 2 && !GuardName.empty() && Directive == "define" && FirstArgument == GuardName)
      --Depth; // The guard's #ifndef holds the whole file.
    if (llvm::is_contained({"include", "include_next", "import"}, Directive) && Depth == 0)
      End = At;
    if (Directive.starts_with("if"))
      ++Depth;
    if (Directive == "endif" && Depth > 0)
      --Depth;
    Directive = FirstArgument = "";
  };
  clang::Token Tok;
  Lex.LexFromRawLexer(Tok);
  while (Tok.isNot(clang::tok::eof)) {
    if (!Tok.isAtStartOfLine()) {
      Lex.LexFromRawLexer(Tok);
      continue;
    }
    Ended(LineStart(Tok));
    if (Tok.isNot(clang::tok::hash)) {
      Lex.LexFromRawLexer(Tok);
      continue;
    }
    Lex.LexFromRawLexer(Tok);
    if (!Tok.isAtStartOfLine() && Tok.is(clang::tok::raw_identifier)) {
      Directive = Tok.getRawIdentifier();
      Lex.LexFromRawLexer(Tok);
      if (!Tok.isAtStartOfLine() && Tok.is(clang::tok::raw_identifier))
        FirstArgument = Tok.getRawIdentifier();
    } else if (!Tok.isAtStartOfLine() && Tok.isNot(clang::tok::eof)) {
      Directive = "other";
      Lex.LexFromRawLexer(Tok);
    }
  }
  Ended(Full.Size);
  if (End == Full.Size)
    return Full;
  return clang::PreambleBounds(End, /*PreambleEndsAtStartOfLine=*/End > 0);
}

ParsePreamble::~ParsePreamble() = default;

std::vector<std::string> ParsePreamble::readFiles() const {
  std::vector<std::string> Paths;
  for (const ReadFile& File : Files)
    Paths.push_back(File.Path);
  return Paths;
}

bool ParsePreamble::fits(llvm::StringRef MainText, llvm::vfs::FileSystem& FS) const {
  if (!MainText.starts_with(Text))
    return false;
  for (const ReadFile& File : Files) {
    llvm::ErrorOr<llvm::vfs::Status> Status = FS.status(File.Path);
    if (!Status || Status->getSize() != File.Size || modifiedNanoseconds(*Status) != File.Modified)
      return false;
  }
  return true;
}

void ParsePreamble::apply(clang::CompilerInvocation& Invocation,
                          llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem>& Files,
                          llvm::MemoryBuffer* Main) const {
  // As PrecompiledPreamble::AddImplicitPreamble configures a parse over a preamble stored in a file; one in
  // memory is configured by it (an overlay of `Files` holds the PCH), then skips only the file's own bytes.
  clang::PreprocessorOptions& Preprocessor = Invocation.getPreprocessorOpts();
  if (InMemory)
    Built->AddImplicitPreamble(Invocation, Files, Main);
  else
    Preprocessor.ImplicitPCHInclude = PCH;
  Preprocessor.PrecompiledPreambleBytes = {Bounds.Size, Bounds.PreambleEndsAtStartOfLine};
  Preprocessor.DisablePCHOrModuleValidation = clang::DisableValidationForModuleKind::PCH;
  Preprocessor.UsePredefines = false; // The preamble's predefines stand.
}

std::shared_ptr<ParsePreamble> PreambleCache::obtain(const clang::CompilerInvocation& Invocation,
                                                     llvm::StringRef MainText, llvm::StringRef Trailer,
                                                     llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> Files,
                                                     std::string& Problem) const {
  const clang::FrontendOptions& Frontend = Invocation.getFrontendOpts();
  if (Frontend.Inputs.size() != 1 || !Frontend.Inputs[0].isFile())
    return nullptr;
  std::string MainPath = Frontend.Inputs[0].getFile().str();
  std::unique_ptr<llvm::MemoryBuffer> Buffer = llvm::MemoryBuffer::getMemBufferCopy(MainText, MainPath);
  clang::PreambleBounds Bounds = preambleBounds(Invocation.getLangOpts(), *Buffer);
  if (Bounds.Size == 0)
    return nullptr;
  llvm::StringRef Text = MainText.take_front(Bounds.Size);
  llvm::ErrorOr<std::string> WorkingDirectory = Files->getCurrentWorkingDirectory();
  if (!WorkingDirectory)
    return nullptr;
  llvm::SmallString<256> AbsoluteMain(MainPath);
  Files->makeAbsolute(AbsoluteMain);
  // The trailer goes after a preamble that ends a line; without it where it does not compile.
  llvm::SmallVector<llvm::StringRef, 2> Trailers;
  if (!Trailer.empty() && Bounds.PreambleEndsAtStartOfLine)
    Trailers.push_back(Trailer);
  Trailers.push_back("");
  auto KeyOf = [&](llvm::StringRef Trailer) {
    return cacheKey(Invocation, MainPath, AbsoluteMain, *WorkingDirectory, Text, Bounds, Trailer);
  };
  auto PathOf = [&](llvm::StringRef Key, llvm::StringRef Extension) {
    llvm::SmallString<256> Path(Directory);
    llvm::sys::path::append(Path, Key + Extension);
    return Path.str().str();
  };

  auto Fresh = [&] {
    std::shared_ptr<ParsePreamble> Preamble(new ParsePreamble());
    Preamble->Text = Text.str();
    Preamble->Bounds = Bounds;
    return Preamble;
  };
  // A cached preamble fits when its record is whole and none of the files it read changed. One without the
  // trailer is in the cache only because the trailer did not compile.
  if (!Directory.empty())
    for (llvm::StringRef Each : Trailers) {
      std::string Key = KeyOf(Each);
      std::string CachedPCH = PathOf(Key, ".pch"), CachedRecord = PathOf(Key, ".files");
      auto Record = llvm::MemoryBuffer::getFile(CachedRecord);
      if (!Record || !llvm::sys::fs::exists(CachedPCH))
        continue;
      std::shared_ptr<ParsePreamble> Preamble = Fresh();
      llvm::SmallVector<llvm::StringRef> Lines;
      (*Record)->getBuffer().split(Lines, '\n', -1, /*KeepEmpty=*/false);
      bool Whole = Lines.size() >= 2 && Lines[0] == FormatLine && Lines[1] == boundsLine(Bounds);
      for (size_t K = 2; Whole && K < Lines.size(); ++K) {
        auto [Size, Rest] = Lines[K].split(' ');
        auto [Modified, Path] = Rest.split(' ');
        ParsePreamble::ReadFile File{Path.str(), 0, 0};
        Whole =
            !Path.empty() && !Size.getAsInteger(10, File.Size) && !Modified.getAsInteger(10, File.Modified);
        Preamble->Files.push_back(std::move(File));
      }
      if (Whole && Preamble->fits(MainText, *Files)) {
        Preamble->PCH = CachedPCH;
        touch(CachedRecord);
        return Preamble;
      }
    }

  // Built as clangd builds one; the PCH goes into the cache directory (then kept under its key), or into a
  // temporary file that lives as long as the preamble.
  if (!Directory.empty())
    if (std::error_code EC = llvm::sys::fs::create_directories(Directory)) {
      Problem = "cannot create the preamble cache " + Directory + ": " + EC.message();
      return nullptr;
    }
  std::shared_ptr<ParsePreamble> Preamble;
  std::string Key;
  for (llvm::StringRef Each : Trailers) {
    IgnoreDiagnostics Ignore;
    llvm::IntrusiveRefCntPtr<clang::DiagnosticsEngine> Diagnostics =
        clang::CompilerInstance::createDiagnostics(new clang::DiagnosticOptions(), &Ignore,
                                                   /*ShouldOwnClient=*/false);
    // The PCH's main file: the preamble's bytes, then the trailer.
    std::unique_ptr<llvm::MemoryBuffer> Compiled =
        llvm::MemoryBuffer::getMemBufferCopy((Text + Each).str(), MainPath);
    RecordReadFiles Callbacks;
    llvm::ErrorOr<clang::PrecompiledPreamble> Built = clang::PrecompiledPreamble::Build(
        Invocation, Compiled.get(),
        clang::PreambleBounds(Compiled->getBufferSize(), Bounds.PreambleEndsAtStartOfLine), *Diagnostics,
        Files, std::make_shared<clang::PCHContainerOperations>(),
        /*StoreInMemory=*/InMemory, /*StoragePath=*/Directory, Callbacks);
    if (!Built || Diagnostics->hasErrorOccurred())
      continue;
    Preamble = Fresh();
    Key = KeyOf(Each);
    Preamble->Built = std::make_unique<clang::PrecompiledPreamble>(std::move(*Built));
    Preamble->InMemory = InMemory;
    {
      // Where Build put the PCH: the path a parse over it would read.
      clang::CompilerInvocation Probe(Invocation);
      llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> ProbeFiles = Files;
      Preamble->Built->AddImplicitPreamble(Probe, ProbeFiles, Compiled.get());
      Preamble->PCH = Probe.getPreprocessorOpts().ImplicitPCHInclude;
    }
    // What it read, and a PCH the command gives (-include-pch): the preamble extends that PCH, and is stale
    // once it is built again.
    std::vector<std::string> Read = std::move(Callbacks.Paths);
    if (const std::string& Given = Invocation.getPreprocessorOpts().ImplicitPCHInclude; !Given.empty())
      Read.push_back(Given);
    for (const std::string& Name : Read) {
      llvm::SmallString<256> Path(Name);
      Files->makeAbsolute(Path);
      if (Path == AbsoluteMain)
        continue; // The main file: its preamble bytes are compared instead.
      llvm::ErrorOr<llvm::vfs::Status> Status = Files->status(Path);
      if (!Status)
        continue;
      Preamble->Files.push_back({Path.str().str(), Status->getSize(), modifiedNanoseconds(*Status)});
    }
    break;
  }
  if (!Preamble)
    return nullptr; // The #include block does not compile: the parse without a preamble says why.
  if (Directory.empty())
    return Preamble;

  // Kept under its key: a link to the PCH renamed into place (atomically replacing a stale one), then its
  // record (the format, the bounds, one line per file read); a reader takes the pair only when the record is
  // whole and matches.
  std::string CachedPCH = PathOf(Key, ".pch"), CachedRecord = PathOf(Key, ".files");
  std::string Link = CachedPCH + ".tmp" + std::to_string(llvm::sys::Process::getProcessId());
  llvm::sys::fs::remove(Link);
  std::error_code EC = llvm::sys::fs::create_hard_link(Preamble->PCH, Link);
  if (EC)
    EC = llvm::sys::fs::copy_file(Preamble->PCH, Link);
  if (!EC)
    EC = llvm::sys::fs::rename(Link, CachedPCH);
  if (!EC) {
    llvm::Error Written = llvm::writeToOutput(CachedRecord, [&](llvm::raw_ostream& OS) {
      OS << FormatLine << "\n" << boundsLine(Bounds) << "\n";
      for (const ParsePreamble::ReadFile& File : Preamble->Files)
        OS << File.Size << " " << File.Modified << " " << File.Path << "\n";
      return llvm::Error::success();
    });
    if (Written)
      EC = llvm::errorToErrorCode(std::move(Written));
  }
  if (EC) {
    llvm::sys::fs::remove(Link);
    Problem = "cannot keep a preamble in the cache " + Directory + ": " + EC.message() +
              " (this run used it; the next one builds it again)";
    return Preamble;
  }
  pruneCache(Directory);
  return Preamble;
}

bool OverPreamble::runInvocation(std::shared_ptr<clang::CompilerInvocation> Invocation,
                                 clang::FileManager* Files,
                                 std::shared_ptr<clang::PCHContainerOperations> PCHContainerOps,
                                 clang::DiagnosticConsumer* DiagConsumer) {
  Use.Applied = false;
  const clang::FrontendOptions& Frontend = Invocation->getFrontendOpts();
  if (Use.Cache && Frontend.Inputs.size() == 1 && Frontend.Inputs[0].isFile()) {
    llvm::vfs::FileSystem& FS = Files->getVirtualFileSystem();
    if (auto Main = FS.getBufferForFile(Frontend.Inputs[0].getFile())) {
      llvm::StringRef Text = (*Main)->getBuffer();
      bool Fits = Use.Preamble && Use.Preamble->fits(Text, FS);
      if (!Fits && Use.MayObtain) {
        // What obtain() gives was read from the cache because it fits, or built from this text.
        Use.Preamble =
            Use.Cache->obtain(*Invocation, Text, Use.Trailer, Files->getVirtualFileSystemPtr(), Use.Problem);
        Fits = Use.Preamble != nullptr;
      }
      if (Fits) {
        llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> Unchanged = Files->getVirtualFileSystemPtr();
        Use.Preamble->apply(*Invocation, Unchanged); // Cached or built in a file: the file system stands.
        Use.Applied = true;
      }
    }
  }
  return clang::tooling::FrontendActionFactory::runInvocation(std::move(Invocation), Files,
                                                              std::move(PCHContainerOps), DiagConsumer);
}

std::unique_ptr<clang::FrontendAction> OverPreamble::create() {
  std::unique_ptr<clang::FrontendAction> Action = Inner.create();
  return Use.Applied ? overPreamble(std::move(Action)) : std::move(Action);
}

std::unique_ptr<clang::FrontendAction> overPreamble(std::unique_ptr<clang::FrontendAction> Action) {
  return std::make_unique<OverPreambleAction>(std::move(Action));
}

} // namespace accelerate::rewriter
