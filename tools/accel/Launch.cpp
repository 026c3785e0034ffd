// Running a program as N local ranks and supervising them (see Launch.h).
#include "Launch.h"

#include "RankEnvironment.h"
#include "RankOutput.h"
#include "SignalPipe.h"
#include "common/durable_file.h"
#include "watch/heartbeat.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <optional>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

namespace accel {
namespace {

using Clock = std::chrono::steady_clock;

/// What the launcher passes on to its ranks; SIGCHLD is caught too, to notice ranks exiting.
const std::vector<int> kForwardedSignals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

std::vector<int> caughtSignals() {
  std::vector<int> signals = kForwardedSignals;
  signals.push_back(SIGCHLD);
  return signals;
}

/// After the last rank exits, how long processes it left behind (after SIGKILL) get to close its pipes.
constexpr std::chrono::milliseconds kFinalDrainTimeout{1000};
/// How long a stop waits for the stacks it asked of live ranks (one is out in well under a second).
constexpr std::chrono::milliseconds kStackWait{5000};
/// How long a heartbeat folder whose beats name no live process must have been unchanged to be swept.
constexpr std::chrono::seconds kStaleHeartbeatFolder{600};

std::string signalName(int signal) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"}};
  for (const auto& [number, name] : kNames)
    if (number == signal)
      return name;
  return "signal " + std::to_string(signal);
}

std::string formatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", seconds);
  return text;
}

/// The launcher's own messages go to stderr as one line, `accel launch: ...`.
void report(const std::string& message) {
  std::string line = "accel launch: " + message + "\n";
  writeFully(STDERR_FILENO, line.data(), line.size());
}

/// How a rank ended.
struct RankExit {
  bool killedBySignal = false;
  int value = 0; ///< the exit code, or the signal number

  static RankExit from(const siginfo_t& info) {
    bool signalled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
    return {signalled, info.si_status};
  }
  bool failed() const { return killedBySignal || value != 0; }
  /// The shell's convention: a process killed by signal S reads as exit code 128 + S.
  int asExitCode() const { return killedBySignal ? 128 + value : value; }
  std::string describe() const {
    if (killedBySignal)
      return "was killed by signal " + std::to_string(value) + " (" + signalName(value) + ")";
    return "failed with exit code " + std::to_string(value);
  }
};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  std::optional<RankExit> exit;
  bool reaped = false;
  /// Null when there is one rank: it writes straight to the launcher's own stdout and stderr.
  std::unique_ptr<RankOutputPipe> stdoutPipe;
  std::unique_ptr<RankOutputPipe> stderrPipe;

  bool running() const { return pid > 0 && !exit; }
};

/// A pipe (or none: both ends -1) whose ends are closed on exec (the rank's end is dup2'ed onto fd 1 or 2,
/// which clears that flag).
struct Pipe {
  int readEnd = -1;
  int writeEnd = -1;

  static Pipe open() {
    int fds[2];
    if (::pipe(fds) != 0)
      throw std::system_error(errno, std::generic_category(), "cannot create an output pipe for a rank");
    for (int fd : fds)
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    return {fds[0], fds[1]};
  }
};

/// Starts the ranks, then runs the poll() loop that forwards their output and the launcher's signals,
/// notices exits, and stops the survivors when one fails. All ranks share one new process group (led by
/// rank 0) so that one killpg() reaches them and anything they started; rank 0 is reaped last so that the
/// group's id cannot be reused while the launcher may still signal it.
class RankSupervisor {
public:
  RankSupervisor(const LaunchOptions& options, SignalPipe& signalPipe, int attempt, std::string heartbeatDir)
      : options_(options), signalPipe_(signalPipe), attempt_(attempt),
        heartbeatDir_(std::move(heartbeatDir)) {}
  ~RankSupervisor() { killAndReapEverything(); }
  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;

