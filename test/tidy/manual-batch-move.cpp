// accelerate-manual-batch-move: a batch of a loader accelerator.prepare_data_loader made is already on the
// process's device; the fix drops the manual move. Batches of libtorch's own loader, CPU moves and dtype
// conversions are left alone.
// RUN: rm -rf %t && mkdir -p %t && cp %s %t/train.cpp
// RUN: %tidy -checks=-*,accelerate-manual-batch-move %t/train.cpp -- -std=c++17 -I%passes_inputs 2>&1 \
// RUN:   | FileCheck %s --implicit-check-not=warning:
// RUN: %tidy -checks=-*,accelerate-manual-batch-move --fix --format-style=none %t/train.cpp -- -std=c++17 \
// RUN:   -I%passes_inputs > %t/fix.log 2>&1
// RUN: FileCheck %s --check-prefix=FIXED --input-file=%t/train.cpp
// RUN: %tidy -checks=-*,accelerate-manual-batch-move %t/train.cpp -- -std=c++17 -I%passes_inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=AGAIN --implicit-check-not=warning:

#include <accelerate/accelerate.h>
#include <torch/torch.h>

#include "datasets.h"

int main() {
  accelerate::Accelerator accelerator;
  torch::Device device(torch::kCUDA);
  torch::nn::Linear model(4, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto loader = accelerator.prepare_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  auto eval_loader =
      torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  for (auto& batch : *loader) {
    auto data = batch.data.to(device);
    // CHECK: train.cpp:[[@LINE-1]]:17: warning: 'batch.data' is a batch of 'loader', which accelerator.prepare_data_loader made: the prepared loader already puts every batch on this process's device, so .to(...) copies it again at best, and with more than one process a fixed device (torch::kCUDA is GPU 0) takes every process's batch away from its own GPU and its model; use 'batch.data' as it is [accelerate-manual-batch-move]
    // FIXED: {{^ *}}auto data = batch.data;
    auto target = batch.target.to(accelerator.device(), /*non_blocking=*/true);
    // CHECK: train.cpp:[[@LINE-1]]:19: warning: 'batch.target' is a batch of 'loader'
    // FIXED: {{^ *}}auto target = batch.target;
    auto on_gpu = batch.data.cuda();
    // CHECK: train.cpp:[[@LINE-1]]:19: warning: {{.*}}, so .cuda() copies it again
    // FIXED: {{^ *}}auto on_gpu = batch.data;
    auto& images = batch.data;
    auto moved = images.to(torch::kCUDA);
    // CHECK: train.cpp:[[@LINE-1]]:18: warning: 'images' is a batch of 'loader'
    // FIXED: {{^ *}}auto moved = images;
    batch.target = batch.target.to(device);
    // CHECK: train.cpp:[[@LINE-1]]:20: warning: {{.*}}; delete this statement
    // AGAIN: train.cpp:[[@LINE-2]]:20: warning: {{.*}}; delete this statement
    // FIXED: {{^ *}}batch.target = batch.target.to(device);
    auto on_cpu = batch.data.to(torch::kCPU);
    auto as_double = batch.data.to(torch::kDouble);
    auto both = batch.data.to(device, torch::kDouble);
    // FIXED: {{^ *}}auto on_cpu = batch.data.to(torch::kCPU);
    optimizer.zero_grad();
    accelerator.backward(torch::mse_loss(model->forward(data), target));
    optimizer.step();
  }
  for (auto& batch : *eval_loader) {
    auto data = batch.data.to(device);
    // FIXED: {{^ *}}auto data = batch.data.to(device);
  }
}
