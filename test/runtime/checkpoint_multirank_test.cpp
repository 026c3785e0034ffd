// Multi-rank tests of checkpoints and debug mode, run by test/harness/run_ranks.py as N ranks over Gloo:
// the rank-local save trap, per-process random states, pruning, a failure on one process failing all, and
// ACCELERATE_DEBUG_MODE naming the process that skipped a collective, sent another shape, or diverged.
#include <accelerate/accelerate.h>

#include "../../runtime/accelerator/state.h"
#include "../../runtime/common/durable_file.h"
#include "../support/numerics.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

accelerate::AcceleratorOptions test_options(int timeout_seconds = 10) {
  return accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(timeout_seconds));
}

/// A path every rank names the same: MASTER_PORT is unique to the run.
std::string shared_path() {
  const char* port = std::getenv("MASTER_PORT");
  const auto* test = testing::UnitTest::GetInstance()->current_test_info();
  return accelerate::detail::join_path(testing::TempDir(), "accel-ckpt-" + std::string(test->name()) + "-" +
                                                               (port != nullptr ? port : "0"));
}

/// The run's shared directory, created empty and removed at the end by rank 0.
class SharedDirectory {
public:
  explicit SharedDirectory(accelerate::Accelerator& accelerator)
      : accelerator_(accelerator), path_(shared_path()) {
    if (accelerator.is_main_process()) {
      accelerate::detail::remove_tree(path_);
      accelerate::detail::make_directories(path_);
    }
  }
  ~SharedDirectory() {
    if (accelerator_.is_main_process()) {
      try {
        accelerate::detail::remove_tree(path_);
      } catch (const std::exception&) {
      }
    }
  }
  std::string operator/(const std::string& name) const { return accelerate::detail::join_path(path_, name); }
  const std::string& path() const { return path_; }

private:
  accelerate::Accelerator& accelerator_;
  std::string path_;
};

/// Meets the other ranks through the rendezvous store, not a collective: after a test made the collectives
/// fail on purpose, it keeps every rank (and rank 0's store) alive until all have finished checking.
void meet_through_the_store(accelerate::Accelerator& accelerator, const std::string& name) {
  auto& state = accelerate::detail::internal_state(accelerator);
  auto store = state.process_group->getStore();
  const std::string prefix = "test/" + name + "/";
  store->set(prefix + std::to_string(accelerator.process_index()), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int rank = 0; rank < accelerator.num_processes(); ++rank) {
    keys.push_back(prefix + std::to_string(rank));
  }
  store->wait(keys, std::chrono::seconds(60));
}

