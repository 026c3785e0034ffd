// rewriter/Driver.h: what one `accel-rewrite FILE` run does, from parsing to writing the result.
#ifndef ACCELERATE_REWRITER_DRIVER_H
#define ACCELERATE_REWRITER_DRIVER_H

#include "passes/Registry.h"

#include "clang/Tooling/CompilationDatabase.h"

#include <string>
#include <vector>

namespace accelerate::rewriter {

struct DriverOptions {
  std::vector<std::string> InputFiles; ///< One; several with InPlace, OutputDir, Diff or Check.
  std::string OutputFile; ///< `-o`: write here; empty means stdout (unless InPlace or OutputDir).
  bool InPlace = false;   ///< `-i`: replace the input files and headers that changed.
  /// `--headers`: the project's headers (files, or directories for every header under them) the rewrite may
  /// change besides the input files. Empty: only the input files; changes headers would need are reported.
  std::vector<std::string> Headers;
  /// `--output-dir`: each input file, and each header of Headers that an input reads (changed or not, so
  /// the copies include one another), is written to OutputDir/<its path relative to Root>.
  std::string OutputDir;
  std::string Root;            ///< `--root`: with OutputDir; empty: the directory of the first input file.
  bool Explain = false;        ///< `--explain`: every change and note, its place and its reason, on stderr.
  bool Check = false;          ///< `--check`: write nothing; exit 1 when the file needs rewriting.
  bool Diff = false;           ///< `--diff`: a unified diff on stdout instead of the rewritten file.
  bool LineDirectives = false; ///< `--line-directives`: `#line` lines that map the output to InputFile.
  std::string ExportFixes;     ///< `--export-fixes`: the edits as clang-apply-replacements YAML, here.
  std::string DepFile;         ///< `--depfile`: the files the rewrite read, as a Makefile rule, here.
  std::vector<passes::PassInfo> Passes; ///< The passes to run, in registry order.
  passes::PassSettings Settings;        ///< What the passes are asked beyond that (`--log-with`).
  std::string ResourceDir;              ///< Clang's resource directory, prepended as `-resource-dir=`.
  std::string RuntimeIncludeDir; ///< Holds accelerate/accelerate.h; appended as `-I` to check the rewrite.
  /// Each input is parsed over the precompiled preamble of its #include block, which the check of its
  /// rewrite reuses (rewriter/Preamble.h); false (`--no-preamble`): both parse the whole file.
  bool Preamble = true;
  /// `--preamble-cache`: where preambles are kept between runs; empty: built for this run only.
  std::string PreambleCache;
};

/// Rewrites the input files and the headers they may change: parse each, run the passes, report (warnings
/// always, with a one-line summary per file; with Explain, every change and note), merge the edits each
/// input makes in a header (a header is rewritten once, and inputs that disagree about it are an error),
/// check that each rewritten input compiles with the rewritten headers, then write the files, their diff,
/// fixes or dependencies as asked. Returns the exit code: 0 on success, 1 when an input does not compile,
/// the rewrite would not compile, an output cannot be written, or (Check) a file needs rewriting; on an
/// error nothing is written.
int runDriver(const clang::tooling::CompilationDatabase& Database, const DriverOptions& Options);

} // namespace accelerate::rewriter

#endif // ACCELERATE_REWRITER_DRIVER_H
