// Output that only the main process writes must not run anything the other processes need: a call not known
// to be pure (or an update) inside a guarded output statement is evaluated by every process, through
// accelerator.main_process_stream; printf arguments with one are reported. Pure operands (item(), const
// member functions, accessors, std functions) keep the plain guard.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN \
// RUN:   --implicit-check-not=warning:

#include "datasets.h"

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

double halve_lr(torch::optim::SGD& optimizer);
int count_calls();

int main() {
  auto model = std::make_shared<Net>();
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  std::ofstream log("log.txt");
  int step = 0;
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    auto loss = model->forward(batch.data).sum();
    loss.backward();
    optimizer.step();
    if (step % 10 == 9) std::cout << "lr now " << halve_lr(optimizer) << "\t";
    // CHECK: {{^}}    if (step % 10 == 9) accelerator.main_process_stream(std::cout) << "lr now " << halve_lr(optimizer) << "\t";{{$}}
    std::cout << "step " << ++step << " ";
    // CHECK: {{^}}    accelerator.main_process_stream(std::cout) << "step " << ++step << " ";{{$}}
    log << std::setw(4) << count_calls() << ",";
    // CHECK: {{^}}    accelerator.main_process_stream(log) << std::setw(4) << count_calls() << ",";{{$}}
    std::cout << "loss " << loss.item<float>() << " size " << batch.data.size(0) << " ";
    // CHECK: {{^}}    if (accelerator.is_main_process()) std::cout << "loss " << loss.item<float>() << " size " << batch.data.size(0) << " ";{{$}}
    std::cout << "lr " << optimizer.param_groups()[0].options().get_lr() << " ";
    // CHECK: {{^}}    if (accelerator.is_main_process()) std::cout << "lr " << optimizer.param_groups()[0].options().get_lr() << " ";{{$}}
    std::cout << "halved " << halve_lr(optimizer) << std::endl;
    // CHECK: {{^}}    accelerator.print("halved ", halve_lr(optimizer));{{$}}
    std::printf("%d\n", count_calls());
    // CHECK: {{^}}    std::printf("%d\n", count_calls());{{$}}
    // WARN: output-side-effects.cpp:[[@LINE-2]]:{{[0-9]+}}: warning: output not rewritten: 'count_calls()' may change what the processes compute next {{.*}}Evaluate it into a variable on the line before{{.*}} [main-process]
    std::printf("%d\n", step);
    // CHECK: {{^}}    if (accelerator.is_main_process()) std::printf("%d\n", step);{{$}}
  }
}
