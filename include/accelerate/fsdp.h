// Fully sharded training (parallel_strategy "fsdp", FSDP / ZeRO-3): the one line a module's forward writes to
// be a unit. docs/runtime.md, "Fully sharded training (FSDP)", says what a unit is and how it trains.
#pragma once

#include <accelerate/activation_checkpoint.h>

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace accelerate::fsdp {
namespace detail {

/// Records that modules of dynamic type `type` call `unit` in their forward: at prepare, the fsdp strategy
/// makes every module of a registered type a unit. Returns true.
bool register_unit_type(const std::type_info& type);
/// Whether `register_unit_type(type)` ran.
bool is_unit_type(const std::type_info& type);

/// One registration per module type that calls `unit`, made at static initialisation: instantiating `unit`
/// for a type instantiates this member, whose initialiser registers the type before main runs, so prepare
/// knows the units before the first forward.
template <typename Module> struct UnitType {
  static const bool registered;
};
template <typename Module> const bool UnitType<Module>::registered = register_unit_type(typeid(Module));

/// The fsdp strategy while it shards a model (runtime/parallel/fsdp/engine.cpp); none otherwise.
class UnitHost {
public:
  virtual ~UnitHost() = default;
  /// Before the body: gathers the unit's parameters. Returns the unit, or null when `module` is not one (the
  /// call is then a plain call). Throws when `module` belongs to no prepared model.
  virtual void* enter(torch::nn::Module& module, const std::type_info& type) = 0;
  /// After the body: attaches the backward side to `outputs` and frees the parameters as the sharding
  /// strategy says.
  virtual void leave(void* unit, const std::vector<torch::Tensor>& outputs) = 0;
  /// After a body that threw.
  virtual void abandon(void* unit) noexcept = 0;
  /// Whether `unit` keeps only its inputs and computes its body again in backward (activation
  /// checkpointing).
  virtual bool recomputes(void* unit) const = 0;
  /// Whether the inputs a recomputed unit keeps are held in CPU memory until its backward
  /// (fsdp_activation_checkpointing_offload on a GPU).
  virtual bool offloads_inputs() const { return false; }
};

/// The host in charge, or null (one relaxed atomic load).
UnitHost* active_host();

template <typename Module, typename All, size_t... I>
decltype(auto) run_unit(Module& module, All all, std::index_sequence<I...>) {
  auto& body = std::get<sizeof...(I)>(all);
  using Body = std::tuple_element_t<sizeof...(I), All>;
  using Result = std::invoke_result_t<Body&, std::tuple_element_t<I, All>...>;
  static_assert(
      accelerate::detail::Collectable<std::decay_t<Result>>::value,
      "accelerate::fsdp::unit: the body must return torch::Tensor, std::vector<torch::Tensor>, or a "
      "std::tuple / std::pair of them (the unit's backward is attached to its outputs)");
  auto call = [&]() -> Result {
    return body(std::forward<std::tuple_element_t<I, All>>(std::get<I>(all))...);
  };
  // Instantiates the registration of Module (see UnitType).
  static_cast<void>(&UnitType<Module>::registered);
  UnitHost* host = active_host();
  if (host == nullptr) {
    return call();
  }
  torch::nn::Module& base = module;
  void* handle = host->enter(base, typeid(module));
  if (handle == nullptr) {
    return call();
  }
  try {
    if constexpr (std::is_reference_v<Result>) {
      Result result = call();
      std::vector<torch::Tensor> outputs;
      accelerate::detail::collect(result, outputs);
      host->leave(handle, outputs);
      return result;
    } else {
      std::optional<Result> result;
      constexpr bool kRecomputable =
          sizeof...(I) > 0 && std::is_copy_constructible_v<std::decay_t<Body>> &&
          (std::is_copy_constructible_v<std::decay_t<std::tuple_element_t<I, All>>> && ...);
      if constexpr (kRecomputable) {
        if (torch::GradMode::is_enabled() && host->recomputes(handle)) {
          using Inputs = std::tuple<std::decay_t<std::tuple_element_t<I, All>>...>;
          result.emplace(accelerate::detail::run_checkpointed<Result>(
              base, std::decay_t<Body>(body), Inputs(std::get<I>(all)...), host->offloads_inputs()));
        }
      }
      if (!result) {
        result.emplace(call());
      }
      std::vector<torch::Tensor> outputs;
      accelerate::detail::collect(*result, outputs);
      host->leave(handle, outputs);
      return Result(std::move(*result));
    }
  } catch (...) {
    host->abandon(handle);
    throw;
  }
}

} // namespace detail

/// Runs `body`, the forward of `module`, as a unit of fully sharded training. The forward's inputs come
/// before the body, which takes them as its parameters:
///
///     torch::Tensor forward(torch::Tensor x) {
///       return accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) { return fc2(torch::relu(fc1(x))); });
///     }
///
/// Under parallel_strategy "fsdp" with several processes, every prepared module of a type whose forward
/// calls this is a candidate, and the wrap policy (fsdp_auto_wrap_policy) chooses the units among them (with
/// NO_WRAP, every candidate): a unit's parameters (those of its submodules that are not units themselves)
/// live in one flat buffer sharded across the processes. Before the body they are all-gathered; after it they
/// are freed (FULL_SHARD) or kept until the unit's backward (SHARD_GRAD_OP); hooks on the outputs gather them
/// again before the unit's backward, and its gradients are reduce-scattered into each process's shard after
/// it. Otherwise (another strategy, one process, NO_SHARD, no Accelerator, an instance that is not a unit)
/// it is a plain call of `body`.
///
/// With fsdp_activation_checkpointing, a unit other than the model itself runs its body without autograd and
/// keeps only its inputs; its backward runs the body again on them (with the random number generators and
/// autocast as they were), which is why the body takes the inputs as parameters and reads nothing else of the
/// forward: it must still be callable after the forward has returned. The form without inputs,
/// `unit(*this, [&] { ... })`, is never recomputed.
///
/// `body` returns a torch::Tensor, a std::vector<torch::Tensor>, or std::tuple / std::pair of those.
template <typename Module, typename... InputsAndBody>
decltype(auto) unit(Module& module, InputsAndBody&&... rest) {
  static_assert(
      std::is_base_of_v<torch::nn::Module, Module>,
      "accelerate::fsdp::unit(module, inputs..., body): module is the torch::nn::Module whose forward "
      "this is (pass *this)");
  static_assert(sizeof...(InputsAndBody) >= 1,
                "accelerate::fsdp::unit(module, inputs..., body): the body (a lambda) comes last");
  return detail::run_unit(module, std::forward_as_tuple(std::forward<InputsAndBody>(rest)...),
                          std::make_index_sequence<sizeof...(InputsAndBody) - 1>{});
}

} // namespace accelerate::fsdp