/// Runs `call`, which must throw; returns the message.
template <typename Call> std::string error_of(Call&& call) {
  try {
    call();
  } catch (const std::exception& error) {
    return error.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

/// The caller is named by its source file and line when the binary has debug information and addr2line
/// is installed, by its function otherwise, and at least by the binary.
#define EXPECT_NAMES_THE_CALLER(text)                                                                        \
  EXPECT_TRUE((text).find("checkpoint_multirank_test.cpp") != std::string::npos ||                           \
              (text).find("runtime_multirank_tests+0x") != std::string::npos)                                \
      << "the caller is not named in: " << (text)

#define EXPECT_CONTAINS(text, part)                                                                          \
  EXPECT_NE((text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

void train_steps(accelerate::Accelerator& accelerator, Net& model, accelerate::Optimizer& optimizer,
                 int steps) {
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    auto x = torch::randn({3, 4}); // each rank draws from its own generator
    accelerator.backward(torch::mse_loss(model.forward(x), x.sum(1, true)));
    optimizer.step();
  }
}

// ---- The collective contract
// -------------------------------------------------------------------------------

TEST(CheckpointMultirank, SaveOnTheMainProcessOnlyFailsWithAnExplanation) {
  accelerate::Accelerator accelerator(test_options(/*timeout_seconds=*/3));
  ASSERT_EQ(accelerator.num_processes(), 2) << "run under accel launch with 2 processes";
  SharedDirectory dir(accelerator);
  auto model = std::make_shared<Net>();
  accelerator.prepare(model);
  if (accelerator.is_main_process()) { // the trap Accelerate users fall into
    const auto start = Clock::now();
    const std::string message = error_of([&] { accelerator.save_state(dir / "ckpt"); });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(8)) << "bounded by the 3 s timeout";
    EXPECT_CONTAINS(message, "save_state is collective: every process must call it");
    EXPECT_CONTAINS(message, "process 1 did not within 3000 ms");
    EXPECT_CONTAINS(message, "is_main_process()");
    EXPECT_NAMES_THE_CALLER(message); // where the lonely call came from
    std::cout << "the message: " << message << std::endl;
    EXPECT_FALSE(accelerate::detail::path_exists(dir / "ckpt"));
  }
  meet_through_the_store(accelerator, "trap");
}

TEST(CheckpointMultirank, DifferentCallsOnDifferentProcessesAreRefused) {
  accelerate::Accelerator accelerator(test_options());
  SharedDirectory dir(accelerator);
  const std::string message = error_of([&] {
    if (accelerator.process_index() == 0) {
      accelerator.save_state(dir / "a");
    } else {
      accelerator.save_state(dir / "b");
    }
  });
  EXPECT_CONTAINS(message, "every process must make the same checkpoint call with the same directory");
  meet_through_the_store(accelerator, "mismatch");
}

/// A registered object whose save fails on one process only.
struct FailsOnRank {
  int rank_to_fail = -1;
  int rank = 0;
  void save(torch::serialize::OutputArchive& archive) const {
    if (rank == rank_to_fail) {
      throw std::runtime_error("the object refused to save on purpose");
    }
    archive.write("rank", torch::tensor(rank));
  }
  void load(torch::serialize::InputArchive&) {}
};

TEST(CheckpointMultirank, AFailureOnOneProcessFailsTheSaveEverywhereAndKeepsThePreviousCheckpoint) {
  accelerate::Accelerator accelerator(test_options());
  SharedDirectory dir(accelerator);
  auto model = std::make_shared<Net>();
  accelerator.prepare(model);
  FailsOnRank object{-1, accelerator.process_index()};
  accelerator.register_for_checkpointing(object);
  const std::string first = accelerator.save_state(dir / "ckpt");
  const std::string before =
      accelerate::detail::read_whole_file(accelerate::detail::join_path(first, "metadata.json"));
  object.rank_to_fail = 0; // the main process writes registered objects
  const std::string message = error_of([&] { accelerator.save_state(dir / "ckpt"); });
  EXPECT_CONTAINS(message, "the object refused to save on purpose");
  if (accelerator.process_index() != 0) {
    EXPECT_CONTAINS(message, "save_state failed on process 0");
  }
  EXPECT_EQ(accelerate::detail::read_whole_file(accelerate::detail::join_path(first, "metadata.json")),
            before);
  if (accelerator.is_main_process()) {
    EXPECT_FALSE(accelerate::detail::path_exists(dir / ".ckpt.partial")); // the main process cleaned up
  }
  object.rank_to_fail = -1;
  accelerator.load_state(dir / "ckpt"); // still loadable, on every process
}

// ---- What a checkpoint holds
// -------------------------------------------------------------------------------

TEST(CheckpointMultirank, EveryProcessGetsItsOwnRandomStateBack) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options().seed(11));
  SharedDirectory dir(accelerator);
  accelerator.set_seed(11, /*device_specific=*/true);
  auto model = std::make_shared<Net>();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::Adam(model->parameters(), 1e-2));
  train_steps(accelerator, *model, optimizer, 3);
  accelerator.save_state(dir / "ckpt");
  const auto draws = torch::randn({4});
  const auto expected = model->fc1->weight.detach().clone();
  train_steps(accelerator, *model, optimizer, 2);
  accelerator.load_state(dir / "ckpt");
  EXPECT_TRUE(torch::equal(torch::randn({4}), draws)) << "process " << accelerator.process_index();
  EXPECT_TRUE(torch::equal(model->fc1->weight, expected));
  // Checked before the gather: after it, the main process may reach the end of the test and remove the shared
  // directory while this process is still looking.
  EXPECT_TRUE(accelerate::detail::path_exists(dir / "ckpt/random_states_1.bin"));
  // Processes drew from different streams (device_specific), and each got its own back.
  auto all = accelerator.gather(draws.unsqueeze(0));
  EXPECT_FALSE(torch::equal(all[0], all[1]));
}

