// test/passes/Inputs/accelerate/accelerate.h: a mirror of the runtime's accelerate::Accelerator, for fast checks
// of rewritten test files. Signatures match include/accelerate/accelerator.h for what is declared here.
#pragma once

#include <torch/torch.h>

#include <optional>

namespace accelerate {
class Accelerator {
public:
  Accelerator();
  Accelerator(const Accelerator&) = delete;
  void backward(const torch::Tensor& loss, const torch::Tensor& gradient = {},
                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                std::optional<at::TensorList> inputs = std::nullopt);
};
} // namespace accelerate
