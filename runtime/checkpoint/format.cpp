// The checkpoint format's schema (format.h).
#include "checkpoint/format.h"

#include "accelerator/state.h"
#include "checkpoint/commit.h"
#include "common/durable_file.h"
#include "parallel/engine.h"

#include <chrono>
#include <stdexcept>

#include <torch/torch.h>

#ifndef ACCEL_VERSION
#define ACCEL_VERSION "unknown"
#endif

namespace accelerate::detail {

Json files_entry(const std::map<std::string, FileRecord>& records) {
  Json files = Json::object();
  for (const auto& [name, record] : records) {
    files[name] = {{"bytes", record.bytes}, {"hash", record.hash}};
    if (record.rank >= 0) {
      files[name]["rank"] = record.rank;
    }
  }
  return files;
}

std::map<std::string, FileRecord> records_of(const Json& files) {
  std::map<std::string, FileRecord> records;
  for (const auto& [name, record] : files.items()) {
    records[name] = {record.at("bytes").get<uint64_t>(), record.at("hash").get<std::string>(),
                     record.value("rank", -1)};
  }
  return records;
}

Json metadata_header(const AcceleratorState& state, int world, std::optional<int64_t> number) {
  Json metadata;
  metadata["format"] = kFormatName;
  metadata["format_version"] = kFormatVersion;
  metadata["accelerate_cpp_version"] = ACCEL_VERSION;
  metadata["torch_version"] = TORCH_VERSION;
  metadata["created_unix_seconds"] =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  metadata["world_size"] = world;
  metadata["parallel_strategy"] = state.config.parallel_strategy;
  metadata["mixed_precision"] = state.config.mixed_precision;
  metadata["step"] = state.gradient_state->optimizer_steps;
  metadata["checkpoint_number"] = number ? Json(*number) : Json(nullptr);
  return metadata;
}

void damaged(const std::string& directory, const std::string& problem) {
  throw std::runtime_error(
      "accelerate: load_state: the checkpoint '" + directory + "' is damaged: " + problem +
      ". Nothing was loaded; load an earlier checkpoint (the directories next to it), or "
      "save a new one");
}

const Json& field(const Json& object, const std::string& key, const std::string& directory) {
  if (!object.is_object() || !object.contains(key)) {
    damaged(directory, std::string(kMetadataFile) + " lacks the entry '" + key + "'");
  }
  return object.at(key);
}

const Json& list_field(const Json& object, const std::string& key, const std::string& directory) {
  const Json& value = field(object, key, directory);
  if (!value.is_array()) {
    damaged(directory, std::string(kMetadataFile) + " entry '" + key + "' is not a list");
  }
  return value;
}

std::string text_field(const Json& object, const std::string& key, const std::string& directory) {
  const Json& value = field(object, key, directory);
  if (!value.is_string()) {
    damaged(directory,
            std::string(kMetadataFile) + " entry '" + key + "' is " + value.dump() + ", not a string");
  }
  return value.get<std::string>();
}

std::string CheckpointMetadata::read_file(const std::string& name) const {
  const Json& files = field(json, "files", directory);
  if (!files.contains(name)) {
    damaged(directory, std::string(kMetadataFile) + " does not record the file '" + name + "'");
  }
  const std::string path = join_path(directory, name);
  if (!path_exists(path)) {
    damaged(directory, "its file '" + name + "' is missing");
  }
  const std::string bytes = read_whole_file(path);
  const auto expected_bytes = number_field<uint64_t>(files.at(name), "bytes", directory);
  if (bytes.size() != expected_bytes) {
    damaged(directory, "'" + name + "' holds " + std::to_string(bytes.size()) + " bytes, but " +
                           kMetadataFile + " recorded " + std::to_string(expected_bytes) +
                           " (the file is truncated or was changed)");
  }
  const std::string expected_hash = text_field(files.at(name), "hash", directory);
  if (content_hash_hex(bytes) != expected_hash) {
    damaged(directory, "'" + name + "' has content hash " + content_hash_hex(bytes) + ", but " +
                           kMetadataFile + " recorded " + expected_hash + " (the file is corrupt)");
  }
  return bytes;
}

CheckpointMetadata read_metadata(const AcceleratorState& state, const std::string& directory, int rank) {
  CheckpointMetadata checkpoint;
  checkpoint.directory = directory;
  if (!is_directory(directory)) {
    throw std::invalid_argument(
        "accelerate: load_state: process " + std::to_string(rank) + " (host " + host_name() +
        ") does not see the checkpoint directory '" + directory +
        "': checkpoints must be on a filesystem every process shares, at the same path");
  }
  const std::string metadata_path = join_path(directory, kMetadataFile);
  if (!path_exists(metadata_path)) {
    throw std::invalid_argument(
        "accelerate: load_state: '" + directory + "' has no " + kMetadataFile +
        ": it is not a checkpoint written by save_state (an interrupted save is never renamed into place, so "
        "this is some other directory); pass the directory save_state returned");
  }
  Json& metadata = checkpoint.json;
  try {
    metadata = Json::parse(read_whole_file(metadata_path));
  } catch (const Json::exception& error) {
    damaged(directory, std::string(kMetadataFile) + " does not parse (" + error.what() + ")");
  }
  if (!metadata.is_object() || !metadata.contains("format") || metadata["format"] != kFormatName) {
    damaged(directory, std::string(kMetadataFile) + " does not describe an accelerate-cpp checkpoint");
  }
  checkpoint.format_version = number_field<int64_t>(metadata, "format_version", directory);
  if (checkpoint.format_version > kFormatVersion) {
    throw std::runtime_error("accelerate: load_state: '" + directory + "' has checkpoint format version " +
                             std::to_string(checkpoint.format_version) + " (written by accelerate-cpp " +
                             metadata.value("accelerate_cpp_version", std::string("?")) +
                             "), but this accelerate-cpp (" + ACCEL_VERSION +
                             ") reads format versions up to " + std::to_string(kFormatVersion) +
                             "; load it with a newer accelerate-cpp");
  }
  field(metadata, "files", directory);
  checkpoint.world_size = number_field<int>(metadata, "world_size", directory);
  checkpoint.parallel_strategy =
      checkpoint.format_version >= 2 ? text_field(metadata, "parallel_strategy", directory) : "ddp";
  if (!state.engine->reads_checkpoints_of(checkpoint.parallel_strategy)) {
    throw std::invalid_argument("accelerate: load_state: the checkpoint '" + directory +
                                "' was written with the parallel strategy '" + checkpoint.parallel_strategy +
                                "' on " + std::to_string(checkpoint.world_size) +
                                " process(es), but this program trains with '" +
                                state.config.parallel_strategy +
                                "', which cannot read it; load it with the strategy it was written with");
  }
  if (field(metadata, "checkpoint_number", directory).is_number_integer()) {
    checkpoint.checkpoint_number = metadata["checkpoint_number"].get<int64_t>();
  }
  return checkpoint;
}

} // namespace accelerate::detail
