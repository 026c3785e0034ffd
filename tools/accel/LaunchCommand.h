// `accel launch`: its flags, their checks, and the hand-off to the launcher (Launch.h).
#pragma once

#include "Flags.h"

#include <string>
#include <vector>

namespace accel {

/// One line on what `accel launch` does, for `accel --help`.
extern const char* const kLaunchSummary;

/// The flags `accel launch` takes (the launcher's own and every launch setting's), for commands that launch a
/// program of their own with the same flags (`accel test`).
const std::vector<FlagSpec>& launchFlagSpecs();

/// Runs `accel launch` with the arguments after `launch`; returns the exit code. Throws UsageError, before
/// starting anything, for a bad flag or value or a program that cannot run.
int runLaunchCommand(const std::vector<std::string>& args);

} // namespace accel
