// Multi-rank tests of data-parallel training: run by test/harness/run_ranks.py as N ranks on this machine
// (gradients averaged through shared memory; the `.reducer` ctest entries run the Reducer over Gloo).
//
// Preconditions of every parity oracle here (shared/DESIGN.md §5): float64, mean-reduced loss, equal per-rank
// batches, rank r takes slice r of the global batch, no dropout or BatchNorm, one intra-op thread. The oracle
// is the same training in one process, with plain libtorch optimizers and `loss.backward()`, on the global
// batch.
#include <accelerate/accelerate.h>

#include "../../runtime/accelerator/state.h"
#include "../../runtime/parallel/engine.h"
#include "../support/numerics.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <vector>

namespace {

struct Mlp : torch::nn::Module {
  explicit Mlp(int64_t in = 8, int64_t hidden = 16, int64_t out = 1) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    fc3 = register_module("fc3", torch::nn::Linear(hidden, out));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc3->forward(torch::tanh(fc2->forward(torch::tanh(fc1->forward(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

constexpr int64_t kPerRankBatch = 4;

/// Global batch number `index`: the same on every rank, drawn from a generator seeded by the index.
std::pair<torch::Tensor, torch::Tensor> global_batch(int index, int64_t size, int64_t in = 8,
                                                     int64_t out = 1) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + index);
  return {at::randn({size, in}, generator, torch::kFloat64),
          at::randn({size, out}, generator, torch::kFloat64)};
}

torch::Tensor rows(const torch::Tensor& t, int64_t begin, int64_t count) {
  return t.slice(0, begin, begin + count);
}

std::shared_ptr<Mlp> make_model(uint64_t seed, int64_t in = 8, int64_t hidden = 16, int64_t out = 1) {
  torch::manual_seed(seed);
  auto model = std::make_shared<Mlp>(in, hidden, out);
  model->to(torch::kFloat64);
  return model;
}

accelerate::AcceleratorOptions test_options() {
  return accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(30));
}

void expect_parameters_equal(const std::vector<torch::Tensor>& actual,
                             const std::vector<torch::Tensor>& expected, int rank) {
  ASSERT_EQ(actual.size(), expected.size());
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(torch::allclose(actual[i], expected[i], /*rtol=*/1e-6, /*atol=*/1e-12))
        << "parameter " << i << " on rank " << rank << " differs by "
        << (actual[i] - expected[i]).abs().max().item<double>();
    worst = std::max(worst, accelerate_test::relative_difference(actual[i], expected[i]));
  }
  accelerate_test::report_spread("parameters on rank " + std::to_string(rank) + " against one process", worst,
                                 1e-6);
}

using MakeOptimizer = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

/// N ranks x batch b for `steps` steps with a StepLR, against one process on batch N*b.
/// `alternate_set_to_none`: zero_grad keeps (zeroes) the gradients at odd steps instead of dropping them.
void expect_ranks_match_one_process(const MakeOptimizer& make_optimizer, int steps,
                                    accelerate::AcceleratorOptions options = test_options(),
                                    bool alternate_set_to_none = false) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(options);
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  ASSERT_GE(world, 2) << "run this test under accel launch with at least 2 processes";
  const int64_t global = kPerRankBatch * world;

  // Ranks start from different weights: prepare makes them rank 0's.
  auto model = make_model(rank == 0 ? 7 : 100 + rank);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare_optimizer(make_optimizer(model->parameters()));
  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, /*step_size=*/5, /*gamma=*/0.5));
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = global_batch(step, global);
    optimizer.zero_grad(/*set_to_none=*/!alternate_set_to_none || step % 2 == 0);
    accelerator.backward(torch::mse_loss(model->forward(rows(x, rank * kPerRankBatch, kPerRankBatch)),
                                         rows(y, rank * kPerRankBatch, kPerRankBatch)));
    optimizer.step();
    scheduler.step();
  }

  auto reference = make_model(7);
  auto plain = make_optimizer(reference->parameters());
  torch::optim::StepLR plain_scheduler(*plain, 5, 0.5);
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = global_batch(step, global);
    plain->zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();
    plain->step();
    plain_scheduler.step();
  }
  expect_parameters_equal(model->parameters(), reference->parameters(), rank);
  EXPECT_EQ(optimizer.fused_steps(), steps) << "the fused ATen kernel was not used";
  EXPECT_EQ(scheduler.steps(), steps);
  EXPECT_DOUBLE_EQ(optimizer.param_groups()[0].options().get_lr(),
                   plain->param_groups()[0].options().get_lr());
}

TEST(DDP, TwoRanksEqualOneRankDoubleBatchSGD) {
  expect_ranks_match_one_process(
      [](std::vector<torch::Tensor> params) {
        return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
      },
      20);
}

