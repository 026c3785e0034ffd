// The non-template half of the prepared data loader: epoch order, sharding plan, position, pass bookkeeping.
#include <accelerate/accelerator.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

namespace accelerate::detail {
namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, fast, and trivially reproducible in any language.
class SplitMix64 {
public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next() { return mix(state_ += 0x9E3779B97F4A7C15ULL); }
  /// Uniform in [0, bound) without modulo bias (Lemire, "Fast random integer generation in an interval").
  uint64_t below(uint64_t bound) {
    unsigned __int128 product = static_cast<unsigned __int128>(next()) * bound;
    auto low = static_cast<uint64_t>(product);
    if (low < bound) {
      const uint64_t threshold = (0 - bound) % bound; // 2^64 mod bound
      while (low < threshold) {
        product = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<uint64_t>(product);
      }
    }
    return static_cast<uint64_t>(product >> 64);
  }

private:
  uint64_t state_;
};

} // namespace

std::vector<size_t> epoch_order(size_t size, uint64_t seed, uint64_t epoch, bool shuffle) {
  std::vector<size_t> order(size);
  for (size_t i = 0; i < size; ++i) {
    order[i] = i;
  }
  if (shuffle && size > 1) {
    SplitMix64 generator(mix(mix(seed) ^ epoch));
    for (size_t i = size - 1; i > 0; --i) {
      std::swap(order[i], order[generator.below(static_cast<uint64_t>(i) + 1)]);
    }
  }
  return order;
}

// ---- ShardPlan -------------------------------------------------------------------------------------------

ShardPlan::ShardPlan(size_t dataset_size, const DataLoaderOptions& options, const LoaderContext& context)
    : dataset_size_(dataset_size), per_process_(options.batch_size()), num_processes_(context.num_processes),
      process_index_(context.process_index), drop_last_(options.drop_last()),
      even_batches_(context.even_batches) {
  if (num_processes_ < 1 || process_index_ < 0 || process_index_ >= num_processes_) {
    throw std::invalid_argument(
        "accelerate::DataLoader: process " + std::to_string(process_index_) + " of " +
        std::to_string(num_processes_) +
        " is not a valid position in the job (need 0 <= process_index < num_processes)");
  }
  if (options.batch_size() == 0) {
    throw std::invalid_argument("accelerate::DataLoader: DataLoaderOptions.batch_size must be >= 1 (got 0)");
  }
  if (context.split_batches) {
    const auto processes = static_cast<size_t>(num_processes_);
    if (options.batch_size() % processes != 0) {
      throw std::invalid_argument("accelerate::DataLoader: with split_batches, DataLoaderOptions.batch_size "
                                  "is the global batch and must "
                                  "be a multiple of the number of processes (got batch_size " +
                                  std::to_string(options.batch_size()) + " for " + std::to_string(processes) +
                                  " processes); choose a multiple, or turn split_batches off to give each "
                                  "process batch_size samples");
    }
    per_process_ = options.batch_size() / processes;
  }
}

size_t ShardPlan::global_batches() const {
  const size_t global = global_batch_size();
  return drop_last_ ? dataset_size_ / global : (dataset_size_ + global - 1) / global;
}

size_t ShardPlan::batches_for_process(int process) const {
  const size_t global = global_batch_size();
  const size_t full = dataset_size_ / global;
  const size_t rest = dataset_size_ % global;
  if (drop_last_ || rest == 0) {
    return full;
  }
  if (even_batches_ || num_processes_ == 1) {
    return full + 1;
  }
  // Uneven: only the processes whose slice of the short final batch holds a sample get a batch of it.
  return full + (rest > static_cast<size_t>(process) * per_process_ ? 1 : 0);
}

int64_t ShardPlan::remainder() const {
  const size_t rest = dataset_size_ % global_batch_size();
  const bool padded = !drop_last_ && even_batches_ && num_processes_ > 1 && rest > 0;
  return padded ? static_cast<int64_t>(rest) : -1;
}

std::vector<size_t> ShardPlan::positions(size_t k, int process) const {
  if (k >= global_batches()) {
    throw std::out_of_range("accelerate::DataLoader: global batch " + std::to_string(k) + " is past the " +
                            std::to_string(global_batches()) + " batches of an epoch");
  }
  const size_t begin = k * global_batch_size() + static_cast<size_t>(process) * per_process_;
  const size_t end = begin + per_process_;
  const bool pad = remainder() >= 0;
  std::vector<size_t> result;
  result.reserve(per_process_);
  for (size_t position = begin; position < end; ++position) {
    if (position < dataset_size_) {
      result.push_back(position);
    } else if (pad) {
      result.push_back((position - dataset_size_) % dataset_size_); // wrap to the start of the order
    } else {
      break;
    }
  }
  return result;
}

