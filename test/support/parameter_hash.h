// One hash of a model's parameters, printed by the launcher tests' programs: equal hashes mean bit-identical
// parameters.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace accelerate_test {

/// FNV-1a over the bytes of every parameter, in order.
inline uint64_t parameter_hash(const std::vector<torch::Tensor>& parameters) {
  uint64_t hash = 1469598103934665603ULL;
  for (const torch::Tensor& parameter : parameters) {
    const torch::Tensor contiguous = parameter.detach().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(contiguous.data_ptr());
    for (size_t i = 0; i < contiguous.nbytes(); ++i) {
      hash = (hash ^ bytes[i]) * 1099511628211ULL;
    }
  }
  return hash;
}

} // namespace accelerate_test
