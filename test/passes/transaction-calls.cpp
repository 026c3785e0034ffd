// A training loop spread over calls is rewritten whole or not at all: a refusal in one function withdraws the
// changes of the code that shares its objects with it (the caller that prepared what it trains, the callees
// that use what it prepared, and so on both ways), and the refusal names that code. Code that shares nothing
// with it (a function called with numbers only, over objects of its own) is rewritten as before.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs > %t/out.cpp 2> %t/stderr
// RUN: diff %s %t/out.cpp
// RUN: FileCheck %s --check-prefix=WARN --implicit-check-not=warning: < %t/stderr
// RUN: %accel-rewrite %S/Inputs/refused_in_caller.cpp -- -std=c++17 -I%S/Inputs > %t/caller.cpp 2> %t/caller.err
// RUN: diff %S/Inputs/refused_in_caller.cpp %t/caller.cpp
// RUN: FileCheck %s --check-prefix=CALLER --implicit-check-not=warning: < %t/caller.err
// RUN: %accel-rewrite %S/Inputs/refused_apart.cpp -- -std=c++17 -I%S/Inputs > %t/apart.cpp 2> %t/apart.err
// RUN: FileCheck %s --check-prefix=APART --input-file %t/apart.cpp
// RUN: FileCheck %s --check-prefix=APART-WARN --implicit-check-not=warning: < %t/apart.err
// RUN: %accel-rewrite %S/Inputs/refused_in_method.cpp -- -std=c++17 -I%S/Inputs > %t/method.cpp 2> %t/method.err
// RUN: diff %S/Inputs/refused_in_method.cpp %t/method.cpp
// RUN: FileCheck %s --check-prefix=METHOD --implicit-check-not=warning: < %t/method.err
// RUN: %accel-rewrite %S/Inputs/refused_one_of_two.cpp -- -std=c++17 -I%S/Inputs > %t/two.cpp 2> %t/two.err
// RUN: FileCheck %s --check-prefix=TWO --input-file %t/two.cpp
// RUN: FileCheck %s --check-prefix=TWO-WARN --implicit-check-not=warning: < %t/two.err

#include "datasets.h"

#include <iostream>
#include <memory>

struct Net : torch::nn::Module {
  Net() : fc(register_module("fc", torch::nn::Linear(2, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return fc->forward(x); }
  torch::nn::Linear fc;
};

// The refused object is in the helper; the model, the optimizer and the loader it trains are made in main.
template <typename Loader> double train(Net& net, torch::optim::Optimizer& opt, Loader& loader, torch::Device device) {
  auto scale = torch::randn({1});
  torch::optim::SGD extra({scale}, 0.01);
  // WARN: transaction-calls.cpp:[[@LINE-1]]:3: warning: optimizer 'extra' not prepared: its constructor takes no model's parameters(){{.*}}; so the training code of function 'train' is left as it is, with the code that shares its objects (function 'main') ({{[0-9]+}} changes not made): a training loop is rewritten whole or not at all [prepare]
  double total = 0;
  for (auto& batch : loader) {
    opt.zero_grad();
    extra.zero_grad();
    torch::Tensor loss = torch::mse_loss(net.forward(batch.data.to(device)) * scale, batch.target.to(device));
    loss.backward();
    opt.step();
    extra.step();
    total += loss.item<double>();
  }
  return total;
}

int main() {
  torch::Device device(torch::kCPU);
  auto net = std::make_shared<Net>();
  net->to(device);
  torch::optim::SGD opt(net->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  for (int epoch = 0; epoch < 3; ++epoch)
    std::cout << train(*net, opt, *loader, device) << std::endl;
}
// WARN: transaction-calls.cpp: 0 changes, 1 not rewritten

// CALLER: refused_in_caller.cpp:{{[0-9]+}}:3: warning: optimizer 'extra' not prepared{{.*}}; so the training code of function 'main' is left as it is, with the code that shares its objects (function 'run_epoch') ({{[0-9]+}} changes not made): a training loop is rewritten whole or not at all [prepare]
// CALLER: refused_in_caller.cpp: 0 changes, 1 not rewritten

// APART: {{^}}double finetune() {{{$}}
// APART: {{^}}  accelerator.prepare(net);{{$}}
// APART: {{^}}  auto opt = accelerator.prepare(torch::optim::SGD(net->parameters(), 0.1));{{$}}
// APART: {{^}}    accelerator.backward(loss);{{$}}
// APART-WARN: refused_apart.cpp:{{[0-9]+}}:3: warning: optimizer 'extra' not prepared{{.*}}; so the training code of function 'pretrain' is left as it is ({{[0-9]+}} changes not made): a training loop is rewritten whole or not at all [prepare]

// METHOD: refused_in_method.cpp:{{[0-9]+}}:5: warning: optimizer 'extra' not prepared{{.*}}; so the training code of function 'fit' is left as it is, with the code that shares its objects ({{.*}}function 'main'{{.*}}) ({{[0-9]+}} changes not made): a training loop is rewritten whole or not at all [prepare]
// METHOD: refused_in_method.cpp: 0 changes, 1 not rewritten

// In main, the statements that made the helper's objects stay as they are; the loop over objects of its own
// is rewritten, and main keeps the accelerator.
// TWO:      {{^}}int main() {{{$}}
// TWO-NEXT: {{^}}  accelerate::Accelerator accelerator;{{$}}
// TWO-NEXT: {{^}}  torch::nn::Linear a(2, 1);{{$}}
// TWO-NEXT: {{^}}  torch::optim::SGD opt_a(a->parameters(), 0.1);{{$}}
// TWO-NEXT: {{^}}  auto loader_a = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);{{$}}
// TWO-NEXT: {{^}}  std::cout << train_a(a, opt_a, *loader_a) << std::endl;{{$}}
// TWO:      {{^}}  accelerator.prepare(b);{{$}}
// TWO-NEXT: {{^}}  auto opt_b = accelerator.prepare(torch::optim::SGD(b->parameters(), 0.1));{{$}}
// TWO-NEXT: {{^}}  auto loader_b = accelerator.prepare_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);{{$}}
// TWO:      {{^}}    accelerator.backward(torch::mse_loss(b->forward(batch.data), batch.target));{{$}}
// TWO-WARN: refused_one_of_two.cpp:{{[0-9]+}}:3: warning: optimizer 'extra' not prepared{{.*}}; so the training code of function 'train_a' is left as it is, with the code that shares its objects (function 'main') ({{[0-9]+}} changes not made): a training loop is rewritten whole or not at all [prepare]
// TWO-WARN: refused_one_of_two.cpp: 5 changes, 1 not rewritten
