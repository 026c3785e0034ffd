// Receiving signals as bytes on a pipe (see SignalPipe.h).
#include "SignalPipe.h"

#include <cerrno>
#include <fcntl.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace accel {
namespace {

int signalWriteFd = -1;

extern "C" void queueSignal(int signal) {
  int savedErrno = errno;
  unsigned char byte = static_cast<unsigned char>(signal);
  // The pipe is non-blocking: if it is full, enough wake-ups are already queued.
  [[maybe_unused]] ssize_t ignored = ::write(signalWriteFd, &byte, 1);
  errno = savedErrno;
}

void makePipe(int fds[2]) {
  if (::pipe(fds) != 0)
    throw std::system_error(errno, std::generic_category(), "cannot create the signal pipe");
  for (int i = 0; i < 2; ++i) {
    ::fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    ::fcntl(fds[i], F_SETFL, ::fcntl(fds[i], F_GETFL) | O_NONBLOCK);
  }
}

} // namespace

SignalPipe::SignalPipe(std::vector<int> signals) : signals_(std::move(signals)) {
  int fds[2];
  makePipe(fds);
  readFd_ = fds[0];
  signalWriteFd = fds[1];

  struct sigaction action{};
  action.sa_handler = queueSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0; // no SA_RESTART: poll() returns EINTR and the loop looks at the pipe at once
  previousActions_.resize(signals_.size());
  for (size_t i = 0; i < signals_.size(); ++i)
    ::sigaction(signals_[i], &action, &previousActions_[i]);

  struct sigaction ignore{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &previousSigpipe_);
}

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < signals_.size(); ++i)
    ::sigaction(signals_[i], &previousActions_[i], nullptr);
  ::sigaction(SIGPIPE, &previousSigpipe_, nullptr);
  ::close(signalWriteFd);
  ::close(readFd_);
  signalWriteFd = -1;
}

std::vector<int> SignalPipe::takeSignals() {
  std::vector<int> received;
  unsigned char bytes[64];
  ssize_t count;
  while ((count = ::read(readFd_, bytes, sizeof(bytes))) > 0)
    received.insert(received.end(), bytes, bytes + count);
  return received;
}

SignalPipe::BlockedForFork::BlockedForFork(const SignalPipe& pipe) : pipe_(pipe) {
  sigset_t caught;
  sigemptyset(&caught);
  for (int signal : pipe_.signals_)
    sigaddset(&caught, signal);
  ::sigprocmask(SIG_BLOCK, &caught, &previousMask_);
}

SignalPipe::BlockedForFork::~BlockedForFork() {
  ::sigprocmask(SIG_SETMASK, &previousMask_, nullptr);
}

void SignalPipe::BlockedForFork::restoreDefaultsInChild() const {
  struct sigaction defaults{};
  defaults.sa_handler = SIG_DFL;
  sigemptyset(&defaults.sa_mask);
  for (int signal : pipe_.signals_)
    ::sigaction(signal, &defaults, nullptr);
  ::sigaction(SIGPIPE, &defaults, nullptr); // an ignored disposition would survive exec
  ::sigprocmask(SIG_SETMASK, &previousMask_, nullptr);
}

} // namespace accel
