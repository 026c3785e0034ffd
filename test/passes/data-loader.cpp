// The data-loader pass: loaders that a training loop reads become prepared loaders (a sequential one keeps its
// order with shuffle(false)); evaluation loaders and loaders with their own sampler are left as they are.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN \
// RUN:   --implicit-check-not=warning:

#include "datasets.h"

#include <utility>

void step(torch::nn::Linear& model, torch::optim::SGD& optimizer, const torch::Tensor& x) {
  optimizer.zero_grad();
  model->forward(x).sum().backward();
  optimizer.step();
}

void shuffled(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  // CHECK: {{^}}  auto loader = accelerator.prepare_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);{{$}}
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    model->forward(batch.data).sum().backward();
    optimizer.step();
  }
  auto options = torch::data::DataLoaderOptions(32).drop_last(true);
  auto random = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      Points().map(torch::data::transforms::Stack<>()), options);
  // CHECK:      {{^}}  auto random = accelerator.prepare_data_loader({{$}}
  // CHECK-NEXT: {{^}}      Points().map(torch::data::transforms::Stack<>()), options);{{$}}
  for (auto& batch : *random)
    step(model, optimizer, batch.data);
}

void sequential(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto dataset = Points().map(torch::data::transforms::Stack<>());
  auto loader =
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(std::move(dataset), 64);
  // CHECK:      {{^}}  auto loader ={{$}}
  // CHECK-NEXT: {{^}}      accelerator.prepare_data_loader(std::move(dataset), accelerate::DataLoaderOptions(64).shuffle(false));{{$}}
  for (auto& batch : *loader)
    step(model, optimizer, batch.data);
}

// The training loop is in a template that the loader is passed to.
template <typename Loader> void train(torch::nn::Linear& model, torch::optim::SGD& optimizer, Loader& loader) {
  for (auto& batch : loader) {
    optimizer.zero_grad();
    auto loss = model->forward(batch.data).sum();
    loss.backward();
    optimizer.step();
  }
}

void through_a_template(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()),
                                              torch::data::DataLoaderOptions().batch_size(16));
  // CHECK:      {{^}}  auto loader = accelerator.prepare_data_loader(Points().map(torch::data::transforms::Stack<>()),{{$}}
  // CHECK-NEXT: {{^}}                                              torch::data::DataLoaderOptions().batch_size(16));{{$}}
  train(model, optimizer, *loader);
}

// Negative: a loader only an evaluation loop reads: every process evaluates the whole set.
void evaluation(torch::nn::Linear& model) {
  auto test_loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 100);
  // CHECK: {{^}}  auto test_loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 100);{{$}}
  for (auto& batch : *test_loader)
    model->forward(batch.data);
}

// Negative: a sampler object of the user's own.
void own_sampler(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()),
                                              torch::data::samplers::SequentialSampler(10), 8);
  // CHECK: {{^}}  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()),{{$}}
  // WARN: data-loader.cpp:[[@LINE-3]]:3: warning: data loader 'loader' not rewritten: prepare_data_loader takes a
  // WARN-SAME: map-style dataset and options, with a random or sequential order; this one has its own sampler
  for (auto& batch : *loader)
    step(model, optimizer, batch.data);
}

// Worker threads in the options (libtorch's DCGAN example) are kept: the prepared loader reads ahead on them.
void with_workers(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(
      Points().map(torch::data::transforms::Stack<>()), torch::data::DataLoaderOptions().batch_size(64).workers(2));
  // CHECK: {{^}}  auto loader = accelerator.prepare_data_loader({{$}}
  // CHECK-NEXT: {{^}}      Points().map(torch::data::transforms::Stack<>()), torch::data::DataLoaderOptions().batch_size(64).workers(2));{{$}}
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    model->forward(batch.data).sum().backward();
    optimizer.step();
  }
}

// Sequential, with worker threads: both kept.
void sequential_with_workers(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      Points().map(torch::data::transforms::Stack<>()), torch::data::DataLoaderOptions(32).workers(2));
  // CHECK: {{^}}  auto loader = accelerator.prepare_data_loader(Points().map(torch::data::transforms::Stack<>()), accelerate::DataLoaderOptions(torch::data::DataLoaderOptions(32).workers(2)).shuffle(false));{{$}}
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    model->forward(batch.data).sum().backward();
    optimizer.step();
  }
}
