// Multi-rank tests of optimizers without a fused kernel under the sharded strategies, run by
// test/harness/run_ranks.py: Adagrad, RMSprop and an optimizer class written here (Lion, declared with
// accelerate::declare_elementwise_optimizer) step each process's share under ZeRO-1, ZeRO-2 and FSDP and
// train as DDP does; their checkpoints load under another strategy and at another process count; LBFGS and an
// optimizer that couples elements (LARS-like, not declared) are refused by name.
//
// Preconditions: one intra-op thread, float64, models without dropout or BatchNorm.
#include <accelerate/accelerate.h>

#include "../../runtime/common/durable_file.h"
#include "../support/numerics.h"

#include <gtest/gtest.h>
#include <torch/optim/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

// ---- An optimizer class of a user's: Lion (sign of an interpolated momentum), per element ----------------

struct LionOptions : torch::optim::OptimizerCloneableOptions<LionOptions> {
  explicit LionOptions(double lr = 1e-4) : lr_(lr) {}
  TORCH_ARG(double, lr);
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.99;
  TORCH_ARG(double, weight_decay) = 0;

public: // (TORCH_ARG leaves the members that follow private)
  void serialize(torch::serialize::OutputArchive& archive) const override {
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(beta1);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(beta2);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  }
  void serialize(torch::serialize::InputArchive& archive) override {
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, beta1);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, beta2);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  }
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LionParamState : torch::optim::OptimizerCloneableParamState<LionParamState> {
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(int64_t, step) = 0;

public:
  void serialize(torch::serialize::OutputArchive& archive) const override {
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  }
  void serialize(torch::serialize::InputArchive& archive) override {
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  }
};

class Lion : public torch::optim::Optimizer {
public:
  Lion(const std::vector<torch::Tensor>& parameters, LionOptions defaults)
      : Optimizer({torch::optim::OptimizerParamGroup(parameters)}, std::make_unique<LionOptions>(defaults)) {}
  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      const auto& options = static_cast<const LionOptions&>(group.options());
      for (auto& p : group.params()) {
        if (!p.grad().defined()) {
          continue;
        }
        auto& slot = state()[p.unsafeGetTensorImpl()];
        if (!slot) {
          auto fresh = std::make_unique<LionParamState>();
          fresh->exp_avg(torch::zeros_like(p));
          slot = std::move(fresh);
        }
        auto& lion = static_cast<LionParamState&>(*slot);
        lion.step(lion.step() + 1);
        const auto& grad = p.grad();
        p.mul_(1 - options.lr() * options.weight_decay());
        auto update = lion.exp_avg() * options.beta1() + grad * (1 - options.beta1());
        p.add_(update.sign(), -options.lr());
        lion.exp_avg().mul_(options.beta2()).add_(grad, 1 - options.beta2());
      }
    }
    return closure ? closure() : torch::Tensor();
  }
  void save(torch::serialize::OutputArchive& archive) const override {
    torch::optim::serialize<LionParamState, LionOptions>(archive, *this);
  }
  void load(torch::serialize::InputArchive& archive) override {
    torch::optim::serialize<LionParamState, LionOptions>(archive, *this);
  }
};

/// LARS-like: each parameter's step scaled by the ratio of its norm to its gradient's, which couples every
/// element of the parameter. Not declared: the sharded strategies refuse it.
class TrustRatioSgd : public torch::optim::SGD {
public:
  using SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      for (auto& p : group.params()) {
        if (p.grad().defined()) {
          p.grad().mul_(p.norm() / (p.grad().norm() + 1e-9));
        }
      }
    }
    return SGD::step(std::move(closure));
  }
};

accelerate::AcceleratorOptions test_options() {
  return accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(30));
}

