// Copying a rank's stdout or stderr to the launcher's with a rank prefix (see RankOutput.h).
#include "RankOutput.h"

#include <cerrno>
#include <cstring>
#include <poll.h>
#include <unistd.h>
#include <utility>

namespace accel {

void writeFully(int fd, const char* text, size_t size) {
  while (size > 0) {
    ssize_t written = ::write(fd, text, size);
    if (written < 0 && errno == EINTR)
      continue;
    if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd writable{fd, POLLOUT, 0};
      ::poll(&writable, 1, -1);
      continue;
    }
    if (written <= 0)
      return;
    text += written;
    size -= static_cast<size_t>(written);
  }
}

PrefixedLineWriter::PrefixedLineWriter(int destinationFd, std::string prefix)
    : destinationFd_(destinationFd), prefix_(std::move(prefix)) {}

void PrefixedLineWriter::write(const char* data, size_t size) {
  const char* end = data + size;
  while (data < end) {
    const char* newline = static_cast<const char*>(std::memchr(data, '\n', static_cast<size_t>(end - data)));
    if (!newline) {
      pending_.append(data, end);
      break;
    }
    pending_.append(data, newline);
    writeLine(pending_.data(), pending_.size());
    pending_.clear();
    data = newline + 1;
  }
  while (pending_.size() >= kMaxLineBytes) {
    writeLine(pending_.data(), kMaxLineBytes);
    pending_.erase(0, kMaxLineBytes);
  }
}

void PrefixedLineWriter::finish() {
  if (!pending_.empty())
    writeLine(pending_.data(), pending_.size());
  pending_.clear();
}

void PrefixedLineWriter::writeLine(const char* text, size_t size) {
  // One write() per line keeps the line whole even when a reader shares the terminal with other writers.
  std::string line;
  line.reserve(prefix_.size() + size + 1);
  line.append(prefix_).append(text, size).push_back('\n');
  writeFully(destinationFd_, line.data(), line.size());
}

RankOutputPipe::RankOutputPipe(int sourceFd, int destinationFd, std::string prefix, int logFd)
    : sourceFd_(sourceFd), logFd_(logFd), writer_(destinationFd, std::move(prefix)) {}

RankOutputPipe::~RankOutputPipe() {
  close();
}

void RankOutputPipe::forwardAvailable() {
  char buffer[16 * 1024];
  ssize_t received = ::read(sourceFd_, buffer, sizeof(buffer));
  if (received < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
    return;
  if (received <= 0) {
    close();
    return;
  }
  if (logFd_ >= 0)
    writeFully(logFd_, buffer, static_cast<size_t>(received));
  writer_.write(buffer, static_cast<size_t>(received));
}

void RankOutputPipe::close() {
  if (sourceFd_ < 0)
    return;
  writer_.finish();
  ::close(sourceFd_);
  sourceFd_ = -1;
  if (logFd_ >= 0)
    ::close(logFd_);
  logFd_ = -1;
}

} // namespace accel
