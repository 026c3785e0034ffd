// `accel launch`: its flags, their checks, and the hand-off to the launcher (see LaunchCommand.h).
#include "LaunchCommand.h"

#include "ConfigFile.h"
#include "ConfigValues.h"
#include "Executable.h"
#include "Flags.h"
#include "FreePort.h"
#include "Launch.h"
#include "LaunchSettings.h"
#include "SystemInfo.h"
#include "settings/spelling.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace accel {

const char* const kLaunchSummary =
    "run a program as N ranks (on one machine or many) with torchrun's environment";

namespace {

/// The flags that steer the launcher itself rather than the training (those come from launchSettingSpecs).
std::vector<FlagSpec> launcherFlags() {
  return {
      FlagSpec::withValue("config_file", "PATH",
                          "Accelerate's config file (default: $ACCELERATE_CONFIG_FILE, else " +
                              defaultConfigPath() + " when it exists)"),
      FlagSpec::withValue("tee", "0-3",
                          "with --log_dir, which streams also go to files: 1 stdout, 2 stderr, 3 both "
                          "(default 3), 0 none"),
      FlagSpec::withValue("log_dir", "DIR",
                          "also write each rank's output to DIR/attempt_<k>/<rank>/std{out,err}.log"),
      FlagSpec::withValue("max_restarts", "N",
                          "after a failure, restart every local rank up to N times (default 0)"),
      FlagSpec::withValue(
          "monitor_interval", "SECONDS",
          "longest pause between checks of the ranks (default 0.1; exits are noticed at once)"),
      FlagSpec::withValue("term_timeout", "SECONDS",
                          "how long ranks being stopped get between SIGTERM and SIGKILL (default 5)"),
      FlagSpec::toggle("quiet", 'q', "leave out the launcher's notes (errors are always printed)"),
      FlagSpec::toggle("help", 'h', "show this help"),
  };
}

const std::vector<FlagSpec>& launchFlags() {
  static const std::vector<FlagSpec> kFlags = [] {
    std::vector<FlagSpec> flags = launcherFlags();
    for (const SettingSpec& spec : launchSettingSpecs()) {
      FlagSpec flag = spec.toggle ? FlagSpec::toggle(spec.name, '\0', spec.help)
                                  : FlagSpec::withValue(spec.name, "VALUE", spec.help);
      if (spec.name == "num_processes")
        flag = FlagSpec::withValue(spec.name, "N", spec.help)
                   .alsoCalled({"nproc_per_node", "nproc", "np", "num_proc", "n"});
      else if (spec.name == "main_process_ip")
        flag = FlagSpec::withValue(spec.name, "ADDR", spec.help).alsoCalled({"master_addr", "master_ip"});
      else if (spec.name == "main_process_port")
        flag = FlagSpec::withValue(spec.name, "PORT", spec.help).alsoCalled({"master_port", "port"});
      else if (spec.name == "num_machines")
        flag = FlagSpec::withValue(spec.name, "N", spec.help).alsoCalled({"nnodes"});
      else if (spec.name == "machine_rank")
        flag = FlagSpec::withValue(spec.name, "R", spec.help).alsoCalled({"node_rank"});
      else if (spec.name == "run_id")
        flag = FlagSpec::withValue(spec.name, "ID", spec.help).accepting({"rdzv_id"});
      else if (spec.name == "init_timeout")
        flag = FlagSpec::withValue(spec.name, "SECONDS", spec.help).accepting({"timeout"});
      else if (spec.name == "hang_timeout")
        flag = FlagSpec::withValue(spec.name, "SECONDS", spec.help);
      flags.push_back(flag);
    }
    return flags;
  }();
  return kFlags;
}

std::string launchUsage() {
  return "usage: accel launch [flags] [--] PROGRAM [ARGS...]\n"
         "\n"
         "Runs PROGRAM as ranks on this machine, each with torchrun's environment: RANK, LOCAL_RANK,\n"
         "WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK, "
         "ROLE_WORLD_SIZE,\n"
         "MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS (and "
         "OMP_NUM_THREADS=1\n"
         "if unset and N > 1), plus the ACCELERATE_* / FSDP_* variables Hugging Face's `accelerate launch` "
         "exports.\n"
         "Settings come from the config file, then the environment, then flags: each later one wins.\n"
         "With more than one rank, every line a rank prints goes to the same stream prefixed `[rankN]: `.\n"
         "SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to the ranks. When a rank fails, the others get\n"
         "SIGTERM, then SIGKILL after --term_timeout, and accel exits with the failed rank's exit code\n"
         "(128 + N if signal N killed it), unless --max_restarts allows another start.\n"
         "On several machines, run accel on each with the same flags and its own --machine_rank.\n"
         "\n"
         "flags:\n" +
         formatFlagHelp(launchFlags()) +
         "\n"
         "Flags end at PROGRAM (or at --): everything after it is PROGRAM's. A PROGRAM without a slash is\n"
         "looked up on PATH. Exit codes: 0 success, 2 bad flags/config/program (nothing started), else the\n"
         "failed rank's. See docs/cli.md.\n"
         "\n"
         "examples:\n"
         "  accel launch --num_processes 2 ./train --epochs 3\n"
         "  accel launch --num_machines 2 --machine_rank 1 --num_processes 4 --main_process_ip 10.1.0.1 "
         "./train\n";
}

/// The config file: --config_file, else $ACCELERATE_CONFIG_FILE, else the default file if there is one.
std::optional<ConfigDocument> loadConfig(const ParsedFlags& flags, const Environment& environment) {
  if (auto path = flags.last("config_file"))
    return readConfigFile(*path);
  if (auto path = environment.get("ACCELERATE_CONFIG_FILE"); path && !path->empty())
    return readConfigFile(*path);
  const std::string path = defaultConfigPath();
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0)
    return std::nullopt;
  return readConfigFile(path);
}

