// The prepare pass on shapes it once left unprepared while reporting nothing, or refused with a wrong reason:
// optimizers declared together in one statement are split into one prepared declaration each; a pointer member
// that starts null and is made later becomes an empty std::optional; a declaration it cannot split is reported
// whole, naming the declarator and the reason.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

void gan(torch::nn::Linear generator, torch::nn::Linear discriminator) {
  // CHECK: {{^}}  accelerator.prepare(generator);{{$}}
  // CHECK-NEXT: {{^}}  auto og = accelerator.prepare(torch::optim::Adam(generator->parameters(), 0.1));{{$}}
  // CHECK-NEXT: {{^}}  accelerator.prepare(discriminator);{{$}}
  // CHECK-NEXT: {{^}}  auto od = accelerator.prepare(torch::optim::Adam(discriminator->parameters(), 0.2));{{$}}
  // CHECK-NEXT: {{^}}  auto s1 = accelerator.prepare(torch::optim::StepLR(og, 1));{{$}}
  // CHECK-NEXT: {{^}}  auto s2 = accelerator.prepare(torch::optim::StepLR(od, 1));{{$}}
  torch::optim::Adam og(generator->parameters(), 0.1), od(discriminator->parameters(), 0.2);
  torch::optim::StepLR s1(og, 1), s2(od, 1);
  for (int step = 0; step < 4; ++step) {
    od.zero_grad();
    discriminator->forward(torch::randn({2})).backward();
    od.step();
    og.zero_grad();
    generator->forward(torch::randn({2})).backward();
    og.step();
    s1.step();
    s2.step();
  }
}

// A loop is rewritten whole or not at all: the function that holds the refused declaration is left as it is.
// WARN: reach.cpp:[[@LINE+8]]:3: warning: optimizers 'model_opt', 'loose' not prepared: they are declared in one statement, which the rewrite splits only when each one can be prepared, and 'loose' takes no model's parameters()
// WARN-SAME: so the training code of function 'loose_tensors' is left as it is (3 changes not made): a training loop is rewritten whole or not at all [prepare]
// CHECK: {{^}}void loose_tensors(torch::nn::Linear model, std::vector<torch::Tensor> extra) {{{$}}
// CHECK-NEXT: {{^}}  torch::optim::SGD model_opt(model->parameters(), 0.1), loose(extra, 0.1);{{$}}
// CHECK-NEXT: {{^}}  for (int step = 0; step < 4; ++step) {{{$}}
// CHECK-NEXT: {{^}}    model_opt.zero_grad();{{$}}
// CHECK-NEXT: {{^}}    model->forward(torch::randn({2})).backward();{{$}}
void loose_tensors(torch::nn::Linear model, std::vector<torch::Tensor> extra) {
  torch::optim::SGD model_opt(model->parameters(), 0.1), loose(extra, 0.1);
  for (int step = 0; step < 4; ++step) {
    model_opt.zero_grad();
    model->forward(torch::randn({2})).backward();
    model_opt.step();
    loose.step();
  }
}

// Optimizers in containers: the element type becomes accelerate::Optimizer (a map's std::optional of one, as
// `map[key]` makes a value before the assignment), each optimizer added is prepared, its model first.
// CHECK: {{^}}void containers(torch::nn::Linear a, torch::nn::Linear b) {{{$}}
// CHECK: {{^}}  std::vector<accelerate::Optimizer> list;{{$}}
// CHECK-NEXT: {{^}}  accelerator.prepare(a);{{$}}
// CHECK-NEXT: {{^}}  list.push_back(accelerator.prepare(torch::optim::SGD(a->parameters(), 0.1)));{{$}}
// CHECK-NEXT: {{^}}  std::map<std::string, std::optional<accelerate::Optimizer>> named;{{$}}
// CHECK-NEXT: {{^}}  accelerator.prepare(b);{{$}}
// CHECK-NEXT: {{^}}  named["b"] = accelerator.prepare(torch::optim::Adam(b->parameters(), 0.1));{{$}}
void containers(torch::nn::Linear a, torch::nn::Linear b) {
  std::vector<std::unique_ptr<torch::optim::Optimizer>> list;
  list.push_back(std::make_unique<torch::optim::SGD>(a->parameters(), 0.1));
  std::map<std::string, std::shared_ptr<torch::optim::Optimizer>> named;
  named["b"] = std::make_shared<torch::optim::Adam>(b->parameters(), 0.1);
  for (int step = 0; step < 4; ++step) {
    for (auto& optimizer : list)
      optimizer->zero_grad();
    named.at("b")->zero_grad();
    (a->forward(torch::randn({2})) + b->forward(torch::randn({2}))).backward();
    list[0]->step();
    named["b"]->step();
  }
}

