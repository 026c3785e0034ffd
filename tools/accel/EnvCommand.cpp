// `accel env`: versions, devices and the resolved config for bug reports (see EnvCommand.h).
#include "EnvCommand.h"

#include "ConfigFile.h"
#include "ConfigSchema.h"
#include "Flags.h"
#include "LaunchSettings.h"
#include "SystemInfo.h"
#include "settings/spelling.h"

#include <iostream>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <thread>

#ifndef ACCEL_TORCH_VERSION
#define ACCEL_TORCH_VERSION ""
#endif
#ifndef ACCEL_CUDA_TOOLKIT_VERSION
#define ACCEL_CUDA_TOOLKIT_VERSION ""
#endif

namespace accel {

const char* const kEnvSummary = "print versions, devices and the resolved config (for bug reports)";

namespace {

const std::vector<FlagSpec>& envFlags() {
  static const std::vector<FlagSpec> kFlags = {
      FlagSpec::withValue("config_file", "PATH",
                          "the config file to show (default: as accel launch picks it)"),
      FlagSpec::toggle("help", 'h', "show this help"),
  };
  return kFlags;
}

std::string orUnknown(const std::string& text, const std::string& why) {
  return text.empty() ? "unknown (" + why + ")" : text;
}

void printVersions() {
  std::cout << "- accelerate-cpp version: " << ACCEL_VERSION << "\n";
  std::cout << "- torch version (built with): "
            << orUnknown(ACCEL_TORCH_VERSION, "accel was built without the runtime (ACCEL_BUILD_RUNTIME=OFF)")
            << "\n";
  if (auto python = firstLineOf("python3 -c 'import torch; print(torch.__version__)'"))
    std::cout << "- torch version (python3 on PATH): " << *python << "\n";
  std::cout << "- CUDA toolkit (built with): "
            << orUnknown(ACCEL_CUDA_TOOLKIT_VERSION, "not found at build time") << "\n";
  std::cout << "- CUDA driver: " << cudaDriverVersion().value_or("none (no libcuda.so.1)") << "\n";
  std::cout << "- NCCL: " << ncclVersion().value_or("none found (libnccl.so.2)") << "\n";
  std::cout << "- LLVM: " << llvmVersion().value_or("none (no clang-19 on PATH)") << "\n";
}

void printMachine() {
  utsname system{};
  if (::uname(&system) == 0)
    std::cout << "- Platform: " << system.sysname << " " << system.release << " " << system.machine << "\n";
  std::cout << "- CPU threads: " << std::thread::hardware_concurrency() << "\n";
  std::vector<GpuDevice> devices = cudaDevices();
  std::cout << "- CUDA devices: " << devices.size() << "\n";
  for (const GpuDevice& device : devices)
    std::cout << "  - " << device.index << ": " << device.name << ", " << device.memoryBytes / (1024 * 1024)
              << " MiB\n";
}

TrainingMode modeOf(const LaunchSettings& settings) {
  return settings.isTrue("use_fsdp")        ? TrainingMode::Fsdp
         : settings.isTrue("use_deepspeed") ? TrainingMode::DeepSpeed
                                            : TrainingMode::Plain;
}

/// The strategy the ranks of `accel launch` would run, with the ZeRO stage and offload under ZeRO, and the
/// sharding strategy, FSDP version and state dict type under FSDP; after refusing what they cannot run.
void printParallelStrategy(const LaunchSettings& settings) {
  const std::string strategy = parallelStrategyOf(settings);
  refuseUnsupportedTraining(settings, strategy);
  std::cout << "- Parallel strategy: " << strategy;
  const int stage = zeroStageOf(settings);
  if (strategy == "zero")
    std::cout << " (ZeRO stage " << (stage == 0 ? 2 : stage) << ", optimizer offload "
              << settings.get("offload_optimizer_device").value_or("none") << ")";
  else if (strategy == "fsdp")
    std::cout << " (" << fsdpShardingOf(settings) << (stage == 3 ? " for ZeRO stage 3" : "")
              << ", fsdp_version " << settings.get("fsdp_version").value_or("1") << ", "
              << accelerate::spelling::state_dict_type(
                     settings.get("fsdp_state_dict_type").value_or("SHARDED_STATE_DICT"))
                     .value_or("SHARDED_STATE_DICT")
              << ")";
  else if (settings.isTrue("use_deepspeed"))
    std::cout << " (DeepSpeed with zero_stage 0: every process holds the whole model)";
  std::cout << "\n";
}

std::string configPathShown(const ParsedFlags& flags, bool* exists) {
  std::string path;
  if (auto given = flags.last("config_file"))
    path = *given;
  else if (auto variable = Environment::current().get("ACCELERATE_CONFIG_FILE");
           variable && !variable->empty())
    path = *variable;
  else
    path = defaultConfigPath();
  struct stat info{};
  *exists = ::stat(path.c_str(), &info) == 0;
  return path;
}

void printConfig(const ParsedFlags& flags) {
  bool exists = false;
  const std::string path = configPathShown(flags, &exists);
  if (!exists) {
    std::cout << "- Config file: " << path << " (none there; `accel config` writes one)\n";
    try {
      LaunchSettings settings = resolveLaunchSettings(nullptr, Environment::current(), ParsedFlags{});
      printParallelStrategy(settings);
    } catch (const UsageError& error) {
      std::cout << "- Parallel strategy: invalid: " << error.what() << "\n";
    }
    return;
  }
  std::cout << "- Config file: " << path << "\n";
  try {
    ConfigDocument config = readConfigFile(path);
    std::cout << "- Config:\n";
    std::string text = configYamlText(config);
    for (size_t start = 0; start < text.size();) {
      size_t end = text.find('\n', start);
      std::cout << "    " << text.substr(start, end - start) << "\n";
      start = end == std::string::npos ? text.size() : end + 1;
    }
    LaunchSettings settings = resolveLaunchSettings(&config, Environment::current(), ParsedFlags{});
    TrainingMode mode = modeOf(settings);
    printParallelStrategy(settings);
    std::cout << "- Variables accel launch exports (with this environment):\n";
    for (const auto& [name, value] : acceleratorVariables(settings, mode, &config))
      std::cout << "    " << name << "=" << value << "\n";
  } catch (const UsageError& error) {
    std::cout << "- Config: invalid: " << error.what() << "\n";
  }
}

} // namespace

int runEnvCommand(const std::vector<std::string>& args) {
  ParsedFlags flags = parseFlags(envFlags(), args);
  if (flags.has("help")) {
    std::cout
        << "usage: accel env [--config_file PATH]\n\n"
        << "Prints what a bug report needs: versions, devices, and the config accel launch would use.\n\n"
        << "flags:\n"
        << formatFlagHelp(envFlags());
    return 0;
  }
  if (!flags.positionals.empty())
    throw UsageError("unexpected argument '" + flags.positionals.front() + "' (accel env takes only flags)");
  std::cout << "Copy-and-paste the text below in your GitHub issue\n\n";
  printVersions();
  printMachine();
  printConfig(flags);
  return 0;
}

} // namespace accel
