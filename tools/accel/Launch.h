// Running a program as N local ranks and supervising them: the engine behind `accel launch`.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace accel {

/// A launch with every value already checked and resolved (see LaunchCommand.cpp for the flags).
struct LaunchOptions {
  int numProcesses = 1; ///< ranks on this machine
  int numMachines = 1;
  int machineRank = 0; ///< this machine's ranks are machineRank * numProcesses + 0 .. numProcesses - 1
  std::string mainProcessIp = "127.0.0.1";
  int mainProcessPort = 29500; ///< never 0 here: a free port has been picked already
  /// On the machine of rank 0: the socket listening on mainProcessPort (FreePort.h), held by the launcher
  /// for the job's life and handed to rank 0 (ACCELERATE_STORE_LISTEN_FD); -1 elsewhere.
  int storeListenFd = -1;
  std::string runId; ///< the job's run id, exported as ACCELERATE_RUN_ID and TORCHELASTIC_RUN_ID
  /// How long a rank may give no heartbeat while alive before the job is ended naming it (0: not watched).
  double hangTimeoutSeconds = 60;
  double termTimeoutSeconds = 5; ///< how long stopping ranks get between SIGTERM and SIGKILL
  bool quiet = false;            ///< leave out the launcher's notes (errors are always printed)
  /// What every rank gets besides torchrun's variables (ACCELERATE_*, FSDP_*, CUDA_VISIBLE_DEVICES).
  std::vector<std::pair<std::string, std::string>> exportedVariables;
  /// When not empty, each rank's streams chosen by `logStdout`/`logStderr` are also written to
  /// <logDir>/attempt_<k>/<rank>/stdout.log and stderr.log.
  std::string logDir;
  bool logStdout = false;
  bool logStderr = false;
  int maxRestarts = 0;                 ///< after a failure, start every local rank again this many times
  double monitorIntervalSeconds = 0.1; ///< the longest the supervisor sleeps without looking at its ranks
  std::string executablePath;          ///< what to execve
  std::vector<std::string> argv;       ///< the program's argv; argv[0] is the program as the user typed it
};

/// Starts `options.numProcesses` ranks of the program on this machine with torchrun's environment (plus
/// TORCHELASTIC_RESTART_COUNT and TORCHELASTIC_MAX_RESTARTS, as torchrun sets them), forwards
/// their output (prefixed `[rankN]: ` when there is more than one rank) and the signals the launcher gets,
/// and returns once every rank has exited and been reaped. When a rank fails, the others get SIGTERM, then
/// SIGKILL after the grace period. Returns the launcher's exit code: 0 when every rank exited 0; else the
/// first failed rank's exit code (128 + signal number if a signal killed it), or 128 + the signal that
/// stopped the launcher. After a failure, while fewer than `maxRestarts` restarts were made, every local
/// rank is started again with TORCHELASTIC_RESTART_COUNT one higher. Each rank's heartbeat (runtime/watch)
/// goes to a folder the launcher makes for the run (ACCELERATE_HEARTBEAT_DIR) and removes at the end: a rank
/// alive but silent for `hangTimeoutSeconds` is named with its process state and last collective, killed, and
/// the job ends with exit code 124 (as timeout(1) exits); when a rank fails, each rank's last collective is
/// reported. Throws std::system_error if the ranks cannot be started (none is left running).
int launchLocalRanks(const LaunchOptions& options);

} // namespace accel
