// Finding CUDA devices, NCCL and LLVM at run time (see SystemInfo.h).
#include "SystemInfo.h"

#include <array>
#include <cstdio>
#include <dlfcn.h>

namespace accel {
namespace {

/// libcuda's entry points accel calls, looked up by name so that accel links nothing from CUDA.
struct CudaDriver {
  using Init = int (*)(unsigned);
  using Count = int (*)(int*);
  using Get = int (*)(int*, int);
  using Name = int (*)(char*, int, int);
  using TotalMem = int (*)(size_t*, int);
  using Version = int (*)(int*);

  void* library = nullptr;
  Init init = nullptr;
  Count count = nullptr;
  Get get = nullptr;
  Name name = nullptr;
  TotalMem totalMem = nullptr;
  Version version = nullptr;

  static const CudaDriver& instance() {
    static const CudaDriver driver = load();
    return driver;
  }

  bool usable() const { return init && count && get && name && totalMem && version && init(0) == 0; }

private:
  static CudaDriver load() {
    CudaDriver driver;
    driver.library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!driver.library)
      return driver;
    driver.init = reinterpret_cast<Init>(::dlsym(driver.library, "cuInit"));
    driver.count = reinterpret_cast<Count>(::dlsym(driver.library, "cuDeviceGetCount"));
    driver.get = reinterpret_cast<Get>(::dlsym(driver.library, "cuDeviceGet"));
    driver.name = reinterpret_cast<Name>(::dlsym(driver.library, "cuDeviceGetName"));
    driver.totalMem = reinterpret_cast<TotalMem>(::dlsym(driver.library, "cuDeviceTotalMem_v2"));
    driver.version = reinterpret_cast<Version>(::dlsym(driver.library, "cuDriverGetVersion"));
    return driver;
  }
};

} // namespace

std::vector<GpuDevice> cudaDevices() {
  std::vector<GpuDevice> devices;
  const CudaDriver& driver = CudaDriver::instance();
  int count = 0;
  if (!driver.usable() || driver.count(&count) != 0)
    return devices;
  for (int index = 0; index < count; ++index) {
    int handle = 0;
    std::array<char, 256> name{};
    GpuDevice device;
    device.index = index;
    if (driver.get(&handle, index) == 0 &&
        driver.name(name.data(), static_cast<int>(name.size()), handle) == 0)
      device.name = name.data();
    driver.totalMem(&device.memoryBytes, handle);
    devices.push_back(device);
  }
  return devices;
}

std::optional<std::string> cudaDriverVersion() {
  const CudaDriver& driver = CudaDriver::instance();
  int version = 0;
  if (!driver.library || !driver.version || driver.version(&version) != 0 || version == 0)
    return std::nullopt;
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::optional<std::string> ncclVersion() {
  std::vector<std::string> candidates = {"libnccl.so.2"};
#ifdef ACCEL_TORCH_LIBRARY_DIR
  // The PyPI wheel keeps NCCL in site-packages/nvidia/nccl/lib, beside torch/lib.
  candidates.push_back(std::string(ACCEL_TORCH_LIBRARY_DIR) + "/../../nvidia/nccl/lib/libnccl.so.2");
#endif
  for (const std::string& candidate : candidates) {
    void* library = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library)
      continue;
    using GetVersion = int (*)(int*);
    auto getVersion = reinterpret_cast<GetVersion>(::dlsym(library, "ncclGetVersion"));
    int code = 0;
    if (getVersion && getVersion(&code) == 0 && code > 0) {
      // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
      return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." +
             std::to_string(code % 100);
    }
  }
  return std::nullopt;
}

std::optional<std::string> firstLineOf(const std::string& command) {
  FILE* pipe = ::popen(("timeout 10 " + command + " 2>/dev/null").c_str(), "r");
  if (!pipe)
    return std::nullopt;
  std::array<char, 512> buffer{};
  std::string line;
  if (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe))
    line = buffer.data();
  while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe)) {
  }
  int status = ::pclose(pipe);
  if (status != 0 || line.empty())
    return std::nullopt;
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
    line.pop_back();
  return line;
}

std::optional<std::string> llvmVersion() {
  for (const char* command : {"clang-19 --version", "clang --version"})
    if (auto line = firstLineOf(command))
      return line;
  return std::nullopt;
}

} // namespace accel