TEST(CheckpointMultirank, TotalLimitKeepsTheNewestTwoOfFiveSaves) {
  accelerate::Accelerator accelerator(test_options().project_dir(shared_path()).total_limit(2));
  SharedDirectory dir(accelerator);
  auto model = std::make_shared<Net>();
  accelerator.prepare(model);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(accelerator.save_state(), dir / ("checkpoints/checkpoint_" + std::to_string(i)));
  }
  EXPECT_EQ(accelerate::detail::list_directory(dir / "checkpoints"),
            (std::vector<std::string>{"checkpoint_3", "checkpoint_4", "latest"}));
  EXPECT_EQ(accelerate::detail::read_whole_file(dir / "checkpoints/latest"), "checkpoint_4\n");
  accelerator.load_state();
}

TEST(CheckpointMultirank, EachProcessOwnFileIsRecordedWithItsWriter) {
  accelerate::Accelerator accelerator(test_options());
  SharedDirectory dir(accelerator);
  auto model = std::make_shared<Net>();
  accelerator.prepare(model);
  const std::string saved = accelerator.save_state(dir / "ckpt");
  const auto metadata = nlohmann::json::parse(
      accelerate::detail::read_whole_file(accelerate::detail::join_path(saved, "metadata.json")));
  EXPECT_EQ(metadata.at("world_size"), 2);
  EXPECT_EQ(metadata.at("parallel_strategy"), "ddp");
  const auto& files = metadata.at("files");
  EXPECT_EQ(files.at("random_states_0.bin").at("rank"), 0);
  EXPECT_EQ(files.at("random_states_1.bin").at("rank"), 1); // written, and recorded, by process 1
  EXPECT_EQ(files.at("random_states_1.bin").at("bytes"),
            accelerate::detail::read_whole_file(dir / "ckpt/random_states_1.bin").size());
  EXPECT_FALSE(files.at("model.safetensors").contains("rank"));
  accelerator.load_state(saved);
}

// ---- Debug mode
// --------------------------------------------------------------------------------------------

/// An all-reduce straight on the process group: debug mode checks every collective, the runtime's own
/// (DDP's buckets, checkpoint agreement) as much as the Accelerator's public ones.
void allreduce(accelerate::Accelerator& accelerator, torch::Tensor tensor) {
  std::vector<torch::Tensor> tensors{std::move(tensor)};
  accelerate::detail::internal_state(accelerator).process_group->allreduce(tensors)->wait();
}

TEST(DebugMode, AProcessThatSkipsACollectiveIsNamedByEveryOther) {
  accelerate::Accelerator accelerator(test_options(/*timeout_seconds=*/3).debug(true));
  ASSERT_EQ(accelerator.num_processes(), 3) << "run under accel launch with 3 processes";
  accelerator.wait_for_everyone(); // a checked collective that matches
  const auto start = Clock::now();
  if (accelerator.process_index() != 1) {
    const std::string message = error_of([&] { allreduce(accelerator, torch::ones({4})); });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(8)) << "bounded by the 3 s timeout";
    EXPECT_CONTAINS(message, "process 1 did not reach collective #");
    EXPECT_CONTAINS(message,
                    "within 3000 ms, while processes 0, 2 called allreduce(sum) (Float[4] cpu) from");
    EXPECT_NAMES_THE_CALLER(message);
    if (accelerator.is_main_process()) {
      std::cout << "the message: " << message << std::endl;
    }
  } else {
    // Process 1 skips the all-reduce; when it reaches its next collective it learns why the others gave up.
    std::this_thread::sleep_for(std::chrono::seconds(5));
    const std::string message = error_of([&] { accelerator.wait_for_everyone(); });
    EXPECT_CONTAINS(message, "another process gave up on collective #");
    EXPECT_CONTAINS(message, "process 1 did not reach collective #");
  }
  meet_through_the_store(accelerator, "skip");
}

TEST(DebugMode, AShapeMismatchIsReportedBeforeAnyDataMoves) {
  accelerate::Accelerator accelerator(test_options().debug(true));
  const int rank = accelerator.process_index();
  auto mine = torch::full({rank == 1 ? 5 : 4}, static_cast<float>(rank + 1));
  const auto untouched = mine.clone();
  const std::string message = error_of([&] { allreduce(accelerator, mine); });
  EXPECT_CONTAINS(message, "processes disagree on collective #");
  EXPECT_CONTAINS(message, ", so nothing was sent");
  EXPECT_CONTAINS(message, "process 0: allreduce(sum) (Float[4] cpu)");
  EXPECT_CONTAINS(message, "process 1: allreduce(sum) (Float[5] cpu)");
  EXPECT_CONTAINS(message, "process 1 differs from process 0");
  if (rank == 0) {
    std::cout << "the message: " << message << std::endl;
  }
  EXPECT_TRUE(torch::equal(mine, untouched));
  meet_through_the_store(accelerator, "shape");
}

