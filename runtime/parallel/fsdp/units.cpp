// Which modules are units: the registry of the module types whose forward calls unit(), fsdp_auto_wrap_policy
// (WrapPolicy), and shard_model, which makes a model's units and moves their parameters into flat buffers.
#include "parallel/fsdp/internal.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <typeindex>
#include <unordered_map>
#include <unordered_set>

#include <c10/util/Type.h>
#include <torch/csrc/autograd/variable.h>

namespace accelerate::fsdp::detail {
namespace {

struct UnitTypes {
  std::mutex mutex;
  std::set<std::type_index> types;
};

UnitTypes& unit_types() {
  static UnitTypes instance;
  return instance;
}

} // namespace

bool register_unit_type(const std::type_info& type) {
  auto& types = unit_types();
  std::lock_guard<std::mutex> lock(types.mutex);
  types.types.insert(std::type_index(type));
  return true;
}

bool is_unit_type(const std::type_info& type) {
  auto& types = unit_types();
  std::lock_guard<std::mutex> lock(types.mutex);
  return types.types.count(std::type_index(type)) != 0;
}

} // namespace accelerate::fsdp::detail

namespace accelerate::detail::fsdp_internal {
namespace {

/// The class name of `module`'s dynamic type, qualified, template arguments left out.
std::string class_name(const torch::nn::Module& module) {
  const std::string demangled = c10::demangle(typeid(module).name());
  std::string name;
  int depth = 0;
  for (char c : demangled) {
    if (c == '<') {
      ++depth;
    } else if (c == '>') {
      --depth;
    } else if (depth == 0) {
      name += c;
    }
  }
  return name;
}

/// The last `::` component of a qualified class name.
std::string unqualified(const std::string& name) {
  const auto colons = name.rfind("::");
  return colons == std::string::npos ? name : name.substr(colons + 2);
}

/// Whether `listed` (a name of fsdp_transformer_layer_cls_to_wrap) names class `qualified`: an unqualified
/// name is the class's last component, or that without "Impl" (TORCH_MODULE's holder `Block` names
/// `BlockImpl`); a qualified one is the class's name or its last components, with or without "Impl".
bool names_class(const std::string& listed, const std::string& qualified) {
  auto ends_with = [](const std::string& text, const std::string& end) {
    return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
  };
  for (const std::string& name : {listed, listed + "Impl"}) {
    if (name.find("::") == std::string::npos ? unqualified(qualified) == name
                                             : qualified == name || ends_with(qualified, "::" + name)) {
      return true;
    }
  }
  return false;
}

} // namespace

WrapPolicy WrapPolicy::of(const ResolvedConfig& config) {
  WrapPolicy wrap;
  wrap.policy = config.fsdp_auto_wrap_policy;
  wrap.min_num_params = config.fsdp_min_num_params;
  std::stringstream list(config.fsdp_transformer_layer_cls_to_wrap);
  for (std::string item; std::getline(list, item, ',');) {
    const auto first = item.find_first_not_of(" \t");
    if (first != std::string::npos) {
      wrap.classes.push_back(item.substr(first, item.find_last_not_of(" \t") - first + 1));
    }
  }
  return wrap;
}

std::vector<bool> WrapPolicy::choose(const std::vector<ModuleEntry>& modules, bool warn) const {
  std::vector<bool> unit(modules.size(), false);
  unit[0] = modules[0].candidate;
  if (policy == "TRANSFORMER_BASED_WRAP") {
    choose_by_class(modules, unit, warn);
  } else if (policy == "SIZE_BASED_WRAP") {
    choose_by_size(modules, unit);
  } else {
    for (size_t i = 1; i < modules.size(); ++i) {
      unit[i] = modules[i].candidate;
    }
  }
  return unit;
}

void WrapPolicy::choose_by_class(const std::vector<ModuleEntry>& modules, std::vector<bool>& unit,
                                 bool warn) const {
  std::vector<bool> found(classes.size(), false);
  std::vector<std::string> fallbacks;
  size_t fallen = 0; // listed modules that are not candidates
  for (size_t i = 0; i < modules.size(); ++i) {
    const std::string qualified = class_name(*modules[i].module);
    bool listed = false;
    for (size_t c = 0; c < classes.size(); ++c) {
      if (names_class(classes[c], qualified)) {
        found[c] = true;
        listed = true;
      }
    }
    if (!listed) {
      continue;
    }
    // A class whose forward does not call unit() (libtorch's own, say) cannot be a unit: its nearest
    // enclosing candidate is, or the root.
    int chosen = static_cast<int>(i);
    while (chosen > 0 && !modules[chosen].candidate) {
      chosen = modules[chosen].parent;
    }
    unit[chosen] = modules[chosen].candidate;
    if (chosen != static_cast<int>(i) && ++fallen <= 10) {
      const auto& into = modules[chosen];
      fallbacks.push_back("'" + modules[i].name + "' (" + qualified + ") is sharded with " +
                          (into.candidate ? "the enclosing unit '" +
                                                (into.name.empty() ? std::string("(root)") : into.name) +
                                                "' (" + class_name(*into.module) + ")"
                                          : std::string("the root's resident parameters (always gathered)")));
    }
  }
  if (fallen > 10) {
    fallbacks.push_back("... and " + std::to_string(fallen - 10) + " more");
  }
  std::vector<std::string> missing;
  for (size_t c = 0; c < classes.size(); ++c) {
    if (!found[c]) {
      missing.push_back(classes[c]);
    }
  }
  if (!missing.empty()) {
    std::vector<std::string> present;
    for (const auto& entry : modules) {
      const std::string name = unqualified(class_name(*entry.module));
      if (std::find(present.begin(), present.end(), name) == present.end()) {
        present.push_back(name);
      }
    }
    throw std::invalid_argument("accelerate: fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP: "
                                "fsdp_transformer_layer_cls_to_wrap lists " +
                                join(missing) + ", but no module of the model is of " +
                                (missing.size() == 1 ? "that class" : "those classes") +
                                " (as Accelerate's \"Could not find the transformer layer class\"). The "
                                "model's module classes are " +
                                join(present) +
                                ": list classes from these (`Block` also names a TORCH_MODULE's "
                                "`BlockImpl`; `ns::Block` a qualified "
                                "one), or use SIZE_BASED_WRAP or NO_WRAP");
  }
  if (warn && !fallbacks.empty()) {
    std::string lines;
    for (const auto& line : fallbacks) {
      lines += "\n  " + line;
    }
    TORCH_WARN(
        "accelerate: fsdp_transformer_layer_cls_to_wrap lists classes whose forward does not call "
        "accelerate::fsdp::unit, so their modules cannot be units of their own:",
        lines,
        "\nTo make them units, list a class of yours that holds them and calls unit() in its forward.");
  }
}

void WrapPolicy::choose_by_size(const std::vector<ModuleEntry>& modules, std::vector<bool>& unit) const {
  std::vector<int64_t> count(modules.size(), 0);
  std::unordered_set<c10::TensorImpl*> seen;
  for (size_t i = 0; i < modules.size(); ++i) {
    for (const auto& parameter : modules[i].module->parameters(/*recurse=*/false)) {
      if (parameter.requires_grad() && seen.insert(parameter.unsafeGetTensorImpl()).second) {
        count[i] += parameter.numel();
      }
    }
  }
  for (size_t i = modules.size(); i-- > 1;) { // pre-order reversed: children before their parent
    if (modules[i].candidate && count[i] >= min_num_params) {
      unit[i] = true;
    } else {
      count[modules[i].parent] += count[i];
    }
  }
}

std::string WrapPolicy::join(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) {
    text += (text.empty() ? "" : ", ") + name;
  }
  return text;
}

