// AcceleratorState: what one Accelerator knows about the job and the objects it prepared.
#pragma once

#include "environment.h"

#include <accelerate/options.h>

#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

namespace accelerate::detail {

struct AcceleratorState {
  AcceleratorOptions options;
  LaunchEnvironment environment;
  torch::Device device{torch::kCPU};
  /// Null when the job has one process.
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;
  std::vector<torch::nn::Module*> models;
  std::vector<torch::optim::Optimizer*> optimizers;
};

} // namespace accelerate::detail