TEST(DDP, GradientAsBucketViewTrainsLikeOneProcess) {
  // The gradients are views of the Reducer's buckets: zero_grad must neither detach_() them in place
  // (libtorch's Optimizer::zero_grad does, and throws) nor lose the views when it keeps them.
  expect_ranks_match_one_process(
      [](std::vector<torch::Tensor> params) {
        return std::make_unique<torch::optim::AdamW>(params,
                                                     torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
      },
      20, test_options().gradient_as_bucket_view(true), /*alternate_set_to_none=*/true);
}

TEST(DDP, TwoRanksEqualOneRankDoubleBatchAdamW) {
  expect_ranks_match_one_process(
      [](std::vector<torch::Tensor> params) {
        return std::make_unique<torch::optim::AdamW>(params,
                                                     torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
      },
      20);
}

TEST(DDP, ThreeRanksAverageLikeOneProcess) {
  // Three processes: shares of the flat gradient that do not divide evenly, and a division by 3.
  expect_ranks_match_one_process(
      [](std::vector<torch::Tensor> params) {
        return std::make_unique<torch::optim::AdamW>(params,
                                                     torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
      },
      12);
}

TEST(DDP, OneMachineAveragesInSharedMemory) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  // 2.1 M float64 parameters (17 MB): several segment chunks, with chunk and share boundaries inside tensors.
  constexpr int64_t in = 1100, hidden = 1000;
  auto model = make_model(rank == 0 ? 7 : 100 + rank, in, hidden, 1);
  accelerator.prepare(model);
  auto& synchronizer = *accelerate::detail::internal_state(accelerator).models.front();
  ASSERT_EQ(synchronizer.synchronisation(), "shared_memory")
      << "every process of this test is on this machine: gradients must be averaged through shared memory";
  EXPECT_EQ(synchronizer.bucket_count(), 0u) << "no Reducer, no buckets";
  EXPECT_NE(accelerator.state().find("cpu_allreduce: shared_memory\n"), std::string::npos)
      << accelerator.state();

  // The gradients after accelerator.backward are the average of every rank's own gradient, which each rank
  // recomputes here for every slice of the global batch on a copy of the (now common) weights.
  auto reference = make_model(0, in, hidden, 1);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < reference->parameters().size(); ++i) {
      reference->parameters()[i].copy_(model->parameters()[i]);
    }
  }
  for (int step = 0; step < 2; ++step) {
    auto [x, y] = global_batch(step, kPerRankBatch * world, in, 1);
    // Step 1 keeps step 0's gradients: the average is of the accumulated gradients.
    accelerator.backward(torch::mse_loss(model->forward(rows(x, rank * kPerRankBatch, kPerRankBatch)),
                                         rows(y, rank * kPerRankBatch, kPerRankBatch)));
    std::vector<torch::Tensor> expected;
    for (int r = 0; r < world; ++r) {
      reference->zero_grad();
      for (int s = 0; s <= step; ++s) {
        auto [xs, ys] = global_batch(s, kPerRankBatch * world, in, 1);
        torch::mse_loss(reference->forward(rows(xs, r * kPerRankBatch, kPerRankBatch)),
                        rows(ys, r * kPerRankBatch, kPerRankBatch))
            .backward();
      }
      for (size_t i = 0; i < reference->parameters().size(); ++i) {
        if (r == 0) {
          expected.push_back(reference->parameters()[i].grad().clone());
        } else {
          expected[i] += reference->parameters()[i].grad();
        }
      }
    }
    for (size_t i = 0; i < expected.size(); ++i) {
      const auto& actual = model->parameters()[i].grad();
      EXPECT_TRUE(torch::allclose(actual, expected[i] / world, /*rtol=*/1e-12, /*atol=*/1e-15))
          << "gradient " << i << " on rank " << rank << " at step " << step << " differs by "
          << (actual - expected[i] / world).abs().max().item<double>();
    }
    if (step == 0) {
      // A non-contiguous gradient is averaged through a contiguous copy and stays where it was.
      auto& weight_gradient = model->fc2->weight.mutable_grad();
      weight_gradient = weight_gradient.t().contiguous().t();
    }
  }
}

TEST(DDP, AProcessThatExitsBeforeBackwardIsNamedByTheOthers) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  auto model = make_model(7);
  accelerator.prepare(model);
  if (rank == world - 1) {
    std::_Exit(0); // leaves without a word, as a crashed process would
  }
  auto [x, y] = global_batch(0, kPerRankBatch * world);
  const auto start = std::chrono::steady_clock::now();
  try {
    accelerator.backward(
        torch::mse_loss(model->forward(rows(x, 0, kPerRankBatch)), rows(y, 0, kPerRankBatch)));
    FAIL() << "the gradients were synchronised without the last process";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("process " + std::to_string(world - 1)), std::string::npos) << message;
    EXPECT_NE(message.find("exited while"), std::string::npos) << message;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  // The group cannot shut down cleanly without that process.
  std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
}

TEST(DDP, ReducerHasBucketsThatStartBeforeBackwardEnds) {
  accelerate_test::set_intra_op_threads();
  // 1 KiB buckets: every layer gets its own, so there are several.
  accelerate::Accelerator accelerator(test_options().bucket_cap_mb(1.0 / 1024));
  auto model = make_model(7, 8, 64, 1);
  accelerator.prepare(model);
  auto& synchronizer = *accelerate::detail::internal_state(accelerator).models.front();
  ASSERT_GE(synchronizer.bucket_count(), 2u);

  std::atomic<int> launched{0};
  synchronizer.observe_bucket_launches([&](size_t) { ++launched; });
  // fc1's weight gradient is computed last in backward: by then later buckets must already be on the wire.
  int launched_when_first_layer_grad_arrived = -1;
  model->fc1->weight.register_hook(
      [&](const torch::Tensor&) { launched_when_first_layer_grad_arrived = launched.load(); });
  auto [x, y] = global_batch(0, kPerRankBatch);
  accelerator.backward(torch::mse_loss(model->forward(x), y));
  EXPECT_GT(launched_when_first_layer_grad_arrived, 0)
      << "no bucket's all-reduce had started when backward reached the first layer: no overlap";
  EXPECT_EQ(static_cast<size_t>(launched.load()), synchronizer.bucket_count());
}

/// k micro-steps of batch b on each rank against one step of batch k*b*N in one process, for a full window
/// and a short final window (the last batch of the loader: end_of_dataloader, as a prepared loader sets it).
TEST(DDP, AccumulationWindowsEqualOneBigStep) {
  accelerate_test::set_intra_op_threads();
  constexpr int k = 4;
  constexpr int micro_batches = 7; // a window of 4, then a short final window of 3
  accelerate::Accelerator accelerator(test_options().gradient_accumulation_steps(k));
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  const int64_t global = kPerRankBatch * world;

  auto model = make_model(7);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(
      torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1)));
  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, 1, 0.5));
  auto gradient_state = accelerator.gradient_state();
  for (int micro = 0; micro < micro_batches; ++micro) {
    gradient_state->end_of_dataloader = micro == micro_batches - 1;
    auto guard = accelerator.accumulate(model);
    optimizer.zero_grad(); // before the forward: must not wipe the window's earlier micro-steps
    auto [x, y] = global_batch(micro, global);
    accelerator.backward(torch::mse_loss(model->forward(rows(x, rank * kPerRankBatch, kPerRankBatch)),
                                         rows(y, rank * kPerRankBatch, kPerRankBatch)));
    optimizer.step();
    scheduler.step();
  }
  gradient_state->end_of_dataloader = false;
  EXPECT_EQ(gradient_state->optimizer_steps, 2) << "one optimizer step per window";
  EXPECT_EQ(scheduler.steps(), 2) << "one scheduler step per window";

  auto reference = make_model(7);
  torch::optim::AdamW plain(reference->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  torch::optim::StepLR plain_scheduler(plain, 1, 0.5);
  for (auto [first, count] : {std::pair{0, 4}, std::pair{4, 3}}) {
    std::vector<torch::Tensor> xs, ys;
    for (int micro = first; micro < first + count; ++micro) {
      auto [x, y] = global_batch(micro, global);
      xs.push_back(x);
      ys.push_back(y);
    }
    plain.zero_grad();
    torch::mse_loss(reference->forward(torch::cat(xs)), torch::cat(ys)).backward();
    plain.step();
    plain_scheduler.step();
  }
  expect_parameters_equal(model->parameters(), reference->parameters(), rank);
}

