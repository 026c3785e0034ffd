// `accel test`: checks a configured setup end to end, as Accelerate's `accelerate test`: it launches the
// bundled accel-test-program on the configuration's processes, which checks the rendezvous, every collective,
// the sharded data loader, the precision recipe, gradient synchronisation under the selected strategy and a
// save/load round trip, one line per check, and prints the verdict.
#pragma once

#include <string>
#include <vector>

namespace accel {

/// One line on what `accel test` does, for `accel --help`.
extern const char* const kTestSummary;

/// The test program `accel test` runs: `accel-test-program` beside the running `accel` (build/bin, or the
/// install's bin). Throws std::runtime_error naming the folder and the fix when it is not there.
std::string testProgramPath();

/// Runs `accel test` with the arguments after `test` (accel launch's flags); returns the exit code: 0 when
/// every check passed, else the failed launch's code. Throws UsageError for a bad flag or config file, or an
/// argument that is not a flag, before anything starts.
int runTestCommand(const std::vector<std::string>& args);

} // namespace accel
