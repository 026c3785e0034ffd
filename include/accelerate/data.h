// Distributed data loading: moving batches to the device, the prepared DataLoader over map-style datasets
// (sharded independently of the world size), and the adapter for loaders that are not torch::data.
// Included at the end of <accelerate/accelerator.h>: include <accelerate/accelerate.h> rather than this file.
#pragma once

#include <accelerate/data_options.h>
#include <accelerate/detail/loader_context.h>
#include <accelerate/gradient_state.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <c10/util/Type.h>
#include <torch/data/example.h>
#include <torch/types.h>

namespace accelerate {

// ---- Moving batches to the device ------------------------------------------------------------------------

/// How `to_device` moves a value of type `T`. Provided for tensors, `torch::data::Example` (with or without a
/// target), `std::vector`, `std::array`, `std::tuple`, `std::pair`, `std::optional`, `std::map` /
/// `std::unordered_map` (values moved, keys kept), numbers and strings (left as they are). Specialize it for
/// your own batch types; `apply` may take a third argument, `bool non_blocking`, to pass on to its members
/// (a rule without it copies them blocking):
///
/// ```
/// struct TokenBatch { torch::Tensor ids, mask; int64_t step; };
/// template <> struct accelerate::ToDevice<TokenBatch> {
///   static TokenBatch apply(TokenBatch batch, const torch::Device& device, bool non_blocking) {
///     return {accelerate::to_device(batch.ids, device, non_blocking),
///             accelerate::to_device(batch.mask, device, non_blocking), batch.step};
///   }
/// };
/// ```
template <typename T, typename Enable = void> struct ToDevice {
  static_assert(detail::unsupported_type<T>,
                "accelerate::to_device: no rule moves this batch type to a device; specialize "
                "accelerate::ToDevice<T> with `static T apply(T value, const torch::Device& device, bool "
                "non_blocking)` (see <accelerate/data.h>)");
};

namespace detail {

/// True when `ToDevice<T>::apply` takes the `non_blocking` flag.
template <typename T, typename = void> struct takes_non_blocking : std::false_type {};
template <typename T>
struct takes_non_blocking<T, std::void_t<decltype(ToDevice<T>::apply(
                                 std::declval<T>(), std::declval<const torch::Device&>(), true))>>
    : std::true_type {};

/// Set on a thread while it copies a batch into pinned host memory: the tensor rule then pins instead of
/// moving, so every batch type `ToDevice` knows (the user's included) is pinned the same way.
inline thread_local bool pinning_batch = false;

/// Set on a thread while it copies a batch to the device on a side stream: the tensor rule then copies
/// through it, so every batch type `ToDevice` knows is copied the same way.
inline thread_local SideStreamCopier* copying_batch = nullptr;

} // namespace detail

/// `value` with every tensor in it on `device` (tensors already there are not copied). `non_blocking`
/// copies asynchronously where the tensor's memory allows it (pinned host memory to a CUDA device).
///
/// ```
/// auto batch = accelerate::to_device(std::make_tuple(inputs, labels), accelerator.device());
/// ```
template <typename T>
std::decay_t<T> to_device(T&& value, const torch::Device& device, bool non_blocking = false) {
  using Value = std::decay_t<T>;
  if constexpr (detail::takes_non_blocking<Value>::value) {
    return ToDevice<Value>::apply(std::forward<T>(value), device, non_blocking);
  } else {
    return ToDevice<Value>::apply(std::forward<T>(value), device);
  }
}

template <> struct ToDevice<torch::Tensor> {
  static torch::Tensor apply(torch::Tensor tensor, const torch::Device& device, bool non_blocking = false) {
    if (!tensor.defined()) {
      return tensor;
    }
    if (detail::pinning_batch) {
      return tensor.device().is_cpu() && !tensor.is_pinned() ? tensor.pin_memory() : tensor;
    }
    if (detail::copying_batch != nullptr) {
      return detail::copying_batch->copy(tensor, device);
    }
    return tensor.to(device, non_blocking);
  }
};

template <typename Data, typename Target> struct ToDevice<torch::data::Example<Data, Target>> {
  static torch::data::Example<Data, Target> apply(torch::data::Example<Data, Target> example,
                                                  const torch::Device& device, bool non_blocking = false) {
    return {to_device(std::move(example.data), device, non_blocking),
            to_device(std::move(example.target), device, non_blocking)};
  }
};

template <typename Data> struct ToDevice<torch::data::Example<Data, torch::data::example::NoTarget>> {
  static torch::data::Example<Data, torch::data::example::NoTarget>
  apply(torch::data::Example<Data, torch::data::example::NoTarget> example, const torch::Device& device,
        bool non_blocking = false) {
    return {to_device(std::move(example.data), device, non_blocking)};
  }
};

template <typename T, typename Allocator> struct ToDevice<std::vector<T, Allocator>> {
  static std::vector<T, Allocator> apply(std::vector<T, Allocator> values, const torch::Device& device,
                                         bool non_blocking = false) {
    for (auto& value : values) {
      value = to_device(std::move(value), device, non_blocking);
    }
    return values;
  }
};

template <typename T, size_t N> struct ToDevice<std::array<T, N>> {
  static std::array<T, N> apply(std::array<T, N> values, const torch::Device& device,
                                bool non_blocking = false) {
    for (auto& value : values) {
      value = to_device(std::move(value), device, non_blocking);
    }
    return values;
  }
};

template <typename... Ts> struct ToDevice<std::tuple<Ts...>> {
  static std::tuple<Ts...> apply(std::tuple<Ts...> values, const torch::Device& device,
                                 bool non_blocking = false) {
    return std::apply(
        [&](auto&&... value) {
          return std::tuple<Ts...>(to_device(std::move(value), device, non_blocking)...);
        },
        std::move(values));
  }
};

template <typename First, typename Second> struct ToDevice<std::pair<First, Second>> {
  static std::pair<First, Second> apply(std::pair<First, Second> values, const torch::Device& device,
                                        bool non_blocking = false) {
    return {to_device(std::move(values.first), device, non_blocking),
            to_device(std::move(values.second), device, non_blocking)};
  }
};

template <typename T> struct ToDevice<std::optional<T>> {
  static std::optional<T> apply(std::optional<T> value, const torch::Device& device,
                                bool non_blocking = false) {
    if (value) {
      return to_device(std::move(*value), device, non_blocking);
    }
    return value;
  }
};

template <typename Key, typename Value, typename Compare, typename Allocator>
struct ToDevice<std::map<Key, Value, Compare, Allocator>> {
  static std::map<Key, Value, Compare, Allocator> apply(std::map<Key, Value, Compare, Allocator> values,
                                                        const torch::Device& device,
                                                        bool non_blocking = false) {
    for (auto& entry : values) {
      entry.second = to_device(std::move(entry.second), device, non_blocking);
    }
    return values;
  }
};

template <typename Key, typename Value, typename Hash, typename Equal, typename Allocator>
struct ToDevice<std::unordered_map<Key, Value, Hash, Equal, Allocator>> {
  using Map = std::unordered_map<Key, Value, Hash, Equal, Allocator>;
  static Map apply(Map values, const torch::Device& device, bool non_blocking = false) {
    for (auto& entry : values) {
      entry.second = to_device(std::move(entry.second), device, non_blocking);
    }
    return values;
  }
};

template <typename T> struct ToDevice<T, std::enable_if_t<std::is_arithmetic_v<T> || std::is_enum_v<T>>> {
  static T apply(T value, const torch::Device&, bool = false) { return value; }
};

template <> struct ToDevice<std::string> {
  static std::string apply(std::string value, const torch::Device&, bool = false) { return value; }
};

namespace detail {

/// `batch` with every CPU tensor in it copied into pinned host memory (see `pinning_batch`).
template <typename Batch> Batch pin_memory(Batch batch) {
  struct Scope {
    Scope() { pinning_batch = true; }
    ~Scope() { pinning_batch = false; }
  } scope;
  return to_device(std::move(batch), torch::Device(torch::kCPU));
}

// ---- Batches sent by the main process (dispatch_batches)
// ---------------------------------------------------

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

} // namespace detail

// ---- Random augmentation that does not depend on the thread ----------------------------------------------

/// A CPU generator for the random augmentation of sample `index`, seeded from the loader's seed, the epoch
/// and `index` alone, so a dataset's `get` augments a sample the same way whichever worker thread reads it,
/// for every number of workers and processes, and again after a resume. Call it inside `get(index)` while a
/// prepared loader reads the batch (elsewhere it throws `std::logic_error`); the generator seed is
/// `mix(mix(mix(seed) ^ epoch) ^ mix(index + 1))`, with the SplitMix64 `mix` of `detail::epoch_order`.
///
/// ```
/// torch::data::Example<> get(size_t index) override {
///   auto generator = accelerate::sample_generator(index);
///   auto image = images_[index] + 0.1 * torch::randn(images_[index].sizes(), generator);
///   return {image, labels_[index]};
/// }
/// ```
at::Generator sample_generator(size_t index);
/// The same generator for an explicit seed and epoch, for reading samples outside a prepared loader.
at::Generator sample_generator(uint64_t seed, uint64_t epoch, size_t index);

// ---- Where a loader stands -------------------------------------------------------------------------------

/// Where a prepared loader stands, for checkpoints. `loader->set_state(saved)` makes the next pass continue
/// with the batch after the last one the training loop took. Batches count *global* batches, and the state
/// records their size, so a state saved by N processes resumes on M at the same sample when the new global
/// batch size divides the samples consumed (always when it is unchanged, e.g. with `split_batches`).
struct DataLoaderState {
  /// The epoch in progress; each epoch's order is drawn from `seed` and `epoch`.
  uint64_t epoch = 0;
  /// Global batches of `epoch` the training loop has taken (the one being processed included).
  uint64_t batches_consumed = 0;
  /// The seed the order is drawn from.
  uint64_t seed = 0;
  /// Samples per global batch (per-process batch × processes) when the state was taken; 0: this loader's.
  uint64_t global_batch_size = 0;

