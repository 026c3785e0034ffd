// The "fsdp" strategy's engine (FsdpEngine, made by make_fsdp_engine): prepares models as units, runs their
// forwards as the UnitHost, and faces the optimizer with this process's shares. internal.h says how it works.
#include "parallel/fsdp/internal.h"

#include <accelerate/logging.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <sstream>
#include <stdexcept>
#include <typeindex>

#include <c10/util/Type.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

namespace accelerate::detail::fsdp_internal {
namespace {

std::string type_name(const std::type_info& type) {
  return c10::demangle(type.name());
}

} // namespace

FsdpEngine::FsdpEngine(const ParallelContext& context)
    : ShardedEngine(with_group_of_one(context)), replicated_(make_ddp_engine(context)),
      sharding_(context.config.fsdp_sharding_strategy), hybrid_(sharding_.rfind("HYBRID_SHARD", 0) == 0),
      activation_checkpointing_(context.config.fsdp_activation_checkpointing ||
                                context.config.activation_checkpointing) {
  if (sharding_ != "FULL_SHARD" && sharding_ != "SHARD_GRAD_OP" && sharding_ != "NO_SHARD" &&
      sharding_ != "HYBRID_SHARD" && sharding_ != "HYBRID_SHARD_ZERO2") {
    throw std::invalid_argument(
        "accelerate: parallel_strategy 'fsdp' takes fsdp_sharding_strategy FULL_SHARD, "
        "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2, not '" +
        sharding_ + "'");
  }
  if (hybrid_ && context.machine_groups) {
    // Shards within each machine, replicas across machines (refused on one machine).
    machines_ = context.machine_groups("fsdp_sharding_strategy " + sharding_);
  }
  if (context.config.find_unused_parameters && sharding_ != "NO_SHARD") {
    throw std::invalid_argument(
        "accelerate: find_unused_parameters under parallel_strategy 'fsdp' is not available in this "
        "version "
        "of the runtime: a parameter no process reached takes part with a zero gradient. Leave "
        "find_unused_parameters off (or use parallel_strategy 'ddp' or 'zero')");
  }
  // On the CPU both offloads are no-ops, said once (see takes_offload_path).
  const bool offload_path = takes_offload_path(context);
  offload_params_ = context.config.fsdp_offload_params && offload_path;
  offload_inputs_ = context.config.fsdp_activation_checkpointing_offload && offload_path;
  for (const auto& [asked, name, what] :
       {std::tuple{context.config.fsdp_offload_params, "fsdp_offload_params",
                   "the shards and the optimizer step"},
        std::tuple{context.config.fsdp_activation_checkpointing_offload,
                   "fsdp_activation_checkpointing_offload", "the inputs checkpointed units keep"}}) {
    if (asked && !offload_path) {
      accelerate::get_logger("accelerate.fsdp")
          .info(name, ": the run is on the CPU, where ", what, " already live; there is nothing to offload");
    }
  }
  if (offload_params_ && sharding_ == "NO_SHARD") {
    accelerate::get_logger("accelerate.fsdp")
        .warning(
            "fsdp_offload_params: NO_SHARD shards nothing, so the parameters and the optimizer step stay "
            "on ",
            context.device.str(),
            ": nothing is offloaded (offload applies to the shards of FULL_SHARD, SHARD_GRAD_OP and the "
            "hybrid strategies)");
    offload_params_ = false;
  }
  // The job's group, or the group of one that offload on one process works over.
  if (ParallelEngine::context().process_group && sharding_ != "NO_SHARD") {
    // From now on a unit's forward is this engine's (the previous one's again when this one goes).
    previous_host_ = accelerate::detail::install_unit_host(this);
  }
}

FsdpEngine::~FsdpEngine() {
  accelerate::detail::remove_unit_host(this, previous_host_);
}

std::shared_ptr<PreparedModel> FsdpEngine::prepare_model(torch::nn::Module& model) {
  const auto& job = context();
  if (!job.process_group || trainable_parameters(model).empty() || sharding_ == "NO_SHARD") {
    return replicated_->prepare_model(model); // nothing to shard: replicated, as DDP
  }
  // In messages of 32 MiB, not DDP's 250 MiB: the model exists whole on every process until it is sharded,
  // and two messages in flight are all the broadcast adds to it (docs/benchmarks.md, setup peak).
  place_and_broadcast(model, size_t{32} << 20);
  // Every process must hold the same model (as under DDP); the message names the mismatch.
  c10d::verify_params_across_processes(job.process_group, trainable_parameters(model), std::nullopt);
  auto sharded =
      shard_model(model, shard_group(), sharding_ == "FULL_SHARD" || sharding_ == "HYBRID_SHARD",
                  offload_params_, WrapPolicy::of(job.config), /*warn=*/job.process_group->getRank() == 0);
  if (machines_) {
    sharded->replicas = machines_->replicas;
  }
  sharded->forward_prefetch = job.config.fsdp_forward_prefetch;
  sharded->backward_prefetch = job.config.fsdp_backward_prefetch;
  sharded->debug = job.config.debug;
  for (const auto& unit : sharded->units) {
    if (!unit.resident && !unit.groups.empty()) {
      sharded->asynchronous = gathers_asynchronously(shard_group(), unit.groups.front().shard);
      break;
    }
  }
  const bool prefetching =
      sharded->asynchronous && (sharded->forward_prefetch || sharded->backward_prefetch != "NO_PREFETCH");
  const size_t in_flight = sharded->reshard_after_forward ? 1 : sharded->units.size();
  sharded->pool.keep(in_flight + (prefetching ? 1 : 0));
  auto prepared = std::make_shared<FsdpModel>(model, sharded, stepped_, job);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& unit : sharded->units) {
    if (!unit.resident) {
      units_[unit.module] = {sharded, unit.index};
    }
  }
  known_modules_.insert(&model);
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    known_modules_.insert(item.value().get());
  }
  for (size_t i = 0; i < sharded->members.size(); ++i) {
    members_[sharded->members[i].parameter.unsafeGetTensorImpl()] = {sharded, i};
  }
  models_.emplace_back(&model, sharded);
  const auto logger = accelerate::get_logger("accelerate.fsdp");
  if (logger.enabled_for(LogLevel::debug)) {
    std::ostringstream units;
    size_t recomputed = 0;
    for (const auto& unit : sharded->units) {
      units << (unit.index ? ", " : "") << (unit.name.empty() ? "(the model)" : unit.name)
            << (unit.resident ? " (resident)" : "");
      recomputed += activation_checkpointing_ && !unit.resident && !unit.name.empty() ? 1 : 0;
    }
    const std::string sharding =
        machines_ ? "; " + sharding_ + ": each unit in " + std::to_string(machines_->machine->getSize()) +
                        " shares within each of " + std::to_string(machines_->machines) +
                        " machines, replicated across them"
                  : std::string();
    logger.debug("prepared a model as ", sharded->units.size(), " unit(s) (fsdp_auto_wrap_policy ",
                 job.config.fsdp_auto_wrap_policy, "): ", units.str(), sharding,
                 "; activation checkpointing: ",
                 activation_checkpointing_
                     ? std::to_string(recomputed) + " unit(s) recompute their forward in backward"
                     : std::string("off"));
  }
  return prepared;
}

