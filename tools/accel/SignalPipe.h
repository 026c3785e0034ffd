// Receiving signals as bytes on a pipe, so the launcher's poll() loop sees them next to the ranks' output.
#pragma once

#include <csignal>
#include <vector>

namespace accel {

/// While it lives, the given signals are caught and queued on a pipe (the self-pipe trick), and SIGPIPE is
/// ignored (a closed stdout must not kill the launcher before it has stopped its ranks). The previous
/// dispositions come back when it is destroyed. One instance at a time.
class SignalPipe {
public:
  explicit SignalPipe(std::vector<int> signals);
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  /// Becomes readable when a signal has arrived.
  int readFd() const { return readFd_; }
  /// The signals that arrived since the last call, oldest first.
  std::vector<int> takeSignals();

  /// Blocks the caught signals until destroyed, and lets a forked child put back the default dispositions
  /// before it unblocks them, so a signal can never run the launcher's handler inside a rank.
  class BlockedForFork {
  public:
    explicit BlockedForFork(const SignalPipe& pipe);
    ~BlockedForFork();
    BlockedForFork(const BlockedForFork&) = delete;
    BlockedForFork& operator=(const BlockedForFork&) = delete;
    /// In the child, between fork and exec: default dispositions for every caught signal and SIGPIPE, and
    /// the signal mask the launcher had. Async-signal-safe.
    void restoreDefaultsInChild() const;

  private:
    const SignalPipe& pipe_;
    sigset_t previousMask_;
  };

private:
  std::vector<int> signals_;
  std::vector<struct sigaction> previousActions_;
  struct sigaction previousSigpipe_{};
  int readFd_ = -1;
};

} // namespace accel
