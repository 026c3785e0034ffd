// Multi-rank tests of the data loader and the collectives: run by test/harness/run_ranks.py as 2 or 3 ranks
// over Gloo on loopback (see data_tests.cmake for which test runs on how many).
#include <accelerate/accelerate.h>

#include "../support/numerics.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

namespace {

accelerate::AcceleratorOptions test_options() {
  return accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(30));
}

/// Sample i is (data [i], target [2i]).
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

std::vector<int64_t> values(const torch::Tensor& tensor) {
  auto flat = tensor.to(torch::kInt64).reshape({-1}).contiguous();
  return {flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel()};
}

std::vector<int64_t> iota(int64_t count) {
  std::vector<int64_t> result(static_cast<size_t>(count));
  std::iota(result.begin(), result.end(), 0);
  return result;
}

// ---- The loader ------------------------------------------------------------------------------------------
TEST(DataLoaderMultirank, GatherForMetricsReturnsEverySampleOnce) {
  accelerate::Accelerator accelerator(test_options());
  ASSERT_GE(accelerator.num_processes(), 2) << "run under accel launch with 2 or more processes";
  constexpr size_t kSamples = 10; // 3 per process: the last global batch is padded on 2 and on 3 processes
  auto loader = accelerator.prepare_data_loader(stacked(kSamples), torch::data::DataLoaderOptions(3));
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen;
    size_t batches = 0;
    for (auto& batch : *loader) {
      ++batches;
      ASSERT_EQ(batch.data.size(0), 3) << "even_batches gives every process full batches";
      EXPECT_TRUE(batch.target.equal(2 * batch.data));
      auto gathered = values(accelerator.gather_for_metrics(batch.data));
      seen.insert(seen.end(), gathered.begin(), gathered.end());
    }
    EXPECT_EQ(batches, loader->size());
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, iota(kSamples)) << "epoch " << epoch << " on process " << accelerator.process_index();
  }
  EXPECT_EQ(loader->epoch(), 2u);
}

TEST(DataLoaderMultirank, UnevenBatchesSeeEverySampleOnceAndNobodyHangs) {
  accelerate::Accelerator accelerator(test_options().even_batches(false));
  ASSERT_GE(accelerator.num_processes(), 2);
  constexpr size_t kSamples = 7; // 3 per process on 2 processes: process 1 gets one batch fewer
  auto loader = accelerator.prepare_data_loader(stacked(kSamples), torch::data::DataLoaderOptions(3));
  std::vector<int64_t> mine;
  for (auto& batch : *loader) {
    auto part = values(batch.data);
    mine.insert(mine.end(), part.begin(), part.end());
  }
  // Processes hold different counts: pad to the longest with -1, gather, drop the padding.
  auto padded = accelerator.pad_across_processes(torch::tensor(mine, torch::kInt64), 0, -1);
  auto all = values(accelerator.gather(padded));
  all.erase(std::remove(all.begin(), all.end(), -1), all.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, iota(kSamples));
}

TEST(DataLoaderMultirank, UnevenBatchesTrainWithoutHanging) {
  // Process 0 has one batch more than process 1: its last backward all-reduces gradients with a process whose
  // loader is exhausted, which must answer through the joiner instead of leaving it waiting.
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options().even_batches(false));
  ASSERT_GE(accelerator.num_processes(), 2);
  torch::manual_seed(0);
  torch::nn::Linear model(1, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.01));
  auto loader = accelerator.prepare_data_loader(stacked(7), torch::data::DataLoaderOptions(3));
  int64_t steps = 0;
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    accelerator.backward(model->forward(batch.data.to(torch::kFloat32)).sum());
    optimizer.step();
    ++steps;
  }
  EXPECT_EQ(steps, static_cast<int64_t>(loader->size()));
  // Training ended on every process with the same weights: the joined steps were real all-reduces.
  auto weights = torch::cat({model->weight.detach().reshape({-1}), model->bias.detach()});
  auto mine = weights.clone();
  auto from_main = accelerator.broadcast(weights, 0);
  EXPECT_TRUE(mine.equal(from_main)) << "process " << accelerator.process_index() << " drifted";
}

