// Activation checkpointing: a module's body that keeps only its inputs for backward and runs again there, as
// its forward ran (the random number generators and autocast as they were). `accelerate::checkpoint` by hand,
// under every strategy and on one process; fully sharded training's units use the same (fsdp.h).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace accelerate {
namespace detail {

/// Runs a body again in backward: takes the inputs (detached copies of the tensors the body was given, in
/// order) and returns the outputs, as collect() lists them.
using Recompute = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

/// The random number generators and autocast as a body's run sees them (captured before it runs).
struct ForwardState;
std::shared_ptr<ForwardState> capture_forward_state(const std::vector<torch::Tensor>& inputs);

/// Activation checkpointing of `module`'s body, which ran without autograd
/// (runtime/accelerator/activation_checkpoint.cpp): returns `outputs` as new tensors whose backward runs
/// `recompute` on detached copies of `inputs` (kept in CPU memory until then when `offload`; with the random
/// number generators and autocast as `state` holds them), backpropagates through what it computes (the
/// module's parameters get their gradients), and hands the inputs' gradients on.
std::vector<torch::Tensor> checkpoint_outputs(const std::shared_ptr<ForwardState>& state,
                                              torch::nn::Module& module,
                                              const std::vector<torch::Tensor>& inputs,
                                              const std::vector<torch::Tensor>& outputs, Recompute recompute,
                                              bool offload);

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

/// The opposite of collect: puts `tensors[next...]` in the places collect() read, in the same order.
inline void replace(torch::Tensor& tensor, const std::vector<torch::Tensor>& tensors, size_t& next) {
  tensor = tensors[next++];
}
inline void replace(std::vector<torch::Tensor>& list, const std::vector<torch::Tensor>& tensors,
                    size_t& next) {
  for (auto& tensor : list) {
    tensor = tensors[next++];
  }
}
template <typename... T>
void replace(std::tuple<T...>& tuple, const std::vector<torch::Tensor>& tensors, size_t& next);
template <typename A, typename B>
void replace(std::pair<A, B>& pair, const std::vector<torch::Tensor>& tensors, size_t& next) {
  replace(pair.first, tensors, next);
  replace(pair.second, tensors, next);
}
template <typename... T>
void replace(std::tuple<T...>& tuple, const std::vector<torch::Tensor>& tensors, size_t& next) {
  std::apply([&](auto&... items) { (replace(items, tensors, next), ...); }, tuple);
}

template <typename T> constexpr bool is_tensor_v = std::is_same_v<std::decay_t<T>, torch::Tensor>;

/// Runs `body(inputs...)` keeping only `inputs` for its backward (see checkpoint_outputs()).
template <typename Result, typename Body, typename Inputs>
Result run_checkpointed(torch::nn::Module& module, const Body& body, const Inputs& inputs, bool offload) {
  std::vector<torch::Tensor> tensors;
  std::apply(
      [&](const auto&... input) {
        (
            [&](const auto& item) {
              if constexpr (is_tensor_v<decltype(item)>) {
                tensors.push_back(item);
              }
            }(input),
            ...);
      },
      inputs);
  auto state = capture_forward_state(tensors);
  std::optional<Result> result;
  {
    torch::NoGradGuard no_grad;
    Inputs copy = inputs; // the body may assign to its parameters
    result.emplace(std::apply(body, copy));
  }
  std::vector<torch::Tensor> outputs;
  collect(*result, outputs);
  // The recomputation gets the kept inputs from checkpoint_outputs(), which may hold them elsewhere
  // (offload): the copy of the inputs it captures holds no tensor, only the other arguments.
  Inputs others = inputs;
  std::apply(
      [](auto&... input) {
        (([](auto& item) {
           if constexpr (is_tensor_v<decltype(item)>) {
             item = torch::Tensor();
           }
         }(input)),
         ...);
      },
      others);
  Recompute recompute = [body, others](const std::vector<torch::Tensor>& detached) {
    Inputs copy = others;
    size_t next = 0;
    std::apply(
        [&](auto&... input) {
          (([&](auto& item) {
             if constexpr (is_tensor_v<decltype(item)>) {
               item = detached[next++];
             }
           }(input)),
           ...);
        },
        copy);
    std::vector<torch::Tensor> out;
    collect(std::apply(body, copy), out);
    return out;
  };
  const auto replaced = checkpoint_outputs(state, module, tensors, outputs, std::move(recompute), offload);
  size_t next = 0;
  replace(*result, replaced, next);
  return std::move(*result);
}

template <typename T, typename = void> struct Collectable : std::false_type {};
template <typename T>
struct Collectable<
    T, std::void_t<decltype(collect(std::declval<const T&>(), std::declval<std::vector<torch::Tensor>&>()))>>
    : std::true_type {};

template <typename Module, typename All, size_t... I>
decltype(auto) run_checkpoint(Module& module, All all, std::index_sequence<I...>) {
  auto& body = std::get<sizeof...(I)>(all);
  using Body = std::tuple_element_t<sizeof...(I), All>;
  using Result = std::invoke_result_t<Body&, std::tuple_element_t<I, All>...>;
  static_assert(
      sizeof...(I) > 0,
      "accelerate::checkpoint(module, inputs..., body): give the body's inputs before it, as its "
      "parameters: backward runs the body again on them, so it must read nothing else of the forward");
  static_assert(
      Collectable<std::decay_t<Result>>::value,
      "accelerate::checkpoint: the body must return torch::Tensor, std::vector<torch::Tensor>, or a "
      "std::tuple / std::pair of them (the backward is attached to its outputs)");
  static_assert(!std::is_reference_v<Result>, "accelerate::checkpoint: the body must return by value");
  static_assert(std::is_copy_constructible_v<std::decay_t<Body>> &&
                    (std::is_copy_constructible_v<std::decay_t<std::tuple_element_t<I, All>>> && ...),
                "accelerate::checkpoint: the body and its inputs must be copyable (backward keeps a copy)");
  torch::nn::Module& base = module;
  if (!torch::GradMode::is_enabled()) { // no backward to come: nothing to keep, nothing to run again
    return Result(body(std::forward<std::tuple_element_t<I, All>>(std::get<I>(all))...));
  }
  using Inputs = std::tuple<std::decay_t<std::tuple_element_t<I, All>>...>;
  return run_checkpointed<Result>(base, std::decay_t<Body>(body), Inputs(std::get<I>(all)...),
                                  /*offload=*/false);
}

} // namespace detail

