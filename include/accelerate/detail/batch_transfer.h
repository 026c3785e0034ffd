// Batches in transit for the prepared DataLoader: copied into pinned host memory, and flattened to tensors
// and rebuilt for dispatch_batches. Included by <accelerate/data.h> once `to_device` is declared; include
// <accelerate/accelerate.h> instead.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/data/example.h>
#include <torch/types.h>

namespace accelerate::detail {

// ---- Pinned memory ---------------------------------------------------------------------------------------

/// `batch` with every CPU tensor in it copied into pinned host memory (see `pinning_batch`).
template <typename Batch> Batch pin_memory(Batch batch) {
  struct Scope {
    Scope() { pinning_batch = true; }
    ~Scope() { pinning_batch = false; }
  } scope;
  return to_device(std::move(batch), torch::Device(torch::kCPU));
}

// ---- Batches sent by the main process (dispatch_batches) -------------------------------------------------

/// How a batch travels from the main process to another as a list of tensors, and is built again there:
/// tensors, `Example`s, `std::tuple`, `std::pair`, `std::array` and `std::vector` (its length travels as a
/// 0-d int64 tensor) of those. Other types (numbers, strings, maps, the user's structs) are not `supported`:
/// the receiving process could not rebuild them from tensors.
template <typename T, typename = void> struct DispatchFields {
  static constexpr bool supported = false;
};

template <> struct DispatchFields<torch::Tensor> {
  static constexpr bool supported = true;
  static void flatten(const torch::Tensor& tensor, std::vector<torch::Tensor>& out) { out.push_back(tensor); }
  static torch::Tensor rebuild(const std::vector<torch::Tensor>& in, size_t& next);
};

template <typename Data, typename Target> struct DispatchFields<torch::data::Example<Data, Target>> {
  static constexpr bool supported = DispatchFields<Data>::supported && DispatchFields<Target>::supported;
  static void flatten(const torch::data::Example<Data, Target>& example, std::vector<torch::Tensor>& out) {
    DispatchFields<Data>::flatten(example.data, out);
    DispatchFields<Target>::flatten(example.target, out);
  }
  static torch::data::Example<Data, Target> rebuild(const std::vector<torch::Tensor>& in, size_t& next) {
    auto data = DispatchFields<Data>::rebuild(in, next);
    auto target = DispatchFields<Target>::rebuild(in, next);
    return {std::move(data), std::move(target)};
  }
};

template <typename Data> struct DispatchFields<torch::data::Example<Data, torch::data::example::NoTarget>> {
  using Example = torch::data::Example<Data, torch::data::example::NoTarget>;
  static constexpr bool supported = DispatchFields<Data>::supported;
  static void flatten(const Example& example, std::vector<torch::Tensor>& out) {
    DispatchFields<Data>::flatten(example.data, out);
  }
  static Example rebuild(const std::vector<torch::Tensor>& in, size_t& next) {
    return Example(DispatchFields<Data>::rebuild(in, next));
  }
};

template <typename... Ts> struct DispatchFields<std::tuple<Ts...>> {
  static constexpr bool supported = (DispatchFields<Ts>::supported && ...);
  static void flatten(const std::tuple<Ts...>& values, std::vector<torch::Tensor>& out) {
    std::apply(
        [&](const auto&... value) {
          (DispatchFields<std::decay_t<decltype(value)>>::flatten(value, out), ...);
        },
        values);
  }
  static std::tuple<Ts...> rebuild(const std::vector<torch::Tensor>& in, size_t& next) {
    return std::tuple<Ts...>{DispatchFields<Ts>::rebuild(in, next)...}; // braces: rebuilt in order
  }
};

template <typename First, typename Second> struct DispatchFields<std::pair<First, Second>> {
  static constexpr bool supported = DispatchFields<First>::supported && DispatchFields<Second>::supported;
  static void flatten(const std::pair<First, Second>& values, std::vector<torch::Tensor>& out) {
    DispatchFields<First>::flatten(values.first, out);
    DispatchFields<Second>::flatten(values.second, out);
  }
  static std::pair<First, Second> rebuild(const std::vector<torch::Tensor>& in, size_t& next) {
    auto first = DispatchFields<First>::rebuild(in, next);
    auto second = DispatchFields<Second>::rebuild(in, next);
    return {std::move(first), std::move(second)};
  }
};

template <typename T, size_t N> struct DispatchFields<std::array<T, N>> {
  static constexpr bool supported = DispatchFields<T>::supported;
  static void flatten(const std::array<T, N>& values, std::vector<torch::Tensor>& out) {
    for (const auto& value : values) {
      DispatchFields<T>::flatten(value, out);
    }
  }
  static std::array<T, N> rebuild(const std::vector<torch::Tensor>& in, size_t& next) {
    std::array<T, N> values;
    for (auto& value : values) {
      value = DispatchFields<T>::rebuild(in, next);
    }
    return values;
  }
};

/// The length of a dispatched `std::vector`, read back from its 0-d tensor.
size_t dispatched_length(const std::vector<torch::Tensor>& in, size_t& next);
torch::Tensor dispatch_length(size_t length);

template <typename T, typename Allocator> struct DispatchFields<std::vector<T, Allocator>> {
  static constexpr bool supported = DispatchFields<T>::supported;
  static void flatten(const std::vector<T, Allocator>& values, std::vector<torch::Tensor>& out) {
    out.push_back(dispatch_length(values.size()));
    for (const auto& value : values) {
      DispatchFields<T>::flatten(value, out);
    }
  }
  static std::vector<T, Allocator> rebuild(const std::vector<torch::Tensor>& in, size_t& next) {
    const size_t length = dispatched_length(in, next);
    std::vector<T, Allocator> values;
    values.reserve(length);
    for (size_t i = 0; i < length; ++i) {
      values.push_back(DispatchFields<T>::rebuild(in, next));
    }
    return values;
  }
};

/// Throws `std::invalid_argument`: `dispatch_batches` cannot send a batch of type `batch_type` (demangled).
[[noreturn]] void throw_undispatchable_batch(const std::string& batch_type);
/// The tensors received for a batch that the batch type did not use up: the processes disagree on it.
void check_dispatched_all(const std::vector<torch::Tensor>& in, size_t next);

} // namespace accelerate::detail