TEST(DataLoaderMultirank, ProcessesDrawTheSameOrderEachEpoch) {
  accelerate::Accelerator accelerator(test_options());
  auto loader =
      accelerator.prepare_data_loader(stacked(12), torch::data::DataLoaderOptions(2).drop_last(true));
  loader->set_epoch(5);
  std::vector<int64_t> mine;
  for (auto& batch : *loader) {
    auto part = values(batch.data);
    mine.insert(mine.end(), part.begin(), part.end());
  }
  // The processes' parts, interleaved batch by batch, are one order of the whole dataset: no overlap.
  auto all = values(accelerator.gather(torch::tensor(mine, torch::kInt64)));
  std::sort(all.begin(), all.end());
  const auto global = static_cast<int64_t>(2 * accelerator.num_processes());
  EXPECT_EQ(all, iota(12 / global * global)) << "drop_last keeps only full global batches";
}

/// A loader made by `make()` (2 workers reading ahead), saved after 2 batches of an epoch and resumed by a
/// new one: the next batches are the ones the uninterrupted epoch gave.
template <typename Make> void expect_resume_continues(Make make, int rank) {
  auto interrupted = make();
  std::vector<std::vector<int64_t>> expected;
  for (auto& batch : *interrupted) {
    expected.push_back(values(batch.data));
  }
  interrupted->set_epoch(0);
  int taken = 0;
  for (auto& batch : *interrupted) {
    EXPECT_EQ(values(batch.data), expected[static_cast<size_t>(taken)]);
    if (++taken == 2) {
      break;
    }
  }
  const auto saved = interrupted->state();
  EXPECT_EQ(saved.batches_consumed, 2u) << "batches handed to the loop, not the ones read ahead";
  auto resumed = make();
  resumed->set_state(saved);
  std::vector<std::vector<int64_t>> rest;
  for (auto& batch : *resumed) {
    rest.push_back(values(batch.data));
  }
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(expected.begin() + 2, expected.end()))
      << "process " << rank;
}

/// This process's batches of two epochs, for every worker count, order and drop_last: each must equal what
/// reading on the calling thread gives (23 samples in batches of `batch_size`, 3 unless the global batch is
/// split: a short final global batch either way).
void expect_workers_keep_every_batch(accelerate::Accelerator& accelerator, size_t batch_size = 3) {
  const int rank = accelerator.process_index();
  for (bool shuffle : {true, false}) {
    for (bool drop_last : {true, false}) {
      std::vector<std::vector<std::vector<int64_t>>> by_workers;
      for (size_t workers : {0, 1, 2}) {
        auto loader = accelerator.prepare_data_loader(
            stacked(23),
            accelerate::DataLoaderOptions(batch_size).shuffle(shuffle).drop_last(drop_last).workers(workers));
        std::vector<std::vector<int64_t>> batches;
        for (int epoch = 0; epoch < 2; ++epoch) {
          for (auto& batch : *loader) {
            batches.push_back(values(batch.data));
          }
          batches.push_back({-1});
        }
        by_workers.push_back(std::move(batches));
      }
      ASSERT_GT(by_workers[0].size(), 6u);
      EXPECT_EQ(by_workers[1], by_workers[0])
          << "1 worker, process " << rank << ", shuffle " << shuffle << ", drop_last " << drop_last;
      EXPECT_EQ(by_workers[2], by_workers[0])
          << "2 workers, process " << rank << ", shuffle " << shuffle << ", drop_last " << drop_last;
    }
  }
  // Saved mid-epoch with 2 workers reading ahead, resumed by a new loader: the same next batches.
  expect_resume_continues(
      [&] {
        return accelerator.prepare_data_loader(stacked(23),
                                               accelerate::DataLoaderOptions(batch_size).workers(2));
      },
      rank);
}

TEST(DataLoaderMultirank, WorkerThreadsKeepEveryProcessBatchesAndOrder) {
  accelerate::Accelerator accelerator(test_options().non_blocking(true)); // no effect on the CPU
  ASSERT_GE(accelerator.num_processes(), 2);
  expect_workers_keep_every_batch(accelerator);
}

TEST(DataLoaderMultirank, WorkerThreadsKeepSplitBatches) {
  accelerate::Accelerator accelerator(test_options().split_batches(true));
  ASSERT_EQ(accelerator.num_processes(), 2) << "a global batch of 4 split over 2 processes";
  expect_workers_keep_every_batch(accelerator, 4);
  auto loader = accelerator.prepare_data_loader(stacked(23), accelerate::DataLoaderOptions(4).workers(2));
  for (auto& batch : *loader) {
    EXPECT_EQ(batch.data.size(0), 2) << "each process takes its half of the global batch of 4";
  }
}

