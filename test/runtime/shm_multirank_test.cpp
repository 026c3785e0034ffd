// Multi-rank tests of the same-machine shared-memory all-reduce (runtime/shm_allreduce.h): run by
// test/harness/run_ranks.py as N ranks on one machine.
#include <accelerate/accelerate.h>

#include "../../runtime/shm_allreduce.h"
#include "../../runtime/state.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

accelerate::AcceleratorOptions test_options() {
  return accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(30));
}

c10::intrusive_ptr<c10d::Backend> cpu_backend(accelerate::Accelerator& accelerator) {
  return accelerate::detail::internal_state(accelerator).process_group->getBackend(c10::DeviceType::CPU);
}

void allreduce(accelerate::Accelerator& accelerator, torch::Tensor& tensor, c10d::ReduceOp op) {
  std::vector<torch::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  cpu_backend(accelerator)->allreduce(tensors, options)->wait();
}

/// Rank r holds (i mod 7) + r at position i: small integers, exact in every dtype, so sum, min and max are
/// known in closed form.
torch::Tensor rank_pattern(int64_t numel, int rank, torch::ScalarType dtype) {
  return (torch::arange(numel, torch::kInt64).remainder(7) + rank).to(dtype);
}

TEST(ShmAllreduce, SumMinMaxAreExactForEveryDtypeSizeAndLayout) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  ASSERT_TRUE(accelerate::detail::uses_shared_memory_allreduce(cpu_backend(accelerator)))
      << "all processes of this test run on one machine: the shared-memory path must be in use";

  // 0 and 1 elements (fewer than processes: empty shares), odd sizes, and 3M floats = 12 MB: several chunks.
  const std::vector<int64_t> sizes = {0, 1, 2, 1001, 65536 + 3, 3 * 1000 * 1000};
  const std::vector<torch::ScalarType> dtypes = {torch::kFloat32, torch::kFloat64, torch::kBFloat16,
                                                 torch::kFloat16, torch::kInt64,   torch::kInt32};
  for (auto dtype : dtypes) {
    for (int64_t numel : sizes) {
      if (numel > 100000 && dtype != torch::kFloat32) {
        continue;
      }
      const auto base = torch::arange(numel, torch::kInt64).remainder(7);
      const std::vector<std::pair<c10d::ReduceOp, torch::Tensor>> cases = {
          {c10d::ReduceOp::SUM, base * world + world * (world - 1) / 2},
          {c10d::ReduceOp::MIN, base},
          {c10d::ReduceOp::MAX, base + (world - 1)}};
      for (const auto& [op, expected] : cases) {
        auto tensor = rank_pattern(numel, rank, dtype);
        allreduce(accelerator, tensor, op);
        ASSERT_TRUE(torch::equal(tensor.to(torch::kInt64), expected))
            << "op " << static_cast<int>(op.op_) << ", " << numel << " elements of " << dtype;
      }
    }
  }

  // A non-contiguous tensor is reduced in place through a contiguous copy.
  auto matrix = rank_pattern(6 * 5, rank, torch::kFloat32).reshape({6, 5});
  auto transposed = matrix.t();
  const auto expected =
      (torch::arange(30).remainder(7) * world + world * (world - 1) / 2).reshape({6, 5}).t();
  allreduce(accelerator, transposed, c10d::ReduceOp::SUM);
  EXPECT_TRUE(torch::equal(matrix.t().to(torch::kInt64), expected));
}

TEST(ShmAllreduce, EveryProcessGetsTheSameBitsAsGlooWouldAgreeOn) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(test_options());
  const int rank = accelerator.process_index();
  ASSERT_TRUE(accelerate::detail::uses_shared_memory_allreduce(cpu_backend(accelerator)));
  // Random floats: rounding depends on the order of the additions. Every process must end with identical bits
  // (replicas must not drift), and the sum must be the float sum of the inputs.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1234 + rank);
  auto mine = at::randn({1 << 20}, generator, torch::kFloat32);
  auto everyone = accelerator.gather(mine.unsqueeze(0)); // world x n, through Gloo
  auto tensor = mine.clone();
  allreduce(accelerator, tensor, c10d::ReduceOp::SUM);
  EXPECT_TRUE(torch::allclose(tensor, everyone.to(torch::kFloat64).sum(0).to(torch::kFloat32), 1e-5, 1e-5));
  auto from_zero = accelerator.broadcast(tensor, 0);
  EXPECT_TRUE(torch::equal(tensor, from_zero)) << "process " << rank << " differs from process 0";
}

TEST(ShmAllreduce, MismatchedSizesAreReportedOnEveryProcess) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(test_options());
  const int rank = accelerator.process_index();
  auto tensor = torch::ones({10 + rank});
  try {
    allreduce(accelerator, tensor, c10d::ReduceOp::SUM);
    FAIL() << "an all-reduce of 10 against 11 elements went through";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("all-reduce mismatch"), std::string::npos) << message;
    EXPECT_NE(message.find("same size and dtype"), std::string::npos) << message;
  }
}

