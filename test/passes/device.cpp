// The device pass: device declarations become the accelerator's device; moves that prepare makes unnecessary
// go (prepared models, batches of prepared loaders); CUDA constants become the accelerator's device; moves to
// the CPU, dtype conversions and moves of models that are only evaluated stay.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --allow-empty \
// RUN:   --check-prefix=WARN --implicit-check-not=warning:

#include "datasets.h"

#include <cstdio>
#include <memory>
#include <tuple>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  // CHECK: {{^}}  torch::Device device = accelerator.device();{{$}}
  auto model = std::make_shared<Net>();
  model->to(device);
  // CHECK-NOT: {{^}}  model->to(device);
  auto teacher = std::make_shared<Net>(); // Only evaluated: placed, not prepared.
  teacher->to(device);
  // CHECK: {{^}}  teacher->to(device);{{$}}
  (*teacher).to(torch::kCUDA);
  // CHECK: {{^}}  (*teacher).to(accelerator.device());{{$}}
  torch::optim::SGD optimizer(model->parameters(), 0.1);

  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  for (auto& batch : *loader) {
    auto data = batch.data.to(device), target = batch.target.to(device);
    // CHECK: {{^}}    auto data = batch.data, target = batch.target;{{$}}
    auto halves = batch.data.to(device, torch::kDouble);
    // CHECK: {{^}}    auto halves = batch.data.to(torch::kDouble);{{$}}
    auto copied = data.cuda();
    // CHECK: {{^}}    auto copied = data;{{$}}
    auto on_cpu = batch.data.to(torch::kCPU);
    // CHECK: {{^}}    auto on_cpu = batch.data.to(torch::kCPU);{{$}}
    auto teacher_out = teacher->forward(data).cpu();
    // CHECK: {{^}}    auto teacher_out = teacher->forward(data).cpu();{{$}}
    auto noise = torch::randn({64, 10}, torch::TensorOptions().device(torch::kCUDA));
    // CHECK: {{^}}    auto noise = torch::randn({64, 10}, torch::TensorOptions().device(accelerator.device()));{{$}}
    auto mask = torch::zeros({64}, device);
    // CHECK: {{^}}    auto mask = torch::zeros({64}, device);{{$}}
    optimizer.zero_grad();
    auto loss = model->forward(data).sum() + noise.sum() + mask.sum() + teacher_out.sum() + halves.sum();
    loss.backward();
    optimizer.step();
  }
}

// A device chosen by if/else, or hard-coded; moves of tensors that no prepared loader made.
void other_forms(Net& net, torch::optim::SGD& optimizer, std::vector<std::tuple<torch::Tensor, torch::Tensor>> data) {
  torch::Device device = torch::kCPU;
  if (torch::cuda::is_available())
    device = torch::kCUDA;
  // CHECK:      {{^}}  torch::Device device = accelerator.device();{{$}}
  // CHECK-NEXT: {{^}}  if (torch::cuda::is_available()){{$}}
  // CHECK-NEXT: {{^}}    device = accelerator.device();{{$}}
  auto gpu = torch::kCUDA;
  // CHECK: {{^}}  auto gpu = accelerator.device();{{$}}
  torch::DeviceType device_type = torch::kCUDA;
  // CHECK: {{^}}  torch::Device device_type = accelerator.device();{{$}}
  torch::Device cpu(torch::kCPU);
  // CHECK: {{^}}  torch::Device cpu(torch::kCPU);{{$}}
  for (auto& batch : data) {
    auto x = std::get<0>(batch).to(device);
    // CHECK: {{^}}    auto x = std::get<0>(batch).to(device);{{$}}
    auto y = std::get<1>(batch).cuda();
    // CHECK: {{^}}    auto y = std::get<1>(batch).to(accelerator.device());{{$}}
    auto z = x.to("cuda:0");
    // CHECK: {{^}}    auto z = x.to(accelerator.device());{{$}}
    optimizer.zero_grad();
    (net.forward(x) - y + z.to(gpu).to(device_type).to(cpu)).sum().backward();
    optimizer.step();
  }
}

