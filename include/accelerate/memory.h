// Fitting the batch to the memory: Accelerate's `find_executable_batch_size` and `should_reduce_batch_size`
// (accelerate.utils.memory), for a training function that takes its batch size.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

namespace accelerate {

/// Whether `error` says memory ran out, as Accelerate's `should_reduce_batch_size` decides: a
/// `c10::OutOfMemoryError` or `std::bad_alloc`, or a message with " out of memory." (CUDA), "cuDNN error:
/// CUDNN_STATUS_NOT_SUPPORTED." or "DefaultCPUAllocator: can't allocate memory" (the CPU allocator).
bool should_reduce_batch_size(const std::exception& error);

/// Accelerate's reduction: 90% of `batch_size`, rounded down.
int64_t reduce_batch_size(int64_t batch_size);

namespace detail {
void run_batch_size_search(int64_t starting_batch_size, const std::function<void(int64_t)>& attempt,
                           const std::function<int64_t(int64_t)>& reduce_batch_size_fn);
} // namespace detail

/// Runs `function(batch_size)` from `starting_batch_size` down until it runs without running out of memory,
/// and returns what that run returned, as Accelerate's `find_executable_batch_size` does:
///
/// ```
/// accelerate::Accelerator accelerator;
/// accelerate::find_executable_batch_size(128, [&](int64_t batch_size) {
///   auto model = std::make_shared<Net>();          // everything the attempt allocates is made inside it
///   accelerator.prepare(model);
///   auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 3e-4));
///   auto loader = accelerator.prepare_data_loader(dataset, torch::data::DataLoaderOptions(batch_size));
///   for (auto& batch : *loader) { ... }
/// });
/// ```
///
/// When an attempt runs out of memory (`should_reduce_batch_size`) on any process, every process leaves it,
/// also those waiting for that process in a collective: the process abandons the job's process group, which
/// fails their collectives at once. Then every process drops the prepared objects (`free_memory`), releases
/// cached device memory, forms a new process group (the Accelerator made before the call keeps working), and
/// all retry at `reduce_batch_size_fn(batch_size)` (process 0's). Processes agree on each attempt's outcome
/// through the job's store: a batch size that fits on one process and not on another is retried on all.
/// Any other error on a process ends the search on every process: that process rethrows it, the others throw
/// `std::runtime_error` naming it. Reaching 0 throws `std::runtime_error` ("no executable batch size found,
/// reached zero"). What the attempt that ran prepared stays prepared, as in Accelerate: keep it alive while
/// the Accelerator is used (return it), or call `free_memory()` after the call when it was local to
/// `function`. Every process must call this the same number of times; an Accelerator may be made before the
/// call (then only that one: other Accelerators alive in the process keep the old group) or inside `function`
/// (each attempt forms its own group).
template <typename Function>
auto find_executable_batch_size(int64_t starting_batch_size, Function&& function,
                                std::function<int64_t(int64_t)> reduce_batch_size_fn = reduce_batch_size)
    -> std::invoke_result_t<Function&, int64_t> {
  using Result = std::invoke_result_t<Function&, int64_t>;
  if constexpr (std::is_void_v<Result>) {
    detail::run_batch_size_search(
        starting_batch_size, [&](int64_t batch_size) { function(batch_size); }, reduce_batch_size_fn);
  } else {
    std::optional<Result> result;
    detail::run_batch_size_search(
        starting_batch_size,
        [&](int64_t batch_size) {
          result.reset();
          result.emplace(function(batch_size));
        },
        reduce_batch_size_fn);
    return std::move(*result);
  }
}

} // namespace accelerate