std::shared_ptr<Sharded> shard_model(torch::nn::Module& model,
                                     const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                     bool reshard_after_forward, bool offload, const WrapPolicy& policy,
                                     bool warn) {
  std::vector<ModuleEntry> entries{{&model, "", -1, fsdp::detail::is_unit_type(typeid(model))}};
  {
    std::map<std::string, int> index_of{{"", 0}};
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
      const std::string& name = item.key();
      const auto dot = name.find_last_of('.');
      const auto parent = index_of.find(dot == std::string::npos ? "" : name.substr(0, dot));
      index_of[name] = static_cast<int>(entries.size());
      entries.push_back({item.value().get(), name, parent == index_of.end() ? 0 : parent->second,
                         fsdp::detail::is_unit_type(typeid(*item.value()))});
    }
  }
  const std::vector<bool> chosen = policy.choose(entries, warn);
  struct Candidate {
    torch::nn::Module* module;
    int parent; // the unit above it; -1 for the root
    int depth;
    std::string name;
  };
  // Candidate 0 is the root: a unit when its type calls unit(), else the resident unit.
  std::vector<Candidate> candidates{{&model, -1, 0, ""}};
  const bool root_is_unit = chosen[0];
  std::vector<int> owner_of(entries.size(), 0);
  std::vector<std::pair<torch::nn::Module*, int>> modules{{&model, 0}};
  for (size_t i = 1; i < entries.size(); ++i) {
    const int parent_owner = owner_of[entries[i].parent];
    int owner = parent_owner;
    if (chosen[i]) {
      owner = static_cast<int>(candidates.size());
      candidates.push_back(
          {entries[i].module, parent_owner, candidates[parent_owner].depth + 1, entries[i].name});
    }
    owner_of[i] = owner;
    modules.emplace_back(entries[i].module, owner);
  }
  auto common = [&](int a, int b) {
    while (a != b) {
      if (candidates[a].depth >= candidates[b].depth) {
        a = candidates[a].parent;
      } else {
        b = candidates[b].parent;
      }
    }
    return a;
  };
  // Each trainable parameter, once, with its owning candidate (tied: the nearest common one).
  std::vector<torch::Tensor> parameters;
  std::vector<int> owners;
  std::unordered_map<c10::TensorImpl*, size_t> seen;
  for (size_t m = 0; m < modules.size(); ++m) {
    const auto& [module, owner] = modules[m];
    for (const auto& item : module->named_parameters(/*recurse=*/false)) {
      const auto& parameter = item.value();
      if (!parameter.requires_grad()) {
        continue;
      }
      auto* impl = parameter.unsafeGetTensorImpl();
      if (auto found = seen.find(impl); found != seen.end()) {
        owners[found->second] = common(owners[found->second], owner);
        continue;
      }
      seen.emplace(impl, parameters.size());
      parameters.push_back(parameter);
      owners.push_back(owner);
    }
  }
  auto sharded = std::make_shared<Sharded>();
  sharded->self = sharded;
  sharded->process_group = group;
  sharded->rank = group->getRank();
  sharded->world = group->getSize();
  sharded->reshard_after_forward = reshard_after_forward;
  sharded->offload = offload;
  std::vector<int> unit_of_candidate(candidates.size(), -1);
  torch::NoGradGuard no_grad;
  for (size_t c = 0; c < candidates.size(); ++c) {
    // This candidate's parameters, grouped by device and dtype in order of first appearance.
    std::vector<std::pair<std::string, std::vector<size_t>>> groups;
    for (size_t p = 0; p < parameters.size(); ++p) {
      if (owners[p] != static_cast<int>(c)) {
        continue;
      }
      const auto& tensor = parameters[p];
      const std::string key = tensor.device().str() + "/" + std::string(c10::toString(tensor.scalar_type()));
      auto found = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
      if (found == groups.end()) {
        groups.emplace_back(key, std::vector<size_t>{});
        found = std::prev(groups.end());
      }
      found->second.push_back(p);
    }
    if (groups.empty()) {
      continue;
    }
    unit_of_candidate[c] = static_cast<int>(sharded->units.size());
    Unit unit;
    unit.owner = sharded.get();
    unit.index = sharded->units.size();
    unit.module = candidates[c].module;
    unit.name = candidates[c].name;
    unit.resident = c == 0 && !root_is_unit;
    for (const auto& [key, indices] : groups) {
      std::vector<torch::Tensor> tensors;
      for (size_t p : indices) {
        tensors.push_back(parameters[p]);
      }
      const FlatPlan plan = plan_flat(tensors, sharded->rank, sharded->world);
      Group flat;
      flat.share = plan.share;
      const auto options = tensors.front().options().requires_grad(false);
      flat.full = empty_from(sharded->pool, plan.share * sharded->world, options,
                             tensors.front().storage().unsafeGetStorageImpl()->allocator())
                      .zero_();
      flat.full_bytes = static_cast<size_t>(flat.full.numel()) * flat.full.element_size();
      for (size_t i = 0; i < tensors.size(); ++i) {
        auto view = flat.full.narrow(0, plan.members[i].offset, plan.members[i].numel);
        view.copy_(tensors[i].detach().reshape(-1));
        tensors[i].set_data(view.view(tensors[i].sizes()));
      }
      const auto mine = flat.full.narrow(0, sharded->rank * plan.share, plan.share);
      flat.shard = offload
                       ? torch::empty({plan.share}, options.device(torch::kCPU).pinned_memory(mine.is_cuda()))
                             .copy_(mine)
                       : mine.clone();
      flat.placeholder = torch::empty({0}, flat.full.options());
      for (size_t i = 0; i < tensors.size(); ++i) {
        Member member;
        member.parameter = tensors[i];
        member.sizes = tensors[i].sizes().vec();
        member.unit = unit.index;
        member.group = unit.groups.size();
        member.place = plan.members[i];
        member.values = flat.shard.narrow(0, plan.members[i].slice_offset, plan.members[i].share_length);
        flat.members.push_back(sharded->members.size());
        sharded->members.push_back(std::move(member));
      }
      unit.trainable += tensors.size();
      unit.groups.push_back(std::move(flat));
    }
    unit.gathered = true;
    sharded->units.push_back(std::move(unit));
    // Released as soon as it is sharded (the resident unit stays gathered), its memory kept for the next
    // unit's buffer: so sharding holds one unit's whole buffer at a time beyond the part of the model not
    // sharded yet. Its parameters' gradient accumulators are made first, while they have their whole shape.
    auto& added = sharded->units.back();
    for (const auto& group : added.groups) {
      for (size_t m : group.members) {
        auto& member = sharded->members[m];
        member.accumulator = torch::autograd::impl::grad_accumulator(member.parameter);
      }
    }
    sharded->reshard(added);
  }
  for (size_t u = sharded->units.size(); u-- > 0;) {
    if (!sharded->units[u].resident) {
      sharded->order.push_back(u);
    }
  }
  for (size_t u = 0; u < sharded->units.size(); ++u) {
    if (sharded->units[u].resident) {
      sharded->order.push_back(u);
    }
  }
  return sharded;
}

} // namespace accelerate::detail::fsdp_internal
