// Reading and writing safetensors files (the Hugging Face weight format) from C++: libtorch has none.
#pragma once

#include <map>
#include <string>

#include <torch/types.h>

namespace accelerate {

/// The content of a safetensors file: tensors by name (on the CPU), and the free-form string metadata of
/// its `__metadata__` header entry.
struct SafetensorsContent {
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Writes `tensors` to `path` in the safetensors format (an 8-byte little-endian header length, a JSON
/// header, then the raw little-endian bytes of each tensor), readable by Python's
/// `safetensors.torch.load_file`. Tensors may live on any device and need not be contiguous; tensors
/// sharing memory (tied weights) are written once per name. Supported dtypes: float64/32/16, bfloat16,
/// float8 e4m3fn/e5m2, int64/32/16/8, uint8/16/32/64 and bool. The file is written to a temporary name,
/// fsync'd and renamed, so `path` never holds a half-written file. Throws `std::invalid_argument` naming the
/// tensor on an unsupported dtype, and `std::runtime_error` naming the path and the reason (e.g. a full
/// disk) when writing fails.
///
/// ```
/// accelerate::save_safetensors({{"weight", linear->weight}, {"bias", linear->bias}}, "linear.safetensors",
///                              {{"format", "pt"}});
/// ```
void save_safetensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file written by `save_safetensors`, Python's `safetensors`, or any other writer.
/// Throws `std::runtime_error` naming the file and what is wrong with it (missing, truncated, a corrupt
/// header, offsets that do not match the dtype and shape, an unknown dtype).
///
/// ```
/// auto content = accelerate::load_safetensors("model.safetensors");
/// torch::Tensor weight = content.tensors.at("fc1.weight");
/// ```
SafetensorsContent load_safetensors(const std::string& path);

} // namespace accelerate
