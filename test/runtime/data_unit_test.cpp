// Single-process tests of the data loader (epoch order, sharding plan, position, gradient state, joiner
// calls, to_device, the iterable adapter) and of the collectives' one-process behaviour. Multi-process
// sharding is tested here by building each process's LoaderContext by hand.
#include <accelerate/accelerate.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <dirent.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <thread>

namespace {

using accelerate::DataLoaderOptions;
using accelerate::detail::LoaderContext;
using accelerate::detail::ShardPlan;

/// Sample i is (data [i], target [2i]): a batch says which samples it holds.
struct IndexDataset : torch::data::datasets::Dataset<IndexDataset> {
  explicit IndexDataset(size_t size) : size_(size) {}
  torch::data::Example<> get(size_t index) override {
    const auto i = static_cast<int64_t>(index);
    return {torch::tensor({i}), torch::tensor({2 * i})};
  }
  std::optional<size_t> size() const override { return size_; }
  size_t size_;
};

auto stacked(size_t size) {
  return IndexDataset(size).map(torch::data::transforms::Stack<>());
}
using StackedDataset = decltype(stacked(0));

LoaderContext context(int processes, int rank, bool even_batches = true, bool split_batches = false,
                      uint64_t seed = 0) {
  LoaderContext context;
  context.num_processes = processes;
  context.process_index = rank;
  context.even_batches = even_batches;
  context.split_batches = split_batches;
  context.seed = seed;
  context.gradient_state = std::make_shared<accelerate::GradientState>();
  return context;
}

std::vector<int64_t> values(const torch::Tensor& tensor) {
  auto flat = tensor.to(torch::kCPU).to(torch::kInt64).reshape({-1}).contiguous();
  return {flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel()};
}

/// Every batch of one pass, as the sample indices each holds.
std::vector<std::vector<int64_t>> one_pass(accelerate::DataLoader<StackedDataset>& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (auto& batch : loader) {
    batches.push_back(values(batch.data));
  }
  return batches;
}

/// Collects the warnings libtorch's TORCH_WARN raises on this thread while alive.
struct WarningCollector : c10::WarningHandler {
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;
};

// On CUDA, a loader with pin_memory under AcceleratorOptions::non_blocking copies batch k+1 on a side stream
// while step k runs (runtime/transport/device_cuda.cpp). Its bookkeeping (read ahead, record, wait, a read
// that fails ahead, leaving early, the position) is tested with a CPU stand-in for the copier.

/// Stands in for the side-stream copier with the latest completion CUDA allows: a copy returns a tensor of
/// sentinel values (NaN, or -7777 for integers) and is carried out only when the loop waits for a `record`
/// made after it. A batch handed out before its copy was recorded and waited for holds the sentinel.
class DeferredCopier final : public accelerate::detail::SideStreamCopier {
public:
  at::Tensor copy(const at::Tensor& tensor, c10::Device device) override {
    EXPECT_EQ(std::this_thread::get_id(), loop_thread_) << "a copy is queued by the training thread";
    at::Tensor target = torch::empty_like(tensor, tensor.options().device(device));
    if (target.is_floating_point()) {
      target.fill_(std::numeric_limits<double>::quiet_NaN());
    } else {
      target.fill_(-7777);
    }
    queued_.push_back({tensor, target});
    return target;
  }
  void record() override {
    recorded_.insert(recorded_.end(), queued_.begin(), queued_.end());
    queued_.clear();
  }
  void wait() override {
    for (auto& [source, target] : recorded_) {
      target.copy_(source);
      ++done_;
    }
    recorded_.clear();
    ++waits_;
  }
  size_t done() const { return done_; }
  size_t waits() const { return waits_; }
  /// Copies queued and not yet carried out.
  size_t pending() const { return queued_.size() + recorded_.size(); }

private:
  std::thread::id loop_thread_ = std::this_thread::get_id();
  std::vector<std::pair<at::Tensor, at::Tensor>> queued_, recorded_;
  size_t done_ = 0, waits_ = 0;
};

/// `ctx` with `copier` as its side-stream copier.
LoaderContext copying(LoaderContext ctx, const std::shared_ptr<DeferredCopier>& copier) {
  ctx.copier = copier;
  return ctx;
}

// ---- Epoch order -----------------------------------------------------------------------------------------
TEST(EpochOrder, MatchesTheDocumentedGenerator) {
  // Computed from the algorithm as <accelerate/detail/data_loader.h> documents it (a Python transcription):
  // checkpoints depend on this order never changing.
  using accelerate::detail::epoch_order;
  EXPECT_EQ(epoch_order(10, 0, 0, true), (std::vector<size_t>{4, 9, 2, 5, 1, 7, 6, 0, 3, 8}));
  EXPECT_EQ(epoch_order(10, 0, 1, true), (std::vector<size_t>{9, 4, 0, 5, 2, 1, 6, 8, 3, 7}));
  EXPECT_EQ(epoch_order(10, 42, 3, true), (std::vector<size_t>{9, 0, 1, 2, 7, 8, 3, 6, 4, 5}));
}

TEST(EpochOrder, IsAPermutationThatDependsOnSeedAndEpoch) {
  using accelerate::detail::epoch_order;
  auto order = epoch_order(1000, 7, 2, true);
  auto sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<size_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(order, identity);
  EXPECT_EQ(order, epoch_order(1000, 7, 2, true));
  EXPECT_NE(order, epoch_order(1000, 7, 3, true));
  EXPECT_NE(order, epoch_order(1000, 8, 2, true));
  EXPECT_EQ(epoch_order(1000, 7, 2, false), identity);
}

// ---- Sharding plan ---------------------------------------------------------------------------------------

/// The real samples (positions in the epoch's order) of global batch k, as the processes' parts together.
std::vector<size_t> global_batch(size_t dataset_size, size_t global_batch_size, int processes, bool even,
                                 size_t k) {
  std::vector<size_t> joined;
  int64_t remainder = -1;
  for (int rank = 0; rank < processes; ++rank) {
    ShardPlan plan(dataset_size, DataLoaderOptions(global_batch_size), context(processes, rank, even, true));
    remainder = plan.remainder();
    if (k < plan.batches_for_process()) {
      auto part = plan.positions(k);
      joined.insert(joined.end(), part.begin(), part.end());
    }
  }
  if (remainder >= 0 && k + 1 == (dataset_size + global_batch_size - 1) / global_batch_size) {
    joined.resize(static_cast<size_t>(remainder)); // what gather_for_metrics keeps
  }
  return joined;
}

TEST(ShardPlan, GlobalBatchesAreTheSameForEveryWorldSize) {
  constexpr size_t kSize = 20;
  constexpr size_t kGlobal = 6;
  for (bool even : {true, false}) {
    for (size_t k = 0; k < 4; ++k) {
      std::vector<size_t> expected;
      for (size_t position = k * kGlobal; position < std::min(kSize, (k + 1) * kGlobal); ++position) {
        expected.push_back(position);
      }
      for (int processes : {1, 2, 3}) {
        EXPECT_EQ(global_batch(kSize, kGlobal, processes, even, k), expected)
            << "global batch " << k << " with " << processes << " processes, even_batches " << even;
      }
    }
  }
}

TEST(ShardPlan, PerProcessBatchTimesProcessesGivesTheSameGlobalBatches) {
  // Without split_batches, B per process on P processes cuts the same global batches as B·P on one.
  for (int processes : {1, 2, 3}) {
    const size_t per_process = 6 / static_cast<size_t>(processes);
    std::vector<size_t> joined;
    for (int rank = 0; rank < processes; ++rank) {
      ShardPlan plan(20, DataLoaderOptions(per_process), context(processes, rank));
      EXPECT_EQ(plan.global_batch_size(), 6u);
      auto part = plan.positions(1);
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, (std::vector<size_t>{6, 7, 8, 9, 10, 11})) << processes << " processes";
  }
}

TEST(ShardPlan, EvenBatchesPadTheLastGlobalBatchFromTheStart) {
  // 10 samples, 3 per process, 2 processes: global batches [0..6) and [6..10) + 2 wrapped samples.
  ShardPlan first(10, DataLoaderOptions(3), context(2, 0));
  ShardPlan second(10, DataLoaderOptions(3), context(2, 1));
  EXPECT_EQ(first.batches_for_process(), 2u);
  EXPECT_EQ(second.batches_for_process(), 2u);
  EXPECT_EQ(first.positions(1), (std::vector<size_t>{6, 7, 8}));
  EXPECT_EQ(second.positions(1), (std::vector<size_t>{9, 0, 1}));
  EXPECT_EQ(first.remainder(), 4);
}

TEST(ShardPlan, EvenBatchesWrapAroundADatasetSmallerThanOneGlobalBatch) {
  ShardPlan last(2, DataLoaderOptions(2), context(3, 2));
  EXPECT_EQ(last.batches_for_process(), 1u);
  EXPECT_EQ(last.positions(0), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(last.remainder(), 2);
}

TEST(ShardPlan, OneProcessNeverPads) {
  ShardPlan plan(10, DataLoaderOptions(4), context(1, 0));
  EXPECT_EQ(plan.batches_for_process(), 3u);
  EXPECT_EQ(plan.positions(2), (std::vector<size_t>{8, 9}));
  EXPECT_EQ(plan.remainder(), -1);
}

TEST(ShardPlan, UnevenBatchesGiveTheLastProcessesFewer) {
  // 7 samples, 3 per process, 2 processes: the final global batch holds one sample, for process 0.
  ShardPlan first(7, DataLoaderOptions(3), context(2, 0, /*even_batches=*/false));
  ShardPlan second(7, DataLoaderOptions(3), context(2, 1, /*even_batches=*/false));
  EXPECT_EQ(first.batches_for_process(), 2u);
  EXPECT_EQ(second.batches_for_process(), 1u);
  EXPECT_EQ(first.positions(1), (std::vector<size_t>{6}));
  EXPECT_EQ(first.remainder(), -1);
}

TEST(ShardPlan, DropLastKeepsOnlyFullGlobalBatches) {
  for (int rank = 0; rank < 2; ++rank) {
    ShardPlan plan(10, DataLoaderOptions(3).drop_last(true), context(2, rank));
    EXPECT_EQ(plan.batches_for_process(), 1u);
    EXPECT_EQ(plan.global_batches(), 1u);
    EXPECT_EQ(plan.remainder(), -1);
  }
}

TEST(ShardPlan, SplitBatchesNeedsAMultipleOfTheProcesses) {
  try {
    ShardPlan plan(10, DataLoaderOptions(5), context(2, 0, true, /*split_batches=*/true));
    FAIL() << "a global batch of 5 split over 2 processes was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("multiple of the number of processes (got batch_size 5 for 2"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(ShardPlan(10, DataLoaderOptions(0), context(1, 0)), std::invalid_argument);
}

// ---- The loader ------------------------------------------------------------------------------------------
TEST(DataLoader, YieldsThisProcessSharePerBatch) {
  accelerate::DataLoader<StackedDataset> loader(stacked(10), DataLoaderOptions(3).shuffle(false),
                                                context(2, 1));
  EXPECT_EQ(loader.size(), 2u);
  auto batches = one_pass(loader);
  EXPECT_EQ(batches, (std::vector<std::vector<int64_t>>{{3, 4, 5}, {9, 0, 1}}));
}

TEST(DataLoader, TakesTorchOptionsAndShufflesByDefault) {
  accelerate::DataLoader<StackedDataset> loader(stacked(10), torch::data::DataLoaderOptions(10),
                                                context(1, 0));
  auto batches = one_pass(loader);
  ASSERT_EQ(batches.size(), 1u);
  std::vector<int64_t> expected{4, 9, 2, 5, 1, 7, 6, 0, 3, 8}; // epoch_order(10, 0, 0)
  EXPECT_EQ(batches[0], expected);
}

TEST(DataLoader, EachEpochReshufflesTheSameWayEverywhere) {
  auto make = [] {
    return accelerate::DataLoader<StackedDataset>(stacked(50), DataLoaderOptions(10),
                                                  context(1, 0, true, false, 3));
  };
  auto loader = make();
  auto epoch0 = one_pass(loader);
  EXPECT_EQ(loader.epoch(), 1u) << "a full pass advances the epoch";
  auto epoch1 = one_pass(loader);
  EXPECT_NE(epoch0, epoch1);

  auto other = make(); // another process, or a rerun
  EXPECT_EQ(one_pass(other), epoch0);
  other.set_epoch(1); // a no-op: the pass already advanced to epoch 1
  EXPECT_EQ(one_pass(other), epoch1);
  other.set_epoch(0);
  EXPECT_EQ(one_pass(other), epoch0);
}

TEST(DataLoader, ANewSeedDrawsANewOrder) {
  accelerate::DataLoader<StackedDataset> loader(stacked(50), DataLoaderOptions(50),
                                                context(1, 0, true, false, 1));
  accelerate::DataLoader<StackedDataset> reseeded(stacked(50), DataLoaderOptions(50), context(1, 0));
  auto seed1 = one_pass(loader);
  reseeded.core()->set_seed(1);
  EXPECT_EQ(one_pass(reseeded), seed1);
  EXPECT_EQ(reseeded.state().seed, 1u);
  reseeded.core()->set_seed(2);
  reseeded.set_epoch(0);
  EXPECT_NE(one_pass(reseeded), seed1);
}

TEST(DataLoader, ResumeFromStateContinuesWithTheNextBatch) {
  accelerate::DataLoader<StackedDataset> reference(stacked(30), DataLoaderOptions(4),
                                                   context(1, 0, true, false, 9));
  reference.set_epoch(2);
  auto expected = one_pass(reference);

  accelerate::DataLoader<StackedDataset> interrupted(stacked(30), DataLoaderOptions(4),
                                                     context(1, 0, true, false, 9));
  interrupted.set_epoch(2);
  accelerate::DataLoaderState saved;
  int taken = 0;
  for (auto& batch : interrupted) {
    EXPECT_EQ(values(batch.data), expected[static_cast<size_t>(taken)]);
    if (++taken == 3) {
      saved = interrupted.state(); // saved while the third batch is being processed
      break;
    }
  }
  EXPECT_EQ(saved, (accelerate::DataLoaderState{2, 3, 9, 4}));

  accelerate::DataLoader<StackedDataset> resumed(stacked(30), DataLoaderOptions(4), context(1, 0));
  resumed.set_state(saved);
  resumed.set_epoch(2); // what a loop that sets the epoch each epoch does: must not undo the resume
  auto rest = one_pass(resumed);
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(expected.begin() + 3, expected.end()));
  EXPECT_EQ(resumed.state(), (accelerate::DataLoaderState{3, 0, 9, 4}));
}

TEST(DataLoader, APassLeftMidEpochStartsThatEpochAgain) {
  accelerate::DataLoader<StackedDataset> loader(stacked(20), DataLoaderOptions(5), context(1, 0));
  std::vector<int64_t> first;
  for (auto& batch : loader) {
    first = values(batch.data);
    break;
  }
  EXPECT_EQ(loader.state().epoch, 0u);
  auto batches = one_pass(loader);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0], first);
}

TEST(DataLoader, OnePassAtATime) {
  accelerate::DataLoader<StackedDataset> loader(stacked(20), DataLoaderOptions(5), context(1, 0));
  auto it = loader.begin();
  EXPECT_THROW(loader.begin(), std::logic_error);
  EXPECT_THROW(loader.set_state({0, 1, 0}), std::logic_error);
}

TEST(DataLoader, ResumesOnAnotherNumberOfProcessesAtTheSameSample) {
  // Saved by 2 processes × 3 (global batch 6) after 2 batches: 12 samples of epoch 1 consumed.
  const accelerate::DataLoaderState saved{1, 2, 5, 6};
  std::vector<int64_t> rest_on_one, rest_on_three;
  accelerate::DataLoader<StackedDataset> one(stacked(20), DataLoaderOptions(4), context(1, 0));
  one.set_state(saved);
  EXPECT_EQ(one.state(), (accelerate::DataLoaderState{1, 3, 5, 4})) << "12 samples = 3 global batches of 4";
  for (const auto& batch : one_pass(one)) {
    rest_on_one.insert(rest_on_one.end(), batch.begin(), batch.end());
  }
  for (int rank = 0; rank < 3; ++rank) {
    accelerate::DataLoader<StackedDataset> part(stacked(20), DataLoaderOptions(1).drop_last(true),
                                                context(3, rank));
    part.set_state(saved); // global batch 3 divides 12
    for (const auto& batch : one_pass(part)) {
      rest_on_three.insert(rest_on_three.end(), batch.begin(), batch.end());
    }
  }
  auto order = accelerate::detail::epoch_order(20, 5, 1, true);
  std::vector<int64_t> expected(order.begin() + 12, order.end());
  EXPECT_EQ(rest_on_one, expected);
  std::sort(rest_on_three.begin(), rest_on_three.end());
  std::vector<int64_t> expected_three(order.begin() + 12,
                                      order.begin() + 18); // drop_last: 2 full batches of 3
  std::sort(expected_three.begin(), expected_three.end());
  EXPECT_EQ(rest_on_three, expected_three);

  accelerate::DataLoader<StackedDataset> five(stacked(20), DataLoaderOptions(5), context(1, 0));
  try {
    five.set_state(saved);
    FAIL() << "a global batch of 5 resumed after 12 samples";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("global batch of 5 (batch size x processes) does not divide"),
              std::string::npos)
        << error.what();
  }
}

