// The in-memory half of the safetensors format, for checkpoints that hash and write files themselves.
#pragma once

#include <accelerate/safetensors.h>

#include <map>
#include <string>
#include <string_view>

namespace accelerate::detail {

/// The bytes of a safetensors file holding `tensors` and `metadata` (see `accelerate::save_safetensors`).
std::string encode_safetensors(const std::map<std::string, torch::Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata);

/// Parses the bytes of a safetensors file; `source` names it in errors (usually its path).
SafetensorsContent decode_safetensors(std::string_view bytes, const std::string& source);

} // namespace accelerate::detail
