// Single-process unit tests of the runtime: launcher environment discovery and the one-process Accelerator.
#include <accelerate/accelerate.h>

#include "../../runtime/settings/config.h"
#include "../../runtime/transport/environment.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <initializer_list>
#include <iomanip>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

namespace {

using accelerate::detail::discover_launch_environment;

/// Sets launcher variables for one test and restores a clean slate afterwards.
class LauncherVariables {
public:
  explicit LauncherVariables(std::initializer_list<std::pair<const std::string, std::string>> values) {
    clear();
    for (const auto& [name, value] : values) {
      setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~LauncherVariables() { clear(); }

private:
  static void clear() {
    for (const char* name : {"ACCELERATE_MIXED_PRECISION",
                             "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
                             "ACCELERATE_USE_CPU",
                             "ACCELERATE_USE_FSDP",
                             "ACCELERATE_USE_DEEPSPEED",
                             "ACCELERATE_DEBUG_MODE",
                             "ACCELERATE_PARALLEL_STRATEGY",
                             "ACCELERATE_CONFIG_FILE",
                             "ACCELERATE_DEEPSPEED_ZERO_STAGE",
                             "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
                             "ACCELERATE_GRADIENT_CLIPPING",
                             "ACCELERATE_DEEPSPEED_CONFIG_FILE",
                             "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE",
                             "ACCELERATE_DEEPSPEED_ZERO3_INIT",
                             "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
                             "RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "SLURM_LOCALID",
                             "SLURM_NTASKS_PER_NODE",
                             "SLURM_JOB_NODELIST"}) {
      unsetenv(name);
    }
  }
};

TEST(Environment, NoLauncherMeansOneProcess) {
  LauncherVariables variables({});
  auto env = discover_launch_environment();
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.launcher, "none");
}

TEST(Environment, ReadsTorchrunVariables) {
  LauncherVariables variables({{"RANK", "3"},
                               {"WORLD_SIZE", "4"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "10.1.2.3"},
                               {"MASTER_PORT", "1234"}});
  auto env = discover_launch_environment();
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "10.1.2.3");
  EXPECT_EQ(env.master_port, 1234);
  EXPECT_EQ(env.launcher, "torchrun");
}

TEST(Environment, ReadsOpenMpiVariables) {
  LauncherVariables variables({{"OMPI_COMM_WORLD_RANK", "1"},
                               {"OMPI_COMM_WORLD_SIZE", "2"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  auto env = discover_launch_environment();
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.launcher, "mpirun");
}

TEST(Environment, ReadsSlurmVariablesAndMasterFromNodeList) {
  LauncherVariables variables({{"SLURM_PROCID", "5"},
                               {"SLURM_NTASKS", "8"},
                               {"SLURM_LOCALID", "1"},
                               {"SLURM_NTASKS_PER_NODE", "4"},
                               {"SLURM_JOB_NODELIST", "gpu[07-08]"}});
  auto env = discover_launch_environment();
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.master_addr, "gpu07");
  EXPECT_EQ(env.launcher, "srun");
}

TEST(Environment, RankBeyondWorldSizeNamesTheProblem) {
  LauncherVariables variables({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  try {
    discover_launch_environment();
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("rank 2 is not below the world size 2"), std::string::npos)
        << error.what();
  }
}

TEST(Environment, NonNumericVariableIsNamed) {
  LauncherVariables variables({{"RANK", "zero"}, {"WORLD_SIZE", "2"}});
  try {
    discover_launch_environment();
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("RANK='zero'"), std::string::npos) << error.what();
  }
}

TEST(Accelerator, OneProcessHasNoProcessGroupAndTrainsLocally) {
  LauncherVariables variables({});
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  EXPECT_EQ(accelerator.num_processes(), 1);
  EXPECT_TRUE(accelerator.is_main_process());
  EXPECT_EQ(accelerator.distributed_type(), accelerate::DistributedType::NO);
  EXPECT_EQ(&accelerate::Accelerator::current(), &accelerator);

  torch::manual_seed(0);
  torch::nn::Linear model(3, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  accelerator.prepare(model, optimizer);
  auto x = torch::ones({2, 3});
  accelerator.backward(model->forward(x).sum());
  EXPECT_TRUE(torch::allclose(model->weight.grad(), torch::full({1, 3}, 2.0)));
}

TEST(Accelerator, PreparingAModelTwiceIsAnError) {
  LauncherVariables variables({});
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  torch::nn::Linear model(3, 1);
  accelerator.prepare(model);
  EXPECT_THROW(accelerator.prepare(model), std::invalid_argument);
}

TEST(Accelerator, PrintUsesAndKeepsTheFormatOfStdCout) {
  LauncherVariables variables({});
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  std::ios saved(nullptr);
  saved.copyfmt(std::cout);
  testing::internal::CaptureStdout();
  std::cout << std::fixed << std::setprecision(3); // set once, as a loop does before it starts
  accelerator.print("loss ", 1.0 / 3);
  accelerator.print("loss ", std::setprecision(5), 2.0 / 3); // a manipulator among the arguments stays set
  accelerator.print("loss ", 1.0 / 3);
  const std::string printed = testing::internal::GetCapturedStdout();
  const int precision = static_cast<int>(std::cout.precision());
  std::cout.copyfmt(saved);
  EXPECT_EQ(printed, "loss 0.333\nloss 0.66667\nloss 0.33333\n");
  EXPECT_EQ(precision, 5);
}

TEST(AcceleratorDeathTest, AnUncaughtExceptionIsReportedInOneLine) {
  LauncherVariables variables({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}});
  // noexcept: the exception reaches std::terminate() directly, as one escaping main() does.
  EXPECT_DEATH(
      ([]() noexcept {
        accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
        std::rethrow_exception(std::make_exception_ptr(std::runtime_error("the replicas diverged")));
      }()),
      "accelerate: process 0 stopped on an exception nothing caught \\(std::runtime_error\\): the replicas "
      "diverged");
}

/// The message of the exception `action` throws, or "" when it throws none.
template <typename Action> std::string error_of(Action&& action) {
  try {
    action();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

TEST(Config, OptionsBeatEnvironmentBeatDefaults) {
  LauncherVariables variables(
      {{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"}, {"ACCELERATE_MIXED_PRECISION", "bf16"}});
  accelerate::Accelerator from_environment(accelerate::AcceleratorOptions().cpu(true));
  EXPECT_EQ(from_environment.gradient_accumulation_steps(), 4);
  EXPECT_EQ(from_environment.mixed_precision(), "bf16");
  accelerate::Accelerator from_options(
      accelerate::AcceleratorOptions().cpu(true).gradient_accumulation_steps(2));
  EXPECT_EQ(from_options.gradient_accumulation_steps(), 2);
  EXPECT_NE(from_options.state().find("gradient_accumulation_steps: 2  (options)"), std::string::npos)
      << from_options.state();
  EXPECT_NE(from_options.state().find("mixed_precision: bf16  (environment)"), std::string::npos);
}

TEST(Config, ConfigFileIsReadOnlyWhenNamed) {
  auto path = testing::TempDir() + "/accelerate_config.yaml";
  {
    std::ofstream file(path);
    file
        << "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\ngradient_accumulation_steps: 3\n"
           "mixed_precision: fp16\nnum_processes: 2\nuse_cpu: true\n";
  }
  LauncherVariables variables({{"ACCELERATE_CONFIG_FILE", path}, {"ACCELERATE_MIXED_PRECISION", "no"}});
  accelerate::Accelerator accelerator;
  EXPECT_EQ(accelerator.gradient_accumulation_steps(), 3);
  EXPECT_EQ(accelerator.mixed_precision(), "no") << "the environment wins over the file";
  EXPECT_EQ(accelerator.device(), torch::Device(torch::kCPU));
}

TEST(Config, BadValuesNameTheKeyAndTheChoices) {
  {
    LauncherVariables variables({{"ACCELERATE_MIXED_PRECISION", "fp4"}});
    EXPECT_NE(error_of([] {
                accelerate::Accelerator accelerator;
              }).find("'fp4' (from the environment) is not one of no, fp16, bf16, fp8"),
              std::string::npos);
  }
  {
    LauncherVariables variables({{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "0"}});
    EXPECT_NE(error_of([] { accelerate::Accelerator accelerator; }).find("gradient_accumulation_steps='0'"),
              std::string::npos);
  }
  {
    LauncherVariables variables({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "HALF_SHARD"}});
    EXPECT_NE(error_of([] { accelerate::Accelerator accelerator; }).find("HALF_SHARD"), std::string::npos);
  }
  auto path = testing::TempDir() + "/broken.yaml";
  {
    std::ofstream file(path);
    file << "mixed_precision: [bf16\n";
  }
  LauncherVariables variables({{"ACCELERATE_CONFIG_FILE", path}});
  EXPECT_NE(error_of([] { accelerate::Accelerator accelerator; }).find("broken.yaml:"), std::string::npos);
}

TEST(Config, NegativeTotalLimitIsRefusedWithTheValueAndWhatIsAllowed) {
  LauncherVariables variables({});
  const std::string message = error_of([] {
    accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true).total_limit(-1));
  });
  EXPECT_NE(message.find("total_limit='-1' (from AcceleratorOptions) must be >= 0"), std::string::npos)
      << message;
  EXPECT_NE(message.find("0 keeps all"), std::string::npos) << message;
  accelerate::Accelerator keeps_all(accelerate::AcceleratorOptions().cpu(true).total_limit(0));
  EXPECT_NE(keeps_all.state().find("total_limit: 0  (options)\n"), std::string::npos) << keeps_all.state();
}

TEST(Config, StateListsEveryOptionWithItsDefaultAndSource) {
  LauncherVariables variables({{"ACCELERATE_PARALLEL_STRATEGY", "ddp"}});
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  const std::string state = accelerator.state();
  for (const char* line :
       {"automatic_checkpoint_naming: true  (default)\n", "total_limit: 0  (default)\n",
        "init_timeout: 600000 ms  (default)\n", "seed: unset  (default)\n",
        "parallel_strategy: ddp  (environment)\n", "cpu: true  (options)\n",
        "split_batches: false  (default)\n", "step_scheduler_with_optimizer: true  (default)\n"}) {
    EXPECT_NE(state.find(line), std::string::npos) << "missing: " << line << "in:\n" << state;
  }
  accelerate::Accelerator unnamed(
      accelerate::AcceleratorOptions().cpu(true).automatic_checkpoint_naming(false));
  EXPECT_NE(unnamed.state().find("automatic_checkpoint_naming: false  (options)\n"), std::string::npos)
      << unnamed.state();
}

TEST(Config, FsdpInTheConfigFileSelectsTheFsdpStrategy) {
  auto path = testing::TempDir() + "/sharded.yaml";
  for (const std::string text : {"distributed_type: FSDP\nuse_cpu: true\n",
                                 "distributed_type: MULTI_GPU\nfsdp_config:\n  fsdp_version: 2\n"}) {
    {
      std::ofstream file(path);
      file << text;
    }
    LauncherVariables variables({{"ACCELERATE_CONFIG_FILE", path}});
    const auto config = accelerate::detail::resolve_config({});
    EXPECT_EQ(config.parallel_strategy, "fsdp") << text;
    EXPECT_EQ(config.fsdp_sharding_strategy, "FULL_SHARD") << text;
  }
  {
    std::ofstream file(path);
    // Older Accelerate versions write empty sections: they ask for nothing.
    file << "distributed_type: MULTI_CPU\nuse_cpu: true\nfsdp_config: {}\ndeepspeed_config: {}\n";
  }
  LauncherVariables variables({{"ACCELERATE_CONFIG_FILE", path}});
  accelerate::Accelerator accelerator;
  EXPECT_EQ(accelerator.device(), torch::Device(torch::kCPU));
  const auto config = accelerate::detail::resolve_config({});
  EXPECT_EQ(config.parallel_strategy, "ddp");
  EXPECT_EQ(config.zero_stage, 0);
}

/// Writes `text` to a config file in the test's temporary folder and returns its path.
std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream file(path);
  file << text;
  return path;
}

TEST(Config, DeepSpeedSectionSelectsZeroWithItsSettingsAndSources) {
  const std::string path = write_config("zero2.yaml", "compute_environment: LOCAL_MACHINE\n"
                                                      "distributed_type: DEEPSPEED\n"
                                                      "deepspeed_config:\n"
                                                      "  zero_stage: 2\n"
                                                      "  gradient_clipping: 1.0\n"
                                                      "  gradient_accumulation_steps: 3\n"
                                                      "  offload_optimizer_device: none\n"
                                                      "  offload_param_device: none\n"
                                                      "  zero3_init_flag: false\n"
                                                      "num_processes: 2\n");
  LauncherVariables variables({{"ACCELERATE_CONFIG_FILE", path}});
  const auto config = accelerate::detail::resolve_config({});
  const std::string file = "config file " + path;
  EXPECT_EQ(config.parallel_strategy, "zero");
  EXPECT_EQ(config.sources.at("parallel_strategy"), "zero_stage 2 from " + file);
  EXPECT_EQ(config.zero_stage, 2);
  EXPECT_EQ(config.sources.at("zero_stage"), file);
  EXPECT_EQ(config.gradient_clipping, 1.0);
  EXPECT_EQ(config.sources.at("gradient_clipping"), file);
  EXPECT_EQ(config.gradient_accumulation_steps, 3);
  EXPECT_EQ(config.sources.at("gradient_accumulation_steps"),
            file + ", key deepspeed_config.gradient_accumulation_steps");
  EXPECT_EQ(config.offload_optimizer_device, "none");
  const std::string state = accelerate::detail::describe(config);
  EXPECT_NE(state.find("parallel_strategy: zero  (zero_stage 2 from " + file + ")\n"), std::string::npos)
      << state;
}

TEST(Config, DeepSpeedWithoutAStageRunsStage2AsAccelerateDoes) {
  const std::string path = write_config("deepspeed.yaml", "distributed_type: DEEPSPEED\n"
                                                          "gradient_accumulation_steps: 5\n"
                                                          "deepspeed_config:\n"
                                                          "  gradient_accumulation_steps: 3\n"
                                                          "  offload_optimizer_device: cpu\n");
  {
    LauncherVariables variables({{"ACCELERATE_CONFIG_FILE", path}});
    const auto config = accelerate::detail::resolve_config({});
    EXPECT_EQ(config.zero_stage, 2);
    EXPECT_EQ(config.sources.at("zero_stage"),
              "Accelerate's DeepSpeed default stage, for distributed_type: DEEPSPEED in config file " + path);
    EXPECT_EQ(config.parallel_strategy, "zero");
    EXPECT_EQ(config.offload_optimizer_device, "cpu");
    EXPECT_EQ(config.gradient_accumulation_steps, 5) << "the top-level key wins over the section's";
    // Explicit settings win over the file's.
    const auto explicit_stage =
        accelerate::detail::resolve_config(accelerate::AcceleratorOptions().zero_stage(1));
    EXPECT_EQ(explicit_stage.zero_stage, 1);
    EXPECT_EQ(explicit_stage.sources.at("parallel_strategy"), "zero_stage 1 from AcceleratorOptions");
  }
  {
    LauncherVariables variables({{"ACCELERATE_USE_DEEPSPEED", "true"}});
    const auto config = accelerate::detail::resolve_config({});
    EXPECT_EQ(config.zero_stage, 2);
    EXPECT_EQ(config.parallel_strategy, "zero");
    EXPECT_EQ(config.sources.at("zero_stage"),
              "Accelerate's DeepSpeed default stage, for ACCELERATE_USE_DEEPSPEED=true in the environment");
  }
  {
    LauncherVariables variables(
        {{"ACCELERATE_USE_DEEPSPEED", "false"}, {"ACCELERATE_GRADIENT_CLIPPING", "0.5"}});
    const auto config = accelerate::detail::resolve_config({});
    EXPECT_EQ(config.parallel_strategy, "ddp");
    EXPECT_EQ(config.zero_stage, 0);
    EXPECT_EQ(config.gradient_clipping, 0.5);
  }
  {
    LauncherVariables variables({{"ACCELERATE_DEEPSPEED_ZERO_STAGE", "1"}});
    EXPECT_EQ(accelerate::detail::resolve_config({}).parallel_strategy, "zero");
  }
  {
    // parallel_strategy "zero" alone means stage 2.
    LauncherVariables variables({{"ACCELERATE_PARALLEL_STRATEGY", "zero"}});
    const auto config = accelerate::detail::resolve_config({});
    EXPECT_EQ(config.zero_stage, 2);
    EXPECT_EQ(config.sources.at("zero_stage"),
              "ZeRO's default stage, for parallel_strategy zero from the environment");
  }
}

TEST(Config, ZeroSettingsThisRuntimeLacksAreRefusedNamingKeyValueAndSource) {
  struct Case {
    std::string yaml;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 4\n",
       "zero_stage='4' (from config file PATH) is not a ZeRO stage; use 0 (off), 1"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_device: nvme\n",
       "offload_optimizer_device='nvme' (from config file PATH) is not an offload device this runtime has; "
       "use none or cpu"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n  zero_stage: 2\n",
       "config file PATH: with deepspeed_config_file set, Accelerate ignores these config keys and refuses "
       "them: "
       "zero_stage."},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_param_device: cpu\n",
       "offload_param_device='cpu' (from config file PATH) conflicts with zero_stage='2' (from Accelerate's "
       "DeepSpeed default stage"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero3_init_flag: true\n",
       "deepspeed_config.zero3_init_flag='true' (from config file PATH) is for ZeRO stage 3"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_nvme_path: /nvme\n",
       "deepspeed_config.offload_optimizer_nvme_path='/nvme' (from config file PATH) is for NVMe offload"},
  };
  const std::string path = testing::TempDir() + "/refused.yaml";
  for (const Case& c : cases) {
    write_config("refused.yaml", c.yaml);
    LauncherVariables variables({{"ACCELERATE_CONFIG_FILE", path}});
    std::string expected = c.expected;
    expected.replace(expected.find("PATH"), 4, path);
    const std::string message = error_of([] { accelerate::detail::resolve_config({}); });
    EXPECT_NE(message.find(expected), std::string::npos) << c.yaml << message;
  }
  {
    const std::string missing = testing::TempDir() + "/missing-ds.json";
    LauncherVariables variables({{"ACCELERATE_DEEPSPEED_CONFIG_FILE", missing}});
    EXPECT_NE(
        error_of([] { accelerate::detail::resolve_config({}); })
            .find("DeepSpeed config " + missing +
                  " cannot be read (No such file or directory; named by ACCELERATE_DEEPSPEED_CONFIG_FILE in "
                  "the environment)"),
        std::string::npos);
  }
  {
    // What Hugging Face's launcher exports for the defaults asks for nothing.
    LauncherVariables variables({{"ACCELERATE_DEEPSPEED_CONFIG_FILE", "none"},
                                 {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "none"},
                                 {"ACCELERATE_DEEPSPEED_ZERO3_INIT", "false"},
                                 {"ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "false"},
                                 {"ACCELERATE_USE_DEEPSPEED", "true"}});
    EXPECT_EQ(accelerate::detail::resolve_config({}).parallel_strategy, "zero");
  }
}

TEST(Config, ExplicitStrategyConflictingWithTheZeroStageIsRefusedNamingBoth) {
  const std::string path = write_config("conflict.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                                                         "  zero_stage: 2\n");
  {
    LauncherVariables variables({{"ACCELERATE_CONFIG_FILE", path}, {"ACCELERATE_PARALLEL_STRATEGY", "ddp"}});
    const std::string message = error_of([] { accelerate::detail::resolve_config({}); });
    EXPECT_NE(
        message.find("parallel_strategy='ddp' (from the environment) conflicts with zero_stage='2' (from "
                     "config file " +
                     path + ")"),
        std::string::npos)
        << message;
  }
  {
    LauncherVariables variables({});
    const std::string message = error_of([] {
      accelerate::detail::resolve_config(
          accelerate::AcceleratorOptions().parallel_strategy("zero").zero_stage(0));
    });
    EXPECT_NE(
        message.find("parallel_strategy='zero' (from AcceleratorOptions) conflicts with zero_stage='0' (from "
                     "AcceleratorOptions), which means no sharding"),
        std::string::npos)
        << message;
  }
  {
    LauncherVariables variables({{"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "cpu"}});
    const std::string message = error_of([] { accelerate::detail::resolve_config({}); });
    EXPECT_NE(
        message.find("offload_optimizer_device='cpu' (from the environment) applies under ZeRO only, and "
                     "parallel_strategy is 'ddp' (from the default)"),
        std::string::npos)
        << message;
  }
}

/// The prepared scheduler's steps and learning rate after six calls of a loop with windows of two
/// accumulation micro-steps (fp16 on the CPU): the optimizer steps at calls 1 and 3, skips at call 5 (an inf
/// gradient), and does nothing at calls 0, 2 and 4.
struct SchedulerRun {
  int64_t scheduler_steps;
  double lr;
  int64_t optimizer_steps;
};

SchedulerRun run_scheduler(bool step_scheduler_with_optimizer) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions()
                                          .cpu(true)
                                          .mixed_precision("fp16")
                                          .gradient_accumulation_steps(2)
                                          .step_scheduler_with_optimizer(step_scheduler_with_optimizer));
  torch::manual_seed(0);
  auto model = torch::nn::Linear(4, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.1)));
  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, /*step_size=*/1, /*gamma=*/0.5));
  for (int call = 0; call < 6; ++call) {
    auto guard = accelerator.accumulate(model);
    optimizer.zero_grad();
    // A small float32 loss: scaled by fp16's initial 65536 its gradients stay finite in float16.
    accelerator.backward(model->forward(torch::ones({2, 4})).sum().to(torch::kFloat32) * 1e-3);
    if (call == 5) {
      torch::NoGradGuard no_grad;
      model->weight.grad().fill_(std::numeric_limits<float>::infinity());
    }
    optimizer.step();
    scheduler.step();
    if (call == 5) {
      EXPECT_TRUE(optimizer.step_was_skipped()) << "the inf gradient must skip the step";
    }
  }
  return {scheduler.steps(), optimizer->param_groups()[0].options().get_lr(),
          accelerator.gradient_state()->optimizer_steps};
}

