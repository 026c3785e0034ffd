// Heartbeats: each process of a job says every second that it is alive and which collective it entered last;
// a watcher (accel launch, or the processes of a machine under other launchers) names a process whose
// heartbeat stopped. The standard library and POSIX only (no torch): `accel` and the runtime share it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accelerate::watch {

/// What one heartbeat file says (`<dir>/rank<r>.beat`, a small binary record the beating process keeps
/// mapped: the count moves with each heartbeat, the collective fields the moment it enters one).
struct Beat {
  int rank = 0;
  int pid = 0;
  std::string host;
  std::uint64_t count = 0;      ///< heartbeats so far: the watcher looks for it to change
  std::uint64_t collective = 0; ///< how many collectives the process has entered (0: none yet)
  std::string op;               ///< the last one's name ("allreduce", ...), "-" before the first
  std::uint64_t bytes = 0;      ///< the last one's input bytes
  int stack_signal = 0;         ///< the signal that makes it print its stack (stacks.h); 0: none installed
  std::uint32_t stacks = 0;     ///< how many stacks it has printed (published with the next heartbeat)
};

/// `<dir>/rank<r>.beat`.
std::string beat_path(const std::string& dir, int rank);

/// Reads a beat file; nullopt when it is missing or unreadable.
std::optional<Beat> read_beat(const std::string& path);

/// Notes that this process enters a collective (the runtime's process groups call it for each).
void note_collective(const char* op, std::uint64_t bytes);

/// Starts this process's heartbeat thread (once per process; later calls do nothing): every `interval` it
/// writes the process's beat for `rank` to `dir`, until the process ends. Installs the stack report
/// (stacks.h) and says so in the beat. Throws std::runtime_error when `dir` cannot be created.
void start_heartbeat(const std::string& dir, int rank, std::chrono::milliseconds interval);

/// A process's state from /proc, in words: "stopped (T, wait channel do_signal_stop)", "running (R)", ...;
/// "gone" when there is no such process.
std::string process_state(int pid);

/// Whether `pid` names a process that has not exited (zombies count as exited).
bool process_alive(int pid);

/// Watches the heartbeats of some ranks: a rank is silent when its beat has not changed for `timeout` while
/// its process is alive. A rank is watched from its first beat on (not while it starts).
class Watcher {
public:
  Watcher(std::string dir, std::vector<int> ranks, std::chrono::milliseconds timeout);
  /// The first rank silent for the timeout, if any.
  std::optional<int> silent_rank();
  /// One line per watched rank with a beat: its last collective (sequence number, op, bytes).
  std::string collectives() const;
  /// The ranks whose last collective is before another's: after a collective timeout, those that never
  /// arrived.
  std::vector<int> behind() const;
  /// The message naming silent rank `rank`: how long, its process state, its last collective against the
  /// others'.
  std::string report(int rank) const;
  std::optional<Beat> last_beat(int rank) const;
  /// Whether `rank`'s beat changed within the timeout.
  bool beating(int rank) const;

private:
  struct Seen {
    int rank = 0;
    std::optional<Beat> beat;
    std::chrono::steady_clock::time_point changed;
  };
  std::string dir_;
  std::chrono::milliseconds timeout_;
  std::vector<Seen> seen_;
};

/// Asks the processes of `ranks` whose beats in `dir` are on this machine, alive and able to print their
/// stack (stack_signal set) for it, and says which were asked. `done()` is true once each has printed a stack
/// since, or gone: the watcher waits for that (a second or so) before it stops the job, so the stacks are
/// written before the processes end.
class StackRequest {
public:
  StackRequest(const std::string& dir, const std::vector<int>& ranks);
  bool done() const;
  /// The ranks asked, "1, 3"; empty when none could be.
  std::string asked() const;

private:
  struct Asked {
    int rank = 0;
    int pid = 0;
    std::uint32_t stacks_before = 0;
  };
  std::string dir_;
  std::vector<Asked> asked_;
};

/// Removes the heartbeat folders (`<tmp>/accelerate-<uid>-*/heartbeats/`) this user's jobs left behind when
/// they ended without their cleanup (SIGKILLed ranks or launchers): a folder goes when it has been unchanged
/// for `quiet`, none of its beats names a live process, and it holds nothing but beats. Returns how many
/// went; never throws (a folder that cannot be read or removed stays).
int sweep_stale_heartbeat_folders(const std::string& tmp, std::chrono::seconds quiet);

/// Seconds as text for messages: "10 s", "2.5 s".
std::string seconds_text(std::chrono::milliseconds duration);

} // namespace accelerate::watch