TEST(DataLoaderMultirank, WorkerThreadsKeepUnevenBatchesAndNobodyHangs) {
  accelerate::Accelerator accelerator(test_options().even_batches(false));
  ASSERT_GE(accelerator.num_processes(), 2);
  expect_workers_keep_every_batch(accelerator);
}

// ---- dispatch_batches ------------------------------------------------------------------------------------
/// Data only the main process can read: `get` throws elsewhere, and the size is unknown elsewhere (the main
/// process's is used). Sample i is (data [i], target [2i]); sample `failing` throws on the main process too.
struct MainOnlyDataset : torch::data::datasets::Dataset<MainOnlyDataset> {
  MainOnlyDataset(size_t size, int rank, std::optional<size_t> failing = std::nullopt)
      : size_(size), rank_(rank), failing_(failing) {}
  torch::data::Example<> get(size_t index) override {
    if (rank_ != 0) {
      throw std::runtime_error("process " + std::to_string(rank_) + " cannot read the data");
    }
    if (failing_ && index == *failing_) {
      throw std::runtime_error("corrupt record");
    }
    const auto i = static_cast<int64_t>(index);
    return {torch::tensor({i}), torch::tensor({2 * i})};
  }
  std::optional<size_t> size() const override {
    return rank_ == 0 ? std::optional<size_t>(size_) : std::nullopt;
  }
  size_t size_;
  int rank_;
  std::optional<size_t> failing_;
};

/// A batch of a tuple holding a vector (its length travels too) and an integer tensor.
struct TupleDataset
    : torch::data::datasets::BatchDataset<TupleDataset,
                                          std::tuple<torch::Tensor, std::vector<torch::Tensor>>> {
  TupleDataset(size_t size, int rank) : size_(size), rank_(rank) {}
  std::tuple<torch::Tensor, std::vector<torch::Tensor>> get_batch(c10::ArrayRef<size_t> indices) override {
    if (rank_ != 0) {
      throw std::runtime_error("process " + std::to_string(rank_) + " cannot read the data");
    }
    std::vector<int64_t> ids(indices.begin(), indices.end());
    auto index = torch::tensor(ids, torch::kInt64);
    return {index, {index.to(torch::kFloat64) / 4, index.to(torch::kInt16).reshape({-1, 1})}};
  }
  std::optional<size_t> size() const override { return size_; }
  size_t size_;
  int rank_;
};

template <typename Loader> std::vector<std::vector<int64_t>> epochs_of_batches(Loader& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (auto& batch : loader) {
      EXPECT_TRUE(batch.target.equal(2 * batch.data));
      batches.push_back(values(batch.data));
    }
    batches.push_back({-1});
  }
  return batches;
}

