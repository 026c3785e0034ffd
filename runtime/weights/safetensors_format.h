// The safetensors format without torch: a file's header (each tensor's dtype, shape and byte range, and the
// `__metadata__` strings), read and checked, and a file's bytes from raw tensor bytes. The runtime turns the
// entries into tensors (checkpoint/safetensors.h); `accel` reads headers (estimate-memory) and copies bytes
// (merge-weights).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace accelerate::weights {

/// One tensor of a safetensors file: its name, dtype (the format's name: "F32", "BF16", ...), shape and byte
/// range [begin, end) in the data section.
struct TensorEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;

  int64_t elements() const;
};

/// A safetensors file's header: its tensors in header order, its `__metadata__`, and where the data section
/// starts in the file (8 + the header's length).
struct Header {
  std::vector<TensorEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;

  const TensorEntry* find(const std::string& name) const;
};

/// The bytes one element of `dtype` takes, or 0 for a dtype name this library does not know.
uint64_t element_size(const std::string& dtype);
/// The dtype names element_size knows, comma-separated (for messages).
std::string known_dtypes();

/// Throws std::runtime_error: `source` is not a valid safetensors file, because of `problem`.
[[noreturn]] void corrupt(const std::string& source, const std::string& problem);

/// Parses and checks the header at the start of `bytes` (a whole file, or at least its header) of a file of
/// `file_size` bytes; `source` names it in errors. Checks every entry's shape, offsets and, for a known
/// dtype, its byte count, and that the tensors tile the data section exactly.
Header parse_header(std::string_view bytes, uint64_t file_size, const std::string& source);

/// The header of the file at `path`, read without its data (a file of any size). Throws std::runtime_error
/// naming the file when it cannot be read or is not a safetensors file.
Header read_header(const std::string& path);

/// A safetensors file opened for reading tensors one at a time.
class SafetensorsFile {
public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const Header& header() const { return header_; }
  /// The raw bytes of `entry` (one of header().tensors).
  std::string read(const TensorEntry& entry) const;

private:
  std::string path_;
  int fd_ = -1;
  Header header_;
};

/// One tensor to write: name, dtype, shape and its raw little-endian bytes (their size must match).
struct TensorBytes {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string_view bytes;
};

/// A safetensors file's bytes holding `tensors` and `metadata`, as the reference writer lays them out: larger
/// elements first, then by name, so every tensor starts at a multiple of its element size (the header is
/// padded to 8 bytes). Throws std::invalid_argument on an unknown dtype or a byte count that does not match.
std::string encode(std::vector<TensorBytes> tensors, const std::map<std::string, std::string>& metadata);

} // namespace accelerate::weights