// ---- UnitHost
void* FsdpEngine::enter(torch::nn::Module& module, const std::type_info& type) {
  std::shared_ptr<Sharded> sharded;
  size_t index = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = units_.find(&module); found != units_.end()) {
      sharded = found->second.first.lock();
      index = found->second.second;
    }
    if (!sharded) {
      if (known_modules_.count(&module) == 0) {
        // A module outside every prepared model trains nothing here when no gradient can reach a parameter
        // of it (a frozen teacher, a loss module, evaluation under NoGradGuard): a plain call, so that the
        // rewriter's unit call in every module class of a project leaves those alone. Otherwise it is a
        // model that prepare never saw, whose gradients would never be synchronised.
        if (!torch::GradMode::is_enabled()) {
          return nullptr;
        }
        const auto parameters = module.parameters();
        if (std::none_of(parameters.begin(), parameters.end(),
                         [](const torch::Tensor& p) { return p.requires_grad(); })) {
          return nullptr;
        }
        throw std::logic_error("accelerate::fsdp::unit: module '" + module.name() + "' (" + type_name(type) +
                               ") runs as a unit, but it belongs to no model prepared under "
                               "parallel_strategy 'fsdp': pass the "
                               "model that holds it to accelerator.prepare(...) before its first forward");
      }
      // A class that inherits its forward, and the unit call in it, from a base class (`struct GptBlock :
      // BlockImpl {}`): prepare made units of the classes whose own forward calls unit(), so this module is
      // none, and its parameters train in the unit that holds it. Said once per class, in debug logging
      // (checked first: this runs at every call of such a module).
      static const auto logger = accelerate::get_logger("accelerate.fsdp");
      if (logger.enabled_for(LogLevel::debug) && !fsdp::detail::is_unit_type(type)) {
        static std::set<std::type_index> said; // under mutex_
        if (said.insert(std::type_index(type)).second) {
          logger.debug("module '", module.name(), "' is of type ", type_name(type),
                       ", whose forward (and unit() call) is its base class's: it is no unit (its parameters "
                       "train in the unit that holds it); give ",
                       type_name(type), " a forward of its own that calls unit() to make it one");
        }
      }
      return nullptr; // not a unit: a plain call
    }
  }
  auto& unit = sharded->units[index];
  if (unit.depth++ == 0) {
    try {
      sharded->gather(unit);
      if (torch::GradMode::is_enabled() && !accelerate::detail::recomputing) {
        sharded->record(index);
        if (sharded->forward_prefetch) {
          sharded->prefetch(sharded->neighbour(index, +1));
        }
      }
    } catch (...) {
      --unit.depth;
      throw;
    }
  }
  return &unit;
}