// A container used in a way prepared optimizers do not support: reported, its function left as it is.
// WARN: reach.cpp:[[@LINE+5]]:3: warning: optimizers in 'raw' not prepared: it is iterated by value at line [[@LINE+13]]
// WARN-SAME: so the training code of function 'deleted_by_hand' is left as it is (3 changes not made)
// CHECK: {{^}}void deleted_by_hand(torch::nn::Linear a) {{{$}}
// CHECK-NEXT: {{^}}  std::vector<torch::optim::SGD*> raw;{{$}}
void deleted_by_hand(torch::nn::Linear a) {
  std::vector<torch::optim::SGD*> raw;
  raw.push_back(new torch::optim::SGD(a->parameters(), 0.1));
  for (int step = 0; step < 4; ++step) {
    raw[0]->zero_grad();
    // CHECK: {{^}}    a->forward(torch::randn({2})).backward();{{$}}
    a->forward(torch::randn({2})).backward();
    raw[0]->step();
  }
  for (auto* optimizer : raw)
    delete optimizer;
}

struct Trainer {
  torch::nn::Linear net{4, 1};
  // CHECK: {{^}}  std::optional<accelerate::Optimizer> opt{};{{$}}
  torch::optim::SGD* opt{};
  // CHECK: {{^}}  std::optional<accelerate::Optimizer> made = std::nullopt;{{$}}
  std::unique_ptr<torch::optim::Adam> made = nullptr;
  // CHECK: {{^}}  Trainer() : opt(std::nullopt) {}{{$}}
  Trainer() : opt(nullptr) {}
  // CHECK: {{^}}    opt = accelerator.prepare(torch::optim::SGD(net->parameters(), 0.1));{{$}}
  // CHECK: {{^}}    made = accelerator.prepare(torch::optim::Adam(head->parameters(), 0.1));{{$}}
  // CHECK: {{^}}    auto scheduler = accelerator.prepare(torch::optim::StepLR(*made, 1));{{$}}
  // CHECK: {{^}}  ~Trainer() {  }{{$}}
  void setup() {
    opt = new torch::optim::SGD(net->parameters(), 0.1);
    made = std::make_unique<torch::optim::Adam>(head->parameters(), 0.1);
  }
  void fit() {
    torch::optim::StepLR scheduler(*made, 1);
    for (int step = 0; step < 4; ++step) {
      opt->zero_grad();
      made->zero_grad();
      (net->forward(torch::randn({4})) + head->forward(torch::randn({4}))).backward();
      opt->step();
      made->step();
      scheduler.step();
    }
  }
  ~Trainer() { delete opt; }
  torch::nn::Linear head{4, 1};
};

// Two optimizer members over one model, made in one function: the model is prepared once.
struct SharedModel {
  torch::nn::Linear net{4, 1};
  torch::optim::SGD* first{};
  std::unique_ptr<torch::optim::Adam> second;
  // CHECK: {{^}}  void setup() {{{$}}
  // CHECK-NEXT: {{^}}    auto& accelerator = accelerate::Accelerator::current();{{$}}
  // CHECK-NEXT: {{^}}    accelerator.prepare(net);{{$}}
  // CHECK-NEXT: {{^}}    first = accelerator.prepare(torch::optim::SGD(net->parameters(), 0.1));{{$}}
  // CHECK-NEXT: {{^}}    second = accelerator.prepare(torch::optim::Adam(net->parameters(), 0.1));{{$}}
  void setup() {
    first = new torch::optim::SGD(net->parameters(), 0.1);
    second = std::make_unique<torch::optim::Adam>(net->parameters(), 0.1);
  }
  void fit() {
    for (int step = 0; step < 4; ++step) {
      first->zero_grad();
      net->forward(torch::randn({4})).backward();
      first->step();
      second->step();
    }
  }
};

