// The profile pass, switched on by --profile: each training run runs under accelerator.profile() (libtorch's
// profiler), declared before the loop, stepped right after each optimizer step (inside the `if` that guards it,
// which gets braces when it has none) and stopped after the loop; a loop where the profiler cannot go is reported
// with the code to write by hand.
// RUN: %accel-rewrite %s --profile -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s --profile -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=WARN --implicit-check-not=warning:
//
// Without --profile the pass does not run, and nothing of it shows:
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s --check-prefix=PLAIN
// PLAIN-NOT: {{^ *[^/ ].*(accelerator[.]profile|profiler[.](step|stop))}}
//
// A second run on the output changes nothing:
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s --profile -- -std=c++17 -I%S/Inputs > %t/once.cpp 2>/dev/null
// RUN: %accel-rewrite %t/once.cpp --profile --check -- -std=c++17 -I%S/Inputs
//
// --explain says what the pass does:
// RUN: %accel-rewrite %s --profile --explain -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=EXPLAIN
// EXPLAIN: the training loop runs under libtorch's profiler (accelerator.profile(), 'profiler'), stepped right after each optimizer step and stopped after the loop, which writes each process's Chrome trace to <profile_trace_dir>/profile_<process_index>.json
//
// Bad input: the pass without --profile, or --profile with the pass disabled.
// RUN: not %accel-rewrite %s --enable=profile -- -std=c++17 -I%S/Inputs 2>&1 | FileCheck %s --check-prefix=NEEDS
// NEEDS: accel-rewrite: the profile pass needs --profile (it adds the profiler only when asked to)
// RUN: not %accel-rewrite %s --profile --disable=profile -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=DISABLED
// DISABLED: accel-rewrite: --profile needs the profile pass, and --disable=profile leaves it out; drop one of them

#include "datasets.h"

#include <iostream>

// One pass over a loader: the profiler steps right after the optimizer step, and stops after the loop.
// CHECK-LABEL: {{^}}void one_pass(
// CHECK:       {{^}}  auto profiler = accelerator.profile();{{$}}
// CHECK-NEXT:  {{^}}  for (auto& batch : *loader) {{[{]}}{{$}}
// CHECK:       {{^}}    optimizer.step();{{$}}
// CHECK-NEXT:  {{^}}    profiler.step();{{$}}
// CHECK-NEXT:  {{^}}    accelerator.print("stepped");{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  profiler.stop();{{$}}
void one_pass(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    model->forward(batch.data).sum().backward();
    optimizer.step();
    std::cout << "stepped" << std::endl;
  }
}

// An epoch loop around the loader loop, whose optimizer steps every fourth batch under an `if` without braces:
// the profiler goes around the epoch loop (the run) and steps with the optimizer, inside the `if`, which gets
// braces. A variable already named `profiler` keeps its name; the profiler takes another.
// CHECK-LABEL: {{^}}void epochs(
// CHECK:       {{^}}  auto train_profiler = accelerator.profile();{{$}}
// CHECK-NEXT:  {{^}}  for (int epoch = 0; epoch < 3; ++epoch) {{[{]}}{{$}}
// CHECK:       {{^}}      if ((i + 1) % 4 == 0) {{[{]}}{{$}}
// CHECK-NEXT:  {{^}}        optimizer.step();{{$}}
// CHECK-NEXT:  {{^}}        train_profiler.step();{{$}}
// CHECK-NEXT:  {{^}}      }{{$}}
// CHECK:       {{^}}    profiler += i;{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  train_profiler.stop();{{$}}
void epochs(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  int profiler = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    int i = 0;
    for (auto& batch : *loader) {
      model->forward(batch.data).sum().backward();
      if ((i + 1) % 4 == 0)
        optimizer.step();
      ++i;
    }
    profiler += i;
  }
  std::cout << profiler << std::endl;
}

void train_step(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  optimizer.zero_grad();
  model->forward(torch::randn({8, 4})).sum().backward();
  optimizer.step();
}

// The optimizer steps in a function the loop calls: the profiler steps after that call. Two runs in one
// function: the second profiler gets a name of its own.
// CHECK-LABEL: {{^}}void called_step(
// CHECK:       {{^}}  auto profiler = accelerator.profile();{{$}}
// CHECK-NEXT:  {{^}}  for (int64_t i = 0; i < n; ++i) {{[{]}}{{$}}
// CHECK-NEXT:  {{^}}    train_step(model, optimizer);{{$}}
// CHECK-NEXT:  {{^}}    profiler.step();{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  profiler.stop();{{$}}
// CHECK-NEXT:  {{^}}  auto train_profiler = accelerator.profile();{{$}}
// CHECK-NEXT:  {{^}}  for (int64_t i = 0; i < n; ++i) {{[{]}}{{$}}
// CHECK-NEXT:  {{^}}    train_step(model, optimizer);{{$}}
// CHECK-NEXT:  {{^}}    train_profiler.step();{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  train_profiler.stop();{{$}}
void called_step(torch::nn::Linear& model, torch::optim::SGD& optimizer, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    train_step(model, optimizer);
  }
  for (int64_t i = 0; i < n; ++i) {
    train_step(model, optimizer);
  }
}

// A loop the profiler cannot go beside: reported, left as it is.
// CHECK-LABEL: {{^}}int main(
// CHECK-NOT:   {{profiler}}
// WARN: profile.cpp:[[@LINE+5]]:5: warning: profiler not added: this training loop is the body of an if or a loop written without braces, where the profiler's declaration cannot go beside it; put it in braces { ... } and run again; or write it by hand: 'auto profiler = accelerator.profile();' before the loop, 'profiler.step();' after each optimizer step and 'profiler.stop();' after the loop [profile]
int main(int argc, char** argv) {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  if (argc > 1)
    for (int64_t i = 0; i < 10; ++i) {
      optimizer.zero_grad();
      model->forward(torch::randn({8, 4})).sum().backward();
      optimizer.step();
    }
  one_pass(model, optimizer);
  epochs(model, optimizer);
  called_step(model, optimizer, 4);
  return 0;
}
