// Finding the program `accel launch` runs: a path, or a bare name looked up on PATH as exec does.
#pragma once

#include <string>

namespace accel {

/// The path to execute for `program`: `program` itself when it contains a slash, else the first executable
/// regular file named `program` in a PATH folder. Throws UsageError naming the program, why it cannot run,
/// and the fix (a missing file, a folder, a file without execute permission, a name not on PATH).
std::string resolveExecutable(const std::string& program);

} // namespace accel
