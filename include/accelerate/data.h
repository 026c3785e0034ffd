// Distributed data loading: moving batches to the device, the prepared DataLoader over map-style datasets
// (sharded independently of the world size), and the adapter for loaders that are not torch::data.
// Included at the end of <accelerate/accelerator.h>: include <accelerate/accelerate.h> rather than this file.
#pragma once

#include <accelerate/data_options.h>
#include <accelerate/detail/loader_context.h>
#include <accelerate/gradient_state.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/data/example.h>
#include <torch/types.h>

namespace accelerate {

// ---- Moving batches to the device ------------------------------------------------------------------------

/// How `to_device` moves a value of type `T`. Provided for tensors, `torch::data::Example` (with or without a
/// target), `std::vector`, `std::tuple`, `std::pair`, `std::optional`, `std::map` / `std::unordered_map`
/// (values moved, keys kept), numbers and strings (left as they are). Specialize it for your own batch types:
///
/// ```
/// struct TokenBatch { torch::Tensor ids, mask; int64_t step; };
/// template <> struct accelerate::ToDevice<TokenBatch> {
///   static TokenBatch apply(TokenBatch batch, const torch::Device& device) {
///     return {accelerate::to_device(batch.ids, device), accelerate::to_device(batch.mask, device),
///     batch.step};
///   }
/// };
/// ```
template <typename T, typename Enable = void> struct ToDevice {
  static_assert(detail::unsupported_type<T>,
                "accelerate::to_device: no rule moves this batch type to a device; specialize "
                "accelerate::ToDevice<T> with `static T apply(T value, const torch::Device& device)` "
                "(see <accelerate/data.h>)");
};

/// `value` with every tensor in it on `device` (tensors already there are not copied).
///
/// ```
/// auto batch = accelerate::to_device(std::make_tuple(inputs, labels), accelerator.device());
/// ```
template <typename T> std::decay_t<T> to_device(T&& value, const torch::Device& device) {
  return ToDevice<std::decay_t<T>>::apply(std::forward<T>(value), device);
}

template <> struct ToDevice<torch::Tensor> {
  static torch::Tensor apply(torch::Tensor tensor, const torch::Device& device) {
    return tensor.defined() ? tensor.to(device) : tensor;
  }
};

template <typename Data, typename Target> struct ToDevice<torch::data::Example<Data, Target>> {
  static torch::data::Example<Data, Target> apply(torch::data::Example<Data, Target> example,
                                                  const torch::Device& device) {
    return {to_device(std::move(example.data), device), to_device(std::move(example.target), device)};
  }
};

template <typename Data> struct ToDevice<torch::data::Example<Data, torch::data::example::NoTarget>> {
  static torch::data::Example<Data, torch::data::example::NoTarget>
  apply(torch::data::Example<Data, torch::data::example::NoTarget> example, const torch::Device& device) {
    return {to_device(std::move(example.data), device)};
  }
};

template <typename T, typename Allocator> struct ToDevice<std::vector<T, Allocator>> {
  static std::vector<T, Allocator> apply(std::vector<T, Allocator> values, const torch::Device& device) {
    for (auto& value : values) {
      value = to_device(std::move(value), device);
    }
    return values;
  }
};

template <typename... Ts> struct ToDevice<std::tuple<Ts...>> {
  static std::tuple<Ts...> apply(std::tuple<Ts...> values, const torch::Device& device) {
    return std::apply(
        [&](auto&&... value) { return std::tuple<Ts...>(to_device(std::move(value), device)...); },
        std::move(values));
  }
};

template <typename First, typename Second> struct ToDevice<std::pair<First, Second>> {
  static std::pair<First, Second> apply(std::pair<First, Second> values, const torch::Device& device) {
    return {to_device(std::move(values.first), device), to_device(std::move(values.second), device)};
  }
};

template <typename T> struct ToDevice<std::optional<T>> {
  static std::optional<T> apply(std::optional<T> value, const torch::Device& device) {
    if (value) {
      return to_device(std::move(*value), device);
    }
    return value;
  }
};

template <typename Key, typename Value, typename Compare, typename Allocator>
struct ToDevice<std::map<Key, Value, Compare, Allocator>> {
  static std::map<Key, Value, Compare, Allocator> apply(std::map<Key, Value, Compare, Allocator> values,
                                                        const torch::Device& device) {
    for (auto& entry : values) {
      entry.second = to_device(std::move(entry.second), device);
    }
    return values;
  }
};

template <typename Key, typename Value, typename Hash, typename Equal, typename Allocator>
struct ToDevice<std::unordered_map<Key, Value, Hash, Equal, Allocator>> {
  using Map = std::unordered_map<Key, Value, Hash, Equal, Allocator>;
  static Map apply(Map values, const torch::Device& device) {
    for (auto& entry : values) {
      entry.second = to_device(std::move(entry.second), device);
    }
    return values;
  }
};

template <typename T> struct ToDevice<T, std::enable_if_t<std::is_arithmetic_v<T> || std::is_enum_v<T>>> {
  static T apply(T value, const torch::Device&) { return value; }
};

template <> struct ToDevice<std::string> {
  static std::string apply(std::string value, const torch::Device&) { return value; }
};

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
  /// B: samples per process per batch.
  size_t per_process_batch_size() const { return per_process_; }
  /// G = B × processes.
  size_t global_batch_size() const { return per_process_ * static_cast<size_t>(num_processes_); }
  /// Global batches per epoch, the final short one included unless `drop_last`.
  size_t global_batches() const;
  /// This process's batches per epoch.
  size_t batches_for_process() const;
  /// Real samples in the final global batch when `even_batches` padded it; -1 when nothing is padded.
  int64_t remainder() const;
  /// Positions in the epoch's order of this process's part of global batch `k`.
  std::vector<size_t> positions(size_t k) const;

private:
  size_t dataset_size_;
  size_t per_process_;
  int num_processes_;
  int process_index_;
  bool drop_last_;
  bool even_batches_;
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

