// The layers pass (off by default): torch::nn::Linear in the user's own modules becomes accelerate::nn::Linear.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs > %t.out 2> %t.stderr
// RUN: diff %s %t.out
// RUN: count 0 < %t.stderr
// RUN: %accel-rewrite %s --passes=layers -- -std=c++17 -I%S/Inputs | FileCheck %s

#include <torch/torch.h>

struct Net : torch::nn::Module {
  Net() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::nn::Linear fc{nullptr};
  // CHECK: {{^}}  Net() { fc = register_module("fc", accelerate::nn::Linear(4, 2)); }{{$}}
  // CHECK: {{^}}  accelerate::nn::Linear fc{nullptr};{{$}}
};

// Not a user module: left alone.
torch::nn::Linear make_head() { return torch::nn::Linear(2, 1); }
// CHECK: {{^}}torch::nn::Linear make_head() { return torch::nn::Linear(2, 1); }{{$}}

void train(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.
