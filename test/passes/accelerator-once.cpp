// One accelerator per process. In a file without main, only the function where training starts constructs
// it: a function that another function of the file calls, passes on as a callback, or names in a template
// (a call that is still dependent) reaches that one through Accelerator::current(), instead of constructing
// a second accelerator whose prepared models would be none.
// RUN: %accel-rewrite %s --passes=backward,accelerator -- -std=c++17 -I%S/Inputs | FileCheck %s

#include "datasets.h"

#include <functional>
#include <memory>
#include <vector>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

void run_epoch(std::shared_ptr<Net>& net, torch::optim::SGD& opt, std::vector<torch::Tensor>& xs) {
  // CHECK:      {{^}}void run_epoch(std::shared_ptr<Net>& net, torch::optim::SGD& opt, std::vector<torch::Tensor>& xs) {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
  for (auto& x : xs) {
    opt.zero_grad();
    auto loss = net->forward(x).sum();
    loss.backward();
    opt.step();
  }
}

// Passes run_epoch on as a callback: run_epoch runs inside it.
void fit(std::shared_ptr<Net>& net, std::vector<torch::Tensor>& xs, int epochs) {
  // CHECK:      {{^}}void fit(std::shared_ptr<Net>& net, std::vector<torch::Tensor>& xs, int epochs) {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}  accelerate::Accelerator accelerator;{{$}}
  torch::optim::SGD opt(net->parameters(), 0.1);
  std::function<void(std::shared_ptr<Net>&, torch::optim::SGD&, std::vector<torch::Tensor>&)> epoch = run_epoch;
  for (int i = 0; i < epochs; ++i)
    epoch(net, opt, xs);
}

torch::Tensor train_step(Net& net, torch::optim::SGD& opt, const torch::Tensor& x) {
  // CHECK:      {{^}}torch::Tensor train_step(Net& net, torch::optim::SGD& opt, const torch::Tensor& x) {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
  opt.zero_grad();
  auto loss = net.forward(x).sum();
  loss.backward();
  opt.step();
  return loss;
}

// Calls train_step with a dependent argument: the call stays unresolved in the template.
template <typename Data> void train_all(Net& net, torch::optim::SGD& opt, const Data& data) {
  // CHECK:      {{^}}template <typename Data> void train_all(Net& net, torch::optim::SGD& opt, const Data& data) {{[{]}}{{$}}
  // CHECK-NEXT: {{^}}  accelerate::Accelerator accelerator;{{$}}
  for (const auto& x : data)
    train_step(net, opt, x);
}
