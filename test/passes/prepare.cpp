// The prepare pass: optimizers and schedulers are declared through accelerator.prepare(...), and the models an
// optimizer trains are prepared (in place) right before it, once.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN \
// RUN:   --implicit-check-not=warning:
//
// A global optimizer stays libtorch's; its global model is prepared at the start of main:
// RUN: %accel-rewrite %S/Inputs/globals.cpp -- -std=c++17 -I%S/Inputs | FileCheck %s --check-prefix=GLOBAL
// GLOBAL:      {{^}}torch::optim::SGD optimizer(net->parameters(), 0.01);{{$}}
// GLOBAL:      {{^}}void train() {{[{]}}{{$}}
// GLOBAL-NEXT: {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
// GLOBAL:      {{^}}    accelerator.backward(net->forward(torch::randn({2, 4})).sum());{{$}}
// GLOBAL:      {{^}}int main() {{[{]}}{{$}}
// GLOBAL-NEXT: {{^}}  accelerate::Accelerator accelerator;{{$}}
// GLOBAL-NEXT: {{^}}  accelerator.prepare(net);{{$}}
// GLOBAL-NEXT: {{^}}  train();{{$}}

#include "datasets.h"

#include <torch/torch.h>

#include <memory>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

void by_value(torch::nn::Linear model) {
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  // CHECK:      {{^}}  accelerator.prepare(model);{{$}}
  // CHECK-NEXT: {{^}}  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.1)));{{$}}
  optimizer.step();
}

void by_pointer() {
  auto net = std::make_shared<Net>();
  auto optimizer = std::make_shared<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(1e-3));
  // CHECK:      {{^}}  accelerator.prepare(net);{{$}}
  // CHECK-NEXT: {{^}}  auto optimizer = accelerator.prepare(torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(1e-3)));{{$}}
  optimizer->step();
  // CHECK: {{^}}  optimizer->step();{{$}}
}

// A module object (not a holder) and a raw pointer to one; braces instead of parentheses.
void objects(Net& net, Net* other) {
  torch::optim::SGD first{net.parameters(), 0.1};
  // CHECK:      {{^}}  accelerator.prepare(net);{{$}}
  // CHECK-NEXT: {{^}}  auto first = accelerator.prepare(torch::optim::SGD{net.parameters(), 0.1});{{$}}
  torch::optim::SGD second = torch::optim::SGD(other->parameters(), 0.1);
  // CHECK:      {{^}}  accelerator.prepare(*other);{{$}}
  // CHECK-NEXT: {{^}}  auto second = accelerator.prepare(torch::optim::SGD(other->parameters(), 0.1));{{$}}
}

// A GAN: two models, two optimizers, each model prepared before its own optimizer.
void gan(std::shared_ptr<Net> generator, std::shared_ptr<Net> discriminator) {
  torch::optim::Adam g_optimizer(generator->parameters(), torch::optim::AdamOptions(2e-4));
  torch::optim::Adam d_optimizer(discriminator->parameters(), torch::optim::AdamOptions(2e-4));
  // CHECK:      {{^}}  accelerator.prepare(generator);{{$}}
  // CHECK-NEXT: {{^}}  auto g_optimizer = accelerator.prepare(torch::optim::Adam(generator->parameters(), torch::optim::AdamOptions(2e-4)));{{$}}
  // CHECK-NEXT: {{^}}  accelerator.prepare(discriminator);{{$}}
  // CHECK-NEXT: {{^}}  auto d_optimizer = accelerator.prepare(torch::optim::Adam(discriminator->parameters(), torch::optim::AdamOptions(2e-4)));{{$}}
}

// One model, two optimizers: prepared once, before the first.
void two_optimizers(torch::nn::Linear model) {
  torch::optim::SGD slow(model->parameters(), 0.01);
  torch::optim::SGD fast(model->parameters(), 0.1);
  // CHECK:      {{^}}  accelerator.prepare(model);{{$}}
  // CHECK-NEXT: {{^}}  auto slow = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.01));{{$}}
  // CHECK-NEXT: {{^}}  auto fast = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));{{$}}
}

