// The optimizer types declared to step each element on its own (accelerate::declare_elementwise_optimizer),
// and one reading of any such type's per-parameter state: the named fields its `serialize` writes. A sharded
// strategy steps shares with these types, and checkpoints narrow, write and assemble their state through the
// fields, whatever the type (runtime/accelerator/optimizer_state.h).
#include <accelerate/optimizer.h>

#include "accelerator/optimizer_state.h"

#include <mutex>
#include <sstream>
#include <stdexcept>
#include <typeindex>
#include <unordered_map>

#include <c10/util/Type.h>

namespace accelerate::detail {
namespace {

template <typename ParamState> ElementwiseKind kind_of(const char* name) {
  return {name, [] { return std::make_unique<ParamState>(); }};
}

struct Registry {
  std::mutex mutex;
  // Nodes keep their address: a prepared optimizer holds a pointer to its kind.
  std::unordered_map<std::type_index, ElementwiseKind> kinds = {
      {typeid(torch::optim::SGD), kind_of<torch::optim::SGDParamState>("torch::optim::SGD")},
      {typeid(torch::optim::Adam), kind_of<torch::optim::AdamParamState>("torch::optim::Adam")},
      {typeid(torch::optim::AdamW), kind_of<torch::optim::AdamWParamState>("torch::optim::AdamW")},
      {typeid(torch::optim::Adagrad), kind_of<torch::optim::AdagradParamState>("torch::optim::Adagrad")},
      {typeid(torch::optim::RMSprop), kind_of<torch::optim::RMSpropParamState>("torch::optim::RMSprop")},
  };
};

Registry& registry() {
  static Registry instance;
  return instance;
}

const ElementwiseKind* find_kind(const std::type_info& type) {
  auto& kinds = registry();
  std::lock_guard<std::mutex> lock(kinds.mutex);
  auto found = kinds.kinds.find(type);
  return found == kinds.kinds.end() ? nullptr : &found->second;
}

/// `archive` read back as an InputArchive (the only way libtorch lists an archive's keys).
torch::serialize::InputArchive reopened(torch::serialize::OutputArchive& archive) {
  std::ostringstream bytes;
  archive.save_to(bytes);
  std::istringstream in(bytes.str());
  torch::serialize::InputArchive input;
  input.load_from(in);
  return input;
}

} // namespace

void declare_elementwise_optimizer(
    const std::type_info& type,
    std::function<std::unique_ptr<torch::optim::OptimizerParamState>()> make_state) {
  auto& kinds = registry();
  std::lock_guard<std::mutex> lock(kinds.mutex);
  kinds.kinds.insert_or_assign(std::type_index(type),
                               ElementwiseKind{c10::demangle(type.name()), std::move(make_state)});
}

const ElementwiseKind* elementwise_kind_of(const torch::optim::Optimizer& optimizer) {
  return find_kind(typeid(optimizer));
}

StateFields state_fields(const torch::optim::OptimizerParamState& state) {
  torch::serialize::OutputArchive archive;
  state.serialize(archive);
  auto input = reopened(archive);
  StateFields fields;
  for (const auto& key : input.keys()) {
    c10::IValue value;
    if (input.try_read(key, value)) {
      fields.emplace_back(key, std::move(value));
    }
  }
  return fields;
}

std::unique_ptr<torch::optim::OptimizerParamState> state_from_fields(const ElementwiseKind& kind,
                                                                     const StateFields& fields) {
  torch::serialize::OutputArchive archive;
  for (const auto& [name, value] : fields) {
    archive.write(name, value);
  }
  auto input = reopened(archive);
  auto state = kind.make_state();
  state->serialize(input);
  return state;
}

int64_t state_step(const StateFields& fields) {
  for (const auto& [name, value] : fields) {
    if (name == "step" && value.isInt()) {
      return value.toInt();
    }
  }
  return 0;
}

} // namespace accelerate::detail
