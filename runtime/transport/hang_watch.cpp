// Heartbeats and the machine's own watch under other launchers (see hang_watch.h).
#include "transport/hang_watch.h"

#include "watch/heartbeat.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace accelerate::detail {
namespace {

void watch_machine(const LaunchEnvironment& env, const std::string& dir, std::chrono::milliseconds timeout,
                   std::chrono::milliseconds interval) {
  std::vector<int> ranks;
  const int first = env.rank - env.local_rank;
  for (int rank = first; rank < first + env.local_world_size; ++rank) {
    ranks.push_back(rank); // itself too: its beat shows in the report beside the others'
  }
  if (ranks.size() < 2) {
    return;
  }
  const int me = env.rank;
  std::thread([dir, ranks, timeout, interval, me] {
    watch::Watcher watcher(dir, ranks, timeout);
    while (true) {
      std::this_thread::sleep_for(interval);
      auto silent = watcher.silent_rank();
      if (!silent) {
        continue;
      }
      // One process reports: the lowest-ranked of those still beating.
      const bool lower_beats = std::any_of(ranks.begin(), ranks.end(), [&](int rank) {
        return rank < me && rank != *silent && watcher.beating(rank);
      });
      auto beat = watcher.last_beat(*silent);
      if (!lower_beats && beat) {
        // The live processes of the machine (this one too) print where they wait for it, first.
        std::vector<int> live;
        for (int rank : ranks) {
          if (rank != *silent) {
            live.push_back(rank);
          }
        }
        watch::StackRequest stacks(dir, live);
        const auto asked = std::chrono::steady_clock::now();
        while (!stacks.done() && std::chrono::steady_clock::now() - asked < std::chrono::seconds(5)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        const std::string line =
            "accelerate: " + watcher.report(*silent) + "; process " + std::to_string(me) +
            " ends it (SIGKILL) so that the launcher ends the job" +
            (stacks.asked().empty() ? "" : "; the stacks of processes " + stacks.asked() + " are above") +
            " (ACCEL_HANG_TIMEOUT sets how long a process may be silent; 0 turns the watch off)\n";
        std::fputs(line.c_str(), stderr);
        std::fflush(stderr);
        ::kill(beat->pid, SIGKILL);
      }
      return;
    }
  }).detach();
}

} // namespace

void start_hang_watch(const LaunchEnvironment& env, std::chrono::milliseconds hang_timeout) {
  if (hang_timeout.count() <= 0) {
    return;
  }
  const auto interval =
      std::clamp(hang_timeout / 10, std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
  if (const char* dir = std::getenv("ACCELERATE_HEARTBEAT_DIR"); dir != nullptr && *dir != '\0') {
    watch::start_heartbeat(dir, env.rank, interval);
    return;
  }
  // The port too: torchrun's default run id ("none") is the same for every job, and two jobs of one machine
  // never share a port while both run.
  const std::string run = run_file_name(env.run_id) + "-" + std::to_string(env.master_port);
  const std::string dir = "/tmp/accelerate-" + std::to_string(::getuid()) + "-" + run + "/heartbeats";
  watch::start_heartbeat(dir, env.rank, interval);
  static bool watching = false;
  if (!watching) {
    watching = true;
    watch_machine(env, dir, hang_timeout, interval);
  }
}

} // namespace accelerate::detail
