// Command-line flag parsing shared by the `accel` subcommands: `--name value`, `--name=value`, `--`, and
// "did you mean" suggestions for unknown flags and commands.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace accel {

/// A mistake in what the user typed: the `accel` driver prints it after `accel <command>: ` and exits with 2.
class UsageError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// One flag a subcommand accepts. `name` is spelled with underscores (`num_processes`); the parser also
/// accepts the hyphenated spelling (`--num-processes`), as Hugging Face's `accelerate launch` does.
///
///   FlagSpec::withValue("num_processes", "N", "how many ranks to start").alsoCalled({"nproc_per_node"})
///   FlagSpec::toggle("quiet", 'q', "leave out the notes")
struct FlagSpec {
  std::string name;
  char shortName = '\0'; ///< e.g. 'q' for `-q`; '\0' when there is none
  std::string valueName; ///< e.g. "N"; empty for a toggle, which takes no value
  std::string help;
  /// Names other launchers use for the same thing (torchrun's `nproc_per_node`): typing one of them gets
  /// this flag as the "did you mean" suggestion.
  std::vector<std::string> otherLaunchersNames;
  /// Other spellings accepted as this flag (torchrun's `--rdzv_id` for `--run_id`); the value is the flag's.
  std::vector<std::string> alsoAccepted;

  static FlagSpec withValue(std::string name, std::string valueName, std::string help) {
    return {std::move(name), '\0', std::move(valueName), std::move(help), {}, {}};
  }
  static FlagSpec toggle(std::string name, char shortName, std::string help) {
    return {std::move(name), shortName, "", std::move(help), {}, {}};
  }
  FlagSpec alsoCalled(std::vector<std::string> otherNames) const {
    FlagSpec copy = *this;
    copy.otherLaunchersNames = std::move(otherNames);
    return copy;
  }
  FlagSpec accepting(std::vector<std::string> names) const {
    FlagSpec copy = *this;
    copy.alsoAccepted = std::move(names);
    return copy;
  }
  bool takesValue() const { return !valueName.empty(); }
};

/// What `parseFlags` found: flag values in the order given, and the arguments after the flags.
struct ParsedFlags {
  struct Value {
    std::string name;
    std::string text; ///< empty for a switch
  };
  std::vector<Value> values;
  /// Everything from the first argument that is not a flag (or after `--`) on, unparsed.
  std::vector<std::string> positionals;

  bool has(const std::string& name) const;
  /// The last value given for `name` (later flags override earlier ones), if any.
  std::optional<std::string> last(const std::string& name) const;
};

/// Parses leading flags of `args` against `specs`; stops at `--` or at the first argument that does not start
/// with `-`, so a program's own flags pass through untouched. Throws UsageError naming the flag and the fix.
ParsedFlags parseFlags(const std::vector<FlagSpec>& specs, const std::vector<std::string>& args);

/// The help lines for `specs`, one flag per line, aligned.
std::string formatFlagHelp(const std::vector<FlagSpec>& specs);

/// The candidate closest to `typed` by edit distance, if it is close enough to be a likely typo.
std::optional<std::string> closestMatch(const std::string& typed, const std::vector<std::string>& candidates);

/// Parses `text` as a whole number >= min (and <= max when given; always within int) for `flag`; throws
/// UsageError naming the flag, the allowed range and the value.
int parseWholeNumberFlag(const std::string& flag, const std::string& text, int min, std::optional<int> max);

/// Parses `text` as a number of seconds >= 0 (decimals allowed) for `--flag`; throws UsageError otherwise.
double parseSecondsFlag(const std::string& flag, const std::string& text);

} // namespace accel