  void startRanks();
  int superviseUntilAllExited();
  /// Whether a signal to the launcher (not a failed rank) ended this attempt: then there is no restart.
  bool stoppedBySignal() const { return launcherSignal_ != 0; }

private:
  Environment environmentSharedByRanks() const;
  int openLogFile(int rank, const char* stream) const;
  void startRank(int rank, const Environment& shared);
  [[noreturn]] void becomeRank(const SignalPipe::BlockedForFork& blocked, pid_t launcherPid, int rank,
                               const Pipe& out, const Pipe& err, std::vector<char*>& argv,
                               std::vector<char*>& envp) const;

  void waitForEvents(std::optional<Clock::time_point> deadline);
  void checkHeartbeats();
  void beginStop(const std::vector<int>& stackRanks, pid_t silentPid);
  void finishPendingStop();
  void handleSignals();
  void collectExitedRanks();
  void stopRanks(int signal);
  void signalRanks(int signal);
  void drainOutputUntil(Clock::time_point deadline);
  void closeOutputPipes();
  void killAndReapEverything();
  int reportOutcome() const;

  bool stopping() const { return killDeadline_.has_value(); }
  Clock::duration gracePeriod() const {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(options_.termTimeoutSeconds));
  }
  bool anyRunning() const;
  bool anyOutputOpen() const;

  const LaunchOptions& options_;
  SignalPipe& signalPipe_;
  int attempt_ = 0; ///< 0 for the first start, k for the k-th restart
  std::vector<RankProcess> ranks_;
  pid_t groupId_ = 0; ///< rank 0's pid once it is started
  std::optional<Clock::time_point> killDeadline_;
  bool sentSigkill_ = false;
  /// Why ranks (not just what they left behind) got SIGKILL, for the final message.
  enum class SigkillCause { None, GracePeriodOver, SecondSignal } sigkillCause_ = SigkillCause::None;
  std::optional<size_t> failedRank_; ///< the first rank that failed while none was being stopped
  int launcherSignal_ = 0;           ///< the first signal the launcher received, if that began the stop
  int ranksRunningWhenStopped_ = 0;
  std::string heartbeatDir_; ///< where the ranks beat; empty when they are not watched
  std::optional<accelerate::watch::Watcher> watcher_;
  Clock::time_point lastHeartbeatCheck_{};
  std::string hangReport_; ///< set when a silent rank began the stop
  /// A stop that waits for the stacks asked of live ranks (after a hang, or a failure with ranks behind in
  /// the collectives) to be printed, kStackWait at most, so they reach the output before the ranks end.
  struct PendingStop {
    accelerate::watch::StackRequest stacks;
    Clock::time_point deadline;
    pid_t silentPid = 0; ///< the silent rank, SIGKILLed with the stop (a hang); 0 after a failure
  };
  std::optional<PendingStop> pendingStop_;
  std::string stacksAsked_; ///< the ranks asked for their stacks, "1, 3", for the report
};