struct Generator : torch::nn::Module {
  Generator() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 6));
  }
  torch::Tensor forward(torch::Tensor z) { return fc2->forward(torch::tanh(fc1->forward(z))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

/// Two models, two optimizers, two backwards in the discriminator step and one through both models in the
/// generator step: each backward synchronises exactly the models it reaches.
TEST(DDP, GanTrainsLikeOneProcess) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  const int64_t global = kPerRankBatch * world;
  constexpr int steps = 6;

  auto build = [](uint64_t seed) {
    torch::manual_seed(seed);
    auto generator = std::make_shared<Generator>();
    auto discriminator = std::make_shared<Mlp>(6, 8, 1);
    generator->to(torch::kFloat64);
    discriminator->to(torch::kFloat64);
    return std::pair{generator, discriminator};
  };
  auto gan_step = [](auto& generator, auto& discriminator, auto& g_optimizer, auto& d_optimizer,
                     auto&& backward, const torch::Tensor& real, const torch::Tensor& noise) {
    d_optimizer.zero_grad();
    auto fake = generator->forward(noise);
    auto ones = torch::ones({real.size(0), 1}, torch::kFloat64);
    backward(torch::mse_loss(discriminator->forward(real), ones));
    backward(torch::mse_loss(discriminator->forward(fake.detach()), torch::zeros_like(ones)));
    d_optimizer.step();
    g_optimizer.zero_grad();
    backward(torch::mse_loss(discriminator->forward(fake), ones));
    g_optimizer.step();
  };

  auto [generator, discriminator] = build(11);
  accelerator.prepare(generator, discriminator);
  auto g_optimizer = accelerator.prepare(torch::optim::Adam(generator->parameters(), 1e-2));
  auto d_optimizer = accelerator.prepare(torch::optim::SGD(discriminator->parameters(), 0.05));
  for (int step = 0; step < steps; ++step) {
    auto [real, noise] = global_batch(step, global, 6, 4);
    gan_step(
        generator, discriminator, g_optimizer, d_optimizer,
        [&](const torch::Tensor& loss) { accelerator.backward(loss); },
        rows(real, rank * kPerRankBatch, kPerRankBatch), rows(noise, rank * kPerRankBatch, kPerRankBatch));
  }

  auto [g_ref, d_ref] = build(11);
  torch::optim::Adam g_plain(g_ref->parameters(), 1e-2);
  torch::optim::SGD d_plain(d_ref->parameters(), 0.05);
  for (int step = 0; step < steps; ++step) {
    auto [real, noise] = global_batch(step, global, 6, 4);
    gan_step(g_ref, d_ref, g_plain, d_plain, [](const torch::Tensor& loss) { loss.backward(); }, real, noise);
  }
  expect_parameters_equal(generator->parameters(), g_ref->parameters(), rank);
  expect_parameters_equal(discriminator->parameters(), d_ref->parameters(), rank);
}

TEST(DDP, PlainBackwardIsRefusedAtStep) {
  accelerate::Accelerator accelerator(test_options());
  auto model = make_model(7);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto [x, y] = global_batch(0, kPerRankBatch);
  torch::mse_loss(model->forward(x), y).backward();
  try {
    optimizer.step();
    FAIL() << "a step on unsynchronised gradients must throw";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("accelerator.backward(loss)"), std::string::npos)
        << error.what();
  }
}

/// The wrong code the unprepared-parameter check is for: a second model that one prepared optimizer trains
/// alongside the prepared model, but that was never prepared itself.
struct HalfPreparedLoop {
  explicit HalfPreparedLoop(accelerate::Accelerator& accelerator) : accelerator(accelerator) {
    model = make_model(7);
    torch::manual_seed(8);
    side = torch::nn::Linear(torch::nn::LinearOptions(8, 1).bias(false));
    side->to(torch::kFloat64);
    accelerator.prepare(model); // `side` is not
    auto parameters = model->parameters();
    parameters.push_back(side->weight);
    optimizer = std::make_unique<accelerate::Optimizer>(
        accelerator.prepare(torch::optim::SGD(parameters, torch::optim::SGDOptions(0.1))));
  }
  /// One step; the loss reaches both models.
  void step(int index) {
    const int rank = accelerator.process_index();
    auto [x, y] = global_batch(index, kPerRankBatch * accelerator.num_processes());
    auto local = rows(x, rank * kPerRankBatch, kPerRankBatch);
    optimizer->zero_grad();
    accelerator.backward(torch::mse_loss(model->forward(local) + side->forward(local),
                                         rows(y, rank * kPerRankBatch, kPerRankBatch)));
    optimizer->step();
  }

  accelerate::Accelerator& accelerator;
  std::shared_ptr<Mlp> model;
  torch::nn::Linear side{nullptr};
  std::unique_ptr<accelerate::Optimizer> optimizer;
};

/// Sets an environment variable for one scope.
struct ScopedEnvironment {
  ScopedEnvironment(const char* name, const char* value) : name(name) { setenv(name, value, 1); }
  ~ScopedEnvironment() { unsetenv(name); }
  const char* name;
};

TEST(DDP, AParameterOfAnUnpreparedModelIsRefusedBeforeBackward) {
  accelerate_test::set_intra_op_threads();
  ASSERT_EQ(std::getenv("ACCELERATE_ALLOW_UNPREPARED_PARAMETERS"), nullptr);
  accelerate::Accelerator accelerator(test_options());
  ASSERT_GE(accelerator.num_processes(), 2) << "run this test under accel launch with at least 2 processes";
  HalfPreparedLoop loop(accelerator);
  // The prepared optimizer steps `side`'s weight, so it is a parameter from the first step on (without such
  // an optimizer, a first sighting of a leaf cannot tell a parameter from a per-step input: see
  // AModelNoOnePreparedIsRefusedWhenALoaderShardsTheData).
  try {
    loop.step(0);
    FAIL() << "a loss that reaches a parameter of no prepared model must throw";
  } catch (const std::logic_error& error) {
    const std::string message = error.what();
    for (const char* part : {"accelerate: ", "shape [1, 8]", "dtype float64", "TBackward0",
                             "(a prepared optimizer steps it)", "not synchronised", "drift apart",
                             "accelerator.prepare(model)", "ACCELERATE_ALLOW_UNPREPARED_PARAMETERS=1"}) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' is missing from: " << message;
    }
  }
  // The check ran before backward (step zeroed the gradients to none first): no gradient was computed.
  EXPECT_FALSE(loop.model->fc1->weight.grad().defined());
  EXPECT_FALSE(loop.side->weight.grad().defined());
  accelerator.wait_for_everyone(); // every rank threw at the same step and is still in step with the others
}