// A template that builds its optimizer from `net.parameters()` is prepared when every instantiation trains a
// module; one instantiated with a plain struct of tensors too is refused whole, naming that instantiation.
template <typename T> void fit_module(T& net) {
  // CHECK: {{^}}  accelerator.prepare(net);{{$}}
  // CHECK-NEXT: {{^}}  auto optimizer = accelerator.prepare(torch::optim::SGD(net.parameters(), 0.1));{{$}}
  torch::optim::SGD optimizer(net.parameters(), 0.1);
  for (int step = 0; step < 4; ++step) {
    optimizer.zero_grad();
    net.forward(torch::randn({4})).backward();
    optimizer.step();
  }
}

struct Plain {
  torch::Tensor weight;
  std::vector<torch::Tensor> parameters();
  torch::Tensor forward(torch::Tensor x);
};

// WARN: reach.cpp:[[@LINE+5]]:3: warning: optimizer 'optimizer' not prepared: the instantiation fit_any<Plain> (made at line {{[0-9]+}}) trains 'net' of type 'Plain', which is not a torch::nn::Module: its tensors are loose
// WARN-SAME: so the training code of function 'fit_any' is left as it is (3 changes not made): a training loop is rewritten whole or not at all [prepare]
// CHECK: {{^}}template <typename T> void fit_any(T& net) {{[{]}}{{$}}
// CHECK-NEXT: {{^}}  torch::optim::SGD optimizer(net.parameters(), 0.1);{{$}}
template <typename T> void fit_any(T& net) {
  torch::optim::SGD optimizer(net.parameters(), 0.1);
  for (int step = 0; step < 4; ++step) {
    optimizer.zero_grad();
    net.forward(torch::randn({4})).backward();
    optimizer.step();
  }
}

// What libtorch's optimizer has and a prepared one (accelerate::Optimizer) does not, such as defaults(), is
// reached through unwrap(): on the prepared optimizer, on a reference bound to it with decltype, and in a
// template whose parameter only ever receives a prepared optimizer.
template <typename Opt> void set_lr(Opt& optimizer, double lr) {
  // CHECK: {{^}}  optimizer.unwrap().defaults().set_lr(lr);{{$}}
  optimizer.defaults().set_lr(lr);
  for (auto& group : optimizer.param_groups())
    group.options().set_lr(lr);
}

void adjusted_by_hand(torch::nn::Linear model) {
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  decltype(optimizer)& same = optimizer;
  for (int step = 0; step < 4; ++step) {
    set_lr(optimizer, 0.1 / (step + 1));
    optimizer.defaults().set_lr(0.1 / (step + 1));
    // CHECK: {{^}}    optimizer.unwrap().defaults().set_lr(0.1 / (step + 1));{{$}}
    same.defaults().set_lr(0.1 / (step + 1));
    // CHECK: {{^}}    same.unwrap().defaults().set_lr(0.1 / (step + 1));{{$}}
    same.zero_grad();
    // CHECK: {{^}}    same.zero_grad();{{$}}
    model->forward(torch::randn({4})).backward();
    optimizer.step();
  }
}

// WARN-NOT: not prepared
// WARN: accel-rewrite: {{.*}}reach.cpp: {{[0-9]+}} changes, 3 not rewritten
int main() {
  Trainer trainer;
  trainer.setup();
  trainer.fit();
  torch::nn::Linear linear(4, 1);
  fit_module(*linear);
  // Its own model: one fit_any trains too would share the refusal of fit_any (test/passes/transaction-calls.cpp).
  torch::nn::Linear other(4, 1);
  fit_any(*other);
  Plain plain;
  fit_any(plain);
}
