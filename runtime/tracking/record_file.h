// Files of whole records for the trackers: one write() per record, a failed write cut back to the last whole
// record, and numbers as the shortest text that reads back exactly (runtime-internal; no torch).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace accelerate::detail {

/// A file the trackers append records to. Each record goes out in one `write` (no fsync per record), so a
/// killed run leaves whole records; a write that fails part-way (a full disk, `ulimit -f`) is cut back to the
/// last whole record and throws `FileError` (runtime/common/durable_file.h) naming the file and the reason.
class RecordFile {
public:
  enum class Mode { append, truncate };
  /// Opens `path` (created when missing); throws `FileError` when it cannot.
  RecordFile(std::string path, Mode mode);
  ~RecordFile();
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  void write(std::string_view record);
  /// Rewrites the file (atomically: a copy renamed over it) keeping only the lines `keep` accepts, and goes
  /// on appending to it: how a run started again at step N drops the records of step N and later that an
  /// earlier attempt wrote after its last checkpoint. Does nothing to an empty file.
  void keep_lines(const std::function<bool(std::string_view line)>& keep);
  /// True when the file holds nothing (a new file: the place for a header).
  bool empty() const { return size_ == 0; }
  const std::string& path() const { return path_; }
  void close();

private:
  std::string path_;
  int fd_ = -1;
  long long size_ = 0;
};

/// `value` as the shortest decimal text that parses back to the same double (`0.1`, `3`, `1e-08`); `nan`,
/// `inf` and `-inf` for the non-finite values.
std::string number_text(double value);

/// Seconds since the Unix epoch, with the clock's resolution (the records' `wall_time`).
double wall_time_now();

/// Creates `directory` and its parents for a tracker; throws `FileError` naming the directory and the fix.
void make_tracker_directory(const std::string& directory);

} // namespace accelerate::detail