TEST(DDP, UnpreparedParametersAreAllowedByTheEnvironment) {
  accelerate_test::set_intra_op_threads();
  ScopedEnvironment allow("ACCELERATE_ALLOW_UNPREPARED_PARAMETERS", "1");
  accelerate::Accelerator accelerator(test_options());
  HalfPreparedLoop loop(accelerator);
  for (int step = 0; step < 4; ++step) {
    loop.step(step);
  }
  // Every rank computed the unprepared model's gradient from its own rows: its copies now differ (what the
  // check warns of), while the prepared model's stay equal.
  auto side = loop.side->weight.detach().clone();
  auto prepared = loop.model->fc1->weight.detach().clone();
  auto pg = accelerate::detail::internal_state(accelerator).process_group;
  std::vector<torch::Tensor> sent{side.clone(), prepared.clone()};
  for (auto& tensor : sent) {
    std::vector<torch::Tensor> message{tensor};
    pg->broadcast(message, c10d::BroadcastOptions{0})->wait();
  }
  EXPECT_TRUE(torch::allclose(prepared, sent[1], 0, 1e-12)) << "on rank " << accelerator.process_index();
  if (accelerator.process_index() != 0) {
    EXPECT_FALSE(torch::equal(side, sent[0])) << "the unprepared model did not drift: the test shows nothing";
  }
}

/// A layer frozen when its model was prepared, then unfrozen: the prepared model owns it, but its gradients
/// were never set up for synchronisation. Refused at the first backward, with its own fix.
TEST(DDP, AParameterUnfrozenAfterPrepareIsRefused) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  auto model = make_model(7);
  model->fc1->weight.requires_grad_(false);
  model->fc1->bias.requires_grad_(false);
  accelerator.prepare(model);
  model->fc1->weight.requires_grad_(true);
  auto [x, y] = global_batch(0, kPerRankBatch);
  try {
    accelerator.backward(torch::mse_loss(model->forward(x), y));
    FAIL() << "a loss that reaches a parameter frozen at prepare must throw";
  } catch (const std::logic_error& error) {
    const std::string message = error.what();
    for (const char* part :
         {"shape [16, 8]", "did not require grad when the model was prepared",
          "before accelerator.prepare(model)", "ACCELERATE_ALLOW_UNPREPARED_PARAMETERS=1"}) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' is missing from: " << message;
    }
  }
  accelerator.wait_for_everyone();
}

/// A critic trained with a WGAN-GP gradient penalty: the interpolated inputs are fresh leaves that require
/// grad at every step, and the penalty's double backward reaches them. They are not parameters.
TEST(DDP, GradientPenaltyInputsAreNotTakenForParameters) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  const int rank = accelerator.process_index();
  auto critic = make_model(7, 6, 8, 1);
  accelerator.prepare(critic);
  auto optimizer = accelerator.prepare(torch::optim::Adam(critic->parameters(), 1e-3));
  torch::Tensor interpolated; // kept between steps, as a loop that logs its last input does
  for (int step = 0; step < 8; ++step) {
    auto [real, fake] = global_batch(step, kPerRankBatch * accelerator.num_processes(), 6, 6);
    real = rows(real, rank * kPerRankBatch, kPerRankBatch);
    fake = rows(fake, rank * kPerRankBatch, kPerRankBatch);
    auto alpha = torch::rand({kPerRankBatch, 1}, torch::kFloat64);
    auto mixed = alpha * real + (1 - alpha) * fake;
    // The previous step's leaf is freed right before this step's is made, so the allocator hands the new
    // one the old one's address: only tensor identity, not the address, tells them apart.
    interpolated = torch::Tensor();
    interpolated = mixed.detach().requires_grad_(true);
    auto gradient =
        torch::autograd::grad({critic->forward(interpolated).sum()}, {interpolated},
                              /*grad_outputs=*/{}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    auto penalty = (gradient.norm(2, 1) - 1).pow(2).mean();
    optimizer.zero_grad();
    ASSERT_NO_THROW(
        accelerator.backward(critic->forward(fake).mean() - critic->forward(real).mean() + 10 * penalty))
        << "at step " << step;
    optimizer.step();
  }
  // The penalty's gradients were synchronised with the rest: the critic is the same everywhere.
  auto pg = accelerate::detail::internal_state(accelerator).process_group;
  for (const auto& parameter : critic->parameters()) {
    std::vector<torch::Tensor> message{parameter.detach().clone()};
    pg->broadcast(message, c10d::BroadcastOptions{0})->wait();
    EXPECT_TRUE(torch::allclose(parameter, message[0], 1e-12, 1e-12)) << "on rank " << rank;
  }
}

/// An EMA copy of the model (requires_grad false everywhere) that the loss reaches, as in a consistency or
/// distillation loss: it has no leaf in the graph and is not refused.
TEST(DDP, AFrozenUnpreparedModelInTheLossIsAllowed) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  const int rank = accelerator.process_index();
  auto model = make_model(7);
  auto ema = make_model(7);
  for (auto& parameter : ema->parameters()) {
    parameter.requires_grad_(false);
  }
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  for (int step = 0; step < 5; ++step) {
    auto [x, y] = global_batch(step, kPerRankBatch * accelerator.num_processes());
    auto local = rows(x, rank * kPerRankBatch, kPerRankBatch);
    optimizer.zero_grad();
    auto prediction = model->forward(local);
    ASSERT_NO_THROW(
        accelerator.backward(torch::mse_loss(prediction, rows(y, rank * kPerRankBatch, kPerRankBatch)) +
                             0.5 * torch::mse_loss(prediction, ema->forward(local))))
        << "at step " << step;
    optimizer.step();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < ema->parameters().size(); ++i) {
      ema->parameters()[i].mul_(0.9).add_(model->parameters()[i], 0.1);
    }
  }
}