Environment RankSupervisor::environmentSharedByRanks() const {
  Environment environment = Environment::current();
  // As torchrun does: N ranks each using every core for OpenMP would oversubscribe the machine.
  if (options_.numProcesses > 1 && !environment.get("OMP_NUM_THREADS")) {
    environment.set("OMP_NUM_THREADS", "1");
    if (!options_.quiet)
      report("setting OMP_NUM_THREADS=1 for each rank (it was unset); set it yourself to tune CPU threads");
  }
  for (const auto& [name, value] : options_.exportedVariables)
    environment.set(name, value);
  // torchrun's names, so a program written for torchrun finds them (the resume contract, docs/cli.md).
  environment.set("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt_));
  environment.set("TORCHELASTIC_MAX_RESTARTS", std::to_string(options_.maxRestarts));
  if (!heartbeatDir_.empty())
    environment.set("ACCELERATE_HEARTBEAT_DIR", heartbeatDir_);
  return environment;
}

/// Opens <logDir>/attempt_<k>/<rank>/<stream>.log for writing, creating its folders.
int RankSupervisor::openLogFile(int rank, const char* stream) const {
  std::string folder = options_.logDir;
  for (const std::string& part : {std::string("attempt_") + std::to_string(attempt_), std::to_string(rank)}) {
    folder += "/" + part;
    ::mkdir(folder.c_str(), 0755);
  }
  const std::string path = folder + "/" + stream + ".log";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::system_error(errno, std::generic_category(),
                            "cannot write " + path + " (check that --log_dir " + options_.logDir +
                                " is writable)");
  return fd;
}

void RankSupervisor::startRanks() {
  Environment shared = environmentSharedByRanks();
  ranks_.reserve(static_cast<size_t>(options_.numProcesses));
  for (int rank = 0; rank < options_.numProcesses; ++rank)
    startRank(rank, shared);
  if (!heartbeatDir_.empty()) {
    std::vector<int> watched;
    for (const RankProcess& process : ranks_)
      watched.push_back(process.rank);
    watcher_.emplace(heartbeatDir_, watched,
                     std::chrono::milliseconds(static_cast<long long>(options_.hangTimeoutSeconds * 1000)));
  }
}

/// A rank alive but silent for the hang timeout is named and killed (a stopped process cannot act on
/// SIGTERM), and the others are stopped. Read a few times a second at most.
void RankSupervisor::checkHeartbeats() {
  if (!watcher_ || stopping() || pendingStop_ ||
      Clock::now() - lastHeartbeatCheck_ < std::chrono::milliseconds(250))
    return;
  lastHeartbeatCheck_ = Clock::now();
  auto silent = watcher_->silent_rank();
  if (!silent)
    return;
  for (const RankProcess& process : ranks_) {
    if (process.rank == *silent && process.running()) {
      hangReport_ = watcher_->report(*silent);
      std::vector<int> live; // where the others wait for it
      for (const RankProcess& other : ranks_)
        if (other.rank != *silent && other.running())
          live.push_back(other.rank);
      beginStop(live, process.pid);
      return;
    }
  }
}

/// Asks `stackRanks` (live ranks) for their stacks, then stops the job once they are printed (see
/// PendingStop), SIGKILLing `silentPid` (0: none) with the others' SIGTERM.
void RankSupervisor::beginStop(const std::vector<int>& stackRanks, pid_t silentPid) {
  if (!heartbeatDir_.empty() && !stackRanks.empty()) {
    accelerate::watch::StackRequest request(heartbeatDir_, stackRanks);
    stacksAsked_ = request.asked();
    if (!stacksAsked_.empty()) {
      pendingStop_.emplace(PendingStop{std::move(request), Clock::now() + kStackWait, silentPid});
      return;
    }
  }
  stopRanks(SIGTERM);
  if (silentPid > 0)
    ::kill(silentPid, SIGKILL);
}

void RankSupervisor::finishPendingStop() {
  if (!pendingStop_ || (!pendingStop_->stacks.done() && Clock::now() < pendingStop_->deadline))
    return;
  const pid_t silentPid = pendingStop_->silentPid;
  pendingStop_.reset();
  if (!stopping())
    stopRanks(SIGTERM);
  if (silentPid > 0)
    ::kill(silentPid, SIGKILL);
}

void RankSupervisor::startRank(int localRank, const Environment& shared) {
  RankPlacement placement;
  placement.rank = options_.machineRank * options_.numProcesses + localRank;
  placement.localRank = localRank;
  placement.worldSize = options_.numProcesses * options_.numMachines;
  placement.localWorldSize = options_.numProcesses;
  placement.nodeRank = options_.machineRank;
  placement.numNodes = options_.numMachines;
  placement.masterAddr = options_.mainProcessIp;
  placement.masterPort = options_.mainProcessPort;
  Environment environment = rankEnvironment(shared, placement);
  if (placement.rank == 0 && options_.storeListenFd >= 0)
    environment.set("ACCELERATE_STORE_LISTEN_FD", std::to_string(options_.storeListenFd));
  std::vector<char*> envp = environment.pointers();
  std::vector<std::string> argvStrings = options_.argv;
  std::vector<char*> argv;
  for (std::string& argument : argvStrings)
    argv.push_back(argument.data());
  argv.push_back(nullptr);

  // One rank writes straight to the launcher's streams (a terminal stays a terminal) unless it is logged.
  const int rank = placement.rank;
  bool prefixOutput = options_.numProcesses > 1;
  bool logged = !options_.logDir.empty() && (options_.logStdout || options_.logStderr);
  bool piped = prefixOutput || logged;
  Pipe out, err;
  if (piped) {
    out = Pipe::open();
    err = Pipe::open();
  }

  RankProcess& process = ranks_.emplace_back();
  process.rank = rank;
  const std::string prefix = prefixOutput ? "[rank" + std::to_string(rank) + "]: " : "";
  if (piped) {
    int stdoutLog = options_.logStdout && logged ? openLogFile(rank, "stdout") : -1;
    int stderrLog = options_.logStderr && logged ? openLogFile(rank, "stderr") : -1;
    process.stdoutPipe = std::make_unique<RankOutputPipe>(out.readEnd, STDOUT_FILENO, prefix, stdoutLog);
    process.stderrPipe = std::make_unique<RankOutputPipe>(err.readEnd, STDERR_FILENO, prefix, stderrLog);
  }

  pid_t launcherPid = ::getpid();
  pid_t pid;
  {
    SignalPipe::BlockedForFork blocked(signalPipe_);
    pid = ::fork();
    if (pid == 0)
      becomeRank(blocked, launcherPid, localRank, out, err, argv, envp);
  }
  int forkErrno = errno;
  if (piped) {
    ::close(out.writeEnd);
    ::close(err.writeEnd);
  }
  if (pid < 0)
    throw std::system_error(forkErrno, std::generic_category(),
                            "cannot start rank " + std::to_string(rank) + ": fork failed");
  // Set the group here as well as in the child, so it is in place whichever of the two runs first.
  ::setpgid(pid, localRank == 0 ? pid : groupId_);
  if (localRank == 0)
    groupId_ = pid;
  process.pid = pid;
}

void RankSupervisor::becomeRank(const SignalPipe::BlockedForFork& blocked, pid_t launcherPid, int localRank,
                                const Pipe& out, const Pipe& err, std::vector<char*>& argv,
                                std::vector<char*>& envp) const {
  blocked.restoreDefaultsInChild();
  ::setpgid(0, localRank == 0 ? 0 : groupId_);
#ifdef __linux__
  // If the launcher itself is SIGKILLed it cannot stop its ranks, so the kernel does. SIGKILL, because a
  // rank that ignores SIGTERM would otherwise outlive it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcherPid)
    ::_exit(128 + SIGKILL);
#else
  (void)launcherPid;
#endif
  // Rank 0 inherits the rendezvous socket the launcher holds (its copy of the descriptor only).
  if (options_.machineRank == 0 && localRank == 0 && options_.storeListenFd >= 0)
    ::fcntl(options_.storeListenFd, F_SETFD, 0);
  if (out.writeEnd >= 0) {
    ::dup2(out.writeEnd, STDOUT_FILENO);
    ::dup2(err.writeEnd, STDERR_FILENO);
  }
  // The ranks are a background process group: one reading the terminal would be stopped (SIGTTIN).
  // Local rank 0 keeps a piped or redirected stdin; the others, and rank 0 at a terminal, read /dev/null.
  if (localRank != 0 || ::isatty(STDIN_FILENO)) {
    int devNull = ::open("/dev/null", O_RDONLY);
    ::dup2(devNull, STDIN_FILENO);
    ::close(devNull);
  }
  ::execve(options_.executablePath.c_str(), argv.data(), envp.data());
  std::string message = "accel launch: cannot execute " + options_.executablePath + " as rank " +
                        std::to_string(options_.machineRank * options_.numProcesses + localRank) + ": " +
                        std::strerror(errno) + "\n";
  writeFully(STDERR_FILENO, message.data(), message.size());
  ::_exit(127);
}

int RankSupervisor::superviseUntilAllExited() {
  while (true) {
    collectExitedRanks();
    if (!anyRunning())
      break;
    checkHeartbeats();
    finishPendingStop();
    if (stopping() && !sentSigkill_ && Clock::now() >= *killDeadline_) {
      sigkillCause_ = SigkillCause::GracePeriodOver;
      signalRanks(SIGKILL);
      sentSigkill_ = true;
    }
    if (pendingStop_)
      waitForEvents(Clock::now() + std::chrono::milliseconds(100)); // to see the stacks out soon
    else
      waitForEvents(sentSigkill_ ? std::nullopt : killDeadline_);
  }
  // Every rank has exited; processes they started may still hold their output pipes. Those get what is left
  // of the grace period (all of it after a clean finish, from SIGTERM), then SIGKILL.
  if (!stopping())
    stopRanks(SIGTERM);
  while (anyOutputOpen() && !sentSigkill_ && Clock::now() < *killDeadline_)
    waitForEvents(killDeadline_);
  signalRanks(SIGKILL);
  drainOutputUntil(Clock::now() + kFinalDrainTimeout);
  closeOutputPipes();
  killAndReapEverything();
  return reportOutcome();
}

void RankSupervisor::waitForEvents(std::optional<Clock::time_point> deadline) {
  std::vector<pollfd> watched = {{signalPipe_.readFd(), POLLIN, 0}};
  std::vector<RankOutputPipe*> pipes;
  for (RankProcess& process : ranks_) {
    for (RankOutputPipe* pipe : {process.stdoutPipe.get(), process.stderrPipe.get()}) {
      if (pipe && pipe->isOpen()) {
        watched.push_back({pipe->sourceFd(), POLLIN, 0});
        pipes.push_back(pipe);
      }
    }
  }
  // SIGCHLD wakes the loop when a rank exits; the monitor interval only bounds how long it sleeps.
  auto monitor =
      std::chrono::milliseconds(static_cast<long long>(options_.monitorIntervalSeconds * 1000) + 1);
  int timeoutMs = static_cast<int>(std::min<long long>(monitor.count(), 60 * 60 * 1000));
  if (deadline) {
    auto remaining = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
    timeoutMs = static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(remaining.count(), 0, timeoutMs));
  }
  if (::poll(watched.data(), watched.size(), timeoutMs) <= 0)
    return; // timed out, or interrupted by a signal whose byte is now waiting on the signal pipe
  if (watched[0].revents != 0)
    handleSignals();
  for (size_t i = 0; i < pipes.size(); ++i)
    if (watched[i + 1].revents != 0)
      pipes[i]->forwardAvailable();
}

