// `accel estimate-memory` on a training program: the program's first prepare(model) reports the model's
// tensors and ends the process (runtime-internal; the command is tools/accel/EstimateMemoryCommand.cpp).
#pragma once

#include <torch/torch.h>

namespace accelerate::detail {

/// When ACCELERATE_ESTIMATE_MEMORY names a file (set by `accel estimate-memory`): writes `model`'s
/// parameters and buffers there, a line each (`tensor <name> <elements> <1 if trained, else 0>`,
/// tab-separated, then `end`), and ends the process with exit code 0, before anything is allocated for
/// training. Otherwise does nothing.
void report_model_for_memory_estimate(const torch::nn::Module& model);

} // namespace accelerate::detail
