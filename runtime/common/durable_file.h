// Durable file I/O for checkpoints and weight files: paths and directories over POSIX, fsync'd writes, atomic
// replacement, whole-file reads, and the content hash recorded in checkpoint metadata (runtime-internal).
//
// Why not std::filesystem: the PyPI libtorch exports its own, older copy of std::filesystem (libtorch.so,
// libtorch_cpu.so), which interposes the system libstdc++ in every program linked against it; some of its
// functions (remove_all, for one) crash there. Everything here is plain POSIX on std::string paths.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace accelerate::detail {

/// An I/O failure, with the path, the system's reason and `errno` (ENOSPC for a full disk).
class FileError : public std::runtime_error {
public:
  FileError(const std::string& message, int error) : std::runtime_error(message), error_(error) {}
  int error() const { return error_; }

private:
  int error_;
};

/// `what` failed on `path`: the system's reason, and a hint for the causes users can fix.
inline FileError file_error(const std::string& what, const std::string& path, int error) {
  std::string message = what + " '" + path + "' failed: " + std::strerror(error);
  if (error == ENOSPC || error == EDQUOT) {
    message += " (the disk or quota is full; free space on that filesystem or write elsewhere)";
  } else if (error == EACCES || error == EPERM || error == EROFS) {
    message += " (no permission to write there; pick a directory this process can write)";
  } else if (error == EFBIG) {
    message += " (the file exceeds the size this process may write: see `ulimit -f`)";
  }
  return FileError(message, error);
}

// ---- Paths ------------------------------------------------------------------------------------------------

/// `name` inside `directory` (an absolute `name` stays as it is).
inline std::string join_path(const std::string& directory, const std::string& name) {
  if (directory.empty() || (!name.empty() && name.front() == '/')) {
    return name;
  }
  return directory.back() == '/' ? directory + name : directory + "/" + name;
}

/// The directory part of `path` ("." when it has none).
inline std::string parent_path(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// The last component of `path`.
inline std::string file_name(const std::string& path) {
  return path.substr(path.find_last_of('/') + 1);
}

/// `path` made absolute (against the working directory) and normalised: no ".", "..", repeated or trailing
/// separators.
inline std::string absolute_path(const std::string& path) {
  std::string full = path;
  if (path.empty() || path.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) {
      throw std::runtime_error(std::string("accelerate: cannot read the working directory: ") +
                               std::strerror(errno));
    }
    full = join_path(cwd, path);
  }
  std::vector<std::string> parts;
  for (size_t start = 0; start <= full.size();) {
    size_t end = full.find('/', start);
    if (end == std::string::npos) {
      end = full.size();
    }
    const std::string part = full.substr(start, end - start);
    if (part == "..") {
      if (!parts.empty()) {
        parts.pop_back();
      }
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string normal;
  for (const auto& part : parts) {
    normal += "/" + part;
  }
  return normal.empty() ? "/" : normal;
}

inline bool path_exists(const std::string& path) {
  struct stat info{};
  return ::stat(path.c_str(), &info) == 0;
}

inline bool is_directory(const std::string& path) {
  struct stat info{};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

/// The entries of `directory`, without "." and "..", sorted by name.
inline std::vector<std::string> list_directory(const std::string& directory);

/// Creates `path` and its missing parents (like `mkdir -p`).
inline void make_directories(const std::string& path);

/// Removes `path`, and everything under it when it is a directory (like `rm -rf`); a missing path is fine.
inline void remove_tree(const std::string& path);

/// Renames `from` to `to` (atomic within one filesystem).
inline void rename_path(const std::string& from, const std::string& to);

/// Writes all of `data` to `fd`, again after a short write or an interruption: 0 when done, else the errno of
/// the write that failed (ENOSPC for a write that wrote nothing).
inline int write_all(int fd, std::string_view data) {
  size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return n < 0 ? errno : ENOSPC;
    }
    written += static_cast<size_t>(n);
  }
  return 0;
}

/// Writes `data` to `path` (created or truncated) and fsyncs it before returning.
inline void write_file_durably(const std::string& path, std::string_view data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw file_error("creating", path, errno);
  }
  if (const int error = write_all(fd, data)) {
    ::close(fd);
    throw file_error("writing " + std::to_string(data.size()) + " bytes to", path, error);
  }
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    throw file_error("flushing (fsync)", path, error);
  }
  if (::close(fd) != 0) {
    throw file_error("closing", path, errno);
  }
}

