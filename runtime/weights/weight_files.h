// Full model weights as transformers and Accelerate write them: one `model.safetensors`, or, above the shard
// size, `model-00001-of-0000N.safetensors` ... with `model.safetensors.index.json` ({"metadata":
// {"total_size": ...}, "weight_map": {name: file}}). One writer for `Accelerator::save_model` and
// `accel merge-weights`, so both shard alike.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace accelerate::weights {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
/// Accelerate's default `max_shard_size`.
constexpr const char* kDefaultMaxShardSize = "10GB";

/// A size as Accelerate's `convert_file_size_to_int` reads it: "10GB" (10^9 bytes), "500MB", "64KB", "2GiB",
/// "512MiB", "4KiB" (powers of 2), a lower-case final "b" meaning bits ("5Gb" = 5*10^9/8 bytes), or a plain
/// number of bytes. Throws std::invalid_argument naming `what` (e.g. "max_shard_size") otherwise.
uint64_t parse_size(const std::string& text, const std::string& what);

/// One tensor of a model's weights: name, safetensors dtype and shape (its byte count follows).
struct WeightInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;

  uint64_t bytes() const;
};

/// The files of a save: each file's name and the indices of its tensors, in order.
struct ShardPlan {
  std::vector<std::pair<std::string, std::vector<size_t>>> files;
  uint64_t total_size = 0;
  bool sharded() const { return files.size() > 1; }
};

/// Splits `tensors`, in their order, as huggingface_hub's `split_torch_state_dict_into_shards` does: a new
/// file when the next tensor would take the current one over `max_shard_size`, a tensor larger than that in
/// a file of its own.
ShardPlan plan_shards(const std::vector<WeightInfo>& tensors, uint64_t max_shard_size);

/// Writes `tensors` into `directory` (created if needed) as `plan_shards` splits them, each file with
/// `metadata` as its `__metadata__`; `bytes_of(i)` gives tensor i's raw bytes, asked for one file at a time.
/// Every file is first written under a hidden temporary name and fsync'd: an error while writing removes
/// them and leaves what the directory held untouched. Then the files are renamed into place, the index (or
/// the single file) last, and what a previous save left that this one does not replace is removed (its
/// other shards, its index, or its single file), so a loader finds one consistent set. Returns the plan.
ShardPlan write_weight_files(const std::string& directory, const std::vector<WeightInfo>& tensors,
                             uint64_t max_shard_size, const std::function<std::string(size_t)>& bytes_of,
                             const std::map<std::string, std::string>& metadata);

} // namespace accelerate::weights
