// The checkpoint format's schema (docs/checkpoint-format.md): metadata.json's header and file records, the
// checks a reader makes before it trusts a checkpoint, and the errors that name a damaged one
// (runtime-internal).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace accelerate::detail {

struct AcceleratorState;

using Json = nlohmann::ordered_json;

constexpr const char* kFormatName = "accelerate-cpp checkpoint";
/// Bump when a reader of the previous version could not load what this one writes; list the change in
/// docs/checkpoint-format.md. Version 2 records the parallel strategy and which process wrote each file.
constexpr int64_t kFormatVersion = 2;
constexpr const char* kMetadataFile = "metadata.json";

/// What metadata.json records of a file: its size and content hash, and the process that wrote it when it is
/// one process's own (`rank`, -1 for a file of the whole checkpoint).
struct FileRecord {
  uint64_t bytes = 0;
  std::string hash;
  int rank = -1;
};
/// The records as metadata.json's `files` object, and back.
Json files_entry(const std::map<std::string, FileRecord>& records);
std::map<std::string, FileRecord> records_of(const Json& files);

/// metadata.json's header: the format and versions, the world size and parallel strategy that wrote it, the
/// precision, the step and the automatic checkpoint's number (`number`, none for an explicit directory).
/// The components' entries and `files` follow it.
Json metadata_header(const AcceleratorState& state, int world, std::optional<int64_t> number);

/// Throws the error for a checkpoint whose metadata or files are not what a save wrote.
[[noreturn]] void damaged(const std::string& directory, const std::string& problem);
/// `object[key]`, or a `damaged` error naming the missing entry.
const Json& field(const Json& object, const std::string& key, const std::string& directory);
const Json& list_field(const Json& object, const std::string& key, const std::string& directory);
std::string text_field(const Json& object, const std::string& key, const std::string& directory);
template <typename T>
T number_field(const Json& object, const std::string& key, const std::string& directory) {
  const Json& value = field(object, key, directory);
  if (!value.is_number_integer()) {
    damaged(directory,
            std::string(kMetadataFile) + " entry '" + key + "' is " + value.dump() + ", not an integer");
  }
  return value.get<T>();
}

/// A checkpoint's metadata.json, read and checked: the format, a version this runtime reads, and the
/// parallel strategy this program uses.
struct CheckpointMetadata {
  std::string directory;
  Json json;
  int64_t format_version = 0;
  int world_size = 0;
  /// "ddp" for format version 1, which predates the field.
  std::string parallel_strategy;
  std::optional<int64_t> checkpoint_number;

  /// The recorded file `name`, read and checked against the size and hash metadata.json recorded.
  std::string read_file(const std::string& name) const;
};

/// Reads and checks `directory`'s metadata.json on process `rank` (which must see the directory).
CheckpointMetadata read_metadata(const AcceleratorState& state, const std::string& directory, int rank);

} // namespace accelerate::detail
