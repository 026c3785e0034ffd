// The safetensors format without torch (safetensors_format.h).
#include "weights/safetensors_format.h"

#include "common/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <tuple>

#include <nlohmann/json.hpp>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian bytes; this library copies them as they are");

namespace accelerate::weights {
namespace {

struct Dtype {
  const char* name;
  uint64_t size;
};

/// The dtypes of the safetensors specification that libtorch can hold.
constexpr Dtype kDtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I64", 8},  {"I32", 4},
    {"I16", 2}, {"I8", 1},  {"U8", 1},  {"U16", 2},  {"U32", 4},     {"U64", 8},     {"BOOL", 1},
};

uint64_t as_offset(const nlohmann::json& value, const std::string& source, const std::string& what) {
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0)) {
    corrupt(source, what + " is " + value.dump() + ", not a non-negative integer");
  }
  return value.get<uint64_t>();
}

uint64_t read_length(std::string_view bytes, const std::string& source) {
  if (bytes.size() < 8) {
    corrupt(source,
            "it holds " + std::to_string(bytes.size()) + " bytes, fewer than the 8-byte header length");
  }
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  return length;
}

} // namespace

int64_t TensorEntry::elements() const {
  int64_t count = 1;
  for (const int64_t size : shape) {
    count *= size;
  }
  return count;
}

const TensorEntry* Header::find(const std::string& name) const {
  for (const auto& entry : tensors) {
    if (entry.name == name) {
      return &entry;
    }
  }
  return nullptr;
}

uint64_t element_size(const std::string& dtype) {
  for (const auto& known : kDtypes) {
    if (dtype == known.name) {
      return known.size;
    }
  }
  return 0;
}

std::string known_dtypes() {
  std::string names;
  for (const auto& dtype : kDtypes) {
    names += (names.empty() ? "" : ", ") + std::string(dtype.name);
  }
  return names;
}

void corrupt(const std::string& source, const std::string& problem) {
  throw std::runtime_error("accelerate: '" + source + "' is not a valid safetensors file: " + problem +
                           ". The file is truncated or corrupt; write it again, or load an intact copy");
}

Header parse_header(std::string_view bytes, uint64_t file_size, const std::string& source) {
  const uint64_t header_length = read_length(bytes, source);
  if (header_length > file_size - 8) {
    corrupt(source, "its header length field says " + std::to_string(header_length) + " bytes, but only " +
                        std::to_string(file_size - 8) + " bytes follow it");
  }
  if (header_length > bytes.size() - 8) {
    throw std::logic_error("accelerate: parse_header: given fewer bytes than the header of '" + source + "'");
  }
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(bytes.substr(8, header_length));
  } catch (const nlohmann::json::exception& error) {
    corrupt(source, std::string("its JSON header does not parse (") + error.what() + ")");
  }
  if (!json.is_object()) {
    corrupt(source, "its JSON header is not an object");
  }
  Header header;
  header.data_start = 8 + header_length;
  const uint64_t data_size = file_size - header.data_start;
  for (const auto& [name, entry] : json.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        corrupt(source, "its __metadata__ entry is not an object of strings");
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          corrupt(source, "__metadata__ value of '" + key + "' is " + value.dump() + ", not a string");
        }
        header.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets") || !entry["dtype"].is_string() || !entry["shape"].is_array() ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      corrupt(source, what + " lacks a string dtype, a shape list or a [begin, end] data_offsets pair");
    }
    TensorEntry tensor;
    tensor.name = name;
    tensor.dtype = entry["dtype"].get<std::string>();
    uint64_t numel = 1;
    for (const auto& dimension : entry["shape"]) {
      const uint64_t size = as_offset(dimension, source, what + "'s shape entry");
      if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (size != 0 && numel > std::numeric_limits<uint64_t>::max() / size)) {
        corrupt(source, what + "'s shape " + entry["shape"].dump() + " is too large");
      }
      numel *= size;
      tensor.shape.push_back(static_cast<int64_t>(size));
    }
    tensor.begin = as_offset(entry["data_offsets"][0], source, what + "'s first data offset");
    tensor.end = as_offset(entry["data_offsets"][1], source, what + "'s second data offset");
    const uint64_t element = element_size(tensor.dtype);
    if (tensor.end < tensor.begin || (element != 0 && tensor.end - tensor.begin != numel * element)) {
      corrupt(source, what + " (" + tensor.dtype + " " + entry["shape"].dump() + ") needs " +
                          std::to_string(numel * element) + " bytes, but its data_offsets [" +
                          std::to_string(tensor.begin) + ", " + std::to_string(tensor.end) + ") span " +
                          std::to_string(tensor.end >= tensor.begin ? tensor.end - tensor.begin : 0));
    }
    if (tensor.end > data_size) {
      corrupt(source, what + " needs bytes [" + std::to_string(tensor.begin) + ", " +
                          std::to_string(tensor.end) + ") of the data section, but the file holds only " +
                          std::to_string(data_size) + " bytes of data");
    }
    header.tensors.push_back(std::move(tensor));
  }
  // The tensors must tile the data section exactly, as the specification requires: a gap or an overlap
  // means the header and the data disagree.
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> extents;
  for (const auto& tensor : header.tensors) {
    extents.emplace_back(tensor.begin, tensor.end, tensor.name);
  }
  std::sort(extents.begin(), extents.end());
  uint64_t covered = 0;
  for (const auto& [begin, end, name] : extents) {
    if (begin != covered) {
      corrupt(source, "tensor '" + name + "' starts at data byte " + std::to_string(begin) +
                          ", but the tensors before it end at " + std::to_string(covered) +
                          " (a gap or an overlap)");
    }
    covered = end;
  }
  if (covered != data_size) {
    corrupt(source, "its tensors cover " + std::to_string(covered) + " bytes of data, but " +
                        std::to_string(data_size) + " bytes follow the header");
  }
  return header;
}

