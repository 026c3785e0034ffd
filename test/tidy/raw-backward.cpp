// accelerate-raw-backward: a raw backward of a loss computed from a prepared model skips the accelerator;
// the fix calls the accelerator that prepared the model (its arguments kept), and a loss of a model nobody
// prepared is left alone.
// RUN: rm -rf %t && mkdir -p %t && cp %s %t/train.cpp
// RUN: %tidy -checks=-*,accelerate-raw-backward %t/train.cpp -- -std=c++17 -I%passes_inputs 2>&1 \
// RUN:   | FileCheck %s --implicit-check-not=warning:
// RUN: %tidy -checks=-*,accelerate-raw-backward --fix --format-style=none %t/train.cpp -- -std=c++17 \
// RUN:   -I%passes_inputs > %t/fix.log 2>&1
// RUN: FileCheck %s --check-prefix=FIXED --input-file=%t/train.cpp
// Fixed, only the backward of two losses at once is left.
// RUN: %tidy -checks=-*,accelerate-raw-backward %t/train.cpp -- -std=c++17 -I%passes_inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=AGAIN --implicit-check-not=warning:

#include <accelerate/accelerate.h>
#include <torch/torch.h>

torch::Tensor step_loss(torch::nn::Linear& net, const torch::Tensor& x) { return net->forward(x).sum(); }

void train(torch::nn::Linear& net, accelerate::Optimizer& optimizer) {
  auto out = net->forward(torch::randn({8, 4}));
  auto loss = out.mean();
  loss.backward();
  // CHECK: train.cpp:[[@LINE-1]]:3: warning: a raw backward of a loss computed from 'net', a model accelerator.prepare prepared, skips the accelerator: with more than one process the gradients are never synchronised {{.*}}; call accelerate::Accelerator::current().backward(loss) instead [accelerate-raw-backward]
  // FIXED: {{^ *}}accelerate::Accelerator::current().backward(loss);
  optimizer.step();
}

int main() {
  accelerate::Accelerator accelerator;
  torch::nn::Linear model(4, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  torch::nn::Linear teacher(4, 1); // never prepared: its losses are its own business
  for (int step = 0; step < 10; ++step) {
    optimizer.zero_grad();
    auto prediction = model->forward(torch::randn({8, 4}));
    torch::Tensor loss;
    loss = torch::mse_loss(prediction, torch::zeros({8, 1}));
    loss.backward(torch::Tensor(), true);
    // CHECK: train.cpp:[[@LINE-1]]:5: warning: {{.*}} computed from 'model'{{.*}}; call accelerator.backward(loss, torch::Tensor(), true) instead
    // FIXED: {{^ *}}accelerator.backward(loss, torch::Tensor(), true);
    auto* pointer = &loss;
    pointer->backward();
    // CHECK: train.cpp:[[@LINE-1]]:5: warning: {{.*}}; call accelerator.backward(*pointer) instead
    // FIXED: {{^ *}}accelerator.backward(*pointer);
    step_loss(model, torch::randn({8, 4})).backward();
    // CHECK: train.cpp:[[@LINE-1]]:5: warning: {{.*}}; call accelerator.backward(step_loss(model, torch::randn({8, 4}))) instead
    // FIXED: {{^ *}}accelerator.backward(step_loss(model, torch::randn({8, 4})));
    torch::autograd::backward({loss});
    // CHECK: train.cpp:[[@LINE-1]]:5: warning: {{.*}}; call accelerator.backward(loss) instead
    // FIXED: {{^ *}}accelerator.backward(loss);
    torch::autograd::backward({loss, prediction.sum()});
    // CHECK: train.cpp:[[@LINE-1]]:5: warning: {{.*}}; call accelerator.backward(loss, gradient, retain_graph) for each loss instead
    // AGAIN: train.cpp:[[@LINE-2]]:5: warning: {{.*}} for each loss instead
    // FIXED: {{^ *}}torch::autograd::backward({loss, prediction.sum()});
    accelerator.backward(loss);
    teacher->forward(torch::randn({8, 4})).sum().backward();
    // FIXED: {{^ *}}teacher->forward(torch::randn({8, 4})).sum().backward();
    optimizer.step();
  }
  train(model, optimizer);
}