void FsdpEngine::leave(void* handle, const std::vector<torch::Tensor>& outputs) {
  auto& unit = *static_cast<Unit*>(handle);
  auto& sharded = *unit.owner;
  --unit.depth;
  bool backward_coming = false;
  if (torch::GradMode::is_enabled()) {
    const std::weak_ptr<Sharded> weak = sharded.self;
    for (const auto& output : outputs) {
      if (output.defined() && output.requires_grad()) {
        const size_t index = unit.index;
        output.register_hook([weak, index](const torch::Tensor&) { before_unit_backward(weak, index); });
        backward_coming = true;
      }
    }
  }
  if (unit.depth == 0 && (!backward_coming || sharded.reshard_after_forward)) {
    sharded.reshard(unit);
  }
}

bool FsdpEngine::recomputes(void* handle) const {
  const auto& unit = *static_cast<const Unit*>(handle);
  return activation_checkpointing_ && !unit.name.empty(); // every unit but the model itself
}

void FsdpEngine::abandon(void* handle) noexcept {
  auto& unit = *static_cast<Unit*>(handle);
  if (--unit.depth == 0) {
    unit.owner->reshard(unit);
  }
}

// ---- The optimizer's side
void FsdpEngine::prepare_optimizer(ShardableOptimizer& optimizer) {
  for (const auto& parameter : optimizer.stepped_parameters()) {
    stepped_->insert(parameter.unsafeGetTensorImpl());
  }
  refuse_optimizer_not_per_element(optimizer, "parallel_strategy 'fsdp' (" + sharding_ + ")");
  // State the optimizer made when it was constructed (Adagrad's), for whole parameters: this process's
  // shares.
  adopt_optimizer_state(optimizer);
}

void FsdpEngine::before_optimizer_step(ShardableOptimizer&) {
  for (auto& [module, weak] : models_) {
    (void)module;
    if (auto sharded = weak.lock()) {
      sharded->settle();
      sharded->settle_host_copies(); // with offload the step writes the shards the gathers read
    }
  }
}

void FsdpEngine::after_optimizer_step(ShardableOptimizer& optimizer) {
  // The units that are gathered now (the resident ones, SHARD_GRAD_OP units whose backward did not run,
  // units inside unshard()) hold the values from before the step: gather them again, in one order.
  std::set<c10::TensorImpl*> stepped;
  for (const auto& parameter : optimizer.stepped_parameters()) {
    stepped.insert(parameter.unsafeGetTensorImpl());
  }
  for (auto& [module, weak] : models_) {
    (void)module;
    auto sharded = weak.lock();
    if (!sharded) {
      continue;
    }
    for (auto& unit : sharded->units) {
      if (!unit.gathered) {
        continue;
      }
      const bool touched = std::any_of(unit.groups.begin(), unit.groups.end(), [&](const Group& group) {
        return std::any_of(group.members.begin(), group.members.end(), [&](size_t m) {
          return stepped.count(sharded->members[m].parameter.unsafeGetTensorImpl()) != 0;
        });
      });
      if (touched) {
        sharded->refresh(unit);
      }
    }
  }
}

