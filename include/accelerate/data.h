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

} // namespace accelerate

// The loader's internals, which use `to_device` and `DataLoaderState` above.
#include <accelerate/detail/batch_transfer.h>
#include <accelerate/detail/data_loader.h>

namespace accelerate {

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
  /// Where the pass in progress (or the latest one) began among this process's batches of its epoch: past
  /// the batches a resumed state had consumed (`set_state`, `load_state`), else at 0. A progress bar over the
  /// loader (`progress_bar`) starts there.
  size_t pass_start() const { return core_->pass_start(); }
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