TEST(Config, StepSchedulerWithOptimizerFalseStepsOnEveryCall) {
  LauncherVariables variables({});
  const SchedulerRun with_optimizer = run_scheduler(true);
  EXPECT_EQ(with_optimizer.optimizer_steps, 2);
  EXPECT_EQ(with_optimizer.scheduler_steps, 2) << "true: only the optimizer steps really taken";
  // libtorch's StepLR leaves the first step() at the initial rate: n steps halve it n - 1 times.
  EXPECT_DOUBLE_EQ(with_optimizer.lr, 0.1 * 0.5);
  const SchedulerRun every_call = run_scheduler(false);
  EXPECT_EQ(every_call.optimizer_steps, 2);
  EXPECT_EQ(every_call.scheduler_steps, 6) << "false: every call, micro-steps and the skipped step included";
  EXPECT_DOUBLE_EQ(every_call.lr, 0.1 * std::pow(0.5, 5));
}

int bound_port(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

TEST(Rendezvous, PortInUseIsNamed) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  LauncherVariables variables({{"RANK", "0"},
                               {"WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "127.0.0.1"},
                               {"MASTER_PORT", std::to_string(bound_port(fd))}});
  auto message = error_of([] {
    accelerate::Accelerator accelerator(
        accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(2)));
  });
  close(fd);
  EXPECT_NE(message.find("already in use"), std::string::npos) << message;
}