std::vector<int64_t> FsdpEngine::whole_sizes(const torch::Tensor& parameter) {
  auto [sharded, index] = find(parameter);
  return sharded ? sharded->members[index].sizes : parameter.sizes().vec();
}

ReplicaExpectation FsdpEngine::replica_expectation() const {
  ReplicaExpectation expectation;
  const bool sharded = context().process_group != nullptr && sharding_ != "NO_SHARD";
  expectation.parameters = !sharded;
  expectation.optimizer_state = !sharded;
  return expectation;
}

std::string FsdpEngine::describe() const {
  std::ostringstream out;
  const int world = context().process_group ? context().process_group->getSize() : 1;
  out << "fsdp: " << sharding_;
  if (!context().process_group) {
    out << ", one process: nothing to shard";
  } else if (sharding_ == "NO_SHARD") {
    out << ": replicated, as ddp";
  } else {
    size_t units = 0;
    for (const auto& [module, weak] : models_) {
      (void)module;
      if (auto sharded = weak.lock()) {
        units += sharded->units.size();
      }
    }
    if (machines_) {
      out << ", parameters, gradients and optimizer state in " << machines_->machine->getSize()
          << " shares within each of " << machines_->machines << " machines, replicated across them, "
          << units << " unit(s)";
    } else if (world == 1) {
      out << ", one process: each of " << units << " unit(s) one share (for "
          << (offload_params_ ? "fsdp_offload_params" : "activation checkpointing") << ")";
    } else {
      out << ", parameters, gradients and optimizer state in " << world << " shares, " << units << " unit(s)";
    }
    const auto& config = context().config;
    out << "; activation checkpointing " << (activation_checkpointing_ ? "on" : "off")
        << (config.fsdp_activation_checkpointing_offload
                ? offload_inputs_ ? " (its inputs offloaded to CPU memory)" : " (offload: a no-op on the CPU)"
                : "");
    if (config.fsdp_offload_params) {
      out << (offload_params_ ? "; offload params: on (shards, their gradients and the optimizer step in CPU "
                                "memory)"
                              : "; offload params: on (a no-op on the CPU)");
    }
    out << "; prefetch: forward " << (config.fsdp_forward_prefetch ? "on" : "off") << ", backward "
        << config.fsdp_backward_prefetch;
    bool asynchronous = false;
    int64_t prefetches = 0;
    for (const auto& [module, weak] : models_) {
      (void)module;
      if (auto sharded = weak.lock()) {
        asynchronous = asynchronous || sharded->asynchronous;
        prefetches += sharded->prefetches;
      }
    }
    if (!models_.empty() && !asynchronous) {
      out << " (skipped: the shared-memory transport gathers on the calling thread, nothing would overlap)";
    } else if (!models_.empty()) {
      out << ", " << prefetches << " all-gather(s) started ahead so far";
    }
  }
  return out.str();
}

std::optional<FsdpEngine::Held> FsdpEngine::held(const torch::Tensor& parameter) {
  auto [sharded, index] = find(parameter);
  if (!sharded) {
    return std::nullopt;
  }
  auto& member = sharded->members[index];
  return Held{member.values, &member.gradient, member.place.share_begin, member.place.share_length, sharded};
}

std::shared_ptr<Sharded> FsdpEngine::sharded_of(const torch::nn::Module& model) const {
  for (auto it = models_.rbegin(); it != models_.rend(); ++it) { // the latest prepare of it
    if (it->first == &model) {
      return it->second.lock();
    }
  }
  return nullptr;
}

std::pair<std::shared_ptr<Sharded>, size_t> FsdpEngine::find(const torch::Tensor& parameter) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = members_.find(parameter.unsafeGetTensorImpl());
  if (found == members_.end()) {
    return {nullptr, 0};
  }
  auto sharded = found->second.first.lock();
  if (!sharded) {
    members_.erase(found); // its model was released (free_memory)
    return {nullptr, 0};
  }
  return {std::move(sharded), found->second.second};
}

} // namespace accelerate::detail::fsdp_internal

namespace accelerate::detail {

std::unique_ptr<ParallelEngine> make_fsdp_engine(const ParallelContext& context) {
  return std::make_unique<fsdp_internal::FsdpEngine>(context);
}

} // namespace accelerate::detail