/// Under `dispatching` (dispatch_batches), every process gets the batches that reading its own share gives
/// under `reading` (the same options otherwise), for every order, drop_last and worker count; a resume
/// mid-epoch continues with the same batch; tuple batches arrive whole.
void expect_dispatch_matches_reading(accelerate::Accelerator& reading, accelerate::Accelerator& dispatching) {
  const int rank = dispatching.process_index();
  for (bool shuffle : {true, false}) {
    for (bool drop_last : {true, false}) {
      for (size_t workers : {0, 2}) {
        const auto options =
            accelerate::DataLoaderOptions(3).shuffle(shuffle).drop_last(drop_last).workers(workers);
        auto expected_loader = reading.prepare_data_loader(stacked(23), options);
        std::vector<std::vector<int64_t>> expected;
        for (int epoch = 0; epoch < 2; ++epoch) {
          for (auto& batch : *expected_loader) {
            expected.push_back(values(batch.data));
          }
          expected.push_back({-1});
        }
        auto loader = dispatching.prepare_data_loader(
            MainOnlyDataset(23, rank).map(torch::data::transforms::Stack<>()), options);
        EXPECT_EQ(loader->size(), expected_loader->size()) << "the main process's dataset size is used";
        EXPECT_EQ(epochs_of_batches(*loader), expected)
            << "process " << rank << ", shuffle " << shuffle << ", drop_last " << drop_last << ", workers "
            << workers;
      }
    }
  }
  // Saved after 2 batches (2 workers reading ahead on the main process), resumed by a new loader.
  expect_resume_continues(
      [&] {
        return dispatching.prepare_data_loader(
            MainOnlyDataset(23, rank).map(torch::data::transforms::Stack<>()),
            accelerate::DataLoaderOptions(3).workers(2));
      },
      rank);

  // A tuple of a tensor and a vector of tensors of other dtypes and shapes.
  auto expected_tuples = reading.prepare_data_loader(TupleDataset(23, 0), accelerate::DataLoaderOptions(3));
  auto tuples = dispatching.prepare_data_loader(TupleDataset(23, rank), accelerate::DataLoaderOptions(3));
  std::vector<std::tuple<torch::Tensor, std::vector<torch::Tensor>>> want;
  for (auto& batch : *expected_tuples) {
    want.push_back(batch);
  }
  size_t k = 0;
  for (auto& [index, parts] : *tuples) {
    ASSERT_LT(k, want.size());
    EXPECT_TRUE(index.equal(std::get<0>(want[k]))) << "batch " << k << " of process " << rank;
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_EQ(parts[0].scalar_type(), torch::kFloat64);
    EXPECT_TRUE(parts[0].equal(std::get<1>(want[k])[0]));
    EXPECT_EQ(parts[1].scalar_type(), torch::kInt16);
    EXPECT_TRUE(parts[1].equal(std::get<1>(want[k])[1]));
    ++k;
  }
  EXPECT_EQ(k, want.size());
}

TEST(DataLoaderMultirank, DispatchBatchesGivesEveryProcessItsOwnBatches) {
  accelerate::Accelerator reading(test_options());
  accelerate::Accelerator dispatching(test_options().dispatch_batches(true));
  ASSERT_GE(dispatching.num_processes(), 2);
  expect_dispatch_matches_reading(reading, dispatching);
}

TEST(DataLoaderMultirank, DispatchBatchesKeepsUnevenBatchesAndNobodyHangs) {
  accelerate::Accelerator reading(test_options().even_batches(false));
  accelerate::Accelerator dispatching(test_options().even_batches(false).dispatch_batches(true));
  ASSERT_GE(dispatching.num_processes(), 2);
  expect_dispatch_matches_reading(reading, dispatching);
  // Training through the uneven end: the process without a last batch joins the others' all-reduce while
  // the main process sends nothing to it.
  torch::manual_seed(0);
  torch::nn::Linear model(1, 1);
  dispatching.prepare(model);
  auto optimizer = dispatching.prepare(torch::optim::SGD(model->parameters(), 0.01));
  auto loader = dispatching.prepare_data_loader(
      MainOnlyDataset(7, dispatching.process_index()).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(3));
  int64_t steps = 0;
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    dispatching.backward(model->forward(batch.data.to(torch::kFloat32)).sum());
    optimizer.step();
    ++steps;
  }
  EXPECT_EQ(steps, static_cast<int64_t>(loader->size()));
  auto weights = torch::cat({model->weight.detach().reshape({-1}), model->bias.detach()});
  EXPECT_TRUE(weights.clone().equal(dispatching.broadcast(weights, 0)));
}