std::vector<size_t> PassSchedule::samples(size_t k) const {
  return samples(k, plan->process_index());
}

std::vector<size_t> PassSchedule::samples(size_t k, int process) const {
  std::vector<size_t> indices = plan->positions(k, process);
  for (auto& position : indices) {
    position = (*order)[position];
  }
  return indices;
}

// ---- LoaderCore ------------------------------------------------------------------------------------------

namespace {

size_t require_size(std::optional<size_t> size) {
  if (!size) {
    throw std::invalid_argument(
        "accelerate::prepare_data_loader: the dataset's size() is empty (an unsized dataset); a prepared "
        "loader "
        "shards a map-style dataset by index and needs its size. Return the size from size(), or wrap a "
        "stream's loader with accelerate::prepare_iterable");
  }
  return *size;
}

/// Refuses options no loader can use; says once what is allowed but probably not meant.
const DataLoaderOptions& require_usable(const DataLoaderOptions& options, const LoaderContext& context) {
  if (options.prefetch_factor() == 0) {
    throw std::invalid_argument(
        "accelerate::prepare_data_loader: DataLoaderOptions.prefetch_factor must be >= 1 (got 0): it is how "
        "many batches each worker thread reads ahead; keep the default (2), or set workers(0) to read "
        "batches on the calling thread");
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  if (hardware > 0 && options.workers() > hardware) {
    TORCH_WARN("accelerate::prepare_data_loader: DataLoaderOptions.workers = ", options.workers(),
               " is more than the ", hardware,
               " hardware threads of this machine; the workers will share them (allowed, but rarely faster "
               "than workers(",
               hardware, "))");
  }
  if (options.pin_memory() && !context.device.is_cuda()) {
    TORCH_WARN("accelerate::prepare_data_loader: DataLoaderOptions.pin_memory(true) does nothing when "
               "training on ",
               context.device.str(),
               ": pinned memory only speeds up copies to a CUDA device; batches are read as without it");
  }
  return options;
}

} // namespace

LoaderCore::LoaderCore(std::optional<size_t> dataset_size, DataLoaderOptions options, LoaderContext context)
    : options_(require_usable(options, context)), context_(std::move(context)),
      plan_(std::make_shared<const ShardPlan>(
          require_size(context_.dispatcher ? context_.dispatcher->dataset_size(dataset_size) : dataset_size),
          options_, context_)) {
  position_.seed = context_.seed;
}

std::shared_ptr<LoaderCore> LoaderCore::create(std::optional<size_t> dataset_size, DataLoaderOptions options,
                                               LoaderContext context) {
  auto core = std::make_shared<LoaderCore>(dataset_size, std::move(options), std::move(context));
  if (const auto& registry = core->context_.registry) {
    auto& cores = registry->cores;
    cores.erase(std::remove_if(cores.begin(), cores.end(), [](const auto& entry) { return entry.expired(); }),
                cores.end());
    cores.push_back(core);
  }
  return core;
}

LoaderCore::~LoaderCore() {
  end_pass();
}

DataLoaderState LoaderCore::state() const {
  DataLoaderState state = position_;
  state.global_batch_size = plan_->global_batch_size();
  return state;
}

void LoaderCore::set_state(const DataLoaderState& state) {
  if (in_pass_) {
    throw std::logic_error("accelerate::DataLoader::set_state: called while a pass over the loader is in "
                           "progress (epoch " +
                           std::to_string(position_.epoch) + ", batch " +
                           std::to_string(position_.batches_consumed) +
                           "); restore the state before iterating");
  }
  const uint64_t global = plan_->global_batch_size();
  uint64_t batches = state.batches_consumed;
  if (state.global_batch_size != 0 && state.global_batch_size != global) {
    // Saved with another global batch size (another number of processes): resume at the same sample.
    const uint64_t samples = state.batches_consumed * state.global_batch_size;
    if (samples >= plan_->dataset_size()) {
      batches = plan_->global_batches();
    } else if (samples % global == 0) {
      batches = samples / global;
    } else {
      throw std::invalid_argument(
          "accelerate::DataLoader::set_state: the state was saved after " + std::to_string(samples) +
          " samples of epoch " + std::to_string(state.epoch) + " (" + std::to_string(state.batches_consumed) +
          " global batches of " + std::to_string(state.global_batch_size) +
          "), and this loader's global batch of " + std::to_string(global) +
          " (batch size x processes) does not divide it; resume with a global batch size that divides " +
          std::to_string(samples) + ", or keep it at " + std::to_string(state.global_batch_size));
    }
  }
  if (batches > plan_->global_batches()) {
    throw std::invalid_argument(
        "accelerate::DataLoader::set_state: batches_consumed = " + std::to_string(batches) + " exceeds the " +
        std::to_string(plan_->global_batches()) +
        " global batches of an epoch; the state was saved with another dataset size or global batch size");
  }
  position_ = state;
  position_.batches_consumed = batches;
  position_.global_batch_size = 0; // kept in the plan; state() reports it
  resume_pending_ = batches > 0;
}

void LoaderCore::set_epoch(uint64_t epoch) {
  if (epoch == position_.epoch) {
    return;
  }
  if (in_pass_) {
    throw std::logic_error("accelerate::DataLoader::set_epoch(" + std::to_string(epoch) +
                           "): called while a pass over epoch " + std::to_string(position_.epoch) +
                           " is in progress; call it between passes");
  }
  position_.epoch = epoch;
  position_.batches_consumed = 0;
  resume_pending_ = false;
}

void LoaderCore::set_seed(uint64_t seed) {
  if (seed == position_.seed) {
    return;
  }
  if (in_pass_) {
    throw std::logic_error("accelerate::DataLoader: the seed changed (to " + std::to_string(seed) +
                           ") while a pass over the loader is in progress; call set_seed between passes");
  }
  position_.seed = seed;
  position_.batches_consumed = 0; // a position in another order means nothing
  resume_pending_ = false;
}

void LoaderCore::begin_pass() {
  if (in_pass_) {
    throw std::logic_error(
        "accelerate::DataLoader::begin: a pass over this loader is still in progress (epoch " +
        std::to_string(position_.epoch) + ", " + std::to_string(position_.batches_consumed) +
        " batches taken); let its iterators go (or run it to the end) before starting another");
  }
  if (!resume_pending_) {
    position_.batches_consumed = 0;
  }
  resume_pending_ = false;
  auto schedule = std::make_shared<PassSchedule>();
  schedule->seed = position_.seed;
  schedule->epoch = position_.epoch;
  schedule->first = position_.batches_consumed;
  pass_start_ = schedule->first;
  schedule->end = std::max(plan_->batches_for_process(), schedule->first);
  schedule->plan = plan_;
  schedule->order = order();
  schedule_ = std::move(schedule);
  in_pass_ = true;
  if (context_.gradient_state) {
    saved_ = *context_.gradient_state;
  }
}

std::shared_ptr<const std::vector<size_t>> LoaderCore::order() {
  const std::pair<uint64_t, uint64_t> key{position_.seed, position_.epoch};
  if (!order_key_ || *order_key_ != key) {
    order_ = std::make_shared<const std::vector<size_t>>(
        epoch_order(plan_->dataset_size(), position_.seed, position_.epoch, options_.shuffle()));
    order_key_ = key;
  }
  return order_;
}

void LoaderCore::publish(size_t batch_index) {
  if (!context_.gradient_state) {
    return;
  }
  auto& state = *context_.gradient_state;
  const auto remaining =
      static_cast<int64_t>(plan_->batches_for_process()) - static_cast<int64_t>(batch_index) - 1;
  state.in_dataloader = true;
  state.end_of_dataloader = remaining == 0;
  state.batches_remaining = remaining;
  state.remainder = plan_->remainder();
}

std::optional<size_t> LoaderCore::upcoming_batch() const {
  if (!in_pass_ || position_.batches_consumed >= plan_->batches_for_process()) {
    return std::nullopt;
  }
  return static_cast<size_t>(position_.batches_consumed);
}

std::optional<size_t> LoaderCore::next_batch() {
  if (!in_pass_) {
    return std::nullopt;
  }
  const bool uneven = context_.joiner && !context_.even_batches && context_.num_processes > 1;
  const size_t index = position_.batches_consumed;
  if (index >= plan_->batches_for_process()) {
    position_.epoch += 1;
    position_.batches_consumed = 0;
    end_pass();
    if (uneven) {
      // Like every process before every step, this one says whether it has a batch (it has none now), then
      // answers the others' gradient synchronisation until they run out too.
      context_.joiner->processes_with_batches(false);
      context_.joiner->join_until_all_exhausted();
    }
    return std::nullopt;
  }
  if (uneven) {
    context_.joiner->processes_with_batches(true);
  }
  position_.batches_consumed = index + 1;
  publish(index);
  return index;
}

void LoaderCore::end_pass() noexcept {
  if (!in_pass_) {
    return;
  }
  in_pass_ = false;
  schedule_.reset();
  if (context_.gradient_state) {
    auto& state = *context_.gradient_state;
    state.in_dataloader = saved_.in_dataloader;
    state.end_of_dataloader = saved_.end_of_dataloader;
    state.remainder = saved_.remainder;
    state.batches_remaining = saved_.batches_remaining;
  }
}

// ---- Per-sample generators and read errors ---------------------------------------------------------------

namespace {

/// The (seed, epoch) of the pass whose batch this thread is reading, if any.
struct SampleContext {
  bool active = false;
  uint64_t seed = 0;
  uint64_t epoch = 0;
};
thread_local SampleContext sample_context;

} // namespace

SampleScope::SampleScope(uint64_t seed, uint64_t epoch)
    : outer_active_(sample_context.active), outer_seed_(sample_context.seed),
      outer_epoch_(sample_context.epoch) {
  sample_context = {true, seed, epoch};
}

SampleScope::~SampleScope() {
  sample_context = {outer_active_, outer_seed_, outer_epoch_};
}

[[noreturn]] void throw_read_error(std::exception_ptr error, const PassSchedule& schedule, size_t batch,
                                   const std::vector<size_t>& samples, std::optional<size_t> culprit) {
  std::string where = "accelerate::DataLoader: ";
  if (culprit) {
    where += "reading sample " + std::to_string(*culprit) + " (in batch " + std::to_string(batch) +
             " of epoch " + std::to_string(schedule.epoch) + ") failed: ";
  } else {
    where += "reading batch " + std::to_string(batch) + " of epoch " + std::to_string(schedule.epoch) +
             " (samples";
    for (size_t i = 0; i < samples.size() && i < 16; ++i) {
      where += " " + std::to_string(samples[i]);
    }
    where += samples.size() > 16 ? " ...)" : ")";
    where += " failed, though each sample reads alone (collating them failed?): ";
  }
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& original) {
    std::throw_with_nested(std::runtime_error(where + original.what_without_backtrace()));
  } catch (const std::exception& original) {
    std::throw_with_nested(std::runtime_error(where + original.what()));
  } catch (...) {
    std::throw_with_nested(std::runtime_error(where + "an exception that is not a std::exception"));
  }
}