/// Makes the entries of `directory` (files created, renamed or removed in it) durable.
inline void sync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    throw file_error("opening directory", directory, errno);
  }
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0 && error != EINVAL) { // some filesystems cannot fsync directories; nothing more can be done
    throw file_error("flushing (fsync) directory", directory, error);
  }
}

/// Replaces `path` with `data` atomically: readers see the old content or the new, never a mix.
inline void replace_file_atomically(const std::string& path, std::string_view data) {
  const std::string temporary = join_path(parent_path(path), "." + file_name(path) + ".tmp");
  write_file_durably(temporary, data);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    throw file_error("renaming '" + temporary + "' to", path, error);
  }
  sync_directory(parent_path(path));
}

/// The whole content of `path`.
inline std::string read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw file_error("opening", path, errno);
  }
  std::string data;
  struct stat info{};
  if (::fstat(fd, &info) == 0 && info.st_size > 0) {
    data.reserve(static_cast<size_t>(info.st_size));
  }
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      const int error = errno;
      ::close(fd);
      throw file_error("reading", path, error);
    }
    if (n == 0) {
      break;
    }
    data.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

inline std::vector<std::string> list_directory(const std::string& directory) {
  DIR* handle = ::opendir(directory.c_str());
  if (handle == nullptr) {
    throw file_error("listing directory", directory, errno);
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(handle)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") {
      names.push_back(name);
    }
  }
  ::closedir(handle);
  std::sort(names.begin(), names.end());
  return names;
}

inline void make_directories(const std::string& path) {
  const std::string full = absolute_path(path);
  for (size_t slash = full.find('/', 1);; slash = full.find('/', slash + 1)) {
    const std::string prefix = slash == std::string::npos ? full : full.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0755) != 0 && !(errno == EEXIST && is_directory(prefix))) {
      throw file_error("creating directory", prefix, errno == EEXIST ? ENOTDIR : errno);
    }
    if (slash == std::string::npos) {
      return;
    }
  }
}

inline void remove_tree(const std::string& path) {
  struct stat info{};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) {
      return;
    }
    throw file_error("inspecting", path, errno);
  }
  if (S_ISDIR(info.st_mode)) {
    for (const auto& name : list_directory(path)) {
      remove_tree(join_path(path, name));
    }
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
      throw file_error("removing directory", path, errno);
    }
  } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw file_error("removing", path, errno);
  }
}

inline void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw file_error("renaming '" + from + "' to", to, errno);
  }
}

/// The content hash checkpoint metadata records for each file: FNV-1a over 64-bit little-endian words
/// (h = (h ^ word) * 0x100000001b3, starting from 0xcbf29ce484222325), the final partial word zero-padded,
/// then the byte length mixed in the same way. Not cryptographic: it catches truncation and corruption.
inline uint64_t content_hash(std::string_view data) {
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t hash = 0xcbf29ce484222325ULL;
  const size_t words = data.size() / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t word;
    std::memcpy(&word, data.data() + i * 8, 8);
    hash = (hash ^ word) * kPrime;
  }
  if (const size_t rest = data.size() % 8; rest != 0) {
    uint64_t word = 0;
    std::memcpy(&word, data.data() + words * 8, rest);
    hash = (hash ^ word) * kPrime;
  }
  return (hash ^ static_cast<uint64_t>(data.size())) * kPrime;
}

/// `content_hash` as 16 lowercase hex digits, as the metadata stores it.
inline std::string content_hash_hex(std::string_view data) {
  static const char* digits = "0123456789abcdef";
  uint64_t hash = content_hash(data);
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, hash >>= 4) {
    text[static_cast<size_t>(i)] = digits[hash & 0xf];
  }
  return text;
}

} // namespace accelerate::detail
