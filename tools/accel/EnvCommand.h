// `accel env`: the versions, devices and resolved config to paste into a bug report.
#pragma once

#include <string>
#include <vector>

namespace accel {

/// One line on what `accel env` does, for `accel --help`.
extern const char* const kEnvSummary;

/// Prints accelerate-cpp's, torch's, CUDA's, NCCL's and LLVM's versions, the devices, and the config file
/// `accel launch` would read with the settings it resolves to. Returns the exit code.
int runEnvCommand(const std::vector<std::string>& args);

} // namespace accel