TEST(DDP, WaitForEveryoneReturnsOnAllRanks) {
  accelerate::Accelerator accelerator(test_options());
  accelerator.wait_for_everyone();
  EXPECT_EQ(accelerator.distributed_type(), accelerate::DistributedType::MULTI_CPU);
  EXPECT_EQ(accelerator.is_main_process(), accelerator.process_index() == 0);
}

TEST(DDP, ProcessesDrawTheSameNumbersFromProcessZerosGenerator) {
  // Each process's CPU generator as an unseeded program finds it: a seed of its own (libtorch draws one per
  // process; made explicit here so that the test cannot pass by chance).
  const int rank = std::atoi(std::getenv("RANK"));
  torch::manual_seed(1000 + rank);
  {
    accelerate::Accelerator accelerator(test_options());
    const auto drawn = torch::randn({16}, torch::kFloat64);
    const auto all = accelerator.gather(drawn).view({accelerator.num_processes(), 16});
    // What process 0 alone draws.
    auto expected = at::randn({16}, at::make_generator<at::CPUGeneratorImpl>(1000), torch::kFloat64);
    for (int64_t process = 0; process < accelerator.num_processes(); ++process) {
      EXPECT_TRUE(torch::equal(all[process], expected)) << "process " << process << " on rank " << rank;
    }
  }
  // Processes seeded alike, having drawn before the Accelerator: nothing is rewound or changed.
  torch::manual_seed(7);
  torch::randn({4});
  accelerate::Accelerator accelerator(test_options());
  auto reference = at::make_generator<at::CPUGeneratorImpl>(7);
  at::randn({4}, reference);
  EXPECT_TRUE(torch::equal(torch::randn({4}), at::randn({4}, reference))) << "rank " << rank;
}

/// A model whose first parameter is bf16 and the rest fp32, with an fp32 and an int64 buffer: prepare's
/// broadcast and the per-step buffer broadcast must carry each tensor in its own dtype.
struct MixedDtypeNet : torch::nn::Module {
  explicit MixedDtypeNet(uint64_t seed) {
    torch::manual_seed(seed);
    scale = register_parameter("scale", torch::randn({4}).to(torch::kBFloat16));
    fc = register_module("fc", torch::nn::Linear(4, 3));
    running = register_buffer("running", torch::randn({3}));
    // Above 2^8 (not a bf16 value) and 2^24 (not an fp32 value): only an int64 transfer keeps it.
    counter =
        register_buffer("counter", torch::full({2}, int64_t{(1 << 24) + 1} + static_cast<int64_t>(seed)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc->forward(x * scale.to(torch::kFloat32)); }
  torch::Tensor scale, running, counter;
  torch::nn::Linear fc{nullptr};
};

void expect_bit_identical(torch::nn::Module& actual, torch::nn::Module& expected, int rank,
                          const char* when) {
  auto actual_params = actual.named_parameters(), expected_params = expected.named_parameters();
  auto actual_buffers = actual.named_buffers(), expected_buffers = expected.named_buffers();
  for (auto [got, want] :
       {std::pair{&actual_params, &expected_params}, std::pair{&actual_buffers, &expected_buffers}}) {
    for (const auto& item : *want) {
      const auto& tensor = (*got)[item.key()];
      EXPECT_EQ(tensor.scalar_type(), item.value().scalar_type())
          << item.key() << " on rank " << rank << " " << when;
      EXPECT_TRUE(torch::equal(tensor, item.value()))
          << item.key() << " on rank " << rank << " " << when << " differs from rank 0's by up to "
          << (tensor.to(torch::kFloat64) - item.value().to(torch::kFloat64)).abs().max().item<double>();
    }
  }
}

TEST(DDP, MixedDtypeModelArrivesBitIdentical) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  const int rank = accelerator.process_index();
  ASSERT_GE(accelerator.num_processes(), 2) << "run this test under accel launch with at least 2 processes";
  auto model = std::make_shared<MixedDtypeNet>(rank == 0 ? 0 : 10 + rank);
  auto rank0_before = std::make_shared<MixedDtypeNet>(0); // what rank 0 holds before prepare
  ASSERT_EQ(model->parameters().front().scalar_type(), torch::kBFloat16)
      << "the first parameter must be bf16";
  accelerator.prepare(model);
  expect_bit_identical(*model, *rank0_before, rank, "after prepare");

  // Buffers are rank 0's again at every step (DDP's broadcast_buffers), each in its own dtype.
  {
    torch::NoGradGuard no_grad;
    model->counter.fill_(int64_t{(1 << 24) + 3} + rank);
    model->running.copy_(torch::randn({3}) + rank);
  }
  auto x = torch::randn({5, 4}).add(rank);
  accelerator.backward(model->forward(x).pow(2).mean());
  std::vector<torch::Tensor> received{model->running.clone(), model->counter.clone()};
  EXPECT_EQ(received[1][0].item<int64_t>(), int64_t{(1 << 24) + 3}) << "on rank " << rank;
  // Rank 0's buffers now, sent to everyone tensor by tensor: every rank's must equal them.
  std::vector<torch::Tensor> sent{model->running.clone(), model->counter.clone()};
  auto pg = accelerate::detail::internal_state(accelerator).process_group;
  for (auto& tensor : sent) {
    std::vector<torch::Tensor> message{tensor};
    pg->broadcast(message, c10d::BroadcastOptions{0})->wait();
  }
  EXPECT_TRUE(torch::equal(received[0], sent[0])) << "the fp32 buffer on rank " << rank;
  EXPECT_TRUE(torch::equal(received[1], sent[1])) << "the int64 buffer on rank " << rank;
}

/// A helper that builds its own Accelerator, as a loop split over functions does.
double train_one_step_in_a_helper(Mlp& model, int rank) {
  accelerate::Accelerator helper(test_options());
  EXPECT_NE(&accelerate::Accelerator::current(), &helper)
      << "the outermost Accelerator stays the current one";
  auto [x, y] = global_batch(0, kPerRankBatch * helper.num_processes());
  auto loss = torch::mse_loss(model.forward(rows(x, rank * kPerRankBatch, kPerRankBatch)),
                              rows(y, rank * kPerRankBatch, kPerRankBatch));
  return helper.reduce(loss.detach(), accelerate::ReduceOp::MEAN).item<double>();
}

TEST(DDP, ASecondAcceleratorSharesTheFirstOnesProcessGroup) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  const int rank = accelerator.process_index();
  auto model = make_model(7);
  accelerator.prepare(model);
  // A second Accelerator while the first lives: no second TCPStore on MASTER_PORT ("address already in use"),
  // the same device and processes, and its collectives reach the other processes.
  double mean_loss = 0;
  {
    accelerate::Accelerator second(test_options());
    EXPECT_EQ(second.num_processes(), accelerator.num_processes());
    EXPECT_EQ(second.process_index(), rank);
    EXPECT_EQ(second.device(), accelerator.device());
    EXPECT_EQ(&accelerate::Accelerator::current(), &accelerator)
        << "the first Accelerator stays the current one";
    mean_loss = train_one_step_in_a_helper(*model, rank); // a third, nested
  }
  auto [x, y] = global_batch(0, kPerRankBatch * accelerator.num_processes());
  EXPECT_NEAR(mean_loss, torch::mse_loss(model->forward(x), y).item<double>(), 1e-12)
      << "the helper's reduce is the mean over every process";
  // The group outlives the inner Accelerators: the first one still trains.
  EXPECT_EQ(&accelerate::Accelerator::current(), &accelerator);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  accelerator.backward(torch::mse_loss(model->forward(rows(x, rank * kPerRankBatch, kPerRankBatch)),
                                       rows(y, rank * kPerRankBatch, kPerRankBatch)));
  optimizer.step();
  accelerator.wait_for_everyone();
}

