// rewriter/OutputFile.h: writes a file so that it is either the old one or the complete new one, never half.
#ifndef ACCELERATE_REWRITER_OUTPUTFILE_H
#define ACCELERATE_REWRITER_OUTPUTFILE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace accelerate::rewriter {

/// Writes `Text` to `Path` through a temporary file in the same directory, renamed over `Path` when complete.
/// An existing file keeps its permissions; a symbolic link is followed, so the file it names is replaced.
llvm::Error writeFileAtomically(llvm::StringRef Path, llvm::StringRef Text);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_OUTPUTFILE_H
