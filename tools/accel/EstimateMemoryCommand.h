// `accel estimate-memory`: the memory a model takes to load and to train, before anything is allocated for
// training: Accelerate's table (per dtype: largest layer, total size, training using Adam) and ours, per
// process under each parallel strategy (docs/cli.md has the formulas).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel {

/// One line on what `accel estimate-memory` does, for `accel --help`.
extern const char* const kEstimateMemorySummary;

/// One tensor of a model: its full name (`block1.fc.weight`), its element count, and whether training updates
/// it (a trainable parameter, not a buffer or a frozen parameter).
struct ModelTensor {
  std::string name;
  std::int64_t elements = 0;
  bool trained = true;
};

/// The sizes `accel estimate-memory` prints, in bytes; the model counted in float32, as Accelerate's
/// estimate creates it.
struct MemoryEstimate {
  std::int64_t totalBytes = 0;        ///< every tensor, float32
  std::int64_t trainedBytes = 0;      ///< the trainable parameters, float32
  std::int64_t largestLayerBytes = 0; ///< the largest layer: the tensors of one module (their name's prefix)
  std::string largestLayer;           ///< its name ("" for tensors at the top)
};

/// Counts `tensors` as Accelerate's `calculate_maximum_sizes` counts a model: float32 bytes, a layer being
/// the tensors directly in one module (the names' common prefix up to the last '.').
MemoryEstimate estimateMemory(const std::vector<ModelTensor>& tensors);

/// The tensors of a safetensors file (its header), or of every `*.safetensors` file in a folder (a sharded
/// checkpoint). Every tensor counts as trained. Throws std::runtime_error naming the file and the problem.
std::vector<ModelTensor> readSafetensorsTensors(const std::string& path);

/// Runs `accel estimate-memory`; returns the exit code.
int runEstimateMemoryCommand(const std::vector<std::string>& args);

} // namespace accel
