// A prepared optimizer that reaches a torch::optim::SGD& the rewriter cannot retype (a std::function's
// signature): the rewrite is abandoned, nothing is written, and the message says what to write instead.
// RUN: rm -rf %t && mkdir -p %t && cp %s %t/input.cpp
// RUN: not %accel-rewrite %t/input.cpp -i -- -std=c++17 -I%S/Inputs > %t/stdout 2> %t/stderr
// RUN: count 0 < %t/stdout
// RUN: diff %s %t/input.cpp
// RUN: FileCheck %s < %t/stderr

#include <torch/torch.h>

#include <functional>

void decay(torch::optim::SGD& optimizer) { optimizer.zero_grad(); }

void train(torch::nn::Linear net) {
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  std::function<void(torch::optim::SGD&)> callback = decay;
  callback(optimizer);
}
// CHECK: input.cpp:[[@LINE-2]]: error: no matching function for call to object of type 'std::function
// CHECK-SAME: (line {{[0-9]+}}, column 3 of the rewritten text)
// CHECK: accel-rewrite: error: the rewritten {{.*}}input.cpp would not compile (diagnostics above, each at
// CHECK-SAME: a prepared optimizer is an accelerate::Optimizer, and here one reaches a torch::optim::<type>& the
// CHECK-SAME: rewriter could not retype
// CHECK-SAME: write accelerate::Optimizer& (or torch::optim::Optimizer&) and run again