  bool operator==(const DataLoaderState& other) const {
    return epoch == other.epoch && batches_consumed == other.batches_consumed && seed == other.seed &&
           global_batch_size == other.global_batch_size;
  }
  bool operator!=(const DataLoaderState& other) const { return !(*this == other); }
};

namespace detail {

/// The order of a dataset's `size` samples in `epoch`: the identity without `shuffle`; otherwise a
/// Fisher–Yates shuffle driven by SplitMix64, so every process and every machine draws the same order.
/// Exactly (all arithmetic modulo 2^64):
/// - mix(z): z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
///   return z ^ (z >> 31).
/// - The generator starts at s = mix(mix(seed) ^ epoch); each draw is s += 0x9E3779B97F4A7C15, then mix(s).
/// - For i from size - 1 down to 1, position i swaps with j, uniform in [0, i] by Lemire's method: with
///   p = draw * (i + 1) as a 128-bit product, redraw while low64(p) < 2^64 mod (i + 1); j = high64(p).
std::vector<size_t> epoch_order(size_t size, uint64_t seed, uint64_t epoch, bool shuffle);

/// How one epoch is cut into global batches, and which positions of each this process takes: global batch k
/// is positions [k·G, (k+1)·G) of the epoch's order (G = per-process batch × processes), and process r takes
/// [k·G + r·B, k·G + (r+1)·B) of it. A final global batch that is not full is dropped (`drop_last`), padded
/// with positions wrapped from the start of the order so every process gets B samples (`even_batches`, more
/// than one process), or handed out as it is (the processes past its end get one batch fewer).
class ShardPlan {
public:
  /// Throws `std::invalid_argument` naming the option on a zero batch size or a global batch (with
  /// `split_batches`) that the number of processes does not divide.
  ShardPlan(size_t dataset_size, const DataLoaderOptions& options, const LoaderContext& context);