TEST(DebugMode, TheChecksumNamesThePerturbedProcess) {
  ::setenv("ACCELERATE_DEBUG_CHECKSUM_EVERY", "2", 1);
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options().debug(true).seed(3));
  const int perturbed = accelerator.num_processes() - 1;
  auto model = std::make_shared<Net>();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
  train_steps(accelerator, *model, optimizer, 3); // checks at steps 0 and 2 pass
  if (accelerator.process_index() == perturbed) {
    torch::NoGradGuard no_grad;
    model->fc2->bias.add_(1e-6);
  }
  train_steps(accelerator, *model, optimizer, 1); // step 3: no check
  const std::string message = error_of([&] { train_steps(accelerator, *model, optimizer, 1); });
  EXPECT_CONTAINS(message, "the processes' replicas diverged");
  EXPECT_CONTAINS(message,
                  "process " + std::to_string(perturbed) + " is the first that differs from the others");
  EXPECT_CONTAINS(message, "differs from the others, in fc2.bias."); // only there: gradients are averaged
  EXPECT_CONTAINS(message, "optimizer step 5");
  if (accelerator.is_main_process()) {
    std::cout << "the message: " << message << std::endl;
  }
  meet_through_the_store(accelerator, "checksum");
}

TEST(DebugMode, TheChecksumNamesAParamGroupWhoseLearningRateDiffers) {
  // A learning-rate change that ran on one process only (a side effect under a main-process guard): with a
  // check at every step, the next step's check names the group before any parameter moves apart.
  ::setenv("ACCELERATE_DEBUG_CHECKSUM_EVERY", "1", 1);
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options().debug(true).seed(3));
  const int perturbed = accelerator.num_processes() - 1;
  auto model = std::make_shared<Net>();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
  train_steps(accelerator, *model, optimizer, 2); // checks at steps 0 and 1 pass
  if (accelerator.process_index() == perturbed) {
    optimizer.param_groups()[0].options().set_lr(5e-3);
  }
  const std::string message = error_of([&] { train_steps(accelerator, *model, optimizer, 1); });
  EXPECT_CONTAINS(message, "the processes' replicas diverged");
  EXPECT_CONTAINS(message,
                  "process " + std::to_string(perturbed) + " is the first that differs from the others");
  EXPECT_CONTAINS(message, "differs from the others, in optimizer 0 param group 0 learning rate.");
  EXPECT_CONTAINS(message, "optimizer step 3");
  if (accelerator.is_main_process()) {
    std::cout << "the message: " << message << std::endl;
  }
  meet_through_the_store(accelerator, "learning-rate checksum");
}

TEST(DebugMode, BatchNormStatisticsOfEachProcessAreNotADivergence) {
  // BatchNorm's running statistics follow each process's own batch in the forward pass and are replaced by
  // the main process's at the synchronised backward: the check at every step passes, and after the step the
  // buffers agree.
  ::setenv("ACCELERATE_DEBUG_CHECKSUM_EVERY", "1", 1);
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options().debug(true).seed(3));
  torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8), torch::nn::Tanh(),
                              torch::nn::Linear(8, 1));
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  try {
    for (int step = 0; step < 4; ++step) {
      optimizer.zero_grad();
      auto x = torch::randn({6, 4}) + accelerator.process_index(); // each process its own batch
      accelerator.backward(torch::mse_loss(model->forward(x), x.sum(1, true)));
      optimizer.step();
    }
  } catch (const std::exception& error) {
    ADD_FAILURE() << error.what();
  }
  for (const auto& buffer : model->buffers()) {
    if (!buffer.is_floating_point()) {
      continue;
    }
    const auto spread = accelerator.reduce(buffer.clone(), accelerate::ReduceOp::MAX) -
                        (-accelerator.reduce(-buffer.clone(), accelerate::ReduceOp::MAX));
    EXPECT_EQ(spread.abs().max().item<double>(), 0.0);
  }
  meet_through_the_store(accelerator, "batch-norm checksum");
}

} // namespace
