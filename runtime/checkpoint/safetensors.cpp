// The safetensors format: encoding and decoding tensor maps, and the public save/load of such files.
#include "checkpoint/safetensors.h"

#include "common/durable_file.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian bytes; this writer copies tensor memory as it is");

namespace accelerate {
namespace detail {
namespace {

struct DtypeName {
  c10::ScalarType type;
  const char* name;
};

/// The dtype names of the safetensors specification that libtorch can hold.
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

std::string supported_names() {
  std::string names;
  for (const auto& dtype : kDtypes) {
    names += (names.empty() ? "" : ", ") + std::string(dtype.name);
  }
  return names;
}

const char* name_of(c10::ScalarType type, const std::string& tensor) {
  for (const auto& dtype : kDtypes) {
    if (dtype.type == type) {
      return dtype.name;
    }
  }
  throw std::invalid_argument("accelerate::save_safetensors: tensor '" + tensor + "' has dtype " +
                              std::string(c10::toString(type)) +
                              ", which safetensors cannot store; convert it to one of " + supported_names());
}

std::optional<c10::ScalarType> type_of(const std::string& name) {
  for (const auto& dtype : kDtypes) {
    if (name == dtype.name) {
      return dtype.type;
    }
  }
  return std::nullopt;
}

[[noreturn]] void corrupt(const std::string& source, const std::string& problem) {
  throw std::runtime_error("accelerate: '" + source + "' is not a valid safetensors file: " + problem +
                           ". The file is truncated or corrupt; write it again, or load an intact copy");
}

uint64_t as_offset(const nlohmann::json& value, const std::string& source, const std::string& what) {
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0)) {
    corrupt(source, what + " is " + value.dump() + ", not a non-negative integer");
  }
  return value.get<uint64_t>();
}

} // namespace

std::string encode_safetensors(const std::map<std::string, torch::Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  struct Entry {
    std::string name;
    torch::Tensor data; // contiguous, on the CPU
    const char* dtype;
  };
  std::vector<Entry> entries;
  entries.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) {
      throw std::invalid_argument("accelerate::save_safetensors: tensor '" + name +
                                  "' is undefined; leave it out of the map or give it a value");
    }
    const char* dtype = name_of(tensor.scalar_type(), name);
    entries.push_back({name, tensor.detach().to(torch::kCPU).contiguous(), dtype});
  }
  // Larger elements first, as the reference writer does: every tensor then starts at a multiple of its
  // element size (the header is padded to 8 bytes), so readers may map the bytes in place.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::make_tuple(-static_cast<int64_t>(a.data.element_size()), a.name) <
           std::make_tuple(-static_cast<int64_t>(b.data.element_size()), b.name);
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
  }
  uint64_t offset = 0;
  for (const auto& entry : entries) {
    const uint64_t bytes = static_cast<uint64_t>(entry.data.numel()) * entry.data.element_size();
    header[entry.name] = {{"dtype", entry.dtype},
                          {"shape", entry.data.sizes().vec()},
                          {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + json.size() + offset);
  const uint64_t length = json.size();
  out.append(reinterpret_cast<const char*>(&length), 8);
  out += json;
  for (const auto& entry : entries) {
    out.append(static_cast<const char*>(entry.data.data_ptr()),
               static_cast<size_t>(entry.data.numel()) * entry.data.element_size());
  }
  return out;
}

SafetensorsContent decode_safetensors(std::string_view bytes, const std::string& source) {
  if (bytes.size() < 8) {
    corrupt(source,
            "it holds " + std::to_string(bytes.size()) + " bytes, fewer than the 8-byte header length");
  }
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  if (header_length > bytes.size() - 8) {
    corrupt(source, "its header length field says " + std::to_string(header_length) + " bytes, but only " +
                        std::to_string(bytes.size() - 8) + " bytes follow it");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, header_length));
  } catch (const nlohmann::json::exception& error) {
    corrupt(source, std::string("its JSON header does not parse (") + error.what() + ")");
  }
  if (!header.is_object()) {
    corrupt(source, "its JSON header is not an object");
  }
  const std::string_view data = bytes.substr(8 + header_length);

  SafetensorsContent content;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> extents;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        corrupt(source, "its __metadata__ entry is not an object of strings");
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          corrupt(source, "__metadata__ value of '" + key + "' is " + value.dump() + ", not a string");
        }
        content.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets") || !entry["dtype"].is_string() || !entry["shape"].is_array() ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      corrupt(source, what + " lacks a string dtype, a shape list or a [begin, end] data_offsets pair");
    }
    const auto dtype_name = entry["dtype"].get<std::string>();
    const auto type = type_of(dtype_name);
    if (!type) {
      throw std::runtime_error("accelerate: '" + source + "': " + what + " has dtype " + dtype_name +
                               ", which this reader does not support (supported: " + supported_names() + ")");
    }
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (const auto& dimension : entry["shape"]) {
      const uint64_t size = as_offset(dimension, source, what + "'s shape entry");
      if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (size != 0 && numel > std::numeric_limits<uint64_t>::max() / size)) {
        corrupt(source, what + "'s shape " + entry["shape"].dump() + " is too large");
      }
      numel *= size;
      shape.push_back(static_cast<int64_t>(size));
    }
    const uint64_t begin = as_offset(entry["data_offsets"][0], source, what + "'s first data offset");
    const uint64_t end = as_offset(entry["data_offsets"][1], source, what + "'s second data offset");
    const uint64_t element = c10::elementSize(*type);
    if (end < begin || end - begin != numel * element) {
      corrupt(source, what + " (" + dtype_name + " " + entry["shape"].dump() + ") needs " +
                          std::to_string(numel * element) + " bytes, but its data_offsets [" +
                          std::to_string(begin) + ", " + std::to_string(end) + ") span " +
                          std::to_string(end >= begin ? end - begin : 0));
    }
    if (end > data.size()) {
      corrupt(source, what + " needs bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
                          ") of the data section, but the file holds only " + std::to_string(data.size()) +
                          " bytes of data");
    }
    auto tensor = torch::empty(shape, torch::TensorOptions(*type));
    if (end > begin) {
      std::memcpy(tensor.data_ptr(), data.data() + begin, end - begin);
    }
    content.tensors.emplace(name, std::move(tensor));
    extents.emplace_back(begin, end, name);
  }
  // The tensors must tile the data section exactly, as the specification requires: a gap or an overlap
  // means the header and the data disagree.
  std::sort(extents.begin(), extents.end());
  uint64_t covered = 0;
  for (const auto& [begin, end, name] : extents) {
    if (begin != covered) {
      corrupt(source, "tensor '" + name + "' starts at data byte " + std::to_string(begin) +
                          ", but the tensors " + "before it end at " + std::to_string(covered) +
                          " (a gap or an overlap)");
    }
    covered = end;
  }
  if (covered != data.size()) {
    corrupt(source, "its tensors cover " + std::to_string(covered) + " bytes of data, but " +
                        std::to_string(data.size()) + " bytes follow the header");
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