  size_t dataset_size() const { return dataset_size_; }
  /// The process whose batches `positions(k)` and `batches_for_process()` describe.
  int process_index() const { return process_index_; }
  /// B: samples per process per batch.
  size_t per_process_batch_size() const { return per_process_; }
  /// G = B × processes.
  size_t global_batch_size() const { return per_process_ * static_cast<size_t>(num_processes_); }
  /// Global batches per epoch, the final short one included unless `drop_last`.
  size_t global_batches() const;
  /// This process's batches per epoch.
  size_t batches_for_process() const { return batches_for_process(process_index_); }
  /// Process `process`'s batches per epoch (`dispatch_batches`: the main process reads them all).
  size_t batches_for_process(int process) const;
  /// Real samples in the final global batch when `even_batches` padded it; -1 when nothing is padded.
  int64_t remainder() const;
  /// Positions in the epoch's order of this process's part of global batch `k`.
  std::vector<size_t> positions(size_t k) const { return positions(k, process_index_); }
  /// Positions in the epoch's order of process `process`'s part of global batch `k`.
  std::vector<size_t> positions(size_t k, int process) const;

private:
  size_t dataset_size_;
  size_t per_process_;
  int num_processes_;
  int process_index_;
  bool drop_last_;
  bool even_batches_;
};

/// The batches one pass hands out, fixed when it begins: what worker threads read ahead from. Immutable, so
/// any thread may read it.
struct PassSchedule {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  /// This process's batches [first, end) of the epoch, `first` past the ones a resumed state consumed.
  size_t first = 0;
  size_t end = 0;
  std::shared_ptr<const ShardPlan> plan;
  std::shared_ptr<const std::vector<size_t>> order;
  /// The dataset indices of this process's batch `k`.
  std::vector<size_t> samples(size_t k) const;
  /// The dataset indices of process `process`'s batch `k` (`dispatch_batches`).
  std::vector<size_t> samples(size_t k, int process) const;
  /// Whether process `process` takes a batch `k` (its batches may end earlier with uneven batches).
  bool has_batch(size_t k, int process) const { return k < plan->batches_for_process(process); }
};

/// The state a prepared loader shares through a handle: options, plan, position, the pass in progress. The
/// template `DataLoader` only fetches and moves batches; everything else lives here (runtime/data.cpp).
class LoaderCore {
public:
  /// A core added to `context.registry` (when there is one), so the accelerator can reach it for
  /// checkpoints and `set_seed`. Throws `std::invalid_argument` when the dataset has no size or the options
  /// are unusable.
  static std::shared_ptr<LoaderCore> create(std::optional<size_t> dataset_size, DataLoaderOptions options,
                                            LoaderContext context);
  LoaderCore(std::optional<size_t> dataset_size, DataLoaderOptions options, LoaderContext context);
  ~LoaderCore();
  LoaderCore(const LoaderCore&) = delete;
  LoaderCore& operator=(const LoaderCore&) = delete;

  const ShardPlan& plan() const { return *plan_; }
  const DataLoaderOptions& options() const { return options_; }
  const LoaderContext& context() const { return context_; }

  DataLoaderState state() const;
  /// Throws `std::invalid_argument` when the state lies past the epoch's end, or was saved with a global
  /// batch size that does not divide the samples it consumed; `std::logic_error` during a pass.
  void set_state(const DataLoaderState& state);
  /// Moves to the start of `epoch`; a no-op when `epoch` is the current one (so a loop that calls
  /// `set_epoch(e)` each epoch neither undoes a `set_state` resume nor the automatic advance).
  void set_epoch(uint64_t epoch);

  /// Draws the orders from `seed` from now on (`Accelerator::set_seed` after the loader was prepared); a new
  /// seed restarts the current epoch. Throws `std::logic_error` during a pass.
  void set_seed(uint64_t seed);

