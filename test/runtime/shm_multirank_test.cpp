// Multi-rank tests of the same-machine shared-memory all-reduce, reduce-scatter and all-gather
// (runtime/transport/shm_allreduce.h) and of the process-group helpers in front of them
// (runtime/transport/process_group.h): run by test/harness/run_ranks.py as N ranks on one machine.
#include <accelerate/accelerate.h>

#include "../../runtime/accelerator/state.h"
#include "../../runtime/transport/process_group.h"
#include "../../runtime/transport/shm_allreduce.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
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

c10::intrusive_ptr<c10d::ProcessGroup> process_group(accelerate::Accelerator& accelerator) {
  return accelerate::detail::internal_state(accelerator).process_group;
}

/// A process group over a Gloo backend of its own (under its own prefix of the job's store), with no
/// shared-memory wrapper: the c10d path that processes on several machines take.
c10::intrusive_ptr<c10d::ProcessGroup> gloo_only_group(accelerate::Accelerator& accelerator) {
  const auto& state = accelerate::detail::internal_state(accelerator);
  const int rank = accelerator.process_index();
  const int world = accelerator.num_processes();
  auto store = c10::make_intrusive<c10d::PrefixStore>("test/gloo_only", state.process_group->getStore());
  auto gloo = accelerate::detail::create_gloo_backend(store, rank, world, state.environment.master_addr,
                                                      std::chrono::seconds(30));
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world);
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  return group;
}

/// Process `rank`'s tensor of one case: normal values rounded to `dtype`. Every process can build every other
/// process's, so gathers and averages can be checked locally.
torch::Tensor case_values(int64_t numel, int rank, torch::ScalarType dtype, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed * 1000 + static_cast<uint64_t>(rank));
  return at::randn({numel}, generator, torch::kFloat64).to(dtype);
}

/// Whether `a` and `b` hold the same bits (not merely equal values).
bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  const auto bits = a.element_size() == 8   ? torch::kInt64
                    : a.element_size() == 4 ? torch::kInt32
                                            : torch::kInt16;
  return a.scalar_type() == b.scalar_type() && torch::equal(a.view(bits), b.view(bits));
}

/// The dtype's unit roundoff (half the distance from 1 to the next value).
double unit_roundoff(torch::ScalarType dtype) {
  return dtype == torch::kFloat64   ? std::ldexp(1.0, -53)
         : dtype == torch::kFloat32 ? std::ldexp(1.0, -24)
                                    : std::ldexp(1.0, -8);
}

/// Per-process shard sizes: 0, 1, odd, and 700001: at 2 processes a slot holds 1 Mi floats, so a
/// reduce-scatter chunk takes 512 Ki of each shard (2 chunks of float, 3 of double) and an all-gather chunk
/// 1 Mi; at 3 processes 2/3 Mi floats (4 and 7 reduce-scatter chunks, 2 and 3 all-gather chunks).
const std::vector<int64_t> kShardSizes = {0, 1, 7, 700001};