TEST(DataLoader, JoinsTheRegistryWhileAlive) {
  auto ctx = context(1, 0);
  ctx.registry = std::make_shared<accelerate::detail::LoaderRegistry>();
  auto registry = ctx.registry;
  {
    accelerate::DataLoader<StackedDataset> loader(stacked(8), DataLoaderOptions(4), ctx);
    ASSERT_EQ(registry->cores.size(), 1u);
    EXPECT_EQ(registry->cores[0].lock(), loader.core());
  }
  EXPECT_TRUE(registry->cores[0].expired());
  accelerate::DataLoader<StackedDataset> next(stacked(8), DataLoaderOptions(4), ctx);
  EXPECT_EQ(registry->cores.size(), 1u) << "expired entries are dropped";
}

TEST(DataLoader, SetStateRejectsAPositionPastTheEpoch) {
  accelerate::DataLoader<StackedDataset> loader(stacked(20), DataLoaderOptions(5), context(1, 0));
  try {
    loader.set_state({0, 5, 0});
    FAIL() << "batches_consumed 5 of a 4-batch epoch was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("batches_consumed = 5 exceeds the 4"), std::string::npos)
        << error.what();
  }
}

TEST(DataLoader, GradientStateMarksTheLastBatchAndIsRestoredAfterwards) {
  auto ctx = context(2, 0);
  auto gradient = ctx.gradient_state;
  accelerate::DataLoader<StackedDataset> loader(stacked(10), DataLoaderOptions(3), ctx);
  std::vector<std::tuple<bool, bool, int64_t, int64_t>> seen;
  for (auto& batch : loader) {
    (void)batch;
    seen.emplace_back(gradient->in_dataloader, gradient->end_of_dataloader, gradient->batches_remaining,
                      gradient->remainder);
  }
  using Row = std::tuple<bool, bool, int64_t, int64_t>;
  EXPECT_EQ(seen, (std::vector<Row>{Row{true, false, 1, 4}, Row{true, true, 0, 4}}));
  EXPECT_FALSE(gradient->in_dataloader);
  EXPECT_FALSE(gradient->end_of_dataloader);
  EXPECT_EQ(gradient->remainder, -1);
  EXPECT_EQ(gradient->batches_remaining, -1);
}

