// `accel launch`: its flags, their checks, and the hand-off to the launcher (Launch.h).
#pragma once

#include <string>
#include <vector>

namespace accel {

/// One line on what `accel launch` does, for `accel --help`.
extern const char* const kLaunchSummary;

/// Runs `accel launch` with the arguments after `launch`; returns the exit code. Throws UsageError, before
/// starting anything, for a bad flag or value or a program that cannot run.
int runLaunchCommand(const std::vector<std::string>& args);

} // namespace accel