// A scheduler over a prepared optimizer, by value; `*optimizer` for one held by pointer.
void schedulers(torch::nn::Linear model) {
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  torch::optim::StepLR scheduler(optimizer, 10, 0.5);
  // CHECK: {{^}}  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, 10, 0.5));{{$}}
  scheduler.step();
  auto adam = std::make_shared<torch::optim::Adam>(model->parameters());
  auto decay = std::make_shared<torch::optim::StepLR>(*adam, 5);
  // CHECK: {{^}}  auto decay = accelerator.prepare(torch::optim::StepLR(*adam, 5));{{$}}
  decay->step();
}

// Negative: an optimizer over loose tensors is reported and left alone (no model to synchronise).
void loose_tensors(torch::Tensor w, torch::Tensor b) {
  torch::optim::SGD optimizer({w, b}, 0.1);
  // CHECK: {{^}}  torch::optim::SGD optimizer({w, b}, 0.1);{{$}}
  // WARN: prepare.cpp:[[@LINE-2]]:3: warning: optimizer 'optimizer' not prepared: its constructor takes no model's
  // WARN-SAME: parameters() {{.*}}[prepare]
}

// Negative: references and pointers to optimizers made elsewhere stay as they are.
void elsewhere(torch::optim::Optimizer& optimizer, std::shared_ptr<torch::optim::Optimizer> shared) {
  optimizer.step();
  shared->step();
  // CHECK: {{^}}  optimizer.step();{{$}}
  // CHECK: {{^}}  shared->step();{{$}}
}

// An optimizer assigned to a pointer, one per branch: its model is prepared before each assignment; the
// optimizer stays libtorch's.
void assigned(torch::nn::Linear net, bool use_adam) {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (use_adam) {
    optimizer = std::make_unique<torch::optim::Adam>(net->parameters());
    // CHECK:      {{^}}    accelerator.prepare(net);{{$}}
    // CHECK-NEXT: {{^}}    optimizer = std::make_unique<torch::optim::Adam>(net->parameters());{{$}}
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(net->parameters(), 0.1);
    // CHECK:      {{^}}    accelerator.prepare(net);{{$}}
    // CHECK-NEXT: {{^}}    optimizer = std::make_unique<torch::optim::SGD>(net->parameters(), 0.1);{{$}}
  }
  optimizer->step();
}

// Frozen parameters: the optimizer takes a vector filled from the model's parameters.
void frozen(torch::nn::Linear net) {
  std::vector<torch::Tensor> trainable;
  for (auto& p : net->parameters())
    if (p.defined())
      trainable.push_back(p);
  torch::optim::Adam optimizer(trainable);
  // CHECK:      {{^}}  accelerator.prepare(net);{{$}}
  // CHECK-NEXT: {{^}}  auto optimizer = accelerator.prepare(torch::optim::Adam(trainable));{{$}}
}

// Parameters of several models gathered in one vector: from its initializer and by an insert of another
// model's.
void gathered(torch::nn::Linear encoder, torch::nn::Linear head) {
  std::vector<torch::Tensor> params = encoder->parameters();
  auto more = head->parameters();
  params.insert(params.end(), more.begin(), more.end());
  torch::optim::Adam optimizer(params);
  // CHECK:      {{^}}  accelerator.prepare(encoder);{{$}}
  // CHECK-NEXT: {{^}}  accelerator.prepare(head);{{$}}
  // CHECK-NEXT: {{^}}  auto optimizer = accelerator.prepare(torch::optim::Adam(params));{{$}}
}