struct RecordingJoiner : accelerate::detail::Joiner {
  int64_t processes_with_batches(bool has_batch) override {
    calls.push_back(has_batch ? "has_batch" : "no_batch");
    return 1;
  }
  void join_until_all_exhausted() override { calls.push_back("join"); }
  std::vector<std::string> calls;
};

TEST(DataLoader, UnevenBatchesAnnounceEachBatchAndJoinWhenExhausted) {
  auto joiner = std::make_shared<RecordingJoiner>();
  auto ctx = context(2, 1, /*even_batches=*/false);
  ctx.joiner = joiner;
  accelerate::DataLoader<StackedDataset> loader(stacked(7), DataLoaderOptions(3).shuffle(false), ctx);
  EXPECT_EQ(one_pass(loader), (std::vector<std::vector<int64_t>>{{3, 4, 5}}));
  EXPECT_EQ(joiner->calls, (std::vector<std::string>{"has_batch", "no_batch", "join"}));

  auto even_joiner = std::make_shared<RecordingJoiner>();
  auto even = context(2, 1, /*even_batches=*/true);
  even.joiner = even_joiner;
  accelerate::DataLoader<StackedDataset> padded(stacked(7), DataLoaderOptions(3), even);
  one_pass(padded);
  EXPECT_TRUE(even_joiner->calls.empty()) << "even batches never need the joiner";
}