TEST(Rendezvous, UnreachableMasterIsNamed) {
  // A port nobody listens on: bind, read the port, close.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const int port = bound_port(fd);
  close(fd);
  LauncherVariables variables({{"RANK", "1"},
                               {"WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "127.0.0.1"},
                               {"MASTER_PORT", std::to_string(port)}});
  auto message = error_of([] {
    accelerate::Accelerator accelerator(
        accelerate::AcceleratorOptions().cpu(true).init_timeout(std::chrono::seconds(2)));
  });
  EXPECT_NE(message.find("MASTER_ADDR"), std::string::npos) << message;
}

/// The fused ATen step against libtorch's own optimizer, on identical gradient sequences (float64).
template <typename Make> void expect_fused_matches_libtorch(Make make) {
  LauncherVariables variables({});
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  torch::manual_seed(3);
  auto initial = torch::randn({5, 7}, torch::kFloat64);
  auto bias_initial = torch::randn({7}, torch::kFloat64);
  std::vector<torch::Tensor> fused_params{initial.clone().requires_grad_(),
                                          bias_initial.clone().requires_grad_()};
  std::vector<torch::Tensor> plain_params{initial.clone().requires_grad_(),
                                          bias_initial.clone().requires_grad_()};
  auto fused = accelerator.prepare_optimizer(make(fused_params));
  auto plain = make(plain_params);
  for (int step = 0; step < 12; ++step) {
    for (size_t i = 0; i < fused_params.size(); ++i) {
      auto grad = torch::randn_like(fused_params[i]);
      fused_params[i].mutable_grad() = grad.clone();
      plain_params[i].mutable_grad() = grad.clone();
    }
    fused.step();
    plain->step();
  }
  EXPECT_EQ(fused.fused_steps(), 12);
  for (size_t i = 0; i < fused_params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(fused_params[i], plain_params[i], 1e-6, 1e-12))
        << "parameter " << i << " differs by "
        << (fused_params[i] - plain_params[i]).abs().max().item<double>();
  }
}

