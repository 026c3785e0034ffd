// Files of whole records for the trackers (runtime/tracking/record_file.h).
#include "tracking/record_file.h"

#include "common/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <ctime>

namespace accelerate::detail {

RecordFile::RecordFile(std::string path, Mode mode) : path_(std::move(path)) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (mode == Mode::append ? O_APPEND : O_TRUNC);
  fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0) {
    throw file_error("creating", path_, errno);
  }
  struct stat info{};
  if (::fstat(fd_, &info) == 0) {
    size_ = static_cast<long long>(info.st_size);
  }
}

RecordFile::~RecordFile() {
  close();
}

void RecordFile::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void RecordFile::write(std::string_view record) {
  if (fd_ < 0) {
    throw FileError("writing to '" + path_ + "' failed: the file is closed (end_training was called)", EBADF);
  }
  if (const int error = write_all(fd_, record)) {
    // Cut back a part-written record; should that fail too, readers stop at its bad length or checksum.
    if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
    }
    throw file_error("writing a record of " + std::to_string(record.size()) + " bytes to", path_, error);
  }
  size_ += static_cast<long long>(record.size());
}

void RecordFile::keep_lines(const std::function<bool(std::string_view line)>& keep) {
  if (size_ == 0 || fd_ < 0) {
    return;
  }
  const std::string text = read_whole_file(path_);
  std::string kept;
  bool dropped = false;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    const std::string_view line(text.data() + start, end - start);
    if (keep(line)) {
      kept.append(line);
    } else {
      dropped = true;
    }
    start = end;
  }
  if (!dropped) {
    return;
  }
  replace_file_atomically(path_, kept);
  close();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) {
    throw file_error("reopening", path_, errno);
  }
  size_ = static_cast<long long>(kept.size());
}

std::string number_text(double value) {
  if (std::isnan(value)) {
    return "nan";
  }
  if (std::isinf(value)) {
    return value > 0 ? "inf" : "-inf";
  }
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

double wall_time_now() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

void make_tracker_directory(const std::string& directory) {
  try {
    make_directories(directory);
  } catch (const FileError& error) {
    throw FileError(
        std::string(error.what()) +
            "; set AcceleratorOptions().project_dir(...) or ACCEL_PROJECT_DIR to a directory this "
            "process can write",
        error.error());
  }
}

} // namespace accelerate::detail