TEST(DataLoader, RefusesUnsizedDatasets) {
  struct Unsized : torch::data::datasets::Dataset<Unsized> {
    torch::data::Example<> get(size_t) override { return {}; }
    std::optional<size_t> size() const override { return std::nullopt; }
  };
  EXPECT_THROW(accelerate::DataLoader<Unsized>(Unsized(), DataLoaderOptions(3), context(1, 0)),
               std::invalid_argument);
}

TEST(DataLoader, UnstackedExamplesArriveAsAVector) {
  accelerate::DataLoader<IndexDataset> loader(IndexDataset(4), DataLoaderOptions(2).shuffle(false),
                                              context(1, 0));
  std::vector<size_t> sizes;
  for (auto& batch : loader) {
    sizes.push_back(batch.size());
    EXPECT_EQ(values(batch[1].target)[0], 2 * values(batch[1].data)[0]);
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{2, 2}));
}

// ---- Worker threads --------------------------------------------------------------------------------------

/// The threads of this process, from /proc/self/task.
size_t thread_count() {
  size_t count = 0;
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) {
    throw std::runtime_error("cannot list /proc/self/task");
  }
  while (const dirent* entry = readdir(tasks)) {
    count += entry->d_name[0] != '.' ? 1 : 0;
  }
  closedir(tasks);
  return count;
}

/// The thread count once it is `expected`, or after a second: a joined thread can stay listed for a moment.
size_t thread_count_settling_at(size_t expected) {
  size_t count = thread_count();
  for (int i = 0; i < 100 && count != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    count = thread_count();
  }
  return count;
}

/// Every pass of `epochs` epochs of a loader with `workers` threads, as sample indices per batch.
std::vector<std::vector<int64_t>> epochs_of(size_t workers, size_t dataset_size, DataLoaderOptions options,
                                            const LoaderContext& ctx, int epochs = 2) {
  accelerate::DataLoader<StackedDataset> loader(stacked(dataset_size), options.workers(workers), ctx);
  std::vector<std::vector<int64_t>> batches;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (auto& batch : one_pass(loader)) {
      batches.push_back(batch);
    }
    batches.push_back({-1}); // epoch boundary
  }
  return batches;
}

