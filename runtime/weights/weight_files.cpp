// Full model weights in one file or in shards with an index (weight_files.h).
#include "weights/weight_files.h"

#include "common/durable_file.h"
#include "weights/safetensors_format.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <regex>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace accelerate::weights {
namespace {

bool ends_with_upper(const std::string& text, const std::string& suffix) {
  if (text.size() < suffix.size()) {
    return false;
  }
  for (size_t i = 0; i < suffix.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(text[text.size() - suffix.size() + i])) != suffix[i]) {
      return false;
    }
  }
  return true;
}

/// A shard's name, as transformers numbers them: model-00001-of-00003.safetensors.
std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

bool is_shard_name(const std::string& name) {
  static const std::regex pattern("model-[0-9]{5}-of-[0-9]{5}\\.safetensors");
  return std::regex_match(name, pattern);
}

} // namespace

uint64_t parse_size(const std::string& text, const std::string& what) {
  const std::string fix =
      what + " is '" + text +
      "': give a number of bytes, or a size with a unit, as Accelerate reads it (\"10GB\", "
      "\"500MB\", \"2GiB\")";
  struct Unit {
    const char* suffix;
    double factor;
    bool bits_when_lower_b;
  };
  static const Unit kUnits[] = {
      {"GIB", 1073741824.0, false},
      {"MIB", 1048576.0, false},
      {"KIB", 1024.0, false},
      {"GB", 1e9, true},
      {"MB", 1e6, true},
      {"KB", 1e3, true},
  };
  auto number = [&](const std::string& digits) {
    size_t used = 0;
    double value = 0;
    try {
      value = std::stod(digits, &used);
    } catch (const std::exception&) {
      throw std::invalid_argument(fix);
    }
    if (used != digits.size() || digits.empty() || !(value >= 0) || std::isspace(digits.front()) != 0) {
      throw std::invalid_argument(fix);
    }
    return value;
  };
  for (const auto& unit : kUnits) {
    const std::string suffix = unit.suffix;
    if (ends_with_upper(text, suffix)) {
      auto bytes = static_cast<uint64_t>(number(text.substr(0, text.size() - suffix.size())) * unit.factor);
      if (unit.bits_when_lower_b && text.back() == 'b') {
        bytes /= 8;
      }
      if (bytes == 0) {
        throw std::invalid_argument(fix + "; it must be at least one byte");
      }
      return bytes;
    }
  }
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    const auto bytes = static_cast<uint64_t>(std::stoull(text));
    if (bytes == 0) {
      throw std::invalid_argument(fix + "; it must be at least one byte");
    }
    return bytes;
  }
  throw std::invalid_argument(fix);
}

uint64_t WeightInfo::bytes() const {
  uint64_t count = element_size(dtype);
  for (const int64_t size : shape) {
    count *= static_cast<uint64_t>(size);
  }
  return count;
}

ShardPlan plan_shards(const std::vector<WeightInfo>& tensors, uint64_t max_shard_size) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_size = 0;
  ShardPlan plan;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t size = tensors[i].bytes();
    plan.total_size += size;
    if (size > max_shard_size) {
      shards.push_back({i});
      continue;
    }
    if (current_size + size > max_shard_size && !current.empty()) {
      shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(i);
    current_size += size;
  }
  if (!current.empty() || shards.empty()) {
    shards.push_back(std::move(current));
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    plan.files.emplace_back(shards.size() == 1 ? std::string(kSingleFile) : shard_name(i, shards.size()),
                            std::move(shards[i]));
  }
  return plan;
}

ShardPlan write_weight_files(const std::string& directory, const std::vector<WeightInfo>& tensors,
                             uint64_t max_shard_size, const std::function<std::string(size_t)>& bytes_of,
                             const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const auto& tensor : tensors) {
    if (!names.insert(tensor.name).second) {
      throw std::invalid_argument("accelerate: two tensors are named '" + tensor.name +
                                  "'; weight files hold each name once");
    }
  }
  const ShardPlan plan = plan_shards(tensors, max_shard_size);
  detail::make_directories(directory);
  const std::string stamp = ".tmp-" + std::to_string(::getpid());
  std::vector<std::pair<std::string, std::string>> staged; // temporary path, final path
  auto stage = [&](const std::string& name, std::string_view bytes) {
    const std::string temporary = detail::join_path(directory, "." + name + stamp);
    staged.emplace_back(temporary, detail::join_path(directory, name));
    detail::write_file_durably(temporary, bytes);
  };
  try {
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    for (const auto& [file, indices] : plan.files) {
      std::vector<std::string> bytes;
      bytes.reserve(indices.size());
      std::vector<TensorBytes> entries;
      for (const size_t i : indices) {
        bytes.push_back(bytes_of(i));
      }
      for (size_t k = 0; k < indices.size(); ++k) {
        const auto& tensor = tensors[indices[k]];
        entries.push_back({tensor.name, tensor.dtype, tensor.shape, bytes[k]});
      }
      stage(file, encode(std::move(entries), metadata));
    }
    if (plan.sharded()) {
      // Accelerate's index: json.dumps(index, indent=2, sort_keys=True) + "\n".
      nlohmann::json index;
      index["metadata"]["total_size"] = plan.total_size;
      index["weight_map"] = nlohmann::json::object();
      for (const auto& [file, indices] : plan.files) {
        for (const size_t i : indices) {
          index["weight_map"][tensors[i].name] = file;
        }
      }
      stage(kIndexFile, index.dump(2) + "\n");
    }
  } catch (...) {
    for (const auto& [temporary, final_path] : staged) {
      ::unlink(temporary.c_str());
    }
    throw;
  }
  // In place: the shards, then the index that names them (or the single file); a loader that prefers
  // model.safetensors over an index finds the previous save's file until the new index is in place.
  for (const auto& [temporary, final_path] : staged) {
    detail::rename_path(temporary, final_path);
  }
  detail::sync_directory(directory);
  std::set<std::string> written;
  for (const auto& [file, indices] : plan.files) {
    written.insert(file);
  }
  for (const auto& name : detail::list_directory(directory)) {
    const bool stale_shard = is_shard_name(name) && written.count(name) == 0;
    const bool stale_single = plan.sharded() && name == kSingleFile;
    const bool stale_index = !plan.sharded() && name == kIndexFile;
    if (stale_shard || stale_single || stale_index) {
      ::unlink(detail::join_path(directory, name).c_str());
    }
  }
  detail::sync_directory(directory);
  return plan;
}

} // namespace accelerate::weights