void RankSupervisor::handleSignals() {
  for (int signal : signalPipe_.takeSignals()) {
    if (signal == SIGCHLD)
      continue; // collectExitedRanks() runs on every turn of the loop
    if (!stopping())
      launcherSignal_ = signal;
    stopRanks(signal);
  }
}

void RankSupervisor::collectExitedRanks() {
  std::optional<size_t> firstFailed;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    RankProcess& process = ranks_[i];
    if (!process.running())
      continue;
    // The group leader stays a zombie (WNOWAIT) until the end, keeping the group id ours.
    bool isGroupLeader = process.pid == groupId_;
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(process.pid), &info,
                 WEXITED | WNOHANG | (isGroupLeader ? WNOWAIT : 0)) != 0 ||
        info.si_pid == 0)
      continue;
    process.exit = RankExit::from(info);
    process.reaped = !isGroupLeader;
    // Of ranks found failed together, blame one that exited with a code over one a signal killed: when a
    // rank exits, its peers' collectives often abort (SIGABRT) a moment later, and the cause is the exit.
    if (process.exit->failed() && (!firstFailed || ranks_[*firstFailed].exit->killedBySignal))
      if (!firstFailed || !process.exit->killedBySignal)
        firstFailed = i;
  }
  if (firstFailed && !stopping() && !pendingStop_) {
    failedRank_ = *firstFailed;
    // Live ranks behind the others in the collectives (after a collective timeout: the ones that never
    // arrived) print their stacks before the job stops: where they are stuck.
    std::vector<int> behind;
    if (watcher_) {
      watcher_->silent_rank(); // reads the beats as they are now
      for (int rank : watcher_->behind())
        for (const RankProcess& process : ranks_)
          if (process.rank == rank && process.running())
            behind.push_back(rank);
    }
    beginStop(behind, 0);
  }
}

