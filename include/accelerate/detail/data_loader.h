// The prepared DataLoader's machinery: epoch order, sharding plan, shared position, worker threads, batch
// reads and the pass iterator, and the helpers of the adapter for other loaders. Included by
// <accelerate/data.h> once `DataLoaderState` is defined; include <accelerate/accelerate.h> instead.
#pragma once

#include <accelerate/data_options.h>
#include <accelerate/detail/batch_transfer.h>
#include <accelerate/detail/loader_context.h>
#include <accelerate/gradient_state.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/data/example.h>
#include <torch/types.h>

namespace accelerate::detail {

// ---- Sharding and the loader's shared state --------------------------------------------------------------

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
/// template `DataLoader` only fetches and moves batches; everything else lives here
/// (runtime/data/loader.cpp).
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
  /// Where the latest pass began in this process's batches of its epoch: its schedule's `first` (past the
  /// batches a resumed state had consumed, else 0), kept after the pass ends.
  size_t pass_start() const { return pass_start_; }
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
  size_t pass_start_ = 0;
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

// ---- Loaders that are not torch::data --------------------------------------------------------------------

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

} // namespace accelerate::detail
