// The safetensors format for tensors: encoding and decoding tensor maps over the torch-free format
// (weights/safetensors_format.h), and the public save/load of such files.
#include "checkpoint/safetensors.h"

#include "common/durable_file.h"
#include "weights/safetensors_format.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace accelerate {
namespace detail {
namespace {

struct DtypeName {
  c10::ScalarType type;
  const char* name;
};

/// The dtype names of the safetensors specification that libtorch can hold (weights/safetensors_format.h
/// knows their sizes).
constexpr DtypeName kDtypes[] = {
    {c10::kDouble, "F64"},
    {c10::kFloat, "F32"},
    {c10::kHalf, "F16"},
    {c10::kBFloat16, "BF16"},
    {c10::kFloat8_e4m3fn, "F8_E4M3"},
    {c10::kFloat8_e5m2, "F8_E5M2"},
    {c10::kLong, "I64"},
    {c10::kInt, "I32"},
    {c10::kShort, "I16"},
    {c10::kChar, "I8"},
    {c10::kByte, "U8"},
    {c10::kUInt16, "U16"},
    {c10::kUInt32, "U32"},
    {c10::kUInt64, "U64"},
    {c10::kBool, "BOOL"},
};

std::optional<c10::ScalarType> type_of(const std::string& name) {
  for (const auto& dtype : kDtypes) {
    if (name == dtype.name) {
      return dtype.type;
    }
  }
  return std::nullopt;
}

} // namespace

std::string safetensors_dtype(c10::ScalarType type, const std::string& tensor) {
  for (const auto& dtype : kDtypes) {
    if (dtype.type == type) {
      return dtype.name;
    }
  }
  throw std::invalid_argument(
      "accelerate::save_safetensors: tensor '" + tensor + "' has dtype " + std::string(c10::toString(type)) +
      ", which safetensors cannot store; convert it to one of " + weights::known_dtypes());
}

torch::Tensor weight_values(const torch::Tensor& tensor, const std::string& name) {
  if (!tensor.defined()) {
    throw std::invalid_argument("accelerate::save_safetensors: tensor '" + name +
                                "' is undefined; leave it out of the map or give it a value");
  }
  safetensors_dtype(tensor.scalar_type(), name);
  return tensor.detach().to(torch::kCPU).contiguous();
}

std::string_view bytes_of(const torch::Tensor& values) {
  return {static_cast<const char*>(values.data_ptr()), values.nbytes()};
}

std::string encode_safetensors(const std::map<std::string, torch::Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> values; // contiguous, on the CPU, alive while encoded
  std::vector<weights::TensorBytes> entries;
  values.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    values.push_back(weight_values(tensor, name));
    entries.push_back({name, safetensors_dtype(tensor.scalar_type(), name), values.back().sizes().vec(),
                       bytes_of(values.back())});
  }
  return weights::encode(std::move(entries), metadata);
}

SafetensorsContent decode_safetensors(std::string_view bytes, const std::string& source) {
  const weights::Header header = weights::parse_header(bytes, bytes.size(), source);
  SafetensorsContent content;
  content.metadata = header.metadata;
  for (const auto& entry : header.tensors) {
    const auto type = type_of(entry.dtype);
    if (!type) {
      throw std::runtime_error(
          "accelerate: '" + source + "': tensor '" + entry.name + "' has dtype " + entry.dtype +
          ", which this reader does not support (supported: " + weights::known_dtypes() + ")");
    }
    auto tensor = torch::empty(entry.shape, torch::TensorOptions(*type));
    if (entry.end > entry.begin) {
      std::memcpy(tensor.data_ptr(), bytes.data() + header.data_start + entry.begin, entry.end - entry.begin);
    }
    content.tensors.emplace(entry.name, std::move(tensor));
  }
  return content;
}

} // namespace detail

void save_safetensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  detail::replace_file_atomically(path, detail::encode_safetensors(tensors, metadata));
}

SafetensorsContent load_safetensors(const std::string& path) {
  std::string bytes;
  try {
    bytes = detail::read_whole_file(path);
  } catch (const detail::FileError& error) {
    throw std::runtime_error(std::string("accelerate::load_safetensors: ") + error.what());
  }
  return detail::decode_safetensors(bytes, path);
}

} // namespace accelerate