// Batches of a prepared loader whose examples are tuples.
// The device is only used by moves that go: its declaration goes with them.
void tuples(Net& net, torch::optim::SGD& optimizer) {
  // CHECK: {{^}}void tuples(Net& net, torch::optim::SGD& optimizer) {{[{]}}{{$}}
  torch::Device device(torch::kCUDA, 0);
  // CHECK-NOT: {{^}}  torch::Device device
  auto loader = torch::data::make_data_loader(Pairs(), 8);
  // CHECK: {{^}}  auto loader = accelerator.prepare_data_loader(Pairs(), 8);{{$}}
  for (auto& batch : *loader) {
    auto inputs = std::get<0>(batch).to(device);
    // CHECK: {{^}}    auto inputs = std::get<0>(batch);{{$}}
    auto targets = std::get<1>(batch).to(device).view({-1});
    // CHECK: {{^}}    auto targets = std::get<1>(batch).view({-1});{{$}}
    optimizer.zero_grad();
    torch::mse_loss(net.forward(inputs), targets).backward();
    optimizer.step();
  }
}
// A DeviceType chosen by if/else and read only by the device declaration goes with its assignments; one that
// other code reads stays.
void chosen_type(Net& net, torch::optim::SGD& optimizer, std::vector<std::tuple<torch::Tensor, torch::Tensor>> data) {
  torch::DeviceType device_type;
  if (torch::cuda::is_available()) {
    std::puts("CUDA available! Training on GPU.");
    device_type = torch::kCUDA;
  } else {
    std::puts("Training on CPU.");
    device_type = torch::kCPU;
  }
  torch::Device device(device_type);
  // CHECK:      {{^}}void chosen_type(Net& net, torch::optim::SGD& optimizer, std::vector<std::tuple<torch::Tensor, torch::Tensor>> data) {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
  // CHECK-NEXT: {{^}}  if (torch::cuda::is_available()) {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}    if (accelerator.is_main_process()) std::puts("CUDA available! Training on GPU.");{{$}}
  // CHECK-NEXT: {{^}}  } else {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}    if (accelerator.is_main_process()) std::puts("Training on CPU.");{{$}}
  // CHECK-NEXT: {{^}}  }{{$}}
  // CHECK-NEXT: {{^}}  torch::Device device = accelerator.device();{{$}}
  torch::DeviceType printed_type;
  if (torch::cuda::is_available()) {
    printed_type = torch::kCUDA;
  } else {
    printed_type = torch::kCPU;
  }
  torch::Device second(printed_type);
  if (printed_type == torch::kCUDA)
    std::puts("on a GPU");
  // CHECK:      {{^}}  torch::DeviceType printed_type;{{$}}
  // CHECK-NEXT: {{^}}  if (torch::cuda::is_available()) {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}    printed_type = torch::kCUDA;{{$}}
  // CHECK:      {{^}}  torch::Device second = accelerator.device();{{$}}
  for (auto& batch : data) {
    optimizer.zero_grad();
    net.forward(std::get<0>(batch).to(device).to(second)).sum().backward();
    optimizer.step();
  }
}
// An if that did nothing but choose such a DeviceType goes as a whole, else-if chains included; one whose
// condition is a call that may do more than ask about CUDA leaves that call as a statement; any other
// condition keeps its (emptied) if.
bool pick_gpu();
[[nodiscard]] bool must_check();
int gpus_wanted();
void chosen_type_only(Net& net, torch::optim::SGD& optimizer, std::vector<std::tuple<torch::Tensor, torch::Tensor>> data) {
  torch::DeviceType device_type;
  if (torch::cuda::is_available()) {
    device_type = torch::kCUDA;
  } else {
    device_type = torch::kCPU;
  }
  torch::Device device(device_type);
  torch::DeviceType chain;
  if (torch::cuda::device_count() > 1) {
    chain = torch::kCUDA;
  } else if (torch::cuda::is_available()) {
    chain = torch::kCUDA;
  } else {
    chain = torch::kCPU;
  }
  torch::Device second(chain);
  torch::DeviceType picked = torch::kCPU;
  if (pick_gpu()) {
    picked = torch::kCUDA;
  }
  torch::Device third(picked);
  torch::DeviceType checked = torch::kCPU;
  if (must_check()) {
    checked = torch::kCUDA;
  }
  torch::Device fourth(checked);
  torch::DeviceType counted = torch::kCPU;
  if (gpus_wanted() > 0) {
    counted = torch::kCUDA;
  } else {
    counted = torch::kCPU;
  }
  torch::Device fifth(counted);
  // CHECK:      {{^}}void chosen_type_only(Net& net, torch::optim::SGD& optimizer, std::vector<std::tuple<torch::Tensor, torch::Tensor>> data) {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
  // CHECK-NEXT: {{^}}  torch::Device device = accelerator.device();{{$}}
  // CHECK-NEXT: {{^}}  torch::Device second = accelerator.device();{{$}}
  // CHECK-NEXT: {{^}}  pick_gpu();{{$}}
  // CHECK-NEXT: {{^}}  torch::Device third = accelerator.device();{{$}}
  // CHECK-NEXT: {{^}}  if (must_check()) {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}  }{{$}}
  // CHECK-NEXT: {{^}}  torch::Device fourth = accelerator.device();{{$}}
  // CHECK-NEXT: {{^}}  if (gpus_wanted() > 0) {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}  } else {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}  }{{$}}
  // CHECK-NEXT: {{^}}  torch::Device fifth = accelerator.device();{{$}}
  for (auto& batch : data) {
    optimizer.zero_grad();
    net.forward(std::get<0>(batch).to(device).to(second).to(third).to(fourth).to(fifth)).sum().backward();
    optimizer.step();
  }
}
// WARN-NOT: warning

// An if whose condition is a call a template leaves dependent (a vendored JSON library's
// `if (JSON_HEDLEY_UNLIKELY(!j.is_null()))`) is not a device choice, and asking it about its result does not crash.
// CHECK: {{^}}template <typename T> void check_json(const T& j) {{[{]}}{{$}}
// CHECK-NEXT: {{^}}  if (__builtin_expect(!!(!j.is_null()), 0)) {{[{]}}{{$}}
template <typename T> void check_json(const T& j) {
  if (__builtin_expect(!!(!j.is_null()), 0)) {
    throw 1;
  }
}