void RankSupervisor::stopRanks(int signal) {
  if (stopping()) {
    // A signal to the launcher while it is already stopping the ranks (a second Ctrl-C) means: now.
    if (!sentSigkill_ && anyRunning())
      sigkillCause_ = SigkillCause::SecondSignal;
    signalRanks(SIGKILL);
    sentSigkill_ = true;
    return;
  }
  ranksRunningWhenStopped_ = 0;
  for (const RankProcess& process : ranks_)
    ranksRunningWhenStopped_ += process.running() ? 1 : 0;
  signalRanks(signal);
  killDeadline_ = Clock::now() + gracePeriod();
}

void RankSupervisor::signalRanks(int signal) {
  if (groupId_ > 0 && !ranks_.empty() && !ranks_[0].reaped)
    ::killpg(groupId_, signal);
  // A rank that moved itself to another group (setsid) is signalled on its own.
  for (const RankProcess& process : ranks_)
    if (process.running() && ::getpgid(process.pid) != groupId_)
      ::kill(process.pid, signal);
}

void RankSupervisor::drainOutputUntil(Clock::time_point deadline) {
  while (anyOutputOpen() && Clock::now() < deadline)
    waitForEvents(deadline);
}

void RankSupervisor::closeOutputPipes() {
  for (RankProcess& process : ranks_) {
    if (process.stdoutPipe)
      process.stdoutPipe->close();
    if (process.stderrPipe)
      process.stderrPipe->close();
  }
}

