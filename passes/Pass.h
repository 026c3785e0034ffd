// passes/Pass.h: what a rewrite pass is: the rule it returns, how it marks what it leaves alone, the row that
// describes it (PassInfo), and the settings of the rewrite it runs in. Every pass includes this header; only
// the table (passes/Registry.h) lists the passes.
#ifndef ACCELERATE_PASSES_PASS_H
#define ACCELERATE_PASSES_PASS_H

#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Tooling/Transformer/RewriteRule.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace accelerate::passes {

/// What every pass returns: a Clang Transformer rule whose metadata is the explanation shown to the user.
/// A case whose only edit is a `noopEdit` reports its explanation as a warning: code the pass recognised
/// but did not rewrite; or, when the explanation starts with NoteMarker, as a note: code the pass left as it
/// is on purpose. The same rule can back a clang-tidy check (`TransformerClangTidyCheck`).
using PassRule = clang::transformer::RewriteRuleWith<std::string>;

/// Starts the explanation of a case that leaves code alone on purpose (reported as a note, not a warning).
inline constexpr llvm::StringLiteral NoteMarker = "note: ";

/// Starts the warning of a case that leaves unprepared an object the training code around it needs prepared
/// (an optimizer, hence the models it trains): the rewrite of that code would not run on more than one
/// process. The rewrite then makes none of the changes in that code (rewriter/PassRunner.cpp): the function
/// the case is in, or the class whose member it is, and the code that shares objects with it across calls
/// (passes/SharedObjects.h). A training loop is rewritten whole or not at all.
inline constexpr llvm::StringLiteral RefusalMarker = "refusal: ";

/// One row of the pass table: each pass's file defines its row (`PassInfo <name>PassInfo()`), and
/// passes/Passes.def, the only list of the passes, names the rows in the order the passes run.
/// accel-rewrite, the clang-tidy module and the language server run allPasses(), the accelerator pass asks
/// the rows where the others use `accelerator`, and docs/passes.md's table is generated from the rows
/// (scripts/passes_table.py). Adding a pass: write `passes/<Name>Pass.cpp` and `test/passes/<name>.cpp`,
/// and add one line to passes/Passes.def (docs/development.md, "Adding a pass").
struct PassInfo {
  llvm::StringRef Name;    ///< Short name used in `--explain`, `--passes=` and docs, e.g. "backward".
  PassRule (*MakeRule)();  ///< Builds the pass's rule.
  llvm::StringRef Summary; ///< One line saying what the pass rewrites.
  bool OnByDefault = true; ///< Off: runs only when named in `--passes=`.
  /// When set: the warning given when the pass runs and finds nothing to do, nor anything to report, in any
  /// file of the rewrite (a pass asked for by name whose sites the code lacks).
  llvm::StringRef WhenNothingFound = {};
  /// What the pass recognises and leaves alone, saying so (docs/passes.md's "leaves alone" column).
  llvm::StringRef LeavesAlone = {};
  /// For a pass off by default: what turns it on (docs/passes.md's "on" column), e.g. "`--log-with`".
  llvm::StringRef TurnedOnBy = {};
  /// When set: matches the statements the pass rewrites into a use of `accelerator` (`accelerator.backward(
  /// ...)`, `accelerator.prepare(...)`); the accelerator pass declares `accelerator` in the functions that
  /// hold them, and `main` gets it when they reach it through `accelerate::Accelerator::current()`.
  clang::ast_matchers::StatementMatcher (*UsesAccelerator)() = nullptr;
  /// When set: matches the main file's top-level declarations the pass makes `main` use `accelerator` for
  /// (a global optimizer whose models are prepared at the start of main).
  clang::ast_matchers::DeclarationMatcher (*UsesAcceleratorInMain)() = nullptr;
  /// When set: the options the pass gives the accelerator the rewrite constructs, as setters chained onto
  /// `accelerate::AcceleratorOptions()` (`log_with({"wandb"})`, several joined by `.`); empty when it gives
  /// none in this rewrite.
  std::string (*AcceleratorOptions)() = nullptr;
  /// For a pass a front-end setting turns on, as accel-rewrite's flag spells it (`--log-with`): the pass runs
  /// whenever the setting is given, and naming the pass without it is refused (it would have nothing to do).
  llvm::StringRef Setting = {};
};

/// What a rewrite asks of the passes beyond which of them run: the command line's settings
/// (`accel-rewrite --log-with`, `--progress-bar`, `accelerate_target(... LOG_WITH ...)`). Passes read them
/// through passSettings(); the defaults change nothing.
struct PassSettings {
  /// `--log-with`: the trackers the tracking pass adds to the accelerator's options (`log_with({...})`), by
  /// the names the runtime's `log_with` takes. Empty: no tracking.
  std::vector<std::string> LogWith;
  /// `--project-name`: the project `init_trackers` names (its directory under the project directory). Empty:
  /// the stem of the file rewritten.
  std::string ProjectName;
  /// `--progress-bar`: the progress-bar pass gives the training loop an `accelerate::ProgressBar`.
  bool ProgressBar = false;
  /// `--resume`: the checkpoint pass loads the checkpoint it saves on any start that finds one, not only on
  /// a launcher's restart.
  bool Resume = false;
  /// `--headers`: the project's headers the rewrite may change besides the main file, as absolute real
  /// paths: a directory stands for every header under it, a file for itself. System headers never count.
  /// Empty: only the main file is rewritten; changes other files would need are reported.
  std::vector<std::string> Headers;
};

/// True when the pass named `Name` runs in the current rewrite. A pass whose rewrite depends on another's
/// (the device pass drops a batch's `.to(device)` only when the data-loader pass prepares its loader) asks
/// this, so that `--disable=` never leaves one half of a pair. Outside an EnabledPasses scope, the passes
/// that are on by default.
bool isPassEnabled(llvm::StringRef Name);

/// The settings of the current rewrite; outside an EnabledPasses scope, the defaults.
const PassSettings& passSettings();

/// (isPassEnabled, passSettings and EnabledPasses are implemented with the table, in passes/Registry.cpp.)
/// While alive, isPassEnabled() answers for `Passes` and passSettings() returns `Settings` (the runner holds
/// one for each rewrite).
class EnabledPasses {
public:
  explicit EnabledPasses(llvm::ArrayRef<PassInfo> Passes, PassSettings Settings = {});
  ~EnabledPasses();
  EnabledPasses(const EnabledPasses&) = delete;
  EnabledPasses& operator=(const EnabledPasses&) = delete;

private:
  const EnabledPasses* Outer;
  std::vector<std::string> Names;
  PassSettings Settings;
  friend bool isPassEnabled(llvm::StringRef Name);
  friend const PassSettings& passSettings();
};

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_PASS_H