TEST(DataLoaderMultirank, DispatchBatchesReportsAFailedReadOnEveryProcess) {
  accelerate::Accelerator dispatching(test_options().dispatch_batches(true));
  const int rank = dispatching.process_index();
  // A batch of a string per sample cannot travel as tensors: refused when built, on every process alike.
  struct Names : torch::data::datasets::Dataset<Names, std::string> {
    std::string get(size_t index) override { return std::to_string(index); }
    std::optional<size_t> size() const override { return 4; }
  };
  try {
    dispatching.prepare_data_loader(Names(), accelerate::DataLoaderOptions(2));
    ADD_FAILURE() << "a batch of strings was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("dispatch_batches"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("basic_string"), std::string::npos) << error.what();
  }
  // Sample 37 (in the batch of process 1 at step 4 of a sequential pass of batches of 4) fails to read on the
  // main process: every process that waited for that step's batch hears why, nobody hangs.
  auto loader =
      dispatching.prepare_data_loader(MainOnlyDataset(48, rank, 37).map(torch::data::transforms::Stack<>()),
                                      accelerate::DataLoaderOptions(4));
  size_t batches = 0;
  try {
    for (auto& batch : *loader) {
      (void)batch;
      ++batches;
    }
    ADD_FAILURE() << "the failed read did not reach process " << rank;
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("37"), std::string::npos) << message;
    if (rank != 0) {
      EXPECT_NE(message.find("the main process could not read"), std::string::npos) << message;
    }
  }
  EXPECT_EQ(batches, 4u) << "the batches before the failing step arrived";
  EXPECT_EQ(loader->state().batches_consumed, 4u) << "the failed batch is not counted as consumed";
  // A sparse tensor cannot travel: the main process says why, and the processes waiting for it hear it.
  struct Sparse : torch::data::datasets::BatchDataset<Sparse, torch::Tensor> {
    torch::Tensor get_batch(c10::ArrayRef<size_t> indices) override {
      return torch::eye(static_cast<int64_t>(indices.size())).to_sparse();
    }
    std::optional<size_t> size() const override { return 8; }
  };
  auto sparse = dispatching.prepare_data_loader(Sparse(), accelerate::DataLoaderOptions(2));
  try {
    for (auto& batch : *sparse) {
      (void)batch;
    }
    ADD_FAILURE() << "a sparse batch was dispatched";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("dense"), std::string::npos) << error.what();
  }
  // The processes still agree afterwards: a collective goes through.
  EXPECT_EQ(dispatching.reduce(torch::ones({1})).item<float>(),
            static_cast<float>(dispatching.num_processes()));
}

// ---- The collectives -------------------------------------------------------------------------------------
/// One accelerator for every collectives test of the process: a second rendezvous on the same port could meet
/// a process still holding the first one's store.
accelerate::Accelerator& shared_accelerator() {
  static accelerate::Accelerator accelerator(test_options());
  return accelerator;
}

TEST(CollectivesMultirank, GatherConcatenatesInProcessOrder) {
  auto& accelerator = shared_accelerator();
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  auto gathered = accelerator.gather(torch::full({2, 3}, rank, torch::kFloat64));
  ASSERT_EQ(gathered.sizes(), torch::IntArrayRef({2 * world, 3}));
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(gathered.slice(0, 2 * r, 2 * r + 2).eq(r).all().item<bool>()) << "rows of process " << r;
  }
  auto scalars = accelerator.gather(torch::tensor(static_cast<int64_t>(rank)));
  EXPECT_EQ(values(scalars), iota(world)) << "0-d tensors gather into a 1-d tensor";
}

TEST(CollectivesMultirank, GatherOfDifferentShapesSaysToPadFirst) {
  auto& accelerator = shared_accelerator();
  const int rank = accelerator.process_index();
  try {
    accelerator.gather(torch::ones({rank + 1, 2}));
    FAIL() << "a gather of [1, 2] and [2, 2] tensors went through";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("process 0: [1, 2] Float, process 1: [2, 2] Float"), std::string::npos) << message;
    EXPECT_NE(message.find("pad_across_processes"), std::string::npos) << message;
  }
  // Every process threw at the same point: the next collective still pairs up.
  EXPECT_EQ(accelerator.gather(torch::ones({1})).size(0), accelerator.num_processes());
}

TEST(CollectivesMultirank, ReduceSumsAveragesAndTakesTheMax) {
  auto& accelerator = shared_accelerator();
  const int world = accelerator.num_processes();
  const double rank = accelerator.process_index();
  auto mine = torch::tensor({rank, 10.0 * rank}, torch::kFloat64);
  const double sum = world * (world - 1) / 2.0;
  EXPECT_TRUE(accelerator.reduce(mine).equal(torch::tensor({sum, 10 * sum}, torch::kFloat64)));
  EXPECT_TRUE(accelerator.reduce(mine, accelerate::ReduceOp::MEAN)
                  .allclose(torch::tensor({sum / world, 10 * sum / world}, torch::kFloat64)));
  EXPECT_TRUE(accelerator.reduce(mine, accelerate::ReduceOp::MAX)
                  .equal(torch::tensor({world - 1.0, 10.0 * (world - 1)}, torch::kFloat64)));
  EXPECT_TRUE(mine.equal(torch::tensor({rank, 10.0 * rank}, torch::kFloat64))) << "the input is left alone";
}

