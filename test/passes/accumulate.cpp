// The accumulate pass: the innermost loop that runs a training step (a backward pass and an optimizer step)
// gets `auto accumulate = accelerator.accumulate(models...);` as its first statement, in both zero_grad orders,
// with the models the stepped optimizers train.
// A loop that stops on a value each process computes from its own batch is reported (it could hang).
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN \
// RUN:   --implicit-check-not=warning:

#include <torch/torch.h>

#include <memory>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

int main() {
  auto model = std::make_shared<Net>();
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int epoch = 0; epoch < 3; ++epoch) {
    // CHECK:      {{^}}  for (int epoch = 0; epoch < 3; ++epoch) {{[{]}}{{$}}
    // CHECK-NEXT: {{^}}    // CHECK
    for (int i = 0; i < 10; ++i) { // zero_grad first
      // CHECK:      {{^}}    for (int i = 0; i < 10; ++i) { // zero_grad first{{$}}
      // CHECK-NEXT: {{^}}      auto accumulate = accelerator.accumulate(model);{{$}}
      optimizer.zero_grad();
      auto loss = model->forward(torch::randn({4, 2})).sum();
      loss.backward();
      optimizer.step();
    }
    int step = 0;
    while (step++ < 10) {
      // CHECK:      {{^}}    while (step++ < 10) {{[{]}}{{$}}
      // CHECK-NEXT: {{^}}      auto accumulate = accelerator.accumulate(model);{{$}}
      auto loss = model->forward(torch::randn({4, 2})).sum();
      loss.backward();
      optimizer.step();
      optimizer.zero_grad(); // zero_grad last
    }
  }
}

// A GAN: both models, from the optimizers stepped in the loop.
void gan(std::shared_ptr<Net> generator, std::shared_ptr<Net> discriminator) {
  torch::optim::Adam g_optimizer(generator->parameters());
  torch::optim::Adam d_optimizer(discriminator->parameters());
  do {
    // CHECK:      {{^}}  do {{[{]}}{{$}}
    // CHECK-NEXT: {{^}}    auto accumulate = accelerator.accumulate(discriminator, generator);{{$}}
    d_optimizer.zero_grad();
    discriminator->forward(generator->forward(torch::randn({2, 2})).detach()).sum().backward();
    d_optimizer.step();
    g_optimizer.zero_grad();
    discriminator->forward(generator->forward(torch::randn({2, 2}))).sum().backward();
    g_optimizer.step();
  } while (false);
}

// The optimizer is a parameter: the models are those the loop calls forward on.
void by_forward(Net& net, torch::optim::Optimizer& optimizer, std::vector<torch::Tensor> batches) {
  for (auto& batch : batches) {
    // CHECK:      {{^}}  for (auto& batch : batches) {{[{]}}{{$}}
    // CHECK-NEXT: {{^}}    auto accumulate = accelerator.accumulate(net);{{$}}
    optimizer.zero_grad();
    net.forward(batch).sum().backward();
    optimizer.step();
  }
}

// Negative: no step in the loop (an autograd loop), a loop body that is not a block, a step in a helper.
void negatives(Net& net, torch::optim::SGD& optimizer, torch::Tensor x) {
  for (int i = 0; i < 2; ++i) {
    // CHECK:      {{^}}  for (int i = 0; i < 2; ++i) {{[{]}}{{$}}
    // CHECK-NEXT: {{^}}    // CHECK
    net.forward(x).sum().backward();
  }
  for (int i = 0; i < 2; ++i)
    net.forward(x).sum().backward(), optimizer.step();
  // CHECK: {{^}}  for (int i = 0; i < 2; ++i){{$}}
  // CHECK-NEXT: {{^}}    accelerator.backward(net.forward(x).sum()), optimizer.step();{{$}}
}

void stops_on_local_loss(Net& net, torch::optim::SGD& optimizer) {
  for (int step = 0; step < 1000; ++step) {
    optimizer.zero_grad();
    auto loss = net.forward(torch::randn({2, 2})).sum();
    loss.backward();
    optimizer.step();
    float value = loss.item<float>();
    if (step == 10) // A condition every process agrees on.
      break;
    if (value < 1e-3)
      break;
    // WARN: accumulate.cpp:[[@LINE-1]]:7: warning: training loop exit not made safe: it depends on a value each
    // WARN-SAME: process computes from its own batch (a local loss), so processes could stop at different steps
  }
}