/// Rank r's share of global batches `batches` (summed over them) on a copy of `model`'s current weights: the
/// gradients that rank computes on its own.
template <typename Forward>
std::vector<torch::Tensor> share_gradients(const std::vector<std::shared_ptr<Mlp>>& models, Forward forward,
                                           const std::vector<int>& batches, int rank, int world,
                                           int64_t in = 8) {
  std::vector<std::shared_ptr<Mlp>> copies;
  for (const auto& model : models) {
    auto copy = make_model(0, model->fc1->options.in_features(), model->fc1->options.out_features(),
                           model->fc3->options.out_features());
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < copy->parameters().size(); ++i) {
      copy->parameters()[i].copy_(model->parameters()[i]);
    }
    copies.push_back(copy);
  }
  for (int index : batches) {
    auto [x, y] = global_batch(index, kPerRankBatch * world, in, 1);
    torch::mse_loss(forward(copies, rows(x, rank * kPerRankBatch, kPerRankBatch)),
                    rows(y, rank * kPerRankBatch, kPerRankBatch))
        .backward();
  }
  std::vector<torch::Tensor> gradients;
  for (const auto& copy : copies) {
    for (const auto& parameter : copy->parameters()) {
      gradients.push_back(parameter.grad().clone());
    }
  }
  return gradients;
}

/// The mean over every rank of `share_gradients`: what synchronised gradients are.
template <typename Forward>
std::vector<torch::Tensor> mean_gradients(const std::vector<std::shared_ptr<Mlp>>& models, Forward forward,
                                          const std::vector<int>& batches, int world) {
  auto mean = share_gradients(models, forward, batches, 0, world);
  for (int r = 1; r < world; ++r) {
    auto other = share_gradients(models, forward, batches, r, world);
    for (size_t i = 0; i < mean.size(); ++i) {
      mean[i] += other[i];
    }
  }
  for (auto& gradient : mean) {
    gradient /= world;
  }
  return mean;
}

std::vector<torch::Tensor> gradients_of(const std::vector<std::shared_ptr<Mlp>>& models) {
  std::vector<torch::Tensor> gradients;
  for (const auto& model : models) {
    for (const auto& parameter : model->parameters()) {
      gradients.push_back(parameter.grad());
    }
  }
  return gradients;
}

/// float64, sums of at most two slices in a different order: agreement to the last bits (1e-12 relative).
void expect_gradients(const std::vector<torch::Tensor>& actual, const std::vector<torch::Tensor>& expected,
                      const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_TRUE(actual[i].defined()) << what << ": gradient " << i << " is undefined";
    EXPECT_TRUE(torch::allclose(actual[i], expected[i], /*rtol=*/1e-12, /*atol=*/1e-15))
        << what << ": gradient " << i << " differs by "
        << (actual[i] - expected[i]).abs().max().item<double>();
  }
}

auto one_model = [](const std::vector<std::shared_ptr<Mlp>>& models, const torch::Tensor& x) {
  return models[0]->forward(x);
};

TEST(DDP, NoSyncKeepsGradientsLocalUntilASynchronisedBackward) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  auto model = make_model(7);
  accelerator.prepare(model);
  const std::vector<std::shared_ptr<Mlp>> models{model};
  const auto own = share_gradients(models, one_model, {0}, rank, world);
  const auto mean = mean_gradients(models, one_model, {0, 1}, world);
  ASSERT_FALSE(torch::allclose(own[0], share_gradients(models, one_model, {0}, (rank + 1) % world, world)[0]))
      << "the ranks' shares must give different gradients, or this test could not tell";
  auto [x0, y0] = global_batch(0, kPerRankBatch * world);
  {
    auto guard = accelerator.no_sync(model);
    accelerator.backward(torch::mse_loss(model->forward(rows(x0, rank * kPerRankBatch, kPerRankBatch)),
                                         rows(y0, rank * kPerRankBatch, kPerRankBatch)));
  }
  expect_gradients(gradients_of(models), own, "inside no_sync (this rank's own gradients)");
  auto [x1, y1] = global_batch(1, kPerRankBatch * world);
  accelerator.backward(torch::mse_loss(model->forward(rows(x1, rank * kPerRankBatch, kPerRankBatch)),
                                       rows(y1, rank * kPerRankBatch, kPerRankBatch)));
  expect_gradients(gradients_of(models), mean, "after the next backward (the mean of both steps' gradients)");
}