int settingNumber(const LaunchSettings& settings, const std::string& name, int fallback) {
  auto value = settings.get(name);
  return value ? std::stoi(*value) : fallback;
}

/// Where a setting came from, to name it in a message: "--x", "x in the config file", ...
std::string origin(const LaunchSettings& settings, const std::string& name) {
  switch (settings.sourceOf(name).value_or(SettingSource::Flag)) {
  case SettingSource::ConfigFile:
    return name + " (from the config file)";
  case SettingSource::Environment:
    return name + " (from the environment)";
  case SettingSource::Flag:
    break;
  }
  return "--" + name;
}

size_t countGpuIds(const std::string& gpuIds) {
  return static_cast<size_t>(std::count(gpuIds.begin(), gpuIds.end(), ',')) + 1;
}

TrainingMode trainingMode(const LaunchSettings& settings) {
  if (settings.isTrue("use_fsdp"))
    return TrainingMode::Fsdp;
  if (settings.isTrue("use_deepspeed"))
    return TrainingMode::DeepSpeed;
  return TrainingMode::Plain;
}

bool usesGpus(const LaunchSettings& settings) {
  return !settings.isTrue("cpu") &&
         (settings.isTrue("multi_gpu") || trainingMode(settings) != TrainingMode::Plain);
}

/// The total number of ranks: given, else one per GPU for a multi-GPU launch, else 1.
int totalProcesses(const LaunchSettings& settings) {
  if (auto value = settings.get("num_processes"))
    return std::stoi(*value);
  if (!settings.isTrue("multi_gpu") || settings.isTrue("cpu"))
    return 1;
  if (auto gpuIds = settings.get("gpu_ids"); gpuIds && *gpuIds != "all")
    return static_cast<int>(countGpuIds(*gpuIds)) * settingNumber(settings, "num_machines", 1);
  size_t found = cudaDevices().size();
  if (found == 0)
    throw UsageError(
        "--multi_gpu found no CUDA device to start one rank per GPU on (give --num_processes, or use "
        "--cpu)");
  return static_cast<int>(found) * settingNumber(settings, "num_machines", 1);
}

