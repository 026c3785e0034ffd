// Named tensors in a file both the C++ and the Python benchmark programs read (bench/compare.py writes them):
// the initial weights and the data of a reference workload.
//
//   line 1:       ABT1 <count>
//   count lines:  <name> <f32|i64> <ndim> <dim>...
//   then the tensors' bytes, little-endian and contiguous, in the order of the lines.
#pragma once

#include <torch/torch.h>

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

namespace accelerate::bench {

inline std::map<std::string, torch::Tensor> read_tensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot open '" + path +
                             "': write the inputs with `bench/compare.py inputs DIR`");
  }
  std::string magic;
  int64_t count = 0;
  in >> magic >> count;
  if (magic != "ABT1" || count < 0) {
    throw std::runtime_error("'" + path + "' is not a benchmark tensor file (no 'ABT1' header)");
  }
  struct Entry {
    std::string name;
    torch::ScalarType type;
    std::vector<int64_t> shape;
  };
  std::vector<Entry> entries;
  for (int64_t i = 0; i < count; ++i) {
    Entry entry;
    std::string type;
    int64_t ndim = 0;
    in >> entry.name >> type >> ndim;
    if (!in || (type != "f32" && type != "i64") || ndim < 0) {
      throw std::runtime_error("'" + path + "': malformed header line " + std::to_string(i + 2));
    }
    entry.type = type == "f32" ? torch::kFloat32 : torch::kInt64;
    entry.shape.resize(ndim);
    for (auto& dim : entry.shape) {
      in >> dim;
    }
    entries.push_back(entry);
  }
  in.get(); // the newline ending the header
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& entry : entries) {
    auto tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.type));
    in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(tensor.nbytes()));
    if (!in) {
      throw std::runtime_error("'" + path + "' ends inside tensor '" + entry.name + "'");
    }
    tensors.emplace(entry.name, tensor);
  }
  return tensors;
}

/// Copies every parameter of `module` from the file; a missing, extra or misshapen tensor is an error.
inline void load_parameters(torch::nn::Module& module, const std::string& path) {
  auto tensors = read_tensors(path);
  torch::NoGradGuard no_grad;
  auto parameters = module.named_parameters(/*recurse=*/true);
  for (const auto& item : parameters) {
    auto found = tensors.find(item.key());
    if (found == tensors.end()) {
      throw std::runtime_error("'" + path + "' has no tensor '" + item.key() + "'");
    }
    if (found->second.sizes() != item.value().sizes()) {
      std::ostringstream message;
      message << "'" << path << "': '" << item.key() << "' is " << found->second.sizes()
              << ", the model's is " << item.value().sizes();
      throw std::runtime_error(message.str());
    }
    item.value().copy_(found->second);
  }
  if (tensors.size() != parameters.size()) {
    throw std::runtime_error("'" + path + "' holds " + std::to_string(tensors.size()) +
                             " tensors, the model has " + std::to_string(parameters.size()) + " parameters");
  }
}

} // namespace accelerate::bench
