// The in-memory half of the safetensors format for tensors, for checkpoints that hash and write files
// themselves, and the dtype names and raw bytes the torch-free weight files writer (runtime/weights/) takes.
#pragma once

#include <accelerate/safetensors.h>

#include <map>
#include <string>
#include <string_view>

namespace accelerate::detail {

/// The safetensors name of `type` ("F32", "BF16"); std::invalid_argument naming `tensor` when it has none.
std::string safetensors_dtype(c10::ScalarType type, const std::string& tensor);
/// `tensor` detached, on the CPU and contiguous, checked to be defined and of a dtype safetensors stores.
torch::Tensor weight_values(const torch::Tensor& tensor, const std::string& name);
/// The raw bytes of contiguous CPU `values` (valid while `values` lives).
std::string_view bytes_of(const torch::Tensor& values);

/// The bytes of a safetensors file holding `tensors` and `metadata` (see `accelerate::save_safetensors`).
std::string encode_safetensors(const std::map<std::string, torch::Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata);

/// Parses the bytes of a safetensors file; `source` names it in errors (usually its path).
SafetensorsContent decode_safetensors(std::string_view bytes, const std::string& source);

} // namespace accelerate::detail