TEST(DDP, AccumulateSynchronisesTheModelsItNamesOnlyAtTheEndOfTheWindow) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options().gradient_accumulation_steps(2));
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  auto encoder = make_model(7, 8, 16, 8);
  auto head = make_model(8, 8, 16, 1);
  accelerator.prepare(encoder);
  accelerator.prepare(head);
  auto two_models = [](const std::vector<std::shared_ptr<Mlp>>& models, const torch::Tensor& x) {
    return models[1]->forward(models[0]->forward(x));
  };
  const std::vector<std::shared_ptr<Mlp>> both{encoder, head};
  const auto own_first = share_gradients(both, two_models, {0}, rank, world);
  const auto mean_first = mean_gradients(both, two_models, {0}, world);
  const auto mean_window = mean_gradients(both, two_models, {0, 1}, world);
  const size_t encoder_tensors = encoder->parameters().size();

  auto unprepared = make_model(9);
  try {
    auto guard = accelerator.accumulate(unprepared);
    FAIL() << "accumulate accepted a model that was not prepared";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("was not prepared"), std::string::npos) << error.what();
  }

  for (int micro = 0; micro < 2; ++micro) {
    auto guard = accelerator.accumulate(encoder); // names the encoder only
    auto [x, y] = global_batch(micro, kPerRankBatch * world);
    accelerator.backward(
        torch::mse_loss(head->forward(encoder->forward(rows(x, rank * kPerRankBatch, kPerRankBatch))),
                        rows(y, rank * kPerRankBatch, kPerRankBatch)));
    const auto actual = gradients_of(both);
    if (micro == 0) {
      // Mid-window: the encoder keeps its own gradients; the head, not named, synchronises now (Accelerate).
      expect_gradients({actual.begin(), actual.begin() + encoder_tensors},
                       {own_first.begin(), own_first.begin() + encoder_tensors}, "encoder mid-window");
      expect_gradients({actual.begin() + encoder_tensors, actual.end()},
                       {mean_first.begin() + encoder_tensors, mean_first.end()}, "head mid-window");
    } else {
      expect_gradients(actual, mean_window, "both models at the end of the window");
    }
  }
}

/// Two heads on a shared trunk; each step's loss uses one of them, the same one on every rank.
struct TwoHeads : torch::nn::Module {
  TwoHeads() {
    trunk = register_module("trunk", torch::nn::Linear(8, 16));
    left = register_module("left", torch::nn::Linear(16, 1));
    right = register_module("right", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_left) {
    auto hidden = torch::tanh(trunk->forward(x));
    return use_left ? left->forward(hidden) : right->forward(hidden);
  }
  torch::nn::Linear trunk{nullptr}, left{nullptr}, right{nullptr};
};

std::shared_ptr<TwoHeads> make_two_heads(uint64_t seed) {
  torch::manual_seed(seed);
  auto model = std::make_shared<TwoHeads>();
  model->to(torch::kFloat64);
  return model;
}

TEST(DDP, ALossThatReachesPartOfAModelIsRefusedWithoutFindUnusedParameters) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  const int rank = accelerator.process_index();
  auto model = make_two_heads(7);
  accelerator.prepare(model);
  auto [x, y] = global_batch(0, kPerRankBatch * accelerator.num_processes());
  try {
    accelerator.backward(torch::mse_loss(model->forward(rows(x, rank * kPerRankBatch, kPerRankBatch), true),
                                         rows(y, rank * kPerRankBatch, kPerRankBatch)));
    FAIL() << "a loss that leaves the right head out was synchronised without find_unused_parameters";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("reaches only 4 of the 6"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("find_unused_parameters(true)"), std::string::npos)
        << error.what();
  }
}

TEST(DDP, FindUnusedParametersTrainsAPartlyUsedModelLikeOneProcess) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options().find_unused_parameters(true));
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  const int64_t global = kPerRankBatch * world;
  auto model = make_two_heads(rank == 0 ? 7 : 100 + rank);
  accelerator.prepare(model);
  EXPECT_EQ(accelerate::detail::internal_state(accelerator).models.front()->synchronisation(), "reducer")
      << "find_unused_parameters needs the Reducer's search for unused parameters";
  // Plain SGD: a head left out keeps no gradient (set_to_none) or a zero one, and steps the same either way.
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  constexpr int steps = 8;
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = global_batch(step, global);
    optimizer.zero_grad();
    accelerator.backward(
        torch::mse_loss(model->forward(rows(x, rank * kPerRankBatch, kPerRankBatch), step % 3 != 2),
                        rows(y, rank * kPerRankBatch, kPerRankBatch)));
    optimizer.step();
  }
  auto reference = make_two_heads(7);
  torch::optim::SGD plain(reference->parameters(), 0.1);
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = global_batch(step, global);
    plain.zero_grad();
    torch::mse_loss(reference->forward(x, step % 3 != 2), y).backward();
    plain.step();
  }
  expect_parameters_equal(model->parameters(), reference->parameters(), rank);
}

TEST(DDP, StaticGraphTrainsLikeOneProcess) {
  expect_ranks_match_one_process(
      [](std::vector<torch::Tensor> params) {
        return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.9));
      },
      12, test_options().static_graph(true));
}

TEST(DDP, UnwrapModelIsTheModelItPrepared) {
  accelerate::Accelerator accelerator(test_options());
  auto model = make_model(7);
  torch::nn::Linear holder(4, 2);
  accelerator.prepare(model);
  accelerator.prepare(holder);
  EXPECT_EQ(&accelerator.unwrap_model(model), &model);
  EXPECT_EQ(accelerator.unwrap_model(model).get(), model.get()) << "prepare works in place: no wrapper";
  EXPECT_EQ(accelerator.unwrap_model(holder).get(), holder.get());
  EXPECT_TRUE(accelerator.unwrap_model(holder)->weight.is_same(holder->weight));
}

TEST(DDP, FreeMemoryReleasesThePreparedObjectsAndTheirHooks) {
  accelerate_test::set_intra_op_threads();
  accelerate::Accelerator accelerator(test_options());
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  const int64_t global = kPerRankBatch * world;
  auto model = make_model(7);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto train_step = [&](accelerate::Optimizer& step_optimizer, int step) {
    auto [x, y] = global_batch(step, global);
    step_optimizer.zero_grad();
    accelerator.backward(torch::mse_loss(model->forward(rows(x, rank * kPerRankBatch, kPerRankBatch)),
                                         rows(y, rank * kPerRankBatch, kPerRankBatch)));
    step_optimizer.step();
  };
  train_step(optimizer, 0);

  accelerator.free_memory();
  auto& state = accelerate::detail::internal_state(accelerator);
  EXPECT_TRUE(state.models.empty());
  EXPECT_TRUE(state.optimizers.empty());
  // The gradient hooks went with the prepared model: a plain backward now is not "unsynchronised" later.
  {
    auto [x, y] = global_batch(99, global);
    torch::mse_loss(model->forward(x), y).backward();
    model->zero_grad();
  }
  // Prepared again (no "already prepared"), it trains on as before.
  accelerator.prepare(model);
  auto again = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  EXPECT_NO_THROW(train_step(again, 1)) << "a hook of the freed model survived free_memory";

  auto reference = make_model(7);
  torch::optim::SGD plain(reference->parameters(), 0.1);
  for (int step = 0; step < 2; ++step) {
    auto [x, y] = global_batch(step, global);
    plain.zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();
    plain.step();
  }
  expect_parameters_equal(model->parameters(), reference->parameters(), rank);
}