void checkMachines(const LaunchSettings& settings, LaunchOptions& options, int total) {
  options.numMachines = settingNumber(settings, "num_machines", 1);
  options.machineRank = settingNumber(settings, "machine_rank", 0);
  if (options.machineRank >= options.numMachines)
    throw UsageError(origin(settings, "machine_rank") + " must be below --num_machines " +
                     std::to_string(options.numMachines) + " (got " + std::to_string(options.machineRank) +
                     ")");
  if (total % options.numMachines != 0)
    throw UsageError(origin(settings, "num_processes") +
                     " is the total over all machines, as in Accelerate: " + std::to_string(total) +
                     " is not a multiple of --num_machines " + std::to_string(options.numMachines) +
                     " (give " + std::to_string(options.numMachines * (total / options.numMachines + 1)) +
                     ", for example)");
  options.numProcesses = total / options.numMachines;
  if (options.numMachines == 1)
    return;
  if (!settings.get("main_process_ip"))
    throw UsageError(
        "--num_machines " + std::to_string(options.numMachines) +
        " needs --main_process_ip (the address of machine rank 0, reachable from every machine)");
  if (settings.get("main_process_port") == std::optional<std::string>("0"))
    throw UsageError(origin(settings, "main_process_port") +
                     " 0 picks a free port on one machine only; with --num_machines " +
                     std::to_string(options.numMachines) + " give every machine the same port, like 29500");
}

/// Whether the operating system lets the job open what it needs, checked before any rank starts (the ranks
/// inherit accel's limits). Every process of a job keeps a connection to every other (Gloo's full mesh), and
/// rank 0 also one from each process to its rendezvous store: about two descriptors per process of the job,
/// plus what libtorch and the C library keep open. accel keeps two pipes per rank of this machine. Each rank
/// of this machine is a process of the user's (RLIMIT_NPROC counts them).
void checkSystemLimits(const LaunchSettings& settings, const LaunchOptions& options) {
  constexpr unsigned long long kDescriptorsBesides = 64; // libraries, logs, shared memory, the store client
  const unsigned long long total =
      static_cast<unsigned long long>(options.numProcesses) * options.numMachines;
  const std::string processes = settings.get("num_processes") ? describeSetting(settings, "num_processes")
                                                              : std::to_string(total) + " processes";
  auto limitText = [](rlim_t value) {
    return value == RLIM_INFINITY ? std::string("unlimited") : std::to_string(value);
  };
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const unsigned long long needed =
        std::max(2 * total, 2ULL * static_cast<unsigned long long>(options.numProcesses)) +
        kDescriptorsBesides;
    if (needed > files.rlim_cur)
      throw UsageError(processes + " needs about " + std::to_string(needed) +
                       " open files in each process (a connection to every other process of the job, and at "
                       "rank 0 one from each to the rendezvous store), over this machine's limit of " +
                       limitText(files.rlim_cur) + " (ulimit -n; hard limit " + limitText(files.rlim_max) +
                       "): raise it (ulimit -n " + std::to_string(needed) + ") or start fewer processes");
  }
  rlimit tasks{};
  if (::getrlimit(RLIMIT_NPROC, &tasks) == 0 && tasks.rlim_cur != RLIM_INFINITY &&
      static_cast<rlim_t>(options.numProcesses) > tasks.rlim_cur)
    throw UsageError(processes + " starts " + std::to_string(options.numProcesses) +
                     " processes on this machine, over its limit of " + limitText(tasks.rlim_cur) +
                     " processes per user (ulimit -u; hard limit " + limitText(tasks.rlim_max) +
                     "): raise it or start fewer processes");
}