TEST(ShmAllreduce, ReduceScatterIsTheAverageBitForBitAndAllGatherTheConcatenation) {
  at::set_num_threads(2); // the averaging loop splits large pieces across intra-op threads
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  const auto group = process_group(accelerator);
  ASSERT_TRUE(accelerate::detail::uses_shared_memory_allreduce(cpu_backend(accelerator)));
  uint64_t seed = 0;
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
    for (int64_t shard : kShardSizes) {
      ++seed;
      const auto where = std::to_string(shard) + " elements per process of " + c10::toString(dtype);
      const auto input = case_values(world * shard, rank, dtype, seed);
      auto everything = input.clone();
      accelerate::detail::average_in_shared_memory(cpu_backend(accelerator), {everything});
      const auto expected = everything.narrow(0, rank * shard, shard);

      const auto original = input.clone();
      auto output = torch::full({shard}, NAN, input.options());
      accelerate::detail::reduce_scatter_average(group, output, input);
      ASSERT_TRUE(same_bits(output, expected)) << "reduce-scatter, " << where;
      ASSERT_TRUE(same_bits(input, original)) << "input changed, " << where;

      // In place: the output is this process's range of the input; the rest of the input stays as it was.
      auto in_place = input.clone();
      accelerate::detail::reduce_scatter_average(group, in_place.narrow(0, rank * shard, shard), in_place);
      ASSERT_TRUE(same_bits(in_place.narrow(0, rank * shard, shard), expected)) << "in place, " << where;
      ASSERT_TRUE(same_bits(in_place.narrow(0, 0, rank * shard), input.narrow(0, 0, rank * shard)));
      ASSERT_TRUE(same_bits(in_place.narrow(0, (rank + 1) * shard, (world - rank - 1) * shard),
                            input.narrow(0, (rank + 1) * shard, (world - rank - 1) * shard)));

      // All-gather of the averaged shards, out of place and in place: the whole average, which every process
      // holds alike (the step after a sharded optimizer's update).
      auto gathered = torch::full({world * shard}, NAN, input.options());
      accelerate::detail::all_gather_into(group, gathered, output);
      ASSERT_TRUE(same_bits(gathered, everything)) << "all-gather, " << where;
      in_place.narrow(0, 0, rank * shard).fill_(NAN);
      in_place.narrow(0, (rank + 1) * shard, (world - rank - 1) * shard).fill_(NAN);
      accelerate::detail::all_gather_into(group, in_place, in_place.narrow(0, rank * shard, shard));
      ASSERT_TRUE(same_bits(in_place, everything)) << "in-place all-gather, " << where;
    }
  }
}

TEST(ShmAllreduce, TheC10dPathAgreesWithSharedMemory) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  const auto shared = process_group(accelerator);
  const auto gloo = gloo_only_group(accelerator);
  ASSERT_TRUE(accelerate::detail::uses_shared_memory_allreduce(cpu_backend(accelerator)));
  ASSERT_FALSE(accelerate::detail::uses_shared_memory_allreduce(gloo->getBackend(c10::DeviceType::CPU)));
  uint64_t seed = 100;
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
    for (int64_t shard : {int64_t{1}, int64_t{7}, int64_t{100003}}) {
      ++seed;
      const auto where = std::to_string(shard) + " elements per process of " + c10::toString(dtype);
      const auto input = case_values(world * shard, rank, dtype, seed);
      auto from_shared = torch::empty({shard}, input.options());
      accelerate::detail::reduce_scatter_average(shared, from_shared, input);
      auto from_gloo = torch::full({shard}, NAN, input.options());
      accelerate::detail::reduce_scatter_average(gloo, from_gloo, input);
      auto in_place = input.clone();
      accelerate::detail::reduce_scatter_average(gloo, in_place.narrow(0, rank * shard, shard), in_place);
      ASSERT_TRUE(same_bits(in_place.narrow(0, rank * shard, shard), from_gloo)) << "in place, " << where;
      if (world == 2) {
        // (a + b) / 2: the sum of two values is rounded once in any order, and halving is exact (no
        // underflow here), so c10d's sum-then-divide and the shared-memory average give the same bits.
        ASSERT_TRUE(same_bits(from_gloo, from_shared)) << "reduce-scatter, " << where;
      } else {
        // Either path sums n = world values in some order with rounding u at most (the dtype's; the shared-
        // memory path sums in float for bfloat16), so each sum is within (n - 1) u (1 + eps) S of the exact
        // one, S = sum of |x_k|, and divides with at most 2u more (a rounded reciprocal, then the product):
        // each average is within (n + 1) u (1 + eps) S / n of the exact mean, the two within twice that.
        // (2n + 3) u S / n covers it with eps < 1/4.
        auto magnitude = torch::zeros({shard}, torch::kFloat64);
        for (int other = 0; other < world; ++other) {
          magnitude += case_values(world * shard, other, dtype, seed)
                           .narrow(0, rank * shard, shard)
                           .to(torch::kFloat64)
                           .abs();
        }
        const double bound = (2.0 * world + 3.0) * unit_roundoff(dtype) / world;
        const auto difference = (from_gloo.to(torch::kFloat64) - from_shared.to(torch::kFloat64)).abs();
        ASSERT_TRUE(torch::all(difference <= bound * magnitude).item<bool>())
            << "reduce-scatter, " << where << ": largest difference " << difference.max().item<double>();
      }

      auto gathered_shared = torch::empty({world * shard}, input.options());
      accelerate::detail::all_gather_into(shared, gathered_shared, input.narrow(0, 0, shard));
      auto gathered_gloo = torch::full({world * shard}, NAN, input.options());
      accelerate::detail::all_gather_into(gloo, gathered_gloo, input.narrow(0, 0, shard));
      ASSERT_TRUE(same_bits(gathered_gloo, gathered_shared)) << "all-gather, " << where;
      auto gathered_in_place = torch::full({world * shard}, NAN, input.options());
      gathered_in_place.narrow(0, rank * shard, shard).copy_(input.narrow(0, 0, shard));
      accelerate::detail::all_gather_into(gloo, gathered_in_place,
                                          gathered_in_place.narrow(0, rank * shard, shard));
      ASSERT_TRUE(same_bits(gathered_in_place, gathered_shared)) << "in-place all-gather, " << where;
    }
  }
}

