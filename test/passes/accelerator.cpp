// The accelerator pass: `accelerator` is declared first in each function the rewrite makes use it (once), and
// <accelerate/accelerate.h> goes after the file's includes. main constructs it; other functions of a file with
// main reach it with Accelerator::current(); in a file without main, the function no other function of the file
// calls constructs it. Nothing is added when the file already has an accelerator.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s --explain -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=EXPLAIN
//
// A file that already declares an accelerator gets no second one, and no second include:
// RUN: %accel-rewrite %S/Inputs/has_accelerator.cpp -- -std=c++17 -I%S/Inputs > %t/has_accelerator.cpp
// RUN: FileCheck %s --check-prefix=EXISTING < %t/has_accelerator.cpp
// RUN: %accel-rewrite %S/Inputs/accelerator_parameter.cpp -- -std=c++17 -I%S/Inputs \
// RUN:   | FileCheck %s --check-prefix=PARAMETER
// RUN: %accel-rewrite %S/Inputs/uses_accelerator.cpp -- -std=c++17 -I%S/Inputs \
// RUN:   | FileCheck %s --check-prefix=USES --implicit-check-not='accelerate::Accelerator accelerator;'
//
// Without main:
// RUN: %accel-rewrite %S/Inputs/no_main.cpp --explain -- -std=c++17 -I%S/Inputs 2>%t/no_main.explain \
// RUN:   | FileCheck %s --check-prefix=NO-MAIN
// RUN: FileCheck %s --check-prefix=NO-MAIN-EXPLAIN < %t/no_main.explain

#include <torch/torch.h>
#include <vector>
// CHECK:      {{^}}#include <torch/torch.h>{{$}}
// CHECK-NEXT: {{^}}#include <vector>{{$}}
// CHECK-NEXT: {{^}}#include <accelerate/accelerate.h>{{$}}

// A helper that never calls backward gets nothing.
torch::Tensor forward(torch::nn::Linear& model, const torch::Tensor& x) { return model->forward(x); }
// CHECK: {{^}}torch::Tensor forward(torch::nn::Linear& model, const torch::Tensor& x) { return model->forward(x); }{{$}}

void train_step(torch::Tensor loss) { loss.backward(); }
// CHECK: {{^}}void train_step(torch::Tensor loss) { auto& accelerator = accelerate::Accelerator::current(); accelerator.backward(loss); }{{$}}
// EXPLAIN: accelerator.cpp:[[@LINE-2]]:{{[0-9]+}}: note: [accelerator] inserted 'auto& accelerator =
// EXPLAIN-SAME: accelerate::Accelerator::current();'; added #include <accelerate/accelerate.h>: one
// EXPLAIN-SAME: accelerate::Accelerator holds the process group, device and precision settings that the rewritten
// EXPLAIN-SAME: calls use; 'train_step' reaches the one main declared through accelerate::Accelerator::current()

// The declaration is indented like the line below the brace, blank lines and tabs included.
void tab_indented(torch::Tensor loss)
{

	loss.backward();
}
// CHECK:      {{^}}void tab_indented(torch::Tensor loss){{$}}
// CHECK-NEXT: {{^[{]$}}
// CHECK-NEXT: {{^}}	auto& accelerator = accelerate::Accelerator::current();{{$}}
// CHECK-EMPTY:
// CHECK-NEXT: {{^}}	accelerator.backward(loss);{{$}}

int main() { // Entry point.
  // The model.
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int epoch = 0; epoch < 2; ++epoch) {
    torch::Tensor loss = forward(model, torch::randn({8, 4})).sum();
    optimizer.zero_grad();
    loss.backward();
    loss.backward();
    optimizer.step();
  }
}
// CHECK:      {{^}}int main() { // Entry point.{{$}}
// CHECK-NEXT: {{^}}  accelerate::Accelerator accelerator;{{$}}
// CHECK-NEXT: {{^}}  // The model.{{$}}
// CHECK-NEXT: {{^}}  torch::nn::Linear model(4, 1);{{$}}
// CHECK-NOT:  accelerate::Accelerator accelerator;
// CHECK:      {{^}}    accelerator.backward(loss);{{$}}
// CHECK-NEXT: {{^}}    accelerator.backward(loss);{{$}}
// EXPLAIN: accelerator.cpp:{{[0-9]+}}:{{[0-9]+}}: note: [accelerator] {{.*}} it is declared at the top of main,
// EXPLAIN-SAME: where training starts{{$}}

// EXISTING:     {{^}}#include <accelerate/accelerate.h>{{$}}
// EXISTING-NOT: #include <accelerate/accelerate.h>
// EXISTING:     {{^}}accelerate::Accelerator accelerator;{{$}}
// EXISTING-NOT: accelerate::Accelerator accelerator;
// EXISTING:     {{^}}  accelerator.backward(loss);{{$}}
// EXISTING-NOT: accelerate::Accelerator accelerator;

// PARAMETER:     {{^}}void step(accelerate::Accelerator& accelerator, torch::Tensor loss) {{[{]}}{{$}}
// PARAMETER-NEXT: {{^}}  accelerator.backward(loss);{{$}}

// USES:      {{^}}int main() {{[{]}}{{$}}
// USES-NEXT: {{^}}  evaluate(accelerator);{{$}}
// USES-NEXT: {{^}}  torch::Tensor loss;{{$}}
// USES-NEXT: {{^}}  accelerator.backward(loss);{{$}}

// NO-MAIN:      {{^}}void step(torch::optim::SGD& optimizer, torch::Tensor loss) {{[{]}}{{$}}
// NO-MAIN-NEXT: {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
// NO-MAIN:      {{^}}void train(torch::nn::Linear& model, torch::optim::SGD& optimizer) {{[{]}}{{$}}
// NO-MAIN-NEXT: {{^}}  accelerate::Accelerator accelerator;{{$}}
// NO-MAIN-EXPLAIN: no_main.cpp:4:{{[0-9]+}}: note: [accelerator] {{.*}} 'step' reaches the one its caller declared
// NO-MAIN-EXPLAIN-SAME: through accelerate::Accelerator::current()
// NO-MAIN-EXPLAIN: no_main.cpp:9:{{[0-9]+}}: note: [accelerator] {{.*}} this file has no main, and no function of it
// NO-MAIN-EXPLAIN-SAME: calls 'train', so it is declared at the top of 'train'