TEST(ShmAllreduce, AverageOfDifferentlySplitTensorsIsTheMeanOnEveryProcess) {
  at::set_num_threads(2); // the averaging loop splits large shares across intra-op threads
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  ASSERT_TRUE(accelerate::detail::uses_shared_memory_allreduce(cpu_backend(accelerator)));
  // 0, 1, fewer elements than processes, odd sizes, and 1.5 M (several chunks for the 2-byte and 8-byte
  // dtypes).
  const std::vector<int64_t> sizes = {0, 1, 2, 4099, 1500 * 1000};
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kFloat16}) {
    for (int64_t numel : sizes) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(99 + rank);
      auto flat = at::randn({numel}, generator, torch::kFloat32).to(dtype);
      auto everyone = accelerator.gather(flat.unsqueeze(0)); // world x n, through Gloo
      // Each process splits the same flat array into pieces at different places (and an empty piece).
      std::vector<torch::Tensor> pieces;
      const int64_t cut = std::min(numel, (numel / 3) * (rank + 1) / world + rank);
      pieces.push_back(flat.slice(0, 0, cut).clone());
      pieces.push_back(torch::empty({0}, flat.options()));
      pieces.push_back(flat.slice(0, cut).clone().reshape({-1, 1}));
      accelerate::detail::average_in_shared_memory(cpu_backend(accelerator), pieces);
      const auto result = torch::cat({pieces[0], pieces[2].reshape({-1})});
      // The mean is taken in float for 2-byte dtypes and rounded once.
      const auto expected = (everyone.to(torch::kFloat64).sum(0) / world).to(dtype);
      const double tolerance = dtype == torch::kFloat64 ? 1e-15 : dtype == torch::kFloat32 ? 1e-6 : 1e-2;
      ASSERT_TRUE(
          torch::allclose(result.to(torch::kFloat64), expected.to(torch::kFloat64), tolerance, tolerance))
          << numel << " elements of " << dtype;
      ASSERT_TRUE(torch::equal(result, accelerator.broadcast(result, 0)))
          << "process " << rank << " differs from process 0 (" << numel << " elements of " << dtype << ")";
    }
  }
}

TEST(ShmAllreduce, AMismatchedAverageIsReportedOnEveryProcess) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(test_options());
  const int rank = accelerator.process_index();
  std::vector<torch::Tensor> tensors{torch::ones({10 + rank}, torch::kFloat64)};
  try {
    accelerate::detail::average_in_shared_memory(cpu_backend(accelerator), tensors);
    FAIL() << "an average of 10 against 11 elements went through";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("all-reduce mismatch"), std::string::npos) << message;
    EXPECT_NE(message.find("(gradient average)"), std::string::npos) << message;
  }
}

TEST(ShmAllreduce, AProcessThatExitedIsNamedInsteadOfWaitedFor) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(test_options());
  const int rank = accelerator.process_index();
  if (rank == accelerator.num_processes() - 1) {
    std::_Exit(0); // leaves without a word, as a crashed process would
  }
  auto tensor = torch::ones({1000});
  const auto start = std::chrono::steady_clock::now();
  try {
    allreduce(accelerator, tensor, c10d::ReduceOp::SUM);
    FAIL() << "the all-reduce completed without the last process";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("process " + std::to_string(accelerator.num_processes() - 1)), std::string::npos)
        << message;
    EXPECT_NE(message.find("exited while"), std::string::npos) << message;
    std::fprintf(stderr, "process %d was told: %s\n", rank, message.c_str());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  std::_Exit(::testing::Test::HasFailure() ? 1
                                           : 0); // the group cannot shut down cleanly without that process
}

TEST(ShmAllreduce, EveryProcessFallsBackToGlooWhenOneTurnsItOff) {
  at::set_num_threads(1);
  // Only the last process says no (before the process group exists): all must still agree, or their
  // all-reduces would never meet.
  const int rank = std::atoi(std::getenv("RANK"));
  const int world = std::atoi(std::getenv("WORLD_SIZE"));
  if (rank == world - 1) {
    setenv("ACCELERATE_SHM_ALLREDUCE", "0", 1);
  }
  accelerate::Accelerator accelerator(test_options());
  EXPECT_FALSE(accelerate::detail::uses_shared_memory_allreduce(cpu_backend(accelerator)));
  auto tensor = rank_pattern(1001, rank, torch::kFloat32);
  allreduce(accelerator, tensor, c10d::ReduceOp::SUM);
  EXPECT_TRUE(torch::equal(tensor.to(torch::kInt64), torch::arange(1001, torch::kInt64).remainder(7) * world +
                                                         world * (world - 1) / 2));
}

TEST(ShmAllreduce, AnUnknownSettingIsRefusedByName) {
  setenv("ACCELERATE_SHM_ALLREDUCE", "sometimes", 1);
  try {
    accelerate::Accelerator accelerator(test_options());
    FAIL() << "ACCELERATE_SHM_ALLREDUCE=sometimes was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(
        std::string(error.what()).find("ACCELERATE_SHM_ALLREDUCE must be auto, 1 or 0 (got 'sometimes')"),
        std::string::npos)
        << error.what();
  }
}

} // namespace