TEST(FusedOptimizer, AdamMatchesLibtorch) {
  expect_fused_matches_libtorch([](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-2).weight_decay(0.01));
  });
}

TEST(FusedOptimizer, AdamAmsgradMatchesLibtorch) {
  expect_fused_matches_libtorch([](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-2).amsgrad(true));
  });
}

TEST(FusedOptimizer, AdamWMatchesLibtorch) {
  expect_fused_matches_libtorch([](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::AdamW>(p, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  });
}

TEST(FusedOptimizer, SgdMomentumMatchesLibtorch) {
  expect_fused_matches_libtorch([](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(
        p, torch::optim::SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(0.01));
  });
}

TEST(FusedOptimizer, SgdNesterovMatchesLibtorch) {
  expect_fused_matches_libtorch([](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(p,
                                               torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  });
}

TEST(FusedOptimizer, LibtorchSaveOfTheUsersOptimizerStillWorks) {
  LauncherVariables variables({});
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  torch::nn::Linear model(3, 2);
  torch::optim::Adam adam(model->parameters(), 1e-2);
  auto prepared = accelerator.prepare(adam);
  accelerator.backward(model->forward(torch::ones({4, 3})).sum());
  prepared.step();
  auto path = testing::TempDir() + "/adam.pt";
  torch::save(adam, path);
  torch::optim::Adam restored(model->parameters(), 1e-2);
  torch::load(restored, path);
  auto& state =
      static_cast<torch::optim::AdamParamState&>(*restored.state().at(model->weight.unsafeGetTensorImpl()));
  EXPECT_EQ(state.step(), 1);
  EXPECT_TRUE(torch::allclose(state.exp_avg(), static_cast<torch::optim::AdamParamState&>(
                                                   *adam.state().at(model->weight.unsafeGetTensorImpl()))
                                                   .exp_avg()));
}

TEST(Accelerator, ClipGradNormReturnsTheNormWithoutSync) {
  LauncherVariables variables({});
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  auto weight = torch::zeros({2}, torch::requires_grad());
  weight.mutable_grad() = torch::tensor({3.0, 4.0});
  auto norm = accelerator.clip_grad_norm_({weight}, 1.0);
  EXPECT_NEAR(norm.item<double>(), 5.0, 1e-6);
  EXPECT_NEAR(weight.grad().norm().item<double>(), 1.0, 1e-5);
}

TEST(Accelerator, CurrentWithoutAnAcceleratorExplains) {
  EXPECT_THROW(accelerate::Accelerator::current(), std::logic_error);
}

// ---- find_executable_batch_size on one process (several: launch.train.FindExecutableBatchSize*) ----------

/// What a real allocation too large for any machine throws on the CPU allocator (c10's "DefaultCPUAllocator:
/// can't allocate memory").
std::exception_ptr cpuAllocationFailure() {
  try {
    const auto tensor = torch::empty({int64_t{1} << 52}, torch::kByte); // 4 PiB: no machine maps it
    (void)tensor;
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

TEST(BatchSizeSearch, OutOfMemoryIsWhatAccelerateCallsIt) {
  const auto failure = cpuAllocationFailure();
  ASSERT_TRUE(failure) << "a 4 PiB tensor was allocated";
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& error) {
    EXPECT_TRUE(accelerate::should_reduce_batch_size(error)) << error.what();
  }
  EXPECT_TRUE(accelerate::should_reduce_batch_size(std::bad_alloc()));
  try {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 2.00 GiB");
  } catch (const c10::OutOfMemoryError& error) {
    EXPECT_TRUE(accelerate::should_reduce_batch_size(error));
  }
  EXPECT_TRUE(accelerate::should_reduce_batch_size(std::runtime_error("HIP out of memory. Tried")));
  EXPECT_FALSE(
      accelerate::should_reduce_batch_size(std::runtime_error("mat1 and mat2 shapes cannot be multiplied")));
  // The text a process leaves when it abandons an attempt is not itself out of memory.
  EXPECT_FALSE(accelerate::should_reduce_batch_size(
      std::runtime_error("process 1 ran out of memory at batch size 64")));
  EXPECT_EQ(accelerate::reduce_batch_size(128), 115);
  EXPECT_EQ(accelerate::reduce_batch_size(10), 9);
  EXPECT_EQ(accelerate::reduce_batch_size(1), 0);
}

TEST(BatchSizeSearch, RetriesAtNinetyPercentUntilTheAttemptFits) {
  LauncherVariables variables({});
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  std::vector<int64_t> tried;
  const auto found = accelerate::find_executable_batch_size(64, [&](int64_t batch_size) {
    tried.push_back(batch_size);
    auto model = std::make_shared<torch::nn::LinearImpl>(4, 2);
    accelerator.prepare(model);
    if (batch_size > 20) {
      std::rethrow_exception(cpuAllocationFailure()); // a real allocator failure, not a hand-made one
    }
    return std::to_string(batch_size);
  });
  EXPECT_EQ(found, "19");
  EXPECT_EQ(tried, (std::vector<int64_t>{64, 57, 51, 45, 40, 36, 32, 28, 25, 22, 19}));

  // Each attempt's prepared model was dropped before the next (preparing a model twice is an error). The
  // first search's landing left its (now destroyed) model prepared, as Accelerate leaves it: free_memory()
  // first, as Accelerate's example does.
  accelerator.free_memory();
  tried.clear();
  auto model = std::make_shared<torch::nn::LinearImpl>(4, 2);
  accelerate::find_executable_batch_size(
      64,
      [&](int64_t batch_size) {
        tried.push_back(batch_size);
        accelerator.prepare(model);
        if (batch_size > 20) {
          throw std::bad_alloc();
        }
      },
      [](int64_t batch_size) { return batch_size / 2; });
  EXPECT_EQ(tried, (std::vector<int64_t>{64, 32, 16}));
}

TEST(BatchSizeSearch, ReachingZeroAndOtherErrorsEndTheSearch) {
  LauncherVariables variables({});
  int attempts = 0;
  try {
    accelerate::find_executable_batch_size(3, [&](int64_t) {
      ++attempts;
      throw std::bad_alloc();
    });
    ADD_FAILURE() << "reaching zero must throw";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("no executable batch size found, reached zero (out of memory at "
                        "every batch size from 3 down to 1)"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(attempts, 3); // 3, 2, 1
  attempts = 0;
  EXPECT_THROW(accelerate::find_executable_batch_size(8,
                                                      [&](int64_t) {
                                                        ++attempts;
                                                        throw std::invalid_argument("not memory");
                                                      }),
               std::invalid_argument);
  EXPECT_EQ(attempts, 1);
  EXPECT_THROW(accelerate::find_executable_batch_size(0, [](int64_t) {}), std::invalid_argument);
}

} // namespace
