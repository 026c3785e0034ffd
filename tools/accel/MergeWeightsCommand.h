// `accel merge-weights`: Accelerate's `accelerate merge-weights`: a checkpoint save_state wrote under a
// sharded strategy (FSDP, ZeRO; any process count) turned into one model's full weights, as save_model writes
// them (docs/cli.md).
#pragma once

#include <string>
#include <vector>

namespace accel {

/// One line on what `accel merge-weights` does, for `accel --help`.
extern const char* const kMergeWeightsSummary;

/// Runs `accel merge-weights`; returns the exit code (2, through UsageError, for a bad checkpoint).
int runMergeWeightsCommand(const std::vector<std::string>& args);

} // namespace accel
