// `accel config`'s questions: what Accelerate's `accelerate config` asks about a local machine, line by
// line on a stream (a terminal or a pipe), and the config document the answers make.
#pragma once

#include "ConfigFile.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace accel {

/// Asks one question at a time on `out` and reads one answer line from `in`. An empty answer takes the
/// default shown in brackets; an answer that does not fit is explained and the question asked again.
class Prompter {
public:
  /// With `echoAnswers` (for piped input, which a terminal does not echo) each answer is printed after its
  /// question, so the transcript reads as it would at a terminal.
  Prompter(std::istream& in, std::ostream& out, bool echoAnswers = false)
      : in_(in), out_(out), echoAnswers_(echoAnswers) {}

  /// A numbered list of `options`; the answer is a number or an option's name. Returns the index.
  size_t choose(const std::string& question, const std::vector<std::string>& options,
                size_t defaultIndex = 0);
  bool yesNo(const std::string& question, bool defaultAnswer);
  long long wholeNumber(const std::string& question, long long defaultValue, long long min, long long max);
  double number(const std::string& question, double defaultValue);
  /// A non-empty text; with `defaultValue` empty the question has no default and must be answered.
  std::string text(const std::string& question, const std::string& defaultValue);
  void note(const std::string& message);

private:
  /// Prints `prompt`, reads a line (without its end); throws UsageError when the input ends first.
  std::string answer(const std::string& prompt);

  std::istream& in_;
  std::ostream& out_;
  bool echoAnswers_;
};

/// Runs the questionnaire and returns the config it describes, with exactly the keys Accelerate's own
/// `accelerate config` writes for the same answers.
ConfigDocument askConfigQuestions(Prompter& prompter);

/// The non-interactive config of `accel config default`: one process per GPU found (MULTI_GPU when more than
/// one), else a single CPU process; `mixedPrecision` is one of no, fp16, bf16, fp8.
ConfigDocument defaultConfig(int gpuCount, const std::string& mixedPrecision);

} // namespace accel