namespace {

std::string read_at(int fd, uint64_t offset, uint64_t length, const std::string& path) {
  std::string bytes(length, '\0');
  uint64_t done = 0;
  while (done < length) {
    const ssize_t got = ::pread(fd, bytes.data() + done, length - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      throw detail::file_error("reading", path, errno);
    }
    if (got == 0) {
      corrupt(path, "it ended while being read (was it truncated meanwhile?)");
    }
    done += static_cast<uint64_t>(got);
  }
  return bytes;
}

} // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    throw std::runtime_error(std::string("accelerate: ") + detail::file_error("opening", path, errno).what());
  }
  try {
    struct stat info{};
    if (::fstat(fd_, &info) != 0) {
      throw detail::file_error("reading", path, errno);
    }
    const auto size = static_cast<uint64_t>(info.st_size);
    const std::string length_bytes = read_at(fd_, 0, std::min<uint64_t>(size, 8), path);
    const uint64_t length = read_length(length_bytes, path);
    if (length > size - 8) {
      corrupt(path, "its header length field says " + std::to_string(length) + " bytes, but only " +
                        std::to_string(size - 8) + " bytes follow it");
    }
    header_ = parse_header(length_bytes + read_at(fd_, 8, length, path), size, path);
  } catch (const detail::FileError& error) {
    ::close(fd_);
    throw std::runtime_error(std::string("accelerate: ") + error.what());
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  ::close(fd_);
}

std::string SafetensorsFile::read(const TensorEntry& entry) const {
  try {
    return read_at(fd_, header_.data_start + entry.begin, entry.end - entry.begin, path_);
  } catch (const detail::FileError& error) {
    throw std::runtime_error(std::string("accelerate: ") + error.what());
  }
}

Header read_header(const std::string& path) {
  return SafetensorsFile(path).header();
}

std::string encode(std::vector<TensorBytes> tensors, const std::map<std::string, std::string>& metadata) {
  for (const auto& tensor : tensors) {
    const uint64_t element = element_size(tensor.dtype);
    if (element == 0) {
      throw std::invalid_argument("accelerate: tensor '" + tensor.name + "' has dtype " + tensor.dtype +
                                  ", which safetensors cannot store; convert it to one of " + known_dtypes());
    }
    uint64_t numel = 1;
    for (const int64_t size : tensor.shape) {
      numel *= static_cast<uint64_t>(size);
    }
    if (numel * element != tensor.bytes.size()) {
      throw std::invalid_argument("accelerate: tensor '" + tensor.name + "' has " +
                                  std::to_string(tensor.bytes.size()) +
                                  " bytes, but its dtype and shape take " + std::to_string(numel * element));
    }
  }
  // Larger elements first, as the reference writer does: every tensor then starts at a multiple of its
  // element size (the header is padded to 8 bytes), so readers may map the bytes in place.
  std::stable_sort(tensors.begin(), tensors.end(), [](const TensorBytes& a, const TensorBytes& b) {
    return std::make_tuple(-static_cast<int64_t>(element_size(a.dtype)), a.name) <
           std::make_tuple(-static_cast<int64_t>(element_size(b.dtype)), b.name);
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
  }
  uint64_t offset = 0;
  for (const auto& tensor : tensors) {
    header[tensor.name] = {{"dtype", tensor.dtype},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + json.size() + offset);
  const uint64_t length = json.size();
  out.append(reinterpret_cast<const char*>(&length), 8);
  out += json;
  for (const auto& tensor : tensors) {
    out.append(tensor.bytes.data(), tensor.bytes.size());
  }
  return out;
}

} // namespace accelerate::weights