TEST(DataLoaderWorkers, EveryWorkerCountYieldsTheSameBatchesInTheSameOrder) {
  // Every process of 1 and 2 (contexts built by hand), shuffled and sequential, even and uneven, with and
  // without drop_last, 23 samples in batches of 3 (a short final global batch either way), two epochs.
  size_t cases = 0;
  for (int processes : {1, 2}) {
    for (int rank = 0; rank < processes; ++rank) {
      for (bool shuffle : {true, false}) {
        for (bool even : {true, false}) {
          for (bool drop_last : {true, false}) {
            auto ctx = context(processes, rank, even, false, /*seed=*/11);
            auto options = DataLoaderOptions(3).shuffle(shuffle).drop_last(drop_last);
            const auto inline_batches = epochs_of(0, 23, options, ctx);
            ASSERT_GE(inline_batches.size(), 8u); // at least 3 batches an epoch, and the epoch marks
            for (size_t workers : {1, 2}) {
              EXPECT_EQ(epochs_of(workers, 23, options, ctx), inline_batches)
                  << workers << " workers, process " << rank << " of " << processes << ", shuffle " << shuffle
                  << ", even_batches " << even << ", drop_last " << drop_last;
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 48u);
}

/// Leaves epoch 1 of 30 samples in batches of 4 after 3 batches, with 2 workers (and the side-stream copy
/// when `copier` is given), saves the position and resumes it in another loader: the next batches are those
/// of an uninterrupted pass, and no thread is left behind.
void expect_resume_mid_epoch(const std::shared_ptr<DeferredCopier>& copier) {
  WarningCollector warnings; // pin_memory on the CPU is said to do nothing
  c10::WarningUtils::WarningHandlerGuard guard(&warnings);
  const auto options = DataLoaderOptions(4).workers(2).pin_memory(copier != nullptr);
  auto ctx = [&](uint64_t seed) { return copying(context(1, 0, true, false, seed), copier); };
  accelerate::DataLoader<StackedDataset> uninterrupted(stacked(30), DataLoaderOptions(4).workers(2),
                                                       context(1, 0, true, false, 9));
  uninterrupted.set_epoch(1);
  const auto expected = one_pass(uninterrupted);
  ASSERT_EQ(expected.size(), 8u);

  const size_t threads_before = thread_count();
  accelerate::DataLoader<StackedDataset> interrupted(stacked(30), options, ctx(9));
  interrupted.set_epoch(1);
  accelerate::DataLoaderState saved;
  size_t taken = 0;
  for (auto& batch : interrupted) {
    EXPECT_EQ(values(batch.data), expected[taken]);
    if (++taken == 3) {
      saved = interrupted.state(); // read ahead, and copying; the state counts what the loop took
      if (copier) {
        EXPECT_EQ(copier->pending(), 2u) << "batch 3's data and target, copying";
      }
      break;
    }
  }
  EXPECT_EQ(saved, (accelerate::DataLoaderState{1, 3, 9, 4}));
  EXPECT_EQ(interrupted.state(), saved) << "what was read ahead is dropped with the pass, not counted";
  EXPECT_EQ(thread_count_settling_at(threads_before), threads_before) << "the pass left threads behind";

  accelerate::DataLoader<StackedDataset> resumed(stacked(30), options, ctx(0));
  resumed.set_state(saved);
  EXPECT_EQ(one_pass(resumed), std::vector<std::vector<int64_t>>(expected.begin() + 3, expected.end()));
  EXPECT_EQ(resumed.state(), (accelerate::DataLoaderState{2, 0, 9, 4}));
}

TEST(DataLoaderWorkers, ResumeMidEpochWithWorkersGivesTheSameNextBatches) {
  expect_resume_mid_epoch(nullptr);
}

/// Sample i is (data [i] + noise, target [i]): the noise drawn from the sample's generator, after a pause
/// that differs between samples so that the workers finish out of order.
struct AugmentingDataset : torch::data::datasets::Dataset<AugmentingDataset> {
  torch::data::Example<> get(size_t index) override {
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (index % 3)));
    auto generator = accelerate::sample_generator(index);
    auto noise = torch::rand({4}, generator, torch::kFloat64);
    return {noise + static_cast<double>(index), torch::tensor({static_cast<int64_t>(index)})};
  }
  std::optional<size_t> size() const override { return 40; }
};

TEST(DataLoaderWorkers, AugmentationFromTheSampleGeneratorDoesNotDependOnTheWorkers) {
  auto augmented = [](size_t workers, uint64_t epoch) {
    accelerate::DataLoader<decltype(AugmentingDataset().map(torch::data::transforms::Stack<>()))> loader(
        AugmentingDataset().map(torch::data::transforms::Stack<>()),
        DataLoaderOptions(5).shuffle(false).workers(workers), context(1, 0, true, false, 3));
    loader.set_epoch(epoch);
    std::vector<torch::Tensor> batches;
    for (auto& batch : loader) {
      batches.push_back(batch.data.clone());
    }
    return batches;
  };
  const auto inline_batches = augmented(0, 0);
  const auto threaded = augmented(2, 0);
  ASSERT_EQ(inline_batches.size(), 8u);
  ASSERT_EQ(threaded.size(), inline_batches.size());
  for (size_t k = 0; k < inline_batches.size(); ++k) {
    EXPECT_TRUE(threaded[k].equal(inline_batches[k])) << "batch " << k;
  }
  EXPECT_FALSE(augmented(0, 1)[0].equal(inline_batches[0]))
      << "another epoch draws other noise (same samples)";

  // The noise is the one documented: the generator of (seed 3, epoch 0, index).
  const auto first = inline_batches[0][0];
  const auto index = static_cast<size_t>(first[0].item<double>());
  auto expected = torch::rand({4}, accelerate::sample_generator(3, 0, index), torch::kFloat64) +
                  static_cast<double>(index);
  EXPECT_TRUE(first.equal(expected));
  EXPECT_EQ(accelerate::sample_generator(5, 2, 37).current_seed(), 4698094502654902367ULL)
      << "mix(mix(mix(5) ^ 2) ^ mix(38)), computed from the documented formula";
  try {
    accelerate::sample_generator(7);
    FAIL() << "sample_generator(index) outside a loader returned a generator";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("sample_generator(seed, epoch, index)"), std::string::npos)
        << error.what();
  }
}

/// Sample 37 cannot be read.
struct FailingDataset : torch::data::datasets::Dataset<FailingDataset> {
  torch::data::Example<> get(size_t index) override {
    if (index == 37) {
      throw std::runtime_error("corrupt record: checksum mismatch");
    }
    return {torch::tensor({static_cast<int64_t>(index)}), torch::tensor({0})};
  }
  std::optional<size_t> size() const override { return 64; }
};

/// Reads a FailingDataset in batches of 8, in order, through a loader with `options` and `ctx`: batches 0-3
/// arrive, then the failure of batch 4 (samples 32-39) names sample 37, nests the original, is not counted as
/// consumed and leaves no thread behind.
void expect_sample_37_fails(DataLoaderOptions options, const LoaderContext& ctx, const std::string& where) {
  const size_t threads_before = thread_count();
  accelerate::DataLoader<decltype(FailingDataset().map(torch::data::transforms::Stack<>()))> loader(
      FailingDataset().map(torch::data::transforms::Stack<>()), options.batch_size(8).shuffle(false), ctx);
  size_t delivered = 0;
  std::string message;
  try {
    for (auto& batch : loader) {
      EXPECT_EQ(values(batch.data)[0], static_cast<int64_t>(8 * delivered)) << where;
      ++delivered;
    }
  } catch (const std::runtime_error& error) {
    message = error.what();
    try {
      std::rethrow_if_nested(error);
      ADD_FAILURE() << where << ": the original exception is not nested";
    } catch (const std::runtime_error& original) {
      EXPECT_EQ(std::string(original.what()), "corrupt record: checksum mismatch") << where;
    }
  }
  EXPECT_EQ(delivered, 4u) << where << ": batches 0-3 arrive; batch 4 holds samples 32-39";
  EXPECT_NE(
      message.find("reading sample 37 (in batch 4 of epoch 0) failed: corrupt record: checksum mismatch"),
      std::string::npos)
      << where << ": " << message;
  EXPECT_EQ(loader.state().batches_consumed, 4u)
      << where << ": the batch that failed is not counted as consumed";
  EXPECT_EQ(thread_count_settling_at(threads_before), threads_before)
      << where << ": the failed pass left threads behind";
}

TEST(DataLoaderWorkers, AnExceptionInGetNamesTheSampleAndKeepsTheOriginalMessage) {
  for (size_t workers : {0, 2}) {
    expect_sample_37_fails(DataLoaderOptions().workers(workers), context(1, 0),
                           std::to_string(workers) + " workers");
  }
}

/// A slow sample: workers are still reading when the loop leaves.
struct SlowDataset : torch::data::datasets::Dataset<SlowDataset> {
  torch::data::Example<> get(size_t index) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return {torch::tensor({static_cast<int64_t>(index)}), torch::tensor({0})};
  }
  std::optional<size_t> size() const override { return 400; }
};

TEST(DataLoaderWorkers, DroppingAnIteratorEarlyStopsTheThreads) {
  accelerate::DataLoader<decltype(SlowDataset().map(torch::data::transforms::Stack<>()))> loader(
      SlowDataset().map(torch::data::transforms::Stack<>()), DataLoaderOptions(4).workers(2), context(1, 0));
  const size_t before = thread_count();
  size_t during = 0;
  size_t taken = 0;
  for (auto& batch : loader) {
    (void)batch;
    during = thread_count();
    if (++taken == 3) {
      break;
    }
  }
  EXPECT_EQ(during, before + 2) << "two worker threads while the pass runs";
  EXPECT_EQ(thread_count_settling_at(before), before) << "the pass left threads behind";
  EXPECT_EQ(loader.state().batches_consumed, 3u) << "the batches the loop took, not the ones read ahead";
  size_t next_pass = 0;
  for (auto& batch : loader) {
    (void)batch;
    ++next_pass;
  }
  EXPECT_EQ(next_pass, 100u) << "the next pass reads the whole epoch";
  EXPECT_EQ(thread_count_settling_at(before), before);
}

TEST(DataLoaderWorkers, BadOptionsAreRefusedOrSaidOnce) {
  try {
    accelerate::DataLoader<StackedDataset> loader(
        stacked(8), DataLoaderOptions(2).workers(2).prefetch_factor(0), context(1, 0));
    FAIL() << "prefetch_factor 0 was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("prefetch_factor must be >= 1 (got 0)"), std::string::npos)
        << error.what();
  }

  const size_t many = std::thread::hardware_concurrency() + 1;
  const auto expected = epochs_of(0, 20, DataLoaderOptions(3), context(1, 0), 1);
  WarningCollector warnings;
  {
    c10::WarningUtils::WarningHandlerGuard guard(&warnings);
    EXPECT_EQ(epochs_of(many, 20, DataLoaderOptions(3), context(1, 0), 3),
              epochs_of(0, 20, DataLoaderOptions(3), context(1, 0), 3));
    EXPECT_EQ(epochs_of(0, 20, DataLoaderOptions(3).pin_memory(true), context(1, 0), 1), expected);
  }
  ASSERT_EQ(warnings.messages.size(), 2u) << "once per loader, not per pass or batch";
  EXPECT_NE(warnings.messages[0].find("workers = " + std::to_string(many) + " is more than the"),
            std::string::npos)
      << warnings.messages[0];
  EXPECT_NE(warnings.messages[1].find("pin_memory(true) does nothing when training on cpu"),
            std::string::npos)
      << warnings.messages[1];

  struct Uncopyable : torch::data::datasets::Dataset<Uncopyable> {
    Uncopyable() = default;
    Uncopyable(const Uncopyable&) = delete;
    Uncopyable(Uncopyable&&) = default;
    torch::data::Example<> get(size_t) override { return {torch::zeros({1}), torch::zeros({1})}; }
    std::optional<size_t> size() const override { return 4; }
  };
  try {
    accelerate::DataLoader<Uncopyable> loader(Uncopyable(), DataLoaderOptions(2).workers(2), context(1, 0));
    FAIL() << "workers over an uncopyable dataset were accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("needs a copyable dataset"), std::string::npos) << error.what();
  }
  accelerate::DataLoader<Uncopyable> inline_reader(Uncopyable(), DataLoaderOptions(2), context(1, 0));
  EXPECT_EQ(inline_reader.size(), 2u) << "without workers, no copy is needed";
}

// ---- The side-stream copy --------------------------------------------------------------------------------
// Its bookkeeping, with DeferredCopier standing in for the CUDA copier (and the resume test above).

TEST(DataLoaderSideStreamCopy, YieldsTheSameBatchesAsWithoutIt) {
  WarningCollector warnings; // pin_memory on the CPU is said to do nothing
  c10::WarningUtils::WarningHandlerGuard guard(&warnings);
  size_t cases = 0;
  for (int processes : {1, 2}) {
    for (int rank = 0; rank < processes; ++rank) {
      for (bool shuffle : {true, false}) {
        for (bool drop_last : {true, false}) {
          for (size_t workers : {0, 2}) {
            auto ctx = context(processes, rank, true, false, /*seed=*/5);
            auto options = DataLoaderOptions(3).shuffle(shuffle).drop_last(drop_last);
            const auto expected = epochs_of(workers, 23, options, ctx);
            auto copier = std::make_shared<DeferredCopier>();
            const auto copied = epochs_of(workers, 23, options.pin_memory(true), copying(ctx, copier));
            const std::string where = std::to_string(workers) + " workers, process " + std::to_string(rank) +
                                      " of " + std::to_string(processes) + ", shuffle " +
                                      std::to_string(shuffle) + ", drop_last " + std::to_string(drop_last);
            EXPECT_EQ(copied, expected) << where;
            // Two epochs: each pass's first batch is copied on the current stream, the others (data and
            // target) on the side stream, each waited for once.
            const size_t batches = expected.size() - 2;
            EXPECT_EQ(copier->done(), 2 * (batches - 2)) << where;
            EXPECT_EQ(copier->waits(), batches - 2) << where;
            EXPECT_EQ(copier->pending(), 0u) << where << ": nothing is read ahead past a pass";
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 24u);

  // The gradient state marks the last batch as without the copy.
  auto ctx = copying(context(2, 0), std::make_shared<DeferredCopier>());
  accelerate::DataLoader<StackedDataset> loader(stacked(10), DataLoaderOptions(3).pin_memory(true), ctx);
  std::vector<std::pair<bool, int64_t>> seen;
  for (auto& batch : loader) {
    (void)batch;
    seen.emplace_back(ctx.gradient_state->end_of_dataloader, ctx.gradient_state->batches_remaining);
  }
  EXPECT_EQ(seen, (std::vector<std::pair<bool, int64_t>>{{false, 1}, {true, 0}}));
}

TEST(DataLoaderSideStreamCopy, AReadThatFailsAheadSurfacesWhenItsBatchIsDue) {
  WarningCollector warnings;
  c10::WarningUtils::WarningHandlerGuard guard(&warnings);
  for (size_t workers : {0, 2}) {
    auto copier = std::make_shared<DeferredCopier>();
    // Batch 4 is read, and fails, while the loop holds batch 3.
    expect_sample_37_fails(DataLoaderOptions().workers(workers).pin_memory(true),
                           copying(context(1, 0), copier),
                           std::to_string(workers) + " workers, side-stream copy");
    EXPECT_EQ(copier->done(), 6u) << "batches 1-3, data and target";
  }
}

TEST(DataLoaderSideStreamCopy, LeavingMidEpochAndResumingGiveTheSameNextBatches) {
  expect_resume_mid_epoch(std::make_shared<DeferredCopier>());
}

// ---- to_device -------------------------------------------------------------------------------------------
TEST(ToDevice, MovesEveryTensorInNestedContainers) {
  const torch::Device meta(torch::kMeta);
  auto tensor = [] { return torch::ones({2}); };
  std::map<std::string, torch::Tensor> named{{"ids", tensor()}};
  auto batch = std::make_tuple(torch::data::Example<>(tensor(), tensor()), std::make_pair(tensor(), 3),
                               std::vector<torch::Tensor>{tensor(), torch::Tensor()},
                               std::optional<torch::Tensor>(tensor()), named,
                               torch::data::TensorExample(tensor()), std::string("kept"));
  auto moved = accelerate::to_device(batch, meta);
  EXPECT_TRUE(std::get<0>(moved).data.is_meta());
  EXPECT_TRUE(std::get<0>(moved).target.is_meta());
  EXPECT_TRUE(std::get<1>(moved).first.is_meta());
  EXPECT_EQ(std::get<1>(moved).second, 3);
  EXPECT_TRUE(std::get<2>(moved)[0].is_meta());
  EXPECT_FALSE(std::get<2>(moved)[1].defined());
  EXPECT_TRUE(std::get<3>(moved)->is_meta());
  EXPECT_TRUE(std::get<4>(moved).at("ids").is_meta());
  EXPECT_TRUE(std::get<5>(moved).data.is_meta());
  EXPECT_EQ(std::get<6>(moved), "kept");
  EXPECT_FALSE(std::get<0>(batch).data.is_meta()) << "the source is left as it was";
}

struct TokenBatch {
  torch::Tensor ids;
  int64_t step;
};

/// A batch whose rule takes the non_blocking flag, and records it.
struct FlaggedBatch {
  torch::Tensor ids;
  bool non_blocking = false;
};

} // namespace

template <> struct accelerate::ToDevice<TokenBatch> {
  static TokenBatch apply(TokenBatch batch, const torch::Device& device) {
    return {accelerate::to_device(batch.ids, device), batch.step};
  }
};

template <> struct accelerate::ToDevice<FlaggedBatch> {
  static FlaggedBatch apply(FlaggedBatch batch, const torch::Device& device, bool non_blocking) {
    return {accelerate::to_device(batch.ids, device, non_blocking), non_blocking};
  }
};

namespace {

TEST(ToDevice, UsesTheUsersSpecialization) {
  auto moved = accelerate::to_device(TokenBatch{torch::ones({2}), 5}, torch::Device(torch::kMeta));
  EXPECT_TRUE(moved.ids.is_meta());
  EXPECT_EQ(moved.step, 5);
  // A rule without the non_blocking argument is still used when the flag is set.
  EXPECT_TRUE(accelerate::to_device(TokenBatch{torch::ones({2}), 5}, torch::kMeta, true).ids.is_meta());
}

TEST(ToDevice, MovesArraysAndPassesNonBlockingDown) {
  const torch::Device meta(torch::kMeta);
  std::array<FlaggedBatch, 2> batches{FlaggedBatch{torch::ones({2})}, FlaggedBatch{torch::ones({3})}};
  auto blocking = accelerate::to_device(batches, meta);
  auto asynchronous = accelerate::to_device(std::make_tuple(batches, torch::ones({1})), meta, true);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(blocking[i].ids.is_meta());
    EXPECT_FALSE(blocking[i].non_blocking);
    EXPECT_TRUE(std::get<0>(asynchronous)[i].ids.is_meta());
    EXPECT_TRUE(std::get<0>(asynchronous)[i].non_blocking) << "the flag reaches rules nested in containers";
  }
  EXPECT_TRUE(std::get<1>(asynchronous).is_meta());
  EXPECT_FALSE(batches[0].ids.is_meta()) << "the source is left as it was";
}

// ---- The iterable adapter --------------------------------------------------------------------------------
std::vector<torch::Tensor> numbered_batches(int64_t count) {
  std::vector<torch::Tensor> batches;
  for (int64_t i = 0; i < count; ++i) {
    batches.push_back(torch::full({2}, i, torch::kInt64)); // batch i: two rows holding i
  }
  return batches;
}

TEST(IterableAdapter, TakesEveryPthBatchAndCompletesTheLastRound) {
  auto source = numbered_batches(7);
  for (int rank = 0; rank < 3; ++rank) {
    auto gradient = std::make_shared<accelerate::GradientState>();
    accelerate::IterableAdapter<std::vector<torch::Tensor>&> adapter(source, 3, rank, torch::kCPU, gradient,
                                                                     false);
    std::vector<int64_t> taken;
    std::vector<bool> last;
    int64_t remainder = -2;
    for (auto& batch : adapter) {
      taken.push_back(batch[0].item<int64_t>());
      last.push_back(gradient->end_of_dataloader);
      remainder = gradient->remainder;
    }
    const std::vector<std::vector<int64_t>> expected{{0, 3, 6}, {1, 4, 0}, {2, 5, 1}};
    EXPECT_EQ(taken, expected[static_cast<size_t>(rank)]) << "process " << rank;
    EXPECT_EQ(last, (std::vector<bool>{false, false, true}));
    EXPECT_EQ(remainder, 2) << "one real batch of two rows in the last round";
    EXPECT_FALSE(gradient->in_dataloader);
  }
}

TEST(IterableAdapter, DropLastDropsAShortRoundAndAFullLastRoundIsMarked) {
  auto gradient = std::make_shared<accelerate::GradientState>();
  accelerate::IterableAdapter<std::vector<torch::Tensor>> dropped(numbered_batches(7), 3, 1, torch::kCPU,
                                                                  gradient, true);
  std::vector<int64_t> taken;
  std::vector<bool> last;
  for (auto& batch : dropped) {
    taken.push_back(batch[0].item<int64_t>());
    last.push_back(gradient->end_of_dataloader);
    EXPECT_EQ(gradient->remainder, -1);
  }
  EXPECT_EQ(taken, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(last, (std::vector<bool>{false, false}))
      << "the dropped round's loss is only known after the fact";

  accelerate::IterableAdapter<std::vector<torch::Tensor>> exact(numbered_batches(6), 3, 2, torch::kCPU,
                                                                gradient, false);
  last.clear();
  for (auto& batch : exact) {
    (void)batch;
    last.push_back(gradient->end_of_dataloader);
  }
  EXPECT_EQ(last, (std::vector<bool>{false, true}));
}

TEST(IterableAdapter, ShardsALibtorchLoader) {
  auto source = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(stacked(6), 2);
  auto gradient = std::make_shared<accelerate::GradientState>();
  accelerate::IterableAdapter<decltype(*source)&> adapter(*source, 2, 1, torch::kCPU, gradient, false);
  std::vector<std::vector<int64_t>> taken;
  for (auto& batch : adapter) {
    taken.push_back(values(batch.data));
  }
  // Batches {0,1} {2,3} {4,5}: rounds [b0 b1] [b2, b0 again]; process 1 takes b1, then the repeat of b0.
  EXPECT_EQ(taken, (std::vector<std::vector<int64_t>>{{2, 3}, {0, 1}}));
  EXPECT_EQ(gradient->remainder, -1) << "restored after the pass";
}

// ---- One-process Accelerator: collectives and prepare_data_loader ----------------------------------------
accelerate::AcceleratorOptions one_process() {
  return accelerate::AcceleratorOptions().cpu(true);
}

TEST(CollectivesOneProcess, BehaveAsTheIdentityWithAccelerateShapes) {
  accelerate::Accelerator accelerator(one_process());
  ASSERT_EQ(accelerator.num_processes(), 1);
  auto scalar = torch::tensor(3.0);
  EXPECT_EQ(accelerator.gather(scalar).sizes(), torch::IntArrayRef({1}));
  EXPECT_TRUE(accelerator.gather(torch::ones({2, 3})).equal(torch::ones({2, 3})));
  EXPECT_TRUE(accelerator.reduce(torch::tensor({1, 2}), accelerate::ReduceOp::MEAN)
                  .equal(torch::tensor({1.0f, 2.0f})));
  EXPECT_TRUE(accelerator.pad_across_processes(torch::ones({2})).equal(torch::ones({2})));
  EXPECT_TRUE(accelerator.broadcast(torch::ones({2})).equal(torch::ones({2})));
  EXPECT_THROW(accelerator.broadcast(torch::ones({2}), 1), std::invalid_argument);
  EXPECT_TRUE(accelerator.split_between_processes(torch::arange(5)).equal(torch::arange(5)));
  EXPECT_THROW(accelerator.split_between_processes(torch::tensor(1)), std::invalid_argument);
  EXPECT_FALSE(accelerator.check_trigger());
  accelerator.set_trigger();
  EXPECT_TRUE(accelerator.check_trigger());
  EXPECT_FALSE(accelerator.check_trigger()) << "checking resets the trigger";
  {
    auto guard = accelerator.main_process_first();
    auto local = accelerator.local_main_process_first();
  }
  accelerator.wait_for_everyone();
}

TEST(CollectivesOneProcess, GatherForMetricsKeepsAnUnpaddedLastBatch) {
  accelerate::Accelerator accelerator(one_process());
  auto loader = accelerator.prepare_data_loader(stacked(10), torch::data::DataLoaderOptions(4));
  std::vector<int64_t> seen;
  for (auto& batch : *loader) {
    auto gathered = values(accelerator.gather_for_metrics(batch.data));
    seen.insert(seen.end(), gathered.begin(), gathered.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(seen, expected);
}

} // namespace
