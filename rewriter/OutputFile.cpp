// rewriter/OutputFile.cpp: atomic file replacement through a temporary file and a rename.
#include "rewriter/OutputFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

namespace accelerate::rewriter {

llvm::Error writeFileAtomically(llvm::StringRef Path, llvm::StringRef Text) {
  namespace fs = llvm::sys::fs;
  llvm::SmallString<256> Target(Path);
  unsigned Mode = fs::all_read | fs::all_write;
  bool Existed = fs::exists(Path);
  if (Existed) {
    if (std::error_code EC = fs::real_path(Path, Target))
      return llvm::createStringError(EC, "cannot resolve '" + Path + "': " + EC.message());
    if (llvm::ErrorOr<fs::perms> Existing = fs::getPermissions(Target))
      Mode = *Existing;
  }
  auto Temporary = fs::TempFile::create(Target + ".accel-rewrite-%%%%%%", Mode);
  if (!Temporary)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "cannot create a temporary file next to '" + Path +
            "' (is its directory writable?): " + llvm::toString(Temporary.takeError()));
  {
    llvm::raw_fd_ostream Stream(Temporary->FD, /*shouldClose=*/false);
    Stream << Text;
    Stream.flush();
    if (Stream.has_error()) {
      std::error_code EC = Stream.error();
      Stream.clear_error();
      llvm::consumeError(Temporary->discard());
      return llvm::createStringError(EC, "cannot write '" + Path + "': " + EC.message());
    }
  }
  if (llvm::Error Err = Temporary->keep(Target))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot replace '" + Path + "': " + llvm::toString(std::move(Err)));
  // TempFile::create applies the umask; put an existing file's permissions back exactly.
  if (std::error_code EC =
          Existed ? fs::setPermissions(Target, static_cast<fs::perms>(Mode)) : std::error_code())
    return llvm::createStringError(EC,
                                   "wrote '" + Path + "' but cannot set its permissions: " + EC.message());
  return llvm::Error::success();
}

} // namespace accelerate::rewriter