TEST(CollectivesMultirank, PadAcrossProcessesPadsToTheLongest) {
  auto& accelerator = shared_accelerator();
  const int world = accelerator.num_processes();
  const int64_t rank = accelerator.process_index();
  auto mine = torch::full({2, rank + 1}, 7, torch::kInt64);
  auto after = accelerator.pad_across_processes(mine, 1, -1);
  auto before = accelerator.pad_across_processes(mine, -1, -1, /*pad_first=*/true);
  ASSERT_EQ(after.sizes(), torch::IntArrayRef({2, world}));
  EXPECT_TRUE(after.slice(1, 0, rank + 1).eq(7).all().item<bool>());
  EXPECT_TRUE(after.slice(1, rank + 1).eq(-1).all().item<bool>());
  EXPECT_TRUE(before.slice(1, world - rank - 1).eq(7).all().item<bool>());
  EXPECT_TRUE(before.slice(1, 0, world - rank - 1).eq(-1).all().item<bool>());
  EXPECT_THROW(accelerator.pad_across_processes(mine, 2), std::invalid_argument);
}

TEST(CollectivesMultirank, BroadcastSendsTheChosenProcessTensor) {
  auto& accelerator = shared_accelerator();
  const int world = accelerator.num_processes();
  for (int from = 0; from < world; ++from) {
    auto mine = torch::full({3}, accelerator.process_index() * 100.0);
    auto received = accelerator.broadcast(mine, from);
    EXPECT_TRUE(received.equal(torch::full({3}, from * 100.0))) << "from process " << from;
  }
  EXPECT_THROW(accelerator.broadcast(torch::ones({1}), world), std::invalid_argument);
}

TEST(CollectivesMultirank, MainProcessFirstRunsTheMainBlockBeforeTheOthers) {
  auto& accelerator = shared_accelerator();
  const char* port = std::getenv("MASTER_PORT");
  ASSERT_NE(port, nullptr) << "the launcher exports MASTER_PORT";
  const auto marker = std::filesystem::temp_directory_path() / (std::string("accel_main_first_") + port);
  std::filesystem::remove(marker);
  accelerator.wait_for_everyone();
  {
    auto guard = accelerator.main_process_first();
    if (accelerator.is_main_process()) {
      std::this_thread::sleep_for(
          std::chrono::milliseconds(300)); // the others would overtake without the guard
      std::ofstream(marker) << "downloaded";
    } else {
      EXPECT_TRUE(std::filesystem::exists(marker)) << "process " << accelerator.process_index()
                                                   << " entered its block before the main process finished";
    }
  }
  accelerator.wait_for_everyone();
  if (accelerator.is_main_process()) {
    std::filesystem::remove(marker);
  }
}

TEST(CollectivesMultirank, SplitBetweenProcessesCoversEveryRowOnce) {
  auto& accelerator = shared_accelerator();
  const int world = accelerator.num_processes();
  const int64_t rows = 2 * world + 1; // the first process gets one more
  auto share = accelerator.split_between_processes(torch::arange(rows));
  EXPECT_EQ(share.size(0), accelerator.process_index() == 0 ? 3 : 2);
  auto all = values(accelerator.gather(accelerator.pad_across_processes(share, 0, -1)));
  all.erase(std::remove(all.begin(), all.end(), -1), all.end());
  EXPECT_EQ(all, iota(rows)) << "contiguous shares, in process order";

  auto padded = accelerator.split_between_processes(torch::arange(rows), /*apply_padding=*/true);
  EXPECT_EQ(padded.size(0), 3);
  if (accelerator.process_index() != 0) {
    EXPECT_EQ(padded[2].item<int64_t>(), rows - 1) << "padding repeats the last row";
  }
  auto items = accelerator.split_between_processes(std::vector<int>(static_cast<size_t>(rows), 1));
  EXPECT_EQ(accelerator.reduce(torch::tensor(static_cast<int64_t>(items.size()))).item<int64_t>(), rows);
}

TEST(CollectivesMultirank, TriggerRaisedOnOneProcessIsSeenByAll) {
  auto& accelerator = shared_accelerator();
  EXPECT_FALSE(accelerator.check_trigger());
  if (accelerator.process_index() == accelerator.num_processes() - 1) {
    accelerator.set_trigger();
  }
  EXPECT_TRUE(accelerator.check_trigger()) << "on process " << accelerator.process_index();
  EXPECT_FALSE(accelerator.check_trigger()) << "the check resets the trigger everywhere";
}

} // namespace
