// Copying a rank's stdout or stderr from its pipe to the launcher's, whole lines at a time, with `[rankN]: `.
#pragma once

#include <cstddef>
#include <string>

namespace accel {

/// Writes text to `destinationFd` as whole lines, each preceded by `prefix`, so that lines from different
/// ranks never interleave. A line longer than `kMaxLineBytes` is cut there; a last line without a newline
/// gets one at `finish()`.
class PrefixedLineWriter {
public:
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  PrefixedLineWriter(int destinationFd, std::string prefix);
  void write(const char* data, size_t size);
  /// Writes what is left of an unterminated last line.
  void finish();

private:
  void writeLine(const char* text, size_t size);

  int destinationFd_;
  std::string prefix_;
  std::string pending_; ///< the start of a line whose newline has not arrived yet
};

/// The read end of the pipe a rank writes one stream (stdout or stderr) to, and where its lines go.
class RankOutputPipe {
public:
  /// With `logFd` >= 0, everything read is also written there as it came (no prefix); the pipe closes it.
  RankOutputPipe(int sourceFd, int destinationFd, std::string prefix, int logFd = -1);
  ~RankOutputPipe();
  RankOutputPipe(const RankOutputPipe&) = delete;
  RankOutputPipe& operator=(const RankOutputPipe&) = delete;

  int sourceFd() const { return sourceFd_; }
  bool isOpen() const { return sourceFd_ >= 0; }
  /// Reads what the rank has written so far and forwards its complete lines. At end of file (every writer
  /// gone) forwards the unterminated rest and closes the pipe. Call when poll() reports the pipe readable.
  void forwardAvailable();
  /// Forwards the unterminated rest and closes the pipe without waiting for end of file.
  void close();

private:
  int sourceFd_;
  int logFd_;
  PrefixedLineWriter writer_;
};

/// Writes all of `text` to `fd`, retrying after signals and partial writes; drops it if `fd` is broken
/// (a closed pipe must not stop the launcher from supervising its ranks).
void writeFully(int fd, const char* text, size_t size);

} // namespace accel
