// `accel merge-weights`' work, without torch: a checkpoint that save_state wrote (under any strategy and
// process count: whole `model.safetensors`, or every process's `model_shards_<r>.safetensors` pieces) turned
// into one model's full weights, written by the same writer as `Accelerator::save_model` (weight_files.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace accelerate::weights {

/// The checkpoint cannot be merged as it is (not a checkpoint folder, a file missing or damaged, pieces that
/// do not add up): the message names the problem and what to do.
class CheckpointInputError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct MergeResult {
  size_t tensors = 0;
  size_t files = 0;
  uint64_t total_size = 0;
  /// The strategy and process count that wrote the checkpoint (metadata.json's), for the report.
  std::string parallel_strategy;
  int world_size = 0;
};

/// Writes prepared model `model` (0 for the first) of the checkpoint in `checkpoint` to `out` as full
/// weights: `model.safetensors`, or shards with an index above `max_shard_size` bytes. Everything is read
/// and checked before anything is written: a bad checkpoint throws CheckpointInputError and writes nothing.
/// Other failures (writing `out`) throw std::runtime_error and leave what `out` held untouched.
MergeResult merge_checkpoint_weights(const std::string& checkpoint, const std::string& out, size_t model,
                                     uint64_t max_shard_size);

} // namespace accelerate::weights
