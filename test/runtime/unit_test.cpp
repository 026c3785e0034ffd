// Single-process unit tests of the runtime: launcher environment discovery and the one-process Accelerator.
#include <accelerate/accelerate.h>

#include "../../runtime/environment.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

namespace {

using accelerate::detail::discover_launch_environment;

/// Sets launcher variables for one test and restores a clean slate afterwards.
class LauncherVariables {
public:
  explicit LauncherVariables(const std::map<std::string, std::string>& values) {
    clear();
    for (const auto& [name, value] : values) {
      setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~LauncherVariables() { clear(); }

private:
  static void clear() {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                             "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                             "SLURM_NTASKS_PER_NODE", "SLURM_JOB_NODELIST"}) {
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
  LauncherVariables variables({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "1234"}});
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
  LauncherVariables variables({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  auto env = discover_launch_environment();
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.launcher, "mpirun");
}

TEST(Environment, ReadsSlurmVariablesAndMasterFromNodeList) {
  LauncherVariables variables({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                               {"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_JOB_NODELIST", "gpu[07-08]"}});
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

TEST(Accelerator, CurrentWithoutAnAcceleratorExplains) {
  EXPECT_THROW(accelerate::Accelerator::current(), std::logic_error);
}

} // namespace
