// When the rewritten text would not compile on a line the rewrite moved down (it inserts lines above it: the
// runtime's #include, the accelerator, a prepare), the error is given at the line of the input file as it is,
// with its line and column in the rewritten text; a line the rewrite left at its number keeps the compiler's
// place (test/passes/safety.cpp). Here a prepared optimizer reaches a function pointer's torch::optim::SGD&,
// which the rewrite cannot retype. Flags after '--', and a compile database naming the file relative to its
// directory, run from elsewhere.
// RUN: rm -rf %t && mkdir -p %t && cp %s %t/input.cpp
// RUN: not %accel-rewrite %t/input.cpp -i -- -std=c++17 -I%S/Inputs > %t/stdout 2> %t/stderr
// RUN: count 0 < %t/stdout
// RUN: diff %s %t/input.cpp
// RUN: FileCheck %s < %t/stderr
// RUN: echo '[{"directory": "%/t", "command": "/usr/bin/c++ -std=c++17 -I%/S/Inputs -o input.o -c input.cpp", "file": "input.cpp"}]' > %t/compile_commands.json
// RUN: cd / && not %accel-rewrite -p %t %t/input.cpp 2> %t/stderr-database
// RUN: FileCheck %s < %t/stderr-database

#include <torch/torch.h>

void (*hook)(torch::optim::SGD&) = nullptr;

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 10; ++step) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
    hook(optimizer);
    // CHECK: input.cpp:[[@LINE-1]]: error: no viable conversion from 'Optimizer' to 'torch::optim::SGD'
    // CHECK-SAME: (line [[#@LINE+2]], column 10 of the rewritten text)
    // CHECK: accel-rewrite: error: the rewritten {{.*}}input.cpp would not compile (diagnostics above, each at
    // CHECK-SAME: its line in the file as it is, with its line and column in the rewritten text where the
  }
}