/// Sample i is (data [i], target [i]): a batch says which samples it holds.
struct IndexDataset : torch::data::datasets::Dataset<IndexDataset> {
  explicit IndexDataset(size_t size) : size_(size) {}
  torch::data::Example<> get(size_t index) override {
    const auto i = static_cast<int64_t>(index);
    return {torch::tensor({i}), torch::tensor({i})};
  }
  std::optional<size_t> size() const override { return size_; }
  size_t size_;
};

/// The sample indices of every batch `accelerator`'s loader gives this process over 16 samples, batch size 8.
std::vector<std::vector<int64_t>> batches_of(accelerate::Accelerator& accelerator) {
  auto loader = accelerator.prepare_data_loader(IndexDataset(16).map(torch::data::transforms::Stack<>()),
                                                accelerate::DataLoaderOptions(8).shuffle(false));
  std::vector<std::vector<int64_t>> batches;
  for (auto& batch : *loader) {
    auto flat = batch.data.reshape({-1}).to(torch::kInt64).contiguous();
    batches.emplace_back(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
  }
  return batches;
}

std::vector<int64_t> range_of(int64_t begin, int64_t count) {
  std::vector<int64_t> values(static_cast<size_t>(count));
  std::iota(values.begin(), values.end(), begin);
  return values;
}

/// The bypass the check exists for: a loop whose model nobody prepared (a rewrite that could not see it, or
/// a loop converted by hand), whose loader is prepared, so each process reads its own share. Without a
/// prepared model no strategy arms anything, yet each process would train its share alone.
TEST(DDP, AModelNoOnePreparedIsRefusedWhenALoaderShardsTheData) {
  accelerate_test::set_intra_op_threads();
  ASSERT_EQ(std::getenv("ACCELERATE_ALLOW_UNPREPARED_PARAMETERS"), nullptr);
  accelerate::Accelerator accelerator(test_options());
  ASSERT_GE(accelerator.num_processes(), 2) << "run this test under accel launch with at least 2 processes";
  auto step_of = [&](const std::shared_ptr<Mlp>& model, torch::optim::Optimizer& optimizer, int index) {
    auto [x, y] = global_batch(index, kPerRankBatch);
    optimizer.zero_grad();
    accelerator.backward(torch::mse_loss(model->forward(x), y));
    optimizer.step();
  };
  auto expect_refusal = [](const std::logic_error& error, const char* extra) {
    const std::string message = error.what();
    for (const char* part :
         {"parameter of no prepared model", "drift apart", "accelerator.prepare(model)", extra}) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' is missing from: " << message;
    }
  };
  {
    // No loader is prepared: every process reads the same data, so an unprepared model trains alike on all.
    auto model = make_model(7);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    for (int step = 0; step < 3; ++step) {
      EXPECT_NO_THROW(step_of(model, optimizer, step));
    }
  }
  auto loader = accelerator.prepare_data_loader(IndexDataset(16).map(torch::data::transforms::Stack<>()),
                                                accelerate::DataLoaderOptions(8).shuffle(false));
  {
    // A libtorch optimizer: the first step cannot tell its parameters from per-step inputs, the second can.
    auto model = make_model(7);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    step_of(model, optimizer, 0);
    try {
      step_of(model, optimizer, 1);
      FAIL() << "an unprepared model trained on sharded data must be refused";
    } catch (const std::logic_error& error) {
      expect_refusal(error, "shape [");
    }
  }
  {
    // A prepared optimizer over an unprepared model: refused at the first step, before any gradient.
    auto model = make_model(7);
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
    try {
      step_of(model, optimizer, 0);
      FAIL() << "an unprepared model a prepared optimizer steps must be refused at the first step";
    } catch (const std::logic_error& error) {
      expect_refusal(error, "(a prepared optimizer steps it)");
    }
    EXPECT_FALSE(model->fc1->weight.grad().defined());
  }
  accelerator.wait_for_everyone(); // every rank threw at the same steps and is still in step with the others
}

TEST(DDP, SplitBatchesGivesEachProcessItsShareOfTheGlobalBatch) {
  accelerate::Accelerator per_process(test_options());
  const int world = per_process.num_processes();
  const int rank = per_process.process_index();
  ASSERT_EQ(world, 2) << "run this test under accel launch with 2 processes";
  // Default: batch size 8 per process, so the global batch is 16 and each process takes 8 of it.
  EXPECT_EQ(batches_of(per_process), (std::vector<std::vector<int64_t>>{range_of(8 * rank, 8)}));
  // split_batches(true): batch size 8 is the global batch, 8 / 2 = 4 samples per process per batch.
  accelerate::Accelerator split(test_options().split_batches(true));
  EXPECT_NE(split.state().find("split_batches: true  (options)"), std::string::npos) << split.state();
  EXPECT_EQ(batches_of(split),
            (std::vector<std::vector<int64_t>>{range_of(4 * rank, 4), range_of(8 + 4 * rank, 4)}));
  per_process.wait_for_everyone();
}

} // namespace

/// allreduce_strategy.cpp: how many gradients the "test_allreduce" strategy has averaged in this process.
int64_t test_allreduce_averaged_gradients();

namespace {

TEST(Strategy, AStrategyAddedByOneFileTrainsLikeDdp) {
  ASSERT_EQ(test_allreduce_averaged_gradients(), 0);
  expect_ranks_match_one_process(
      [](std::vector<torch::Tensor> params) {
        return std::make_unique<torch::optim::AdamW>(params,
                                                     torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
      },
      20, test_options().parallel_strategy("test_allreduce"));
  EXPECT_EQ(test_allreduce_averaged_gradients(), 20 * 6)
      << "6 parameter tensors averaged at each of 20 steps";
}

TEST(Strategy, AnUnknownStrategyIsRefusedBeforeTheProcessGroupForms) {
  try {
    accelerate::Accelerator accelerator(test_options().parallel_strategy("zero9"));
    FAIL() << "an unknown parallel strategy was accepted";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'zero9' is not a strategy"), std::string::npos) << message;
    EXPECT_NE(message.find("'ddp'"), std::string::npos) << message;
    EXPECT_NE(message.find("'test_allreduce'"), std::string::npos) << message;
  }
}

} // namespace
