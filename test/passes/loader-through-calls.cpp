// A loader built in one function and read by a training loop in another, through parameters of up to three
// calls (templates included), is prepared where it is built. A loader that goes to code the file does not
// show is reported, not taken for an evaluation loader.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN \
// RUN:   --implicit-check-not=warning:

#include "datasets.h"

#include <memory>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

template <typename Model, typename Optimizer, typename Data> void run_epoch(Model& net, Optimizer& opt, Data& xs) {
  for (auto& batch : xs) {
    opt.zero_grad();
    auto loss = net->forward(batch.data).sum();
    loss.backward();
    opt.step();
  }
}

template <typename Model, typename Optimizer, typename Data>
void fit(Model& net, Optimizer& opt, Data& xs, int epochs) {
  for (int epoch = 0; epoch < epochs; ++epoch)
    run_epoch(net, opt, xs);
}

template <typename Data> void train_elsewhere(Data& loader);

int main() {
  auto net = std::make_shared<Net>();
  torch::optim::SGD opt(net->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  // CHECK: {{^}}  auto loader = accelerator.prepare_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);{{$}}
  fit(net, opt, *loader, 3);
  auto other = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  // CHECK: {{^}}  auto other = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);{{$}}
  // WARN: loader-through-calls.cpp:[[@LINE-2]]:{{[0-9]+}}: warning: data loader 'other' not rewritten: no loop of this file is seen to read it{{.*}} [data-loader]
  train_elsewhere(*other);
}
