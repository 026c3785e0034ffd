// Fully sharded training (parallel_strategy "fsdp", FSDP / ZeRO-3): the one line a module's forward writes to
// be a unit. docs/runtime.md, "Fully sharded training (FSDP)", says what a unit is and how it trains.
#pragma once

#include <torch/torch.h>

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

/// The fsdp strategy while it shards a model (runtime/fsdp.cpp); none otherwise.
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
};

/// The host in charge, or null (one relaxed atomic load).
UnitHost* active_host();

inline void collect(const torch::Tensor& tensor, std::vector<torch::Tensor>& out) {
  out.push_back(tensor);
}
inline void collect(const std::vector<torch::Tensor>& tensors, std::vector<torch::Tensor>& out) {
  out.insert(out.end(), tensors.begin(), tensors.end());
}
template <typename... T> void collect(const std::tuple<T...>& tuple, std::vector<torch::Tensor>& out);
template <typename A, typename B> void collect(const std::pair<A, B>& pair, std::vector<torch::Tensor>& out) {
  collect(pair.first, out);
  collect(pair.second, out);
}
template <typename... T> void collect(const std::tuple<T...>& tuple, std::vector<torch::Tensor>& out) {
  std::apply([&](const auto&... items) { (collect(items, out), ...); }, tuple);
}

template <typename T, typename = void> struct Collectable : std::false_type {};
template <typename T>
struct Collectable<
    T, std::void_t<decltype(collect(std::declval<const T&>(), std::declval<std::vector<torch::Tensor>&>()))>>
    : std::true_type {};

} // namespace detail

/// Runs `body`, the forward of `module`, as a unit of fully sharded training:
///
///     torch::Tensor forward(torch::Tensor x) {
///       return accelerate::fsdp::unit(*this, [&] { return fc2(torch::relu(fc1(x))); });
///     }
///
/// Under parallel_strategy "fsdp" with several processes, every prepared module of a type whose forward
/// calls this is a unit: its parameters (those of its submodules that are not units themselves) live in one
/// flat buffer sharded across the processes. Before the body they are all-gathered; after it they are freed
/// (FULL_SHARD) or kept until the unit's backward (SHARD_GRAD_OP); hooks on the outputs gather them again
/// before the unit's backward, and its gradients are reduce-scattered into each process's shard after it.
/// Otherwise (another strategy, one process, NO_SHARD, no Accelerator) it is a plain call of `body`.
///
/// `body` returns a torch::Tensor, a std::vector<torch::Tensor>, or std::tuple / std::pair of those.
template <typename Module, typename Body> decltype(auto) unit(Module& module, Body&& body) {
  static_assert(std::is_base_of_v<torch::nn::Module, Module>,
                "accelerate::fsdp::unit(module, body): module is the torch::nn::Module whose forward this is "
                "(pass *this)");
  using Result = std::invoke_result_t<Body&>;
  static_assert(
      detail::Collectable<std::decay_t<Result>>::value,
      "accelerate::fsdp::unit: the body must return torch::Tensor, std::vector<torch::Tensor>, or a "
      "std::tuple / std::pair of them (the unit's backward is attached to its outputs)");
  // Instantiates the registration of Module (see UnitType).
  static_cast<void>(&detail::UnitType<Module>::registered);
  detail::UnitHost* host = detail::active_host();
  if (host == nullptr) {
    return std::forward<Body>(body)();
  }
  torch::nn::Module& base = module;
  void* handle = host->enter(base, typeid(module));
  if (handle == nullptr) {
    return std::forward<Body>(body)();
  }
  try {
    Result result = std::forward<Body>(body)();
    std::vector<torch::Tensor> outputs;
    detail::collect(result, outputs);
    host->leave(handle, outputs);
    return result;
  } catch (...) {
    host->abandon(handle);
    throw;
  }
}

} // namespace accelerate::fsdp