  /// Starts a pass over the current epoch: from its first batch, or right after `set_state` from the batch
  /// after the ones consumed. Throws `std::logic_error` when a pass is already in progress.
  void begin_pass();
  /// The batches the pass in progress hands out (null outside a pass).
  const std::shared_ptr<const PassSchedule>& schedule() const { return schedule_; }
  /// The index of the batch `next_batch` hands out next; `std::nullopt` at the end of the epoch or outside a
  /// pass.
  std::optional<size_t> upcoming_batch() const;
  /// Hands out this process's next batch (its samples: `schedule()->samples(index)`): updates the gradient
  /// state and the position (and, with uneven batches, calls `joiner->processes_with_batches(true)`), and
  /// returns its index. `std::nullopt` at the end of the epoch: the pass ends, the epoch advances, and with
  /// uneven batches the process calls `joiner->processes_with_batches(false)` then
  /// `joiner->join_until_all_exhausted()`, answering the others' collectives until every process is
  /// exhausted.
  std::optional<size_t> next_batch();
  /// Ends the pass (idempotent): restores the gradient state as the pass found it. A pass left mid-epoch
  /// keeps its epoch, and the next pass starts that epoch again, as a Python loader does.
  void end_pass() noexcept;
  bool in_pass() const { return in_pass_; }

private:
  std::shared_ptr<const std::vector<size_t>> order();
  void publish(size_t batch_index);

  DataLoaderOptions options_;
  LoaderContext context_;
  std::shared_ptr<const ShardPlan> plan_;
  DataLoaderState position_;
  bool resume_pending_ = false;
  bool in_pass_ = false;
  GradientState saved_;
  std::shared_ptr<const std::vector<size_t>> order_;
  std::optional<std::pair<uint64_t, uint64_t>> order_key_; // (seed, epoch) order_ was drawn from
  std::shared_ptr<const PassSchedule> schedule_;
};

/// Reads a pass's batches ahead on worker threads and hands them out in order. Worker threads claim batches
/// in order, at most `capacity` past the next one to be taken, and exit when none is left; a batch whose
/// reading threw is handed out as that exception, and no batch after it is read. Destroying the pool stops
/// the workers (each finishes the batch it is reading) and joins them.
class WorkerPool {
public:
  /// Reads batch `batch` on worker thread `worker` (0-based); may throw.
  using Read = std::function<std::shared_ptr<void>(size_t worker, size_t batch)>;
  /// Starts `workers` threads reading batches [first, end). Throws `std::system_error` when a thread cannot
  /// start (the ones started are stopped first).
  WorkerPool(size_t workers, size_t capacity, size_t first, size_t end, Read read);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  /// Batch `batch`, the next in order, once a worker has read it; rethrows what reading it threw.
  std::shared_ptr<void> take(size_t batch);

private:
  void stop() noexcept;

