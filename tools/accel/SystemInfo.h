// What this machine has, found at run time without linking anything: CUDA devices and driver (libcuda
// through dlopen), NCCL (libnccl through dlopen), LLVM (clang-19 --version), and the versions accel was
// built with.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace accel {

struct GpuDevice {
  int index = 0;
  std::string name;
  size_t memoryBytes = 0;
};

/// The CUDA devices the driver reports (honouring CUDA_VISIBLE_DEVICES), or none when there is no driver.
std::vector<GpuDevice> cudaDevices();
/// The driver's CUDA version, like "13.0", if a driver is installed.
std::optional<std::string> cudaDriverVersion();
/// NCCL's version, like "2.27.7", if libnccl.so.2 can be loaded (from the library path or next to torch).
std::optional<std::string> ncclVersion();
/// The first line of `clang-19 --version` (or `clang --version`), if either is on PATH.
std::optional<std::string> llvmVersion();
/// The first line `command` prints on stdout, if it runs and exits 0 within a few seconds.
std::optional<std::string> firstLineOf(const std::string& command);

} // namespace accel