/// 3 Linear layers (171 elements: no world size here divides them), tanh between.
struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 10));
    fc2 = register_module("fc2", torch::nn::Linear(10, 7));
    head = register_module("head", torch::nn::Linear(7, 4));
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x) { return head(torch::tanh(fc2(torch::tanh(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr};
};

constexpr int64_t kGlobalBatch = 6;

/// This process's rows of step `step`'s global batch (the same global data at any world size).
std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank, int world) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(500 + step);
  auto x = at::randn({kGlobalBatch, 6}, generator).to(torch::kFloat64);
  auto y = at::randn({kGlobalBatch, 4}, generator).to(torch::kFloat64);
  const int64_t rows = kGlobalBatch / world;
  return {x.narrow(0, rank * rows, rows), y.narrow(0, rank * rows, rows)};
}

struct Strategy {
  std::string name; // "ddp", "zero1", "zero2", "fsdp", "zero1-offload", "zero2-offload"
  accelerate::AcceleratorOptions apply(accelerate::AcceleratorOptions options) const {
    if (name.size() > 8 && name.compare(name.size() - 8, 8, "-offload") == 0) {
      return Strategy{name.substr(0, name.size() - 8)}.apply(options).offload_optimizer_device("cpu");
    }
    if (name == "ddp") {
      return options.parallel_strategy("ddp");
    }
    if (name == "fsdp") {
      // Size-based units: fc1 and fc2 each a unit of its own, the head in the root unit.
      return options.parallel_strategy("fsdp")
          .fsdp_sharding_strategy("FULL_SHARD")
          .fsdp_auto_wrap_policy("SIZE_BASED_WRAP")
          .fsdp_min_num_params(60);
    }
    return options.parallel_strategy("zero").zero_stage(name == "zero1" ? 1 : 2).bucket_cap_mb(0.0005);
  }
};
const std::vector<Strategy> kStrategies = {{"ddp"},  {"zero1"},         {"zero2"},
                                           {"fsdp"}, {"zero1-offload"}, {"zero2-offload"}};

/// Whether the test hook runs ZeRO-Offload's copies on the CPU (test/runtime/optimizer_tests.cmake).
bool offload_path_on_cpu() {
  const char* hook = std::getenv("ACCELERATE_ZERO_OFFLOAD_PATH_ON_CPU");
  return hook != nullptr && std::string(hook) == "1";
}

/// The optimizer `name` over `model`'s parameters: Adagrad (lr decay, weight decay, a nonzero initial sum:
/// its state is made when it is constructed), RMSprop (centered, with momentum), Lion, or AdamW (stepped by
/// ATen's fused kernel, here for ZeRO-Offload's path).
std::shared_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name, Net& model) {
  if (name == "adamw") {
    return std::make_shared<torch::optim::AdamW>(model.parameters(),
                                                 torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  }
  if (name == "adagrad") {
    return std::make_shared<torch::optim::Adagrad>(
        model.parameters(),
        torch::optim::AdagradOptions(0.05).lr_decay(0.01).weight_decay(0.02).initial_accumulator_value(0.1));
  }
  if (name == "rmsprop") {
    return std::make_shared<torch::optim::RMSprop>(
        model.parameters(),
        torch::optim::RMSpropOptions(0.01).momentum(0.5).centered(true).weight_decay(0.01));
  }
  accelerate::declare_elementwise_optimizer<Lion, LionParamState>();
  return std::make_shared<Lion>(model.parameters(), LionOptions(0.003).weight_decay(0.1));
}

torch::Tensor flat(torch::nn::Module& model) {
  std::vector<torch::Tensor> parts;
  for (const auto& parameter : model.parameters()) {
    parts.push_back(parameter.detach().reshape(-1).clone());
  }
  return torch::cat(parts);
}

/// A model, its optimizer and a scheduler, prepared under `strategy`, trained a step at a time.
struct Trainer {
  Trainer(const Strategy& strategy, const std::string& optimizer_name, int seed, int accumulation = 2)
      : accelerator(strategy.apply(test_options()).gradient_accumulation_steps(accumulation)) {
    accelerate_test::set_intra_op_threads();
    torch::manual_seed(seed); // prepare makes every process's model process 0's
    model = std::make_shared<Net>();
    // Constructed before the model is prepared (as Accelerate's prepare(model, optimizer) takes them).
    auto built = make_optimizer(optimizer_name, *model);
    accelerator.prepare(model);
    optimizer.emplace(accelerator.prepare_optimizer(built));
    scheduler.emplace(accelerator.prepare(torch::optim::StepLR(*optimizer, 3, 0.5)));
  }
  /// Micro-steps [first, last): windows of `accumulation`, the gradients clipped at each real step.
  void steps(int first, int last) {
    for (int step = first; step < last; ++step) {
      auto guard = accelerator.accumulate(model);
      optimizer->zero_grad();
      auto [x, y] = batch(step, accelerator.process_index(), accelerator.num_processes());
      accelerator.backward(torch::mse_loss(model->forward(x), y));
      if (accelerator.sync_gradients()) {
        accelerator.clip_grad_norm_(model->parameters(), 0.5);
      }
      optimizer->step();
      scheduler->step();
    }
  }
  torch::Tensor parameters() {
    auto restore = accelerator.unshard(model); // FSDP's parameters hold no elements outside forward
    return flat(*model);
  }
  accelerate::Accelerator accelerator;
  std::shared_ptr<Net> model;
  std::optional<accelerate::Optimizer> optimizer;
  std::optional<accelerate::Scheduler> scheduler;
};

/// float64 at 2 processes: each optimizer under each sharded strategy against DDP, 12 micro-steps in windows
/// of 2 with clipping. The bound is the 1e-12 relative: the per-element arithmetic is the same and
/// the float64 sums differ at most in order (measured: reported below).
TEST(ShardedOptimizers, EachOptimizerMatchesDdpUnderEachShardedStrategy) {
  accelerate::Accelerator outer(test_options());
  ASSERT_EQ(outer.num_processes(), 2) << "run this test under accel launch with 2 processes";
  for (const std::string optimizer : {"adagrad", "rmsprop", "lion", "adamw"}) {
    Trainer ddp(kStrategies[0], optimizer, /*seed=*/11);
    ddp.steps(0, 12);
    const auto expected = ddp.parameters();
    std::map<std::string, torch::Tensor> trained;
    for (size_t s = 1; s < kStrategies.size(); ++s) {
      Trainer sharded(kStrategies[s], optimizer, /*seed=*/11);
      if (kStrategies[s].name.find("offload") != std::string::npos) {
        EXPECT_EQ(sharded.accelerator.state().find("stepped there") != std::string::npos,
                  offload_path_on_cpu())
            << sharded.accelerator.state();
      }
      sharded.steps(0, 12);
      const auto actual = sharded.parameters();
      trained[kStrategies[s].name] = actual;
      ASSERT_FALSE(torch::equal(actual, flat(*std::make_shared<Net>()))) << "nothing trained";
      EXPECT_TRUE(accelerate_test::within(actual, expected, 1e-12,
                                          optimizer + " under " + kStrategies[s].name + " against DDP"));
      // The state is this process's share: fewer elements than the model's 171.
      int64_t held = 0;
      for (const auto& [key, slot] : sharded.optimizer->unwrap().state()) {
        (void)key;
        torch::serialize::OutputArchive archive;
        slot->serialize(archive);
        std::ostringstream bytes;
        archive.save_to(bytes);
        std::istringstream in(bytes.str());
        torch::serialize::InputArchive read;
        read.load_from(in);
        for (const auto& name : read.keys()) {
          c10::IValue value;
          read.try_read(name, value);
          if (value.isTensor() && value.toTensor().dim() > 0) {
            held = std::max(held, value.toTensor().numel());
          }
        }
      }
      // fc2's weight, the largest parameter (70 elements), is split between the two processes everywhere.
      EXPECT_GT(held, 0) << optimizer << " under " << kStrategies[s].name << ": no state";
      EXPECT_LT(held, 70) << optimizer << " under " << kStrategies[s].name << ": a state tensor is whole";
    }
    // ZeRO-Offload steps the same kernels on copies of the same shares: bit for bit ZeRO's.
    for (const std::string stage : {"zero1", "zero2"}) {
      EXPECT_TRUE(torch::equal(trained[stage + "-offload"], trained[stage])) << optimizer << " " << stage;
    }
  }
}

TEST(ShardedOptimizers, LbfgsAndACoupledOptimizerAreRefusedByName) {
  {
    // Under DDP it trains, with its own step: a subclass of SGD is not stepped by SGD's fused kernel.
    accelerate::Accelerator accelerator(Strategy{"ddp"}.apply(test_options()));
    auto model = std::make_shared<Net>();
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(TrustRatioSgd(model->parameters(), 0.1));
    auto [x, y] = batch(0, accelerator.process_index(), accelerator.num_processes());
    accelerator.backward(torch::mse_loss(model->forward(x), y));
    optimizer.step();
    EXPECT_EQ(optimizer.fused_steps(), 0) << "SGD's fused kernel stepped a subclass that overrides step()";
  }
  for (const std::string strategy : {"zero2", "fsdp"}) {
    accelerate::Accelerator accelerator(Strategy{strategy}.apply(test_options()));
    auto model = std::make_shared<Net>();
    accelerator.prepare(model);
    try {
      accelerator.prepare(torch::optim::LBFGS(model->parameters(), 0.1));
      FAIL() << "LBFGS was accepted under " << strategy;
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("torch::optim::LBFGS steps with a closure"), std::string::npos) << message;
    }
    try {
      accelerator.prepare(TrustRatioSgd(model->parameters(), 0.1));
      FAIL() << "an optimizer not declared per element was accepted under " << strategy;
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("TrustRatioSgd is not declared"), std::string::npos) << message;
      EXPECT_NE(message.find("declare_elementwise_optimizer"), std::string::npos) << message;
    }
  }
}

