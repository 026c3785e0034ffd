// A data loader of static storage (at namespace scope, or a static member) that a training loop iterates is made
// before main constructs the Accelerator, so it cannot be prepared where it is declared; and the model, the
// optimizer and the loops that use such globals are one training loop spread over the file. The file is left as
// it is, whole, with one warning that names the loader, the loop that trains on it and the fix. A static local
// loader is made when its function first runs, after the Accelerator, and is prepared as a local one is.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs > %t/out.cpp 2> %t/stderr
// RUN: diff %s %t/out.cpp
// RUN: FileCheck %s --check-prefix=WARN --implicit-check-not=warning: < %t/stderr
// RUN: %accel-rewrite %S/Inputs/static_local_loader.cpp -- -std=c++17 -I%S/Inputs | FileCheck %s --check-prefix=LOCAL

#include "datasets.h"

#include <iostream>

namespace shapes {

torch::nn::Linear head(2, 1);

struct Batches {
  static inline auto holdout = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 16);
};

auto points = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
    Points().map(torch::data::transforms::Stack<>()), 8);
// WARN: loader-static.cpp:[[@LINE-2]]:1: warning: data loader 'points' not prepared: it is a variable of static storage, made before main constructs the Accelerator, so prepare_data_loader cannot be called where it is declared, and each process would train on the whole dataset (in its own order when shuffled) instead of its share in the loop of 'fit' (line [[#@LINE+7]]); declare it after {{.*}} (in main or in the function that trains on it), as `auto points = {{.*}}.prepare_data_loader(dataset, options);`, and hand it to the loop; so the training code of file 'loader-static.cpp' is left as it is ({{[0-9]+}} changes not made): a training loop is rewritten whole or not at all [data-loader]
// WARN: loader-static.cpp: 0 changes, 1 not rewritten

} // namespace shapes

double fit(torch::optim::Optimizer& opt) {
  double total = 0;
  for (auto& batch : *shapes::points) {
    opt.zero_grad();
    auto loss = torch::mse_loss(shapes::head->forward(batch.data), batch.target);
    loss.backward();
    opt.step();
    total += loss.item<double>();
  }
  return total;
}

double evaluate() {
  torch::NoGradGuard no_grad;
  double total = 0;
  for (auto& batch : *shapes::Batches::holdout)
    total += torch::mse_loss(shapes::head->forward(batch.data), batch.target).item<double>();
  return total;
}

int main() {
  torch::optim::SGD opt(shapes::head->parameters(), 0.1);
  for (int epoch = 0; epoch < 3; ++epoch)
    std::cout << fit(opt) << " " << evaluate() << std::endl;
}

// LOCAL: {{^}}  static auto loader = accelerator.prepare_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);{{$}}
// LOCAL: {{^}}    accelerator.backward(torch::mse_loss(head->forward(batch.data), batch.target));{{$}}
