// The device pass drops `.to(device)` only from tensors that come from a prepared loader's batches; a tensor
// the loop makes itself keeps its move (to accelerator.device()), whatever its shape came from. A batch
// moved to the CPU and fed to a prepared model is reported. With the data-loader or prepare pass disabled,
// the loader or model is not prepared, so the moves stay.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN \
// RUN:   --implicit-check-not=warning:
// RUN: %accel-rewrite %s --disable=data-loader -- -std=c++17 -I%S/Inputs 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=NOLOADER
// RUN: %accel-rewrite %s --disable=prepare -- -std=c++17 -I%S/Inputs 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=NOPREPARE

#include "datasets.h"

#include <memory>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  // CHECK: {{^}}  torch::Device device = accelerator.device();{{$}}
  // NOLOADER: {{^}}  torch::Device device = accelerator.device();{{$}}
  auto model = std::make_shared<Net>();
  model->to(device);
  // CHECK-NOT: {{^}}  model->to(device);
  // NOLOADER-NOT: {{^}}  model->to(device);
  // NOPREPARE: {{^}}  model->to(device);{{$}}
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  // NOLOADER: {{^}}  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);{{$}}
  for (auto& batch : *loader) {
    int64_t n = batch.data.size(0);
    auto noise = torch::randn({n, 16}).to(device);
    // CHECK: {{^}}    auto noise = torch::randn({n, 16}).to(device);{{$}}
    auto ones = torch::ones_like(batch.data).to(device);
    // CHECK: {{^}}    auto ones = torch::ones_like(batch.data).to(device);{{$}}
    auto mixed = (batch.data + noise).to(device);
    // CHECK: {{^}}    auto mixed = (batch.data + noise).to(device);{{$}}
    auto scaled = (batch.data.view({n, -1}) / 255.0).to(device);
    // CHECK: {{^}}    auto scaled = batch.data.view({n, -1}) / 255.0;{{$}}
    // NOLOADER: {{^}}    auto scaled = (batch.data.view({n, -1}) / 255.0).to(device);{{$}}
    auto target = batch.target.to(device);
    // CHECK: {{^}}    auto target = batch.target;{{$}}
    // NOLOADER: {{^}}    auto target = batch.target.to(device);{{$}}
    torch::Tensor copy = target;
    auto moved_copy = copy.to(device);
    // CHECK: {{^}}    auto moved_copy = copy;{{$}}
    auto on_cpu = batch.data.to(torch::kCPU);
    // CHECK: {{^}}    auto on_cpu = batch.data.to(torch::kCPU);{{$}}
    // WARN: device-moves.cpp:[[@LINE-2]]:{{[0-9]+}}: warning: 'batch.data.to(torch::kCPU)' not rewritten: it moves a batch of a prepared loader to the CPU, and the prepared model it feeds is on accelerator.device(){{.*}} [device]
    auto unused_on_cpu = batch.target.cpu();
    optimizer.zero_grad();
    auto loss = model->forward(on_cpu).sum() + noise.sum() + ones.sum() + mixed.sum() + scaled.sum() +
                moved_copy.sum() + unused_on_cpu.sum();
    loss.backward();
    optimizer.step();
  }
}
