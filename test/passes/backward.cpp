// The backward pass: every at::Tensor::backward call becomes accelerator.backward(tensor, args...), whatever
// the tensor expression and however many arguments are written; other `backward`s are left alone.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs -Wno-unused-value | FileCheck %s
// RUN: %accel-rewrite %s --explain -- -std=c++17 -I%S/Inputs -Wno-unused-value 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=EXPLAIN
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs -Wno-unused-value 2>&1 >/dev/null | FileCheck %s \
// RUN:   --check-prefix=WARN --allow-empty --implicit-check-not=warning:

#include <torch/torch.h>

#include <memory>

void update(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.

struct Scheduler {
  void backward();
};
struct ScaledLoss : torch::Tensor {};

void plain(torch::Tensor loss) {
  loss.backward();
  // CHECK: {{^}}  accelerator.backward(loss);{{$}}
}

void any_name_any_expression(torch::Tensor d_loss_real, torch::Tensor a, torch::Tensor b, torch::Tensor* ptr,
                             std::shared_ptr<torch::Tensor> shared) {
  d_loss_real.backward();
  // CHECK: {{^}}  accelerator.backward(d_loss_real);{{$}}
  (a + b).backward();
  // CHECK: {{^}}  accelerator.backward(a + b);{{$}}
  a.sum().backward();
  // CHECK: {{^}}  accelerator.backward(a.sum());{{$}}
  ptr->backward();
  // CHECK: {{^}}  accelerator.backward(*ptr);{{$}}
  shared->backward();
  // CHECK: {{^}}  accelerator.backward(*shared);{{$}}
  (0, a).backward();
  // CHECK: {{^}}  accelerator.backward((0, a));{{$}}
}

void arguments_kept_as_written(torch::Tensor loss, torch::Tensor grad) {
  loss.backward(grad, true);
  // CHECK: {{^}}  accelerator.backward(loss, grad, true);{{$}}
  loss.backward(torch::ones_like(loss), /*retain_graph=*/std::nullopt, /*create_graph=*/false);
  // CHECK: {{^}}  accelerator.backward(loss, torch::ones_like(loss), /*retain_graph=*/std::nullopt, /*create_graph=*/false);{{$}}
  loss.backward(
      grad);
  // CHECK: {{^}}  accelerator.backward(loss,{{$}}
  // CHECK-NEXT: {{^}}      grad);{{$}}
}

void derived_and_aliased(ScaledLoss scaled, torch::autograd::Variable variable) {
  scaled.backward();
  // CHECK: {{^}}  accelerator.backward(scaled);{{$}}
  variable.backward();
  // CHECK: {{^}}  accelerator.backward(variable);{{$}}
}

void in_a_lambda(torch::Tensor loss) {
  auto step = [&] { loss.backward(); };
  // CHECK: {{^}}  auto step = [&] { accelerator.backward(loss); };{{$}}
  step();
}

template <class Scalar> void non_dependent_in_template(Scalar) {
  torch::Tensor loss;
  loss.backward();
  // CHECK: {{^}}  accelerator.backward(loss);{{$}}
}
template void non_dependent_in_template(int);
template void non_dependent_in_template(double);

// torch::autograd::backward of a braced list, with no other argument, computes the gradients of the sum of its
// one-element tensors; given gradients, it is left alone with a warning.
void autograd_lists(torch::Tensor loss, torch::Tensor aux, torch::Tensor grad) {
  torch::autograd::backward({loss});
  // CHECK: {{^}}  accelerator.backward(loss);{{$}}
  torch::autograd::backward({loss, aux / 10, aux.sum()});
  // CHECK: {{^}}  accelerator.backward(loss + (aux / 10) + aux.sum());{{$}}
  torch::autograd::backward({loss}, {grad});
  // WARN: backward.cpp:[[@LINE-1]]:3: warning: torch::autograd::backward not rewritten: it is given gradients
  // CHECK: {{^}}  torch::autograd::backward({loss}, {grad});{{$}}
}

// Negative: code the pass must leave alone.
void not_a_tensor(Scheduler scheduler) {
  scheduler.backward();
  // CHECK: {{^}}  scheduler.backward();{{$}}
}

// A call whose tensor type depends on a template parameter is left alone, with a warning (once, however many
// instantiations there are).
template <class T> void dependent(T& loss) { loss.backward(); }
// WARN: backward.cpp:[[@LINE-1]]:46: warning: backward call in a template not rewritten: the tensor's type
// WARN-SAME: depends on a template parameter
// CHECK: {{^}}template <class T> void dependent(T& loss) { loss.backward(); }{{$}}
void instantiate(torch::Tensor loss, Scheduler scheduler) {
  dependent(loss);
  dependent(scheduler);
  dependent<const torch::Tensor>(loss);
}

// EXPLAIN: backward.cpp:{{[0-9]+}}:3: note: [backward] 'loss.backward()' -> 'accelerator.backward(loss)':
// EXPLAIN-SAME: accelerator.backward() runs the backward pass and also scales the loss for mixed precision
// EXPLAIN: backward.cpp:{{[0-9]+}}:3: note: [backward] '(a + b).backward()' -> 'accelerator.backward(a + b)'
// EXPLAIN: backward.cpp:{{[0-9]+}}:3: note: [backward] 'loss.backward( grad)' -> 'accelerator.backward(loss, grad)'
// EXPLAIN: accel-rewrite: {{.*}}backward.cpp: {{[0-9]+}} changes, 2 not rewritten
