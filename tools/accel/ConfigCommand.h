// `accel config`: the questionnaire, `accel config default`, and `accel config --validate FILE`.
#pragma once

#include <string>
#include <vector>

namespace accel {

/// One line on what `accel config` does, for `accel --help`.
extern const char* const kConfigSummary;

/// Runs `accel config` with the arguments after `config`; returns the exit code. Throws UsageError (exit 2)
/// for a bad flag, an invalid file, or answers that end early.
int runConfigCommand(const std::vector<std::string>& args);

} // namespace accel