void RankSupervisor::killAndReapEverything() {
  if (anyRunning())
    signalRanks(SIGKILL);
  for (RankProcess& process : ranks_) {
    if (process.pid <= 0 || process.reaped)
      continue;
    int status = 0;
    while (::waitpid(process.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!process.exit)
      process.exit =
          RankExit{WIFSIGNALED(status), WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status)};
    process.reaped = true;
  }
}

int RankSupervisor::reportOutcome() const {
  std::string stopped;
  if (sigkillCause_ == SigkillCause::GracePeriodOver)
    stopped = ", with SIGKILL after the " + formatSeconds(options_.termTimeoutSeconds) + " grace period";
  else if (sigkillCause_ == SigkillCause::SecondSignal)
    stopped = ", with SIGKILL on a second signal";
  const bool several = stacksAsked_.find(',') != std::string::npos;
  const std::string stacks = stacksAsked_.empty() ? ""
                             : several ? "; asked ranks " + stacksAsked_ + " for their stacks (above)"
                                       : "; asked rank " + stacksAsked_ + " for its stack (above)";
  if (!hangReport_.empty()) {
    std::string message = hangReport_ + "; killed it";
    if (ranksRunningWhenStopped_ > 1)
      message +=
          " and stopped the other " + std::to_string(ranksRunningWhenStopped_ - 1) + " rank(s)" + stopped;
    message += stacks;
    report(message + " (--hang_timeout sets how long a rank may be silent; 0 turns the watch off)");
    return 124;
  }
  if (failedRank_) {
    const RankProcess& failed = ranks_[*failedRank_];
    std::string message = "rank " + std::to_string(failed.rank) + " (pid " + std::to_string(failed.pid) +
                          ") " + failed.exit->describe();
    if (ranksRunningWhenStopped_ > 0)
      message += "; stopped the other " + std::to_string(ranksRunningWhenStopped_) + " rank(s)" + stopped;
    report(message + stacks);
    // Where each rank was: after a collective timeout, the rank behind is the one that never arrived.
    if (watcher_) {
      const std::string collectives = watcher_->collectives();
      if (!collectives.empty())
        report("last collectives: " + collectives);
    }
    return failed.exit->asExitCode();
  }
  if (launcherSignal_ != 0) {
    report("received " + signalName(launcherSignal_) + "; passed it on to " +
           std::to_string(ranksRunningWhenStopped_) + " running rank(s)" + stopped);
    return 128 + launcherSignal_;
  }
  return 0;
}

