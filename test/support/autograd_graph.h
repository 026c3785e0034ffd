// The autograd graph as the tests inspect it: how many nodes of a kind backward from a tensor would run.
#pragma once

#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

namespace accelerate_test {

/// How many nodes named `name` ("accelerate::CheckpointBackward", "TanhBackward0") the autograd graph of
/// `root` holds, each counted once.
inline int count_nodes(const torch::Tensor& root, const std::string& name) {
  std::vector<torch::autograd::Node*> pending{root.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  int count = 0;
  while (!pending.empty()) {
    auto* node = pending.back();
    pending.pop_back();
    if (node == nullptr || !seen.insert(node).second) {
      continue;
    }
    count += node->name() == name ? 1 : 0;
    for (const auto& edge : node->next_edges()) {
      pending.push_back(edge.function.get());
    }
  }
  return count;
}

} // namespace accelerate_test