/// Activation checkpointing of `body`, part of `module`'s forward: the body runs without keeping its
/// activations, and backward runs it again on the inputs it kept (with the random number generators and
/// autocast as they were: dropout draws the same masks) to compute the gradients. Memory for activations
/// falls to the inputs of each checkpointed body, for a second forward of it in backward. The inputs come
/// before the body, which takes them as its parameters:
///
///     torch::Tensor forward(torch::Tensor x) {
///       return accelerate::checkpoint(*this, x, [this](torch::Tensor x) { return fc2(torch::gelu(fc1(x)));
///       });
///     }
///
/// Works under every parallel strategy and on one process, with or without an Accelerator (the module's
/// parameters get their gradients as without it, so DDP and ZeRO synchronise them as usual). The body runs
/// again after the forward has returned: it reads only its parameters and what outlives the step (the
/// module's members), never locals of the forward captured by reference. Without autograd
/// (`torch::NoGradGuard`, evaluation) it is a plain call. `body` returns a torch::Tensor, a
/// std::vector<torch::Tensor>, or std::tuple / std::pair of those. Under parallel_strategy "fsdp",
/// fsdp_activation_checkpointing does the same for every unit (fsdp.h).
template <typename Module, typename... InputsAndBody>
decltype(auto) checkpoint(Module& module, InputsAndBody&&... rest) {
  static_assert(
      std::is_base_of_v<torch::nn::Module, Module>,
      "accelerate::checkpoint(module, inputs..., body): module is the torch::nn::Module whose forward "
      "this is (pass *this)");
  static_assert(
      sizeof...(InputsAndBody) >= 2,
      "accelerate::checkpoint(module, inputs..., body): the inputs, then the body (a lambda taking them)");
  return detail::run_checkpoint(module, std::forward_as_tuple(std::forward<InputsAndBody>(rest)...),
                                std::make_index_sequence<sizeof...(InputsAndBody) - 1>{});
}

} // namespace accelerate