  struct Shared;
  std::shared_ptr<Shared> shared_;
};

/// While alive, `sample_generator(index)` on this thread draws from `seed` and `epoch`.
class SampleScope {
public:
  SampleScope(uint64_t seed, uint64_t epoch);
  ~SampleScope();
  SampleScope(const SampleScope&) = delete;
  SampleScope& operator=(const SampleScope&) = delete;

private:
  bool outer_active_;
  uint64_t outer_seed_;
  uint64_t outer_epoch_;
};

/// Throws `std::runtime_error` saying which sample (`culprit`, when one alone fails) or batch of the pass
/// failed to read and why, with `error` nested (`std::rethrow_if_nested` reaches it).
[[noreturn]] void throw_read_error(std::exception_ptr error, const PassSchedule& schedule, size_t batch,
                                   const std::vector<size_t>& samples, std::optional<size_t> culprit);

/// Refuses `workers` for a dataset that cannot be copied: each worker thread reads its own copy.
[[noreturn]] void throw_uncopyable_dataset(size_t workers);

/// Reads this process's batch `k` of a pass from `dataset`, with the pass's `sample_generator` context, into
/// pinned memory when `pin`. When reading throws, the batch's samples are read again one at a time to name
/// the one that fails (so keep `get` free of side effects), and `throw_read_error` reports it.
template <typename Dataset>
auto read_batch(Dataset& dataset, const PassSchedule& schedule, size_t k, bool pin,
                std::optional<int> process = std::nullopt) {
  const std::vector<size_t> samples = process ? schedule.samples(k, *process) : schedule.samples(k);
  SampleScope scope(schedule.seed, schedule.epoch);
  try {
    auto batch = dataset.get_batch(samples);
    return pin ? pin_memory(std::move(batch)) : batch;
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    std::optional<size_t> culprit;
    if (samples.size() == 1) {
      culprit = samples.front();
    }
    for (size_t i = 0; samples.size() > 1 && i < samples.size() && !culprit; ++i) {
      try {
        dataset.get_batch(std::vector<size_t>{samples[i]});
      } catch (...) {
        culprit = samples[i];
        error = std::current_exception();
      }
    }
    throw_read_error(error, schedule, k, samples, culprit);
  }
}

template <typename T> struct is_std_optional : std::false_type {};
template <typename T> struct is_std_optional<std::optional<T>> : std::true_type {};

template <typename Dataset, typename = void> struct has_get_batch : std::false_type {};
template <typename Dataset>
struct has_get_batch<Dataset, std::void_t<decltype(std::declval<Dataset&>().get_batch(
                                  std::declval<const std::vector<size_t>&>()))>> : std::true_type {};

template <typename Dataset> std::optional<size_t> dataset_size(const Dataset& dataset) {
  auto size = dataset.size();
  if constexpr (is_std_optional<decltype(size)>::value) {
    return size ? std::optional<size_t>(static_cast<size_t>(*size)) : std::nullopt;
  } else {
    return static_cast<size_t>(size);
  }
}

/// The iterator of a prepared loader (DataLoader, IterableAdapter): an input iterator over one pass, whose
/// copies share the pass. `Pass` is built from the loader, holds the current batch in `batch` (a
/// `std::optional<Batch>`, empty once the pass is over) and fetches the next one in `advance()`.
template <typename Pass, typename Batch> class PassIterator {
public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using pointer = Batch*;
  using reference = Batch&;

  /// The end of every pass.
  PassIterator() = default;
  /// Starts a pass of `loader` and fetches its first batch.
  template <typename Loader> static PassIterator start(Loader* loader) {
    auto pass = std::make_shared<Pass>(loader);
    pass->advance();
    return PassIterator(std::move(pass));
  }

  Batch& operator*() const { return *pass_->batch; }
  Batch* operator->() const { return &*pass_->batch; }
  PassIterator& operator++() {
    pass_->advance();
    return *this;
  }
  bool operator==(const PassIterator& other) const { return at_end() == other.at_end(); }
  bool operator!=(const PassIterator& other) const { return !(*this == other); }

private:
  explicit PassIterator(std::shared_ptr<Pass> pass) : pass_(std::move(pass)) {}
  bool at_end() const { return !pass_ || !pass_->batch; }
  std::shared_ptr<Pass> pass_;
};

} // namespace detail

// ---- The prepared loader ---------------------------------------------------------------------------------

/// A data loader over a map-style dataset, sharded across processes independently of their number: each
/// epoch draws one order of the whole dataset from (seed, epoch), the same on every process; global batch k
/// is a fixed slice of it, and process r takes its part. Batches arrive on the accelerator's device. Built by
/// `Accelerator::prepare_data_loader`; iterate it like libtorch's loader.
///
/// The loader is a handle to shared state: `set_epoch`, `state` / `set_state` (checkpoints) act on the loader
/// the program holds. A full pass advances the epoch by itself, so each epoch reshuffles; a pass abandoned
/// mid-epoch (`break`) leaves the epoch as it was. `gradient_state()` tells the accumulation logic which
/// batch is the last one (`end_of_dataloader`, `batches_remaining`) and how much of a padded final batch is
/// real (`remainder`, used by `gather_for_metrics`). When every process must stop early, stop them at the
/// same batch (e.g. with `set_trigger` / `check_trigger`): the processes' collectives must stay matched.
///
/// With `workers(N)`, N threads read and collate batches ahead (at most `N × prefetch_factor` waiting), each
/// from its own copy of the dataset; the loop gets exactly the batches, in exactly the order, that
/// `workers(0)` gives, and `state()` counts the batches handed to the loop, not the ones read ahead. Random
/// augmentation in `get` drawn from `accelerate::sample_generator(index)` does not depend on N. An exception
/// in `get` reaches the loop when its batch is due, naming the sample (`std::runtime_error`, the original
/// nested); leaving a pass early (`break`) stops and joins the threads.
///
/// ```
/// auto dataset = torch::data::datasets::MNIST("data").map(torch::data::transforms::Stack<>());
/// auto loader = accelerator.prepare_data_loader(std::move(dataset), accelerate::DataLoaderOptions(64));
/// for (int epoch = 0; epoch < 3; ++epoch) {
///   for (auto& batch : *loader) {            // batch.data and batch.target are on accelerator.device()
///     auto step = accelerator.accumulate(model);
///     ...
///   }
/// }
/// auto saved = loader->state();              // {epoch, batches_consumed, seed}
/// loader->set_state(saved);                  // the next pass continues after the last batch taken
/// ```
template <typename Dataset> class DataLoader {
  static_assert(
      detail::has_get_batch<Dataset>::value,
      "accelerate::DataLoader: the dataset needs get_batch(indices) returning a batch (a map-style "
      "dataset, e.g. MyDataset(...).map(torch::data::transforms::Stack<>())); for other sources use "
      "accelerate::prepare_iterable");

public:
  using DatasetType = Dataset;
  using BatchType =
      std::decay_t<decltype(std::declval<Dataset&>().get_batch(std::declval<const std::vector<size_t>&>()))>;
  static_assert(
      !detail::is_std_optional<BatchType>::value,
      "accelerate::DataLoader: stateful datasets (get_batch returning std::optional, such as "
      "ChunkDataset) are streams, not map-style; wrap their loader with accelerate::prepare_iterable");

private:
  /// One pass over the epoch: the reads, the workers, the copy ahead.
  struct Pass {
    explicit Pass(DataLoader* loader) : loader(loader) {
      auto& core = *loader->core_;
      core.begin_pass();
      schedule = core.schedule();
      const auto& options = core.options();
      pin = options.pin_memory() && core.context().device.is_cuda();
      dispatcher = core.context().dispatcher.get();
      // The context has a copier on CUDA with non_blocking (or where a test gives it one).
      copier = options.pin_memory() && !dispatcher ? core.context().copier.get() : nullptr;
      const int processes = core.context().num_processes;
      receives = dispatcher && core.context().process_index != 0;
      if (loader->worker_datasets_ && !receives) {
        try {
          pool = std::make_unique<detail::WorkerPool>(
              options.workers(), options.workers() * options.prefetch_factor(), schedule->first,
              schedule->end,
              [datasets = loader->worker_datasets_, schedule = schedule, pin = pin,
               processes = dispatcher ? processes : 0](size_t worker, size_t k) {
                if (processes > 0) {
                  return std::static_pointer_cast<void>(
                      std::make_shared<Round>(read_round((*datasets)[worker], *schedule, k, pin, processes)));
                }
                return std::static_pointer_cast<void>(
                    std::make_shared<BatchType>(detail::read_batch((*datasets)[worker], *schedule, k, pin)));
              });
        } catch (...) {
          core.end_pass();
          throw;
        }
      }
    }
    ~Pass() {
      pool.reset(); // stops and joins the workers before the pass ends
      loader->core_->end_pass();
    }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    void advance() {
      batch.reset();
      auto& core = *loader->core_;
      const std::optional<size_t> k = core.upcoming_batch();
      if (!k) {
        core.next_batch(); // ends the pass
        return;
      }
      if (ahead_index == k) { // read, and copied on the side stream, while the previous step was queued
        ahead_index.reset();
        if (ahead_error) {
          std::rethrow_exception(std::exchange(ahead_error, nullptr));
        }
        copier->wait();
        core.next_batch();
        batch = std::move(ahead);
        ahead.reset();
      } else {
        // Read before the batch is handed out: a batch that fails to read is not counted as consumed.
        BatchType read = dispatcher ? dispatched(*k) : read_own(*k);
        core.next_batch();
        batch.emplace(to_device(std::move(read), core.context().device, core.context().non_blocking));
      }
      if (copier && *k + 1 < schedule->end) {
        read_ahead(*k + 1);
      }
    }
    BatchType read_own(size_t k) {
      return pool ? std::move(*std::static_pointer_cast<BatchType>(pool->take(k)))
                  : detail::read_batch(loader->dataset_, *schedule, k, pin);
    }
    /// Reads batch `k` and starts its copy on the side stream; an error is kept until `k` is due.
    void read_ahead(size_t k) {
      ahead_index = k;
      try {
        BatchType read = read_own(k);
        struct Scope {
          explicit Scope(detail::SideStreamCopier* copier) { detail::copying_batch = copier; }
          ~Scope() { detail::copying_batch = nullptr; }
        } scope(copier);
        ahead.emplace(to_device(std::move(read), loader->core_->context().device, true));
        copier->record();
      } catch (...) {
        ahead.reset();
        ahead_error = std::current_exception();
      }
    }
    /// dispatch_batches: the main process reads batch `k` of every process that has one and sends the
    /// others theirs; the others receive theirs.
    BatchType dispatched(size_t k) {
      if constexpr (detail::DispatchFields<BatchType>::supported) {
        if (receives) {
          const std::vector<torch::Tensor> tensors = dispatcher->receive(pin);
          size_t next = 0;
          BatchType batch = detail::DispatchFields<BatchType>::rebuild(tensors, next);
          detail::check_dispatched_all(tensors, next);
          return batch;
        }
        const int processes = loader->core_->context().num_processes;
        Round round;
        try {
          round = pool ? std::move(*std::static_pointer_cast<Round>(pool->take(k)))
                       : read_round(loader->dataset_, *schedule, k, pin, processes);
        } catch (const std::exception& error) {
          dispatcher->send_error(waiting(k, processes), error.what());
          throw;
        } catch (...) {
          dispatcher->send_error(waiting(k, processes), "reading the batch threw an exception that is not a "
                                                        "std::exception");
          throw;
        }
        std::vector<std::optional<std::vector<torch::Tensor>>> sent(static_cast<size_t>(processes));
        for (size_t r = 1; r < round.size(); ++r) {
          if (round[r]) {
            sent[r].emplace();
            detail::DispatchFields<BatchType>::flatten(*round[r], *sent[r]);
          }
        }
        dispatcher->send(sent);
        return std::move(*round[0]);
      } else {
        detail::throw_undispatchable_batch(c10::demangle(typeid(BatchType).name())); // refused when built
      }
    }
    /// The processes other than the main one that take a batch `k`.
    std::vector<int> waiting(size_t k, int processes) const {
      std::vector<int> result;
      for (int r = 1; r < processes; ++r) {
        if (schedule->has_batch(k, r)) {
          result.push_back(r);
        }
      }
      return result;
    }

    DataLoader* loader;
    std::shared_ptr<const detail::PassSchedule> schedule;
    bool pin = false;
    detail::BatchDispatcher* dispatcher = nullptr;
    /// dispatch_batches on a process other than the main one: batches arrive from the main process.
    bool receives = false;
    /// Pinned batches to CUDA with non_blocking (not with dispatch_batches): the next batch is read and its
    /// copy started on a side stream as soon as the current one is handed out.
    detail::SideStreamCopier* copier = nullptr;
    std::optional<size_t> ahead_index;
    std::optional<BatchType> ahead;
    std::exception_ptr ahead_error;
    std::unique_ptr<detail::WorkerPool> pool;
    std::optional<BatchType> batch;
  };

public:
  /// An input iterator over one pass; copies share the pass.
  using Iterator = detail::PassIterator<Pass, BatchType>;

  /// Prefer `Accelerator::prepare_data_loader`, which fills `context` from the accelerator.
  DataLoader(Dataset dataset, DataLoaderOptions options, detail::LoaderContext context)
      : dataset_(std::move(dataset)), core_(make_core(dataset_, std::move(options), std::move(context))),
        worker_datasets_(worker_copies(dataset_, core_->options().workers())) {}
  // Iterators point at their loader: copying one would be a second loader sharing the first one's position.
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  DataLoader(DataLoader&&) = default;
  DataLoader& operator=(DataLoader&&) = default;

  /// Starts a pass and fetches its first batch. One pass at a time: an iterator of an unfinished pass must be
  /// gone first.
  Iterator begin() { return Iterator::start(this); }
  Iterator end() { return Iterator(); }

  /// This process's batches per epoch.
  size_t size() const { return core_->plan().batches_for_process(); }
  /// Moves to the start of `epoch` (a no-op when it is the current one). Passes advance it by themselves.
  void set_epoch(uint64_t epoch) { core_->set_epoch(epoch); }
  uint64_t epoch() const { return core_->state().epoch; }
  /// Where the loader stands, for a checkpoint.
  DataLoaderState state() const { return core_->state(); }
  /// Continues from a checkpoint: the next pass starts after the batches `state` consumed.
  void set_state(const DataLoaderState& state) { core_->set_state(state); }

  /// The dataset the calling thread reads (with workers, each worker reads its own copy, made when the loader
  /// was built).
  Dataset& dataset() { return dataset_; }
  const DataLoaderOptions& options() const { return core_->options(); }
  /// The shared state behind this loader (for the runtime's checkpointing).
  const std::shared_ptr<detail::LoaderCore>& core() const { return core_; }

private:
  /// dispatch_batches: batch `k` of each process, read by the main process (empty for a process that takes
  /// none); only the main process's own batch is pinned.
  using Round = std::vector<std::optional<BatchType>>;
  static Round read_round(Dataset& dataset, const detail::PassSchedule& schedule, size_t k, bool pin,
                          int processes) {
    Round round(static_cast<size_t>(processes));
    for (int r = 0; r < processes; ++r) {
      if (schedule.has_batch(k, r)) {
        round[static_cast<size_t>(r)].emplace(detail::read_batch(dataset, schedule, k, pin && r == 0, r));
      }
    }
    return round;
  }

  /// Refuses `dispatch_batches` for a batch type that cannot travel as tensors, on every process alike and
  /// before any message is sent.
  static std::shared_ptr<detail::LoaderCore> make_core(const Dataset& dataset, DataLoaderOptions options,
                                                       detail::LoaderContext context) {
    if constexpr (!detail::DispatchFields<BatchType>::supported) {
      if (context.dispatch_batches) {
        detail::throw_undispatchable_batch(c10::demangle(typeid(BatchType).name()));
      }
    }
    return detail::LoaderCore::create(detail::dataset_size(dataset), std::move(options), std::move(context));
  }

  /// Each worker thread's copy of the dataset; null without workers.
  static std::shared_ptr<std::vector<Dataset>> worker_copies(const Dataset& dataset, size_t workers) {
    if (workers == 0) {
      return nullptr;
    }
    if constexpr (std::is_copy_constructible_v<Dataset>) {
      return std::make_shared<std::vector<Dataset>>(workers, dataset);
    } else {
      detail::throw_uncopyable_dataset(workers);
    }
  }

  Dataset dataset_;
  std::shared_ptr<detail::LoaderCore> core_;
  std::shared_ptr<std::vector<Dataset>> worker_datasets_;
};

template <typename Dataset>
std::unique_ptr<DataLoader<Dataset>> Accelerator::prepare_data_loader(Dataset dataset,
                                                                      DataLoaderOptions options) {
  return std::make_unique<DataLoader<Dataset>>(std::move(dataset), std::move(options), loader_context());
}

// ---- Loaders that are not torch::data --------------------------------------------------------------------
namespace detail {

/// Rows in a batch (its first dimension), when the batch type says: tensors, `Example`s (their data), tuples
/// and pairs (their first element), vectors of `Example`s (their length). `std::nullopt` otherwise.
template <typename T> std::optional<int64_t> batch_rows(const T&) {
  return std::nullopt;
}
inline std::optional<int64_t> batch_rows(const torch::Tensor& batch) {
  return batch.defined() && batch.dim() > 0 ? std::optional<int64_t>(batch.size(0)) : std::nullopt;
}
template <typename Data, typename Target>
std::optional<int64_t> batch_rows(const torch::data::Example<Data, Target>& batch) {
  return batch_rows(batch.data);
}
template <typename... Ts> std::optional<int64_t> batch_rows(const std::tuple<Ts...>& batch) {
  if constexpr (sizeof...(Ts) > 0) {
    return batch_rows(std::get<0>(batch));
  }
  return std::nullopt;
}
template <typename First, typename Second>
std::optional<int64_t> batch_rows(const std::pair<First, Second>& batch) {
  return batch_rows(batch.first);
}
template <typename Data, typename Target>
std::optional<int64_t> batch_rows(const std::vector<torch::data::Example<Data, Target>>& batch) {
  return static_cast<int64_t>(batch.size());
}

/// Publishes an adapter's position to the gradient state and restores what it found when the pass ends.
class IterablePassState {
public:
  explicit IterablePassState(std::shared_ptr<GradientState> state);
  ~IterablePassState();
  IterablePassState(const IterablePassState&) = delete;
  IterablePassState& operator=(const IterablePassState&) = delete;
  void publish(bool last, int64_t remainder);
  void finish() noexcept;

private:
  std::shared_ptr<GradientState> state_;
  GradientState saved_;
  bool active_ = true;
};

} // namespace detail

/// Shards any other loader — a range whose iterators yield batches, the same sequence on every process —
/// among the processes: of each round of P consecutive batches, process r takes batch r, moved to the
/// device. A final round of fewer than P batches is completed with batches from the first round (so every
/// process steps as often; `gather_for_metrics` drops the repeats when `batch_rows` can count them), or
/// dropped with `drop_last`. Every process reads the whole range, so keep batches cheap to produce or
/// pre-shard the source yourself. The adapter keeps no position: resuming mid-epoch is the source's job.
///
/// ```
/// std::vector<std::pair<torch::Tensor, torch::Tensor>> batches = load_my_batches(); // same on every process
/// for (auto& [inputs, labels] : accelerate::prepare_iterable(accelerator, batches)) {
///   auto loss = torch::mse_loss(model->forward(inputs), labels);   // on accelerator.device()
///   accelerator.backward(loss);
/// }
/// ```
template <typename Range> class IterableAdapter {
  using SourceIterator = decltype(std::begin(std::declval<Range&>()));

public:
  using BatchType = std::decay_t<decltype(*std::declval<SourceIterator&>())>;

private:
  /// One pass over the range.
  struct Pass {
    explicit Pass(IterableAdapter* adapter)
        : adapter(adapter), source(std::begin(adapter->range_)), source_end(std::end(adapter->range_)),
          gradient(adapter->gradient_state_) {}

    void advance() {
      batch.reset();
      const auto processes = static_cast<size_t>(adapter->num_processes_);
      const auto rank = static_cast<size_t>(adapter->process_index_);
      if (finished) {
        gradient.finish();
        return;
      }
      std::vector<BatchType> round = std::move(lookahead);
      lookahead.clear();
      while (round.size() < processes && source != source_end) {
        round.push_back(*source);
        ++source;
      }
      if (round.empty() || (round.size() < processes && adapter->drop_last_)) {
        finished = true;
        gradient.finish();
        return;
      }
      if (first_round.empty() && processes > 1 && !adapter->drop_last_) {
        first_round = round; // the batches a short final round is completed with
      }
      const size_t real = round.size();
      int64_t remainder = -1;
      if (real < processes) {
        std::optional<int64_t> rows = 0;
        for (const auto& real_batch : round) {
          auto count = detail::batch_rows(real_batch);
          rows = rows && count ? std::optional<int64_t>(*rows + *count) : std::nullopt;
        }
        remainder = rows.value_or(-1);
        for (size_t j = 0; round.size() < processes; ++j) {
          round.push_back(first_round[j % first_round.size()]);
        }
        finished = true;
      } else if (source != source_end) {
        lookahead.push_back(*source); // to know whether this round is the last
        ++source;
      } else {
        finished = true;
      }
      gradient.publish(finished, remainder);
      batch.emplace(to_device(std::move(round[rank]), adapter->device_));
    }

    IterableAdapter* adapter;
    SourceIterator source;
    SourceIterator source_end;
    detail::IterablePassState gradient;
    std::vector<BatchType> first_round;
    std::vector<BatchType> lookahead;
    std::optional<BatchType> batch;
    bool finished = false;
  };

public:
  /// An input iterator over one pass; copies share the pass.
  using Iterator = detail::PassIterator<Pass, BatchType>;

  IterableAdapter(Range range, int num_processes, int process_index, torch::Device device,
                  std::shared_ptr<GradientState> gradient_state, bool drop_last)
      : range_(std::forward<Range>(range)), num_processes_(num_processes), process_index_(process_index),
        device_(device), gradient_state_(std::move(gradient_state)), drop_last_(drop_last) {}

  Iterator begin() { return Iterator::start(this); }
  Iterator end() { return Iterator(); }

private:
  Range range_; // a reference when the adapter was made from an lvalue
  int num_processes_;
  int process_index_;
  torch::Device device_;
  std::shared_ptr<GradientState> gradient_state_;
  bool drop_last_;
};

/// This process's share of `range` (see `IterableAdapter`), on `accelerator.device()`. An lvalue range is
/// referred to (keep it alive while iterating); an rvalue is moved into the adapter.
template <typename Range>
IterableAdapter<Range> prepare_iterable(Accelerator& accelerator, Range&& range, bool drop_last = false) {
  return IterableAdapter<Range>(std::forward<Range>(range), accelerator.num_processes(),
                                accelerator.process_index(), accelerator.device(),
                                accelerator.gradient_state(), drop_last);
}

} // namespace accelerate