void checkGpus(const LaunchSettings& settings, const LaunchOptions& options) {
  if (settings.isTrue("multi_gpu") && !settings.isTrue("cpu") && options.numMachines == 1 &&
      options.numProcesses < 2)
    throw UsageError("--multi_gpu needs at least 2 processes (got " + std::to_string(options.numProcesses) +
                     "; for one GPU, leave out --multi_gpu)");
  auto gpuIds = settings.get("gpu_ids");
  if (!usesGpus(settings) || !gpuIds || *gpuIds == "all")
    return;
  if (countGpuIds(*gpuIds) < static_cast<size_t>(options.numProcesses))
    throw UsageError(origin(settings, "gpu_ids") + " " + *gpuIds + " lists " +
                     std::to_string(countGpuIds(*gpuIds)) + " GPU(s) but " +
                     std::to_string(options.numProcesses) +
                     " ranks run on this machine, one GPU each (list one id per rank, or use all)");
}

void checkLogging(const ParsedFlags& flags, LaunchOptions& options) {
  auto tee = flags.last("tee");
  int streams = tee ? parseWholeNumberFlag("--tee", *tee, 0, 3) : 3;
  auto logDir = flags.last("log_dir");
  if (tee && !logDir)
    throw UsageError("--tee " + *tee + " needs --log_dir (the folder the log files go to)");
  if (!logDir)
    return;
  if (logDir->empty())
    throw UsageError("--log_dir is empty (give a folder, like --log_dir logs)");
  std::string folder;
  std::stringstream parts(*logDir);
  for (std::string part; std::getline(parts, part, '/');) {
    folder += (folder.empty() && logDir->front() != '/' ? "" : "/") + part;
    if (!part.empty())
      ::mkdir(folder.c_str(), 0755);
  }
  struct stat info{};
  if (::stat(logDir->c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || ::access(logDir->c_str(), W_OK) != 0)
    throw UsageError("--log_dir " + *logDir + " is not a writable folder (" + std::strerror(errno) +
                     "; give another one)");
  options.logDir = *logDir;
  options.logStdout = (streams & 1) != 0;
  options.logStderr = (streams & 2) != 0;
}

void noteIgnoredConfig(const ConfigDocument& config) {
  auto nonEmpty = [&](const char* key) {
    const ConfigValue* value = config.root.find(key);
    return value && value->kind == ConfigValue::Kind::Map && !value->entries.empty();
  };
  for (const char* key : {"mpirun_config", "parallelism_config", "megatron_lm_config", "fp8_config"})
    if (nonEmpty(key))
      std::cerr << "accel launch: note: " << config.where(key) << key
                << " is for Python Accelerate; accel launch ignores it\n";
  for (const char* key : {"deepspeed_multinode_launcher", "deepspeed_hostfile", "deepspeed_inclusion_filter",
                          "deepspeed_exclusion_filter"})
    if (config.scalar(std::string("deepspeed_config.") + key))
      std::cerr << "accel launch: note: " << config.where(std::string("deepspeed_config.") + key)
                << "deepspeed_config." << key
                << " is for DeepSpeed's own launcher; accel launch starts each machine's ranks itself\n";
  if (auto backend = config.scalar("dynamo_config.dynamo_backend"); backend && *backend != "NO")
    std::cerr << "accel launch: note: " << config.where("dynamo_config")
              << "dynamo_config is ignored: libtorch's C++ API has no torch.compile\n";
}

void noteRendezvous(const LaunchSettings& settings) {
  if (auto backend = settings.get("rdzv_backend"); backend && *backend != "static")
    std::cerr << "accel launch: note: rdzv_backend " << *backend
              << ": accel rendezvous through a TCPStore at main_process_ip:main_process_port (as 'static')\n";
}

/// The job's run id: --run_id/--rdzv_id or ACCELERATE_RUN_ID, else a new one. The machines of a job must
/// share it, so a job of several machines without one gets torchrun's default, "none".
std::string runIdOf(const LaunchSettings& settings, const LaunchOptions& options) {
  if (auto given = settings.get("run_id"); given && !given->empty())
    return *given;
  if (options.numMachines > 1)
    return "none";
  std::random_device random;
  char text[32];
  std::snprintf(text, sizeof(text), "accel-%08x%04x", random(), random() & 0xffffu);
  return text;
}

LaunchOptions checkedOptions(const ParsedFlags& flags) {
  const Environment environment = Environment::current();
  std::optional<ConfigDocument> config = loadConfig(flags, environment);
  LaunchSettings settings = resolveLaunchSettings(config ? &*config : nullptr, environment, flags);
  std::optional<long long> worldSize;
  if (auto processes = settings.get("num_processes"))
    worldSize = std::stoll(*processes);
  const std::vector<std::string> deepspeedNotes = applyDeepSpeedJson(settings, worldSize);
  // Refuses conflicting settings, and what the strategy cannot run, before any rank starts.
  refuseUnsupportedTraining(settings, parallelStrategyOf(settings));
  LaunchOptions options;
  options.quiet = flags.has("quiet");
  if (config && !options.quiet)
    noteIgnoredConfig(*config);
  if (!options.quiet)
    for (const std::string& note : deepspeedNotes)
      std::cerr << "accel launch: note: " << note << "\n";
  if (!options.quiet)
    noteRendezvous(settings);

  checkMachines(settings, options, totalProcesses(settings));
  checkGpus(settings, options);
  checkSystemLimits(settings, options);
  options.mainProcessIp = settings.get("main_process_ip").value_or("127.0.0.1");
  if (options.mainProcessIp.empty())
    throw UsageError(origin(settings, "main_process_ip") +
                     " is empty (give rank 0's address, like 127.0.0.1)");
  options.mainProcessPort = settingNumber(settings, "main_process_port", 29500);
  if (auto value = flags.last("term_timeout"))
    options.termTimeoutSeconds = parseSecondsFlag("--term_timeout", *value);
  if (auto value = flags.last("monitor_interval"))
    options.monitorIntervalSeconds = parseSecondsFlag("--monitor_interval", *value);
  if (auto value = flags.last("max_restarts"))
    options.maxRestarts = parseWholeNumberFlag("--max_restarts", *value, 0, std::nullopt);
  checkLogging(flags, options);
  options.exportedVariables =
      acceleratorVariables(settings, trainingMode(settings), config ? &*config : nullptr);
  // A mode flag beats a mode variable of the environment, which the ranks would inherit: they are told it is
  // off.
  for (const auto& [variable, name] :
       {std::pair<const char*, const char*>{accelerate::spelling::kUseFsdpVariable, "use_fsdp"},
        {accelerate::spelling::kUseDeepSpeedVariable, "use_deepspeed"}})
    if (auto value = environment.get(variable);
        value && accelerate::spelling::boolean(*value) == std::optional<bool>(true) && !settings.isTrue(name))
      options.exportedVariables.emplace_back(variable, "false");

  if (flags.positionals.empty())
    throw UsageError("no program to run (usage: accel launch [flags] PROGRAM [ARGS...], e.g. "
                     "accel launch --num_processes 2 ./train)");
  options.executablePath = resolveExecutable(flags.positionals.front());
  options.argv = flags.positionals;
  if (auto value = settings.get("hang_timeout"))
    options.hangTimeoutSeconds = parseSecondsFlag(origin(settings, "hang_timeout"), *value);
  options.runId = runIdOf(settings, options);
  for (const char* variable : {"ACCELERATE_RUN_ID", "TORCHELASTIC_RUN_ID"})
    options.exportedVariables.emplace_back(variable, options.runId);
  if (options.machineRank == 0) {
    HeldPort held = holdRendezvousPort(options.mainProcessPort, settings.get("main_process_port").has_value(),
                                       options.quiet);
    options.storeListenFd = held.fd;
    options.mainProcessPort = held.port;
  }
  return options;
}

} // namespace

const std::vector<FlagSpec>& launchFlagSpecs() {
  return launchFlags();
}

int runLaunchCommand(const std::vector<std::string>& args) {
  ParsedFlags flags = parseFlags(launchFlags(), args);
  if (flags.has("help")) {
    std::cout << launchUsage();
    return 0;
  }
  return launchLocalRanks(checkedOptions(flags));
}

} // namespace accel