// ---- Checkpoints: saved in shares, loaded under another strategy and process count ------------------------

std::string checkpoints() {
  const char* directory = std::getenv("ACCEL_OPTIMIZER_CHECKPOINTS");
  return directory != nullptr ? directory : "optimizer_checkpoints";
}

/// Loads the checkpoint `optimizer` saved under ZeRO-2 on 2 processes under every strategy at this process
/// count, trains micro-steps 6-11 and compares with the uninterrupted run: within 1e-12 relative (float64).
void resume_everywhere(const std::string& optimizer) {
  using accelerate::detail::join_path;
  torch::Tensor expected;
  torch::load(expected, join_path(checkpoints(), optimizer + ".final.pt"));
  for (const auto& strategy : kStrategies) {
    Trainer trainer(strategy, optimizer, /*seed=*/99); // other weights: the checkpoint must replace them
    trainer.accelerator.load_state(join_path(checkpoints(), optimizer));
    trainer.steps(6, 12);
    EXPECT_TRUE(accelerate_test::within(trainer.parameters(), expected, 1e-12,
                                        optimizer + " saved under zero2 on 2, resumed under " +
                                            strategy.name + " on " +
                                            std::to_string(trainer.accelerator.num_processes())));
  }
}

TEST(ShardedOptimizerCheckpoints, SavedInSharesOnTwoProcesses) {
  accelerate::Accelerator outer(test_options());
  ASSERT_EQ(outer.num_processes(), 2);
  if (outer.is_main_process()) {
    accelerate::detail::remove_tree(checkpoints());
    accelerate::detail::make_directories(checkpoints());
  }
  outer.wait_for_everyone();
  for (const std::string optimizer : {"adagrad", "rmsprop", "lion"}) {
    Trainer trainer(Strategy{"zero2"}, optimizer, /*seed=*/5);
    trainer.steps(0, 6);
    trainer.accelerator.save_state(accelerate::detail::join_path(checkpoints(), optimizer));
    trainer.steps(6, 12);
    const auto final_parameters = trainer.parameters();
    if (trainer.accelerator.is_main_process()) {
      torch::save(final_parameters, accelerate::detail::join_path(checkpoints(), optimizer + ".final.pt"));
    }
    trainer.accelerator.wait_for_everyone();
    EXPECT_TRUE(accelerate::detail::path_exists(
        accelerate::detail::join_path(checkpoints(), optimizer + "/optimizer_shares_1.bin")));
  }
  for (const std::string optimizer : {"adagrad", "rmsprop", "lion"}) {
    resume_everywhere(optimizer);
  }
}

TEST(ShardedOptimizerCheckpoints, LoadedOnOneProcess) {
  accelerate::Accelerator outer(test_options());
  ASSERT_EQ(outer.num_processes(), 1);
  for (const std::string optimizer : {"adagrad", "rmsprop", "lion"}) {
    resume_everywhere(optimizer);
  }
}

} // namespace