// A plateau scheduler stepped with a metric computed from this process's share of the data is reported; one
// stepped with a number every process has alike is not.
void plateau(torch::nn::Linear net, float held_out) {
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  torch::optim::ReduceLROnPlateauScheduler scheduler(optimizer);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  for (int epoch = 0; epoch < 3; ++epoch) {
    double total = 0;
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto loss = torch::mse_loss(net->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      total += loss.item<double>();
    }
    scheduler.step(static_cast<float>(total));
    // WARN: prepare.cpp:[[@LINE-1]]:5: warning: plateau scheduler step not made safe: its metric
    // WARN-SAME: 'static_cast<float>(total)' is computed from this process's share of the data
    // CHECK: {{^}}    scheduler.step(static_cast<float>(total));{{$}}
    scheduler.step(held_out);
  }
}

// A helper that takes the concrete optimizer type by reference, called with the prepared optimizer only: the
// parameter becomes accelerate::Optimizer& (a torch::optim::Adam& could not bind to it).
void update(torch::optim::Adam& trainer) { trainer.step(); }
// CHECK: {{^}}void update(accelerate::Optimizer& trainer) { trainer.step(); }{{$}}
void calls_update(torch::nn::Linear net) {
  torch::optim::Adam trainer(net->parameters());
  update(trainer);
}
// Negative: also called with an optimizer that is not prepared.
void reset(torch::optim::Optimizer& optimizer) { optimizer.zero_grad(); }
// CHECK: {{^}}void reset(torch::optim::Optimizer& optimizer) { optimizer.zero_grad(); }{{$}}
void calls_reset(torch::nn::Linear net, torch::optim::SGD& elsewhere) {
  torch::optim::SGD mine(net->parameters(), 0.1);
  reset(mine);
  reset(elsewhere);
}

// A lambda that takes the concrete type, called with the prepared optimizer: its parameter is retyped too (the
// lambda object is the call's first argument).
void calls_lambda(torch::nn::Linear net) {
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  auto step = [&](torch::optim::SGD& trainer) { trainer.step(); };
  // CHECK: {{^}}  auto step = [&](accelerate::Optimizer& trainer) { trainer.step(); };{{$}}
  step(optimizer);
}
// Negative: a lambda also called with an optimizer that is not prepared keeps its type.
void calls_lambda_twice(torch::nn::Linear net, torch::optim::SGD& elsewhere) {
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  auto zero = [](torch::optim::SGD& trainer) { trainer.zero_grad(); };
  // CHECK: {{^}}  auto zero = [](torch::optim::SGD& trainer) { trainer.zero_grad(); };{{$}}
  zero(elsewhere);
}

// A function handed on as a callback beside the prepared optimizer, called with it inside a template.
template <typename Function, typename Optimizer> void apply_to(Function function, Optimizer& optimizer) {
  function(optimizer);
}
void decay(torch::optim::SGD& trainer) { trainer.zero_grad(); }
// CHECK: {{^}}void decay(accelerate::Optimizer& trainer) { trainer.zero_grad(); }{{$}}
void calls_through_template(torch::nn::Linear net) {
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  apply_to(decay, optimizer);
}
// Negative: handed on beside no prepared optimizer.
void halve(torch::optim::SGD& trainer) { trainer.zero_grad(); }
// CHECK: {{^}}void halve(torch::optim::SGD& trainer) { trainer.zero_grad(); }{{$}}
void hands_on_unprepared(torch::optim::SGD& elsewhere) { apply_to(halve, elsewhere); }

// A parameter that only receives the prepared optimizer, handed on to a lambda: both are retyped.
void fit(torch::optim::SGD& optimizer) {
  // CHECK: {{^}}void fit(accelerate::Optimizer& optimizer) {{[{]}}{{$}}
  auto step = [](torch::optim::SGD& trainer) { trainer.step(); };
  // CHECK: {{^}}  auto step = [](accelerate::Optimizer& trainer) { trainer.step(); };{{$}}
  step(optimizer);
}
void calls_fit(torch::nn::Linear net) {
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  fit(optimizer);
}