[[noreturn]] void throw_uncopyable_dataset(size_t workers) {
  throw std::invalid_argument(
      "accelerate::prepare_data_loader: DataLoaderOptions.workers = " + std::to_string(workers) +
      " needs a copyable dataset (each worker thread reads its own copy, as libtorch's loader does), and "
      "this one cannot be copied; make it copyable (hold shared state through a std::shared_ptr), or set "
      "workers(0)");
}

} // namespace accelerate::detail

namespace accelerate {

at::Generator sample_generator(uint64_t seed, uint64_t epoch, size_t index) {
  using detail::mix;
  return at::make_generator<at::CPUGeneratorImpl>(mix(mix(mix(seed) ^ epoch) ^ mix(index + 1)));
}

at::Generator sample_generator(size_t index) {
  const auto& context = detail::sample_context;
  if (!context.active) {
    throw std::logic_error(
        "accelerate::sample_generator(" + std::to_string(index) +
        "): called outside a prepared loader's reading of a batch, so there is no seed and epoch to draw "
        "from; call it inside your dataset's get() while a prepared loader reads it, or pass them: "
        "accelerate::sample_generator(seed, epoch, index)");
  }
  return sample_generator(context.seed, context.epoch, index);
}

} // namespace accelerate

namespace accelerate::detail {

// ---- IterablePassState -----------------------------------------------------------------------------------

IterablePassState::IterablePassState(std::shared_ptr<GradientState> state) : state_(std::move(state)) {
  if (state_) {
    saved_ = *state_;
  }
}

IterablePassState::~IterablePassState() {
  finish();
}

void IterablePassState::publish(bool last, int64_t remainder) {
  if (!state_) {
    return;
  }
  state_->in_dataloader = true;
  state_->end_of_dataloader = last;
  state_->remainder = remainder;
  state_->batches_remaining = last ? 0 : -1;
}

void IterablePassState::finish() noexcept {
  if (!active_) {
    return;
  }
  active_ = false;
  if (state_) {
    state_->in_dataloader = saved_.in_dataloader;
    state_->end_of_dataloader = saved_.end_of_dataloader;
    state_->remainder = saved_.remainder;
    state_->batches_remaining = saved_.batches_remaining;
  }
}

} // namespace accelerate::detail
