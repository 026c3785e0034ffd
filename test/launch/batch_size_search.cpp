// find_executable_batch_size under a memory limit, for the launcher tests (train_test.py, the
// FindExecutableBatchSize* tests): each process may limit its own address space, as `prlimit --as` does
// (RLIMIT_AS = its VmSize once the Accelerator is made + a budget), so that an attempt at a large batch size
// runs out of memory on that process alone while the others wait for it in the gradient all-reduce.
//
//   batch_size_search --start N [--budget-mb B0,B1,...] [--steps S] [--inside] [--fail-rank R]
//
// B<r> is process r's budget in MiB (0 or absent: no limit). --inside makes the Accelerator inside the
// function (each attempt forms its own process group); otherwise one is made before the call. --fail-rank R
// makes process R throw an error that is not out of memory at its first attempt's first step.
// Every process prints `rank <r> batch size <B> fnv=<hash of every parameter's bytes>` at the end.
#include <accelerate/accelerate.h>

#include "../support/parameter_hash.h"

#include <torch/torch.h>

#include <sys/resource.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// A wide hidden layer: its activations (8192 floats a sample, kept for backward with the ReLU's) are what a
// larger batch costs; the weights are 8 MiB.
struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(256, 8192));
    fc2 = register_module("fc2", torch::nn::Linear(8192, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

/// This process's address-space size in bytes (VmSize).
uint64_t addressSpaceBytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0)
      return std::stoull(line.substr(7)) * 1024;
  }
  throw std::runtime_error("no VmSize in /proc/self/status");
}

int envRank() {
  const char* rank = std::getenv("RANK");
  return rank ? std::atoi(rank) : 0;
}

} // namespace

int main(int argc, char** argv) {
  int64_t start = 0;
  int steps = 3;
  bool inside = false;
  int failRank = -1;
  std::vector<int64_t> budgets;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--start" && i + 1 < argc)
      start = std::atoll(argv[++i]);
    else if (arg == "--steps" && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (arg == "--inside")
      inside = true;
    else if (arg == "--fail-rank" && i + 1 < argc)
      failRank = std::atoi(argv[++i]);
    else if (arg == "--budget-mb" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');)
        budgets.push_back(std::atoll(item.c_str()));
    } else {
      std::fprintf(stderr, "batch_size_search: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  at::set_num_threads(1);
  const auto options = accelerate::AcceleratorOptions().cpu(true);
  std::optional<accelerate::Accelerator> outside;
  if (!inside)
    outside.emplace(options);
  const int rank = envRank();
  const int64_t budget = rank < static_cast<int>(budgets.size()) ? budgets[rank] : 0;
  if (budget > 0) {
    const rlim_t limit = addressSpaceBytes() + static_cast<rlim_t>(budget) * 1024 * 1024;
    const rlimit value{limit, limit};
    if (setrlimit(RLIMIT_AS, &value) != 0) {
      std::perror("setrlimit");
      return 2;
    }
    std::printf("rank %d limits its address space to %" PRIu64 " MiB (+%" PRId64 " MiB)\n", rank,
                static_cast<uint64_t>(limit >> 20), budget);
    std::fflush(stdout);
  }

  uint64_t hash = 0;
  bool failed = false;
  const int64_t found = accelerate::find_executable_batch_size(start, [&](int64_t batchSize) {
    std::optional<accelerate::Accelerator> own;
    if (inside)
      own.emplace(options);
    accelerate::Accelerator& accelerator = inside ? *own : *outside;
    std::printf("rank %d tries batch size %" PRId64 " (VmSize %" PRIu64 " MiB)\n", rank, batchSize,
                addressSpaceBytes() >> 20);
    std::fflush(stdout);
    torch::manual_seed(0);
    auto model = std::make_shared<Net>();
    accelerator.prepare(model);
    auto optimizer =
        accelerator.prepare(torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.01)));
    for (int step = 0; step < steps; ++step) {
      if (rank == failRank && !failed) {
        failed = true;
        throw std::invalid_argument("batch_size_search: process " + std::to_string(rank) +
                                    " fails as asked (not out of memory)");
      }
      auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * step + accelerator.process_index());
      auto x = at::randn({batchSize, 256}, generator);
      optimizer.zero_grad();
      const torch::Tensor loss = model->forward(x).pow(2).mean();
      accelerator.backward(loss);
      optimizer.step();
    }
    hash = accelerate_test::parameter_hash(model->parameters());
    return batchSize;
  });
  std::printf("rank %d batch size %" PRId64 " fnv=%016" PRIx64 "\n", rank, found, hash);
  std::fflush(stdout);
  return 0;
}
