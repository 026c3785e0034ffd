// The layers pass (off by default): torch::nn::Linear in the user's own modules. Until the runtime has
// accelerate::nn::Linear, each site is reported; with it, the type is swapped.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 | FileCheck %s --check-prefix=OFF \
// RUN:   --implicit-check-not=accelerate::nn::Linear --implicit-check-not=warning:
// RUN: %accel-rewrite %s --passes=layers -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s \
// RUN:   --check-prefix=WARN --implicit-check-not=warning:
// RUN: %accel-rewrite %s --passes=layers --assume-runtime=accelerate-linear -- -std=c++17 -I%S/Inputs \
// RUN:   -DACCEL_MIRROR_LINEAR | FileCheck %s --check-prefix=SWAP

#include <torch/torch.h>

#ifdef ACCEL_MIRROR_LINEAR // What the runtime will have: a drop-in with the same constructors.
namespace accelerate::nn {
class Linear : public torch::nn::ModuleHolder<torch::nn::LinearImpl> {
public:
  using torch::nn::ModuleHolder<torch::nn::LinearImpl>::ModuleHolder;
  Linear(int64_t in_features, int64_t out_features);
};
} // namespace accelerate::nn
#endif

struct Net : torch::nn::Module {
  Net() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::nn::Linear fc{nullptr};
  // SWAP: {{^}}  Net() { fc = register_module("fc", accelerate::nn::Linear(4, 2)); }{{$}}
  // SWAP: {{^}}  accelerate::nn::Linear fc{nullptr};{{$}}
  // WARN: layers.cpp:[[@LINE-5]]:38: warning: torch::nn::Linear not rewritten: accelerate::nn::Linear (fused
  // WARN-SAME: bias, fp8) is not in this runtime yet [layers]
  // WARN: layers.cpp:[[@LINE-6]]:3: warning: torch::nn::Linear not rewritten
};

// Not a user module: left alone.
torch::nn::Linear make_head() { return torch::nn::Linear(2, 1); }
// SWAP: {{^}}torch::nn::Linear make_head() { return torch::nn::Linear(2, 1); }{{$}}

void train(torch::optim::SGD& optimizer);
// OFF: void train(torch::optim::SGD& optimizer);
