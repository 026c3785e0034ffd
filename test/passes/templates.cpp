// Training loops in function templates (the official MNIST example's shape): calls whose types depend on the
// template parameter are rewritten when every instantiation makes them what the pass expects.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s

#include "datasets.h"

#include <cstdio>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

template <typename DataLoader>
void train(size_t epoch, Net& model, torch::Device device, DataLoader& data_loader, torch::optim::Optimizer& optimizer) {
  // Every call passes the prepared optimizer: the parameter takes the accelerate::Optimizer.
  // CHECK: {{^}}void train(size_t epoch, Net& model, torch::Device device, DataLoader& data_loader, accelerate::Optimizer& optimizer) {{[{]}}{{$}}
  model.train();
  size_t batch_idx = 0;
  for (auto& batch : data_loader) {
    // CHECK:      {{^}}  for (auto& batch : data_loader) {{[{]}}{{$}}
    // CHECK-NEXT: {{^}}    auto accumulate = accelerator.accumulate(model);{{$}}
    auto data = batch.data.to(device), targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    auto loss = torch::nll_loss(output, targets);
    loss.backward();
    // CHECK: {{^}}    accelerator.backward(loss);{{$}}
    optimizer.step();
    if (batch_idx++ % 10 == 0)
      std::printf("Train Epoch: %zu Loss: %.4f\n", epoch, loss.template item<float>());
    // CHECK: {{^}}      if (accelerator.is_main_process()) std::printf("Train Epoch: %zu Loss: %.4f\n", epoch, loss.template item<float>());{{$}}
  }
}

template <typename DataLoader> void test(Net& model, torch::Device device, DataLoader& data_loader) {
  torch::NoGradGuard no_grad;
  model.eval();
  double correct = 0;
  for (const auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    correct += model.forward(data).argmax(1).eq(targets).sum().template item<double>();
  }
  std::printf("Accuracy: %.3f\n", correct);
  // CHECK: {{^}}  if (accelerator.is_main_process()) std::printf("Accuracy: %.3f\n", correct);{{$}}
}

int main() {
  torch::Device device(torch::kCUDA);
  // CHECK: {{^}}  torch::Device device = accelerator.device();{{$}}
  Net model;
  model.to(device);
  auto train_loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      Points().map(torch::data::transforms::Stack<>()), 64);
  // CHECK: {{^}}  auto train_loader = accelerator.prepare_data_loader({{$}}
  auto test_loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 1000);
  // CHECK: {{^}}  auto test_loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 1000);{{$}}
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  // CHECK:      {{^}}  accelerator.prepare(model);{{$}}
  // CHECK-NEXT: {{^}}  auto optimizer = accelerator.prepare(torch::optim::SGD(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.5)));{{$}}
  for (size_t epoch = 1; epoch <= 2; ++epoch) {
    train(epoch, model, device, *train_loader, optimizer);
    test(model, device, *test_loader);
  }
}
