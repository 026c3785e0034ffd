// Each process's heartbeat, and the watch over the processes of its machine under launchers that do not watch
// (runtime-internal; the heartbeat itself is runtime/watch/heartbeat.h).
#pragma once

#include "transport/environment.h"

#include <chrono>

namespace accelerate::detail {

/// Starts this process's heartbeat (once per process) unless `hang_timeout` is 0. Under `accel launch`
/// (ACCELERATE_HEARTBEAT_DIR set) the beats go to the launcher, which watches. Under any other launcher they
/// go to a folder of the machine keyed by the user and the run id, and every process of the machine watches
/// the others: when one gives no heartbeat for `hang_timeout` while its process is alive, the lowest-ranked
/// process still beating prints the report (rank, process state, last collective against the others') and
/// kills the silent one with SIGKILL, which its launcher sees as that rank's failure and ends the job.
void start_hang_watch(const LaunchEnvironment& env, std::chrono::milliseconds hang_timeout);

} // namespace accelerate::detail