TEST(ShmAllreduce, InDebugModeTheHelpersGoThroughCheckedC10d) {
  at::set_num_threads(1);
  setenv("ACCELERATE_DEBUG_MODE", "1", 1);
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  const auto group = process_group(accelerator);
  // The CPU backend is debug mode's checking wrapper (around the shared-memory one): the helpers use c10d.
  ASSERT_FALSE(accelerate::detail::uses_shared_memory_allreduce(cpu_backend(accelerator)));
  const int64_t shard = 1001;
  const auto input = case_values(world * shard, rank, torch::kFloat32, 7);
  auto output = torch::empty({shard}, input.options());
  accelerate::detail::reduce_scatter_average(group, output, input);
  auto sum = torch::zeros({shard}, torch::kFloat32);
  for (int other = 0; other < world; ++other) {
    sum += case_values(world * shard, other, torch::kFloat32, 7).narrow(0, rank * shard, shard);
  }
  // Two processes: the float sum of two values is rounded once in any order and halving is exact.
  ASSERT_EQ(world, 2);
  EXPECT_TRUE(same_bits(output, sum / 2));

  auto gathered = torch::empty({world * shard}, input.options());
  accelerate::detail::all_gather_into(group, gathered, gathered.narrow(0, rank * shard, shard).copy_(output));
  std::vector<torch::Tensor> expected;
  for (int other = 0; other < world; ++other) {
    expected.push_back(accelerator.broadcast(output, other));
  }
  EXPECT_TRUE(same_bits(gathered, torch::cat(expected)));
}

TEST(ShmAllreduce, AMismatchedReduceScatterIsReportedOnEveryProcess) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  const int64_t shard = 10 + rank;
  try {
    accelerate::detail::reduce_scatter_average(process_group(accelerator), torch::empty({shard}),
                                               torch::ones({world * shard}));
    FAIL() << "a reduce-scatter of 10 against 11 elements per process went through";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("collective mismatch"), std::string::npos) << message;
    EXPECT_NE(message.find("a reduce-scatter average over " + std::to_string(world * shard) + " elements"),
              std::string::npos)
        << message;
  }
}

TEST(ShmAllreduce, AnAllGatherMeetingAReduceScatterIsReportedOnEveryProcess) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  // The same number of elements of the same dtype on both sides: only the kind of collective differs.
  try {
    if (rank == 0) {
      accelerate::detail::all_gather_into(process_group(accelerator), torch::empty({world * 10}),
                                          torch::ones({10}));
    } else {
      accelerate::detail::reduce_scatter_average(process_group(accelerator), torch::empty({10}),
                                                 torch::ones({world * 10}));
    }
    FAIL() << "an all-gather met a reduce-scatter";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("collective mismatch"), std::string::npos) << message;
    EXPECT_NE(message.find("an all-gather"), std::string::npos) << message;
    EXPECT_NE(message.find("a reduce-scatter average"), std::string::npos) << message;
  }
}

} // namespace
