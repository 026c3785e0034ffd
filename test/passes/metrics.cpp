// Sums, counts and means that training code computes over its loader's batches are, after the rewrite, over
// this process's share only: where they are printed, they are reduced over the processes first (sums and
// counts with SUM, means of losses with MEAN). A number computed from them (a ratio) cannot be reduced by kind
// and is reported. Numbers from loaders that are not prepared (evaluation) or from no loader stay as they are.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN \
// RUN:   --implicit-check-not=warning:

#include "datasets.h"

#include <cstdint>
#include <iostream>
#include <memory>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

void train(Net& net, torch::optim::SGD& optimizer, int64_t dataset_size) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  for (int epoch = 0; epoch < 3; ++epoch) {
    double epoch_loss = 0, mean_sum = 0;
    int64_t correct = 0, seen = 0;
    int batches = 0;
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto output = net.forward(batch.data);
      auto loss = output.sum();
      loss.backward();
      optimizer.step();
      epoch_loss += loss.item<double>() * batch.data.size(0);
      mean_sum += loss.item<double>();
      correct += output.argmax(1).eq(batch.target).sum().item<int64_t>();
      seen += batch.data.size(0);
      ++batches;
    }
    std::cout << "epoch " << epoch << " loss " << epoch_loss / dataset_size << " acc " << correct << "/" << seen << std::endl;
    // CHECK: {{^}}    accelerator.print("epoch ", epoch, " loss ", accelerator.reduce(epoch_loss, accelerate::ReduceOp::SUM) / dataset_size, " acc ", accelerator.reduce(correct, accelerate::ReduceOp::SUM), "/", accelerator.reduce(seen, accelerate::ReduceOp::SUM));{{$}}
    std::cerr << "mean " << mean_sum / batches << "\n";
    // CHECK: {{^}}    accelerator.main_process_stream(std::cerr) << "mean " << accelerator.reduce(mean_sum, accelerate::ReduceOp::MEAN) / batches << "\n";{{$}}
    double ratio = epoch_loss / seen;
    std::cout << "ratio " << ratio << std::endl;
    // CHECK: {{^}}    std::cout << "ratio " << ratio << std::endl;{{$}}
    // WARN: metrics.cpp:[[@LINE-2]]:{{[0-9]+}}: warning: output not rewritten: 'ratio' is computed from this process's share of the data{{.*}} [main-process]
  }
}

// An evaluation loader is not prepared: every process evaluates the whole set, its sums are global.
void evaluate(Net& net) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  torch::NoGradGuard no_grad;
  int64_t correct = 0;
  for (auto& batch : *loader)
    correct += net.forward(batch.data).argmax(1).eq(batch.target).sum().item<int64_t>();
  std::cout << "correct " << correct << std::endl;
  // CHECK: {{^}}  accelerator.print("correct ", correct);{{$}}
}

// No loader: every process computes the same numbers.
void full_batch(Net& net, torch::optim::SGD& optimizer, const torch::Tensor& inputs) {
  double total = 0;
  for (int step = 0; step < 10; ++step) {
    optimizer.zero_grad();
    auto loss = net.forward(inputs).sum();
    loss.backward();
    optimizer.step();
    total += loss.item<double>();
  }
  std::cout << "total " << total << std::endl;
  // CHECK: {{^}}  accelerator.print("total ", total);{{$}}
}

// By data flow: in a function that trains on a prepared loader, only numbers that derive from its batches
// are this process's share. A sum over the parameters (alike on every process after prepare), a count over an
// unprepared evaluation loader read in the same function (every process reads all of it) and a constant are
// printed as they are; a number from a tensor the pass cannot follow (a parameter) is still reduced.
void train_and_evaluate(Net& net, torch::optim::SGD& optimizer, const torch::Tensor& scale) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  auto test_loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  double running = 0, weights = 0, scaled = 0;
  int64_t correct = 0, seen = 0;
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    auto loss = net.forward(batch.data).sum();
    loss.backward();
    optimizer.step();
    running += loss.item<double>();
    scaled += scale.sum().item<double>();
  }
  for (const auto& parameter : net.parameters())
    weights += parameter.sum().item<double>();
  for (auto& batch : *test_loader) {
    auto predicted = net.forward(batch.data).argmax(1);
    correct += predicted.eq(batch.target).sum().item<int64_t>();
    seen += batch.data.size(0);
  }
  std::cout << "loss " << running << " weights " << weights << " eval " << correct << "/" << seen << std::endl;
  // CHECK: {{^}}  accelerator.print("loss ", accelerator.reduce(running, accelerate::ReduceOp::MEAN), " weights ", weights, " eval ", correct, "/", seen);{{$}}
  std::cout << "scaled " << scaled << std::endl;
  // CHECK: {{^}}  accelerator.print("scaled ", accelerator.reduce(scaled, accelerate::ReduceOp::SUM));{{$}}
}
