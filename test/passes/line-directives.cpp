// --line-directives maps the rewritten file back to the original: a compiler's diagnostics in the rewritten
// copy name the original file and line; --depfile lists the files the rewrite read, for the build system.
// RUN: rm -rf %t && mkdir -p %t/out && cp %s %t/train.cpp
// RUN: %accel-rewrite %t/train.cpp --line-directives -o %t/out/train.cpp --depfile %t/train.d -- -std=c++17 -I%S/Inputs
// RUN: FileCheck %s < %t/out/train.cpp
// RUN: not %clang -fsyntax-only -std=c++17 -I%S/Inputs -DMAKE_AN_ERROR %t/out/train.cpp 2>&1 \
// RUN:   | FileCheck %s --check-prefix=ERROR
// RUN: FileCheck %s --check-prefix=DEPS < %t/train.d

#include <torch/torch.h>

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 10; ++step) {
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
#ifdef MAKE_AN_ERROR
    undeclared(loss);
#endif
  }
}

// CHECK:      {{^}}#line 1 "{{.*}}train.cpp"{{$}}
// CHECK:      {{^}}#include <accelerate/accelerate.h>{{$}}
// CHECK-NEXT: {{^}}#line 11 "{{.*}}train.cpp"{{$}}
// CHECK:      {{^}}int main() {{[{]}}{{$}}
// CHECK-NEXT: {{^}}  accelerate::Accelerator accelerator;{{$}}
// CHECK-NEXT: {{^}}#line 13 "{{.*}}train.cpp"{{$}}
// CHECK-NEXT: {{^}}  torch::nn::Linear model(4, 1);{{$}}
// CHECK-NEXT: {{^}}  accelerator.prepare(model);{{$}}
// CHECK-NEXT: {{^}}  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));{{$}}
// CHECK-NEXT: {{^}}#line 15 "{{.*}}train.cpp"{{$}}

// ERROR: train.cpp:20:5: error: use of undeclared identifier 'undeclared'
// ERROR-NOT: out/train.cpp

// DEPS:     {{.*}}out/train.cpp: \
// DEPS-DAG: {{.*}}Inputs/torch/torch.h
// DEPS-DAG: {{.*}}/train.cpp