  const ShardPlan& plan() const { return plan_; }
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
  /// The dataset indices of this process's next batch, after updating the gradient state and the position
  /// (and, with uneven batches, `joiner->processes_with_batches(true)`). `std::nullopt` at the end of the
  /// epoch: the pass ends, the epoch advances, and with uneven batches the process calls
  /// `joiner->processes_with_batches(false)` then `joiner->join_until_all_exhausted()`, answering the others'
  /// collectives until every process is exhausted.
  std::optional<std::vector<size_t>> next_batch();
  /// Ends the pass (idempotent): restores the gradient state as the pass found it. A pass left mid-epoch
  /// keeps its epoch, and the next pass starts that epoch again, as a Python loader does.
  void end_pass() noexcept;
  bool in_pass() const { return in_pass_; }

private:
  const std::vector<size_t>& order();
  void publish(size_t batch_index);

  DataLoaderOptions options_;
  LoaderContext context_;
  ShardPlan plan_;
  DataLoaderState position_;
  bool resume_pending_ = false;
  bool in_pass_ = false;
  GradientState saved_;
  std::vector<size_t> order_;
  std::optional<std::pair<uint64_t, uint64_t>> order_key_; // (seed, epoch) order_ was drawn from
};

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

  /// An input iterator over one pass; copies share the pass.
  class Iterator {
  public:
    using iterator_category = std::input_iterator_tag;
    using value_type = BatchType;
    using difference_type = std::ptrdiff_t;
    using pointer = BatchType*;
    using reference = BatchType&;

    Iterator() = default;
    BatchType& operator*() const { return *pass_->batch; }
    BatchType* operator->() const { return &*pass_->batch; }
    Iterator& operator++() {
      pass_->advance();
      return *this;
    }
    bool operator==(const Iterator& other) const { return at_end() == other.at_end(); }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

  private:
    friend class DataLoader;
    struct Pass {
      explicit Pass(DataLoader* loader) : loader(loader) { loader->core_->begin_pass(); }
      ~Pass() { loader->core_->end_pass(); }
      Pass(const Pass&) = delete;
      Pass& operator=(const Pass&) = delete;
      void advance() {
        batch.reset();
        if (auto indices = loader->core_->next_batch()) {
          batch.emplace(to_device(loader->dataset_.get_batch(*indices), loader->core_->context().device));
        }
      }
      DataLoader* loader;
      std::optional<BatchType> batch;
    };
    explicit Iterator(std::shared_ptr<Pass> pass) : pass_(std::move(pass)) {}
    bool at_end() const { return !pass_ || !pass_->batch; }
    std::shared_ptr<Pass> pass_;
  };

  /// Prefer `Accelerator::prepare_data_loader`, which fills `context` from the accelerator.
  DataLoader(Dataset dataset, DataLoaderOptions options, detail::LoaderContext context)
      : dataset_(std::move(dataset)),
        core_(detail::LoaderCore::create(detail::dataset_size(dataset_), options, std::move(context))) {}
  // Iterators point at their loader: copying one would be a second loader sharing the first one's position.
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  DataLoader(DataLoader&&) = default;
  DataLoader& operator=(DataLoader&&) = default;

  /// Starts a pass and fetches its first batch. One pass at a time: an iterator of an unfinished pass must be
  /// gone first.
  Iterator begin() {
    auto pass = std::make_shared<typename Iterator::Pass>(this);
    pass->advance();
    return Iterator(std::move(pass));
  }
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

  Dataset& dataset() { return dataset_; }
  const DataLoaderOptions& options() const { return core_->options(); }
  /// The shared state behind this loader (for the runtime's checkpointing).
  const std::shared_ptr<detail::LoaderCore>& core() const { return core_; }

private:
  Dataset dataset_;
  std::shared_ptr<detail::LoaderCore> core_;
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

  class Iterator {
  public:
    using iterator_category = std::input_iterator_tag;
    using value_type = BatchType;
    using difference_type = std::ptrdiff_t;
    using pointer = BatchType*;
    using reference = BatchType&;

    Iterator() = default;
    BatchType& operator*() const { return *pass_->batch; }
    BatchType* operator->() const { return &*pass_->batch; }
    Iterator& operator++() {
      pass_->advance();
      return *this;
    }
    bool operator==(const Iterator& other) const { return at_end() == other.at_end(); }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

  private:
    friend class IterableAdapter;
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
    explicit Iterator(std::shared_ptr<Pass> pass) : pass_(std::move(pass)) {}
    bool at_end() const { return !pass_ || !pass_->batch; }
    std::shared_ptr<Pass> pass_;
  };

  IterableAdapter(Range range, int num_processes, int process_index, torch::Device device,
                  std::shared_ptr<GradientState> gradient_state, bool drop_last)
      : range_(std::forward<Range>(range)), num_processes_(num_processes), process_index_(process_index),
        device_(device), gradient_state_(std::move(gradient_state)), drop_last_(drop_last) {}

  Iterator begin() {
    auto pass = std::make_shared<typename Iterator::Pass>(this);
    pass->advance();
    return Iterator(std::move(pass));
  }
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
