// The device of each process everywhere: a device variable at namespace scope is set to the accelerator's
// device at the start of main, and a CUDA device written as a constant for a function's device parameter
// becomes accelerator.device(). As written, every process would put these tensors on GPU 0 while its prepared
// model is on its own GPU (the CPU cannot show it; scripts/gpu-check.sh runs fixtures.reach.device_global there).
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN

#include <torch/torch.h>

// CHECK: {{^}}inline torch::Device device = torch::Device(torch::kCUDA, 0);{{$}}
inline torch::Device device = torch::Device(torch::kCUDA, 0);
namespace setup {
torch::Device gpu(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
} // namespace setup
// A device explicitly on the CPU stays as it is; a const one cannot be set, and is reported.
// CHECK: {{^}}torch::Device cpu(torch::kCPU);{{$}}
torch::Device cpu(torch::kCPU);
// WARN: device-globals.cpp:[[@LINE+1]]:{{[0-9]+}}: warning: global device 'fixed' not rewritten: every process would place its tensors on the device written here
const torch::Device fixed(torch::kCUDA, 1);

void train(torch::nn::Linear& model, torch::Device target) {
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    auto noise = torch::randn({8, 4}).to(device);
    auto labels = torch::zeros({8, 1}).to(target);
    auto more = torch::zeros({8, 1}).to(setup::gpu);
    optimizer.zero_grad();
    (model->forward(noise) - labels - more).sum().backward();
    optimizer.step();
  }
}

// CHECK: {{^}}int main() {{{$}}
// CHECK-NEXT: {{^}}  accelerate::Accelerator accelerator;{{$}}
// CHECK-NEXT: {{^}}  device = accelerator.device();{{$}}
// CHECK-NEXT: {{^}}  setup::gpu = accelerator.device();{{$}}
// CHECK: {{^}}  train(model, accelerator.device());{{$}}
// CHECK-NEXT: {{^}}  train(model, accelerator.device());{{$}}
// CHECK-NEXT: {{^}}  train(model, cpu);{{$}}
int main() {
  torch::nn::Linear model(4, 1);
  train(model, torch::Device(torch::kCUDA, 0));
  train(model, torch::kCUDA);
  train(model, cpu);
}
