// `accel launch`: its flags, their checks, and the hand-off to the launcher (see LaunchCommand.h).
#include "LaunchCommand.h"

#include "Executable.h"
#include "Flags.h"
#include "FreePort.h"
#include "Launch.h"

#include <iostream>

namespace accel {

const char* const kLaunchSummary = "run a program as N local ranks with torchrun's environment";

namespace {

const std::vector<FlagSpec>& launchFlags() {
  static const std::vector<FlagSpec> kFlags = {
      FlagSpec::withValue("num_processes", "N", "how many ranks to start on this machine (default 1)")
          .alsoCalled({"nproc_per_node", "nproc", "np", "num_proc", "n"}),
      FlagSpec::withValue("main_process_ip", "ADDR",
                          "where rank 0 serves the rendezvous, exported as MASTER_ADDR (default 127.0.0.1)")
          .alsoCalled({"master_addr", "master_ip"}),
      FlagSpec::withValue("main_process_port", "PORT",
                          "rendezvous port, exported as MASTER_PORT; 0 picks a free one (default 29500)")
          .alsoCalled({"master_port", "port"}),
      FlagSpec::withValue("term_timeout", "SECONDS",
                          "how long ranks being stopped get between SIGTERM and SIGKILL (default 5)"),
      FlagSpec::toggle("quiet", 'q', "leave out the launcher's notes (errors are always printed)"),
      FlagSpec::toggle("help", 'h', "show this help"),
  };
  return kFlags;
}

std::string launchUsage() {
  return "usage: accel launch [flags] [--] PROGRAM [ARGS...]\n"
         "\n"
         "Runs PROGRAM as --num_processes ranks on this machine, each with torchrun's environment: RANK,\n"
         "LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK,\n"
         "ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and OMP_NUM_THREADS=1 if unset and N > 1).\n"
         "With more than one rank, every line a rank prints goes to the same stream prefixed `[rankN]: `.\n"
         "SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to the ranks. When a rank fails, the others get\n"
         "SIGTERM, then SIGKILL after --term_timeout, and accel exits with the failed rank's exit code\n"
         "(128 + N if signal N killed it).\n"
         "\n"
         "flags:\n" +
         formatFlagHelp(launchFlags()) +
         "\n"
         "Flags end at PROGRAM (or at --): everything after it is PROGRAM's. A PROGRAM without a slash is\n"
         "looked up on PATH.\n"
         "\n"
         "example:\n"
         "  accel launch --num_processes 2 ./train --epochs 3\n";
}

LaunchOptions checkedOptions(const ParsedFlags& flags) {
  LaunchOptions options;
  if (auto value = flags.last("num_processes"))
    options.numProcesses = parseWholeNumberFlag("--num_processes", *value, 1, std::nullopt);
  if (auto value = flags.last("main_process_ip")) {
    if (value->empty())
      throw UsageError("--main_process_ip is empty (give rank 0's address, like 127.0.0.1)");
    options.mainProcessIp = *value;
  }
  if (auto value = flags.last("main_process_port"))
    options.mainProcessPort = parseWholeNumberFlag("--main_process_port", *value, 0, 65535);
  if (auto value = flags.last("term_timeout"))
    options.termTimeoutSeconds = parseSecondsFlag("--term_timeout", *value);
  options.quiet = flags.has("quiet");

  if (flags.positionals.empty())
    throw UsageError("no program to run (usage: accel launch [flags] PROGRAM [ARGS...], e.g. "
                     "accel launch --num_processes 2 ./train)");
  options.executablePath = resolveExecutable(flags.positionals.front());
  options.argv = flags.positionals;
  if (options.mainProcessPort == 0)
    options.mainProcessPort = pickFreePort(options.mainProcessIp);
  return options;
}

} // namespace

int runLaunchCommand(const std::vector<std::string>& args) {
  ParsedFlags flags = parseFlags(launchFlags(), args);
  if (flags.has("help")) {
    std::cout << launchUsage();
    return 0;
  }
  return launchLocalRanks(checkedOptions(flags));
}

} // namespace accel