bool RankSupervisor::anyRunning() const {
  for (const RankProcess& process : ranks_)
    if (process.running())
      return true;
  return false;
}

bool RankSupervisor::anyOutputOpen() const {
  for (const RankProcess& process : ranks_)
    if ((process.stdoutPipe && process.stdoutPipe->isOpen()) ||
        (process.stderrPipe && process.stderrPipe->isOpen()))
      return true;
  return false;
}

/// The run's heartbeat folder, made for the launch and removed with what the ranks wrote in it.
class HeartbeatFolder {
public:
  explicit HeartbeatFolder(const LaunchOptions& options) {
    if (options.hangTimeoutSeconds <= 0)
      return;
    const char* variable = std::getenv("TMPDIR");
    const std::string tmp = variable != nullptr && *variable != '\0' ? variable : "/tmp";
    // What jobs killed without their cleanup left (their beats name no live process) goes first; the
    // runtime's own folders under other launchers are in /tmp.
    for (const std::string& folder : {tmp, std::string("/tmp")})
      accelerate::watch::sweep_stale_heartbeat_folders(folder, kStaleHeartbeatFolder);
    // The port too: the machines of a job without --run_id share torchrun's "none", and two jobs of one
    // machine never hold one port at once.
    std::string base = tmp + "/accelerate-" + std::to_string(::getuid()) + "-" + options.runId + "-" +
                       std::to_string(options.mainProcessPort);
    // A folder of this run's name left by a launcher that was killed is taken over (mkdir's EEXIST).
    if (::mkdir(base.c_str(), 0700) != 0 && errno != EEXIST)
      throw std::system_error(errno, std::generic_category(), "cannot create the heartbeat folder " + base);
    base_ = base;
    path_ = base + "/heartbeats";
    ::mkdir(path_.c_str(), 0700);
  }
  ~HeartbeatFolder() {
    try {
      if (!base_.empty())
        accelerate::detail::remove_tree(base_);
    } catch (const std::exception&) {
      // a folder left in $TMPDIR is no reason to fail a finished job
    }
  }
  HeartbeatFolder(const HeartbeatFolder&) = delete;
  HeartbeatFolder& operator=(const HeartbeatFolder&) = delete;
  const std::string& path() const { return path_; }

private:
  std::string base_;
  std::string path_;
};

} // namespace

int launchLocalRanks(const LaunchOptions& options) {
  SignalPipe signalPipe(caughtSignals());
  HeartbeatFolder heartbeats(options);
  for (int attempt = 0;; ++attempt) {
    RankSupervisor supervisor(options, signalPipe, attempt, heartbeats.path());
    supervisor.startRanks();
    int exitCode = supervisor.superviseUntilAllExited();
    if (exitCode == 0 || supervisor.stoppedBySignal() || attempt >= options.maxRestarts)
      return exitCode;
    report("restarting the " + std::to_string(options.numProcesses) + " local rank(s): restart " +
           std::to_string(attempt + 1) + " of --max_restarts " + std::to_string(options.maxRestarts) +
           " (TORCHELASTIC_RESTART_COUNT=" + std::to_string(attempt + 1) + ")");
  }
}

} // namespace accel
