// The prepare pass on optimizers held by members: each becomes a prepared optimizer where it is built (the
// models it trains prepared before it), its `delete` goes; a member the tool cannot retarget is reported by
// name and left as it is.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN

#include <torch/torch.h>

#include <memory>

struct Gan {
  // CHECK: {{^}}  Gan() {{{$}}
  // CHECK-NEXT: {{^}}    auto& accelerator = accelerate::Accelerator::current();{{$}}
  // CHECK-NEXT: {{^}}    accelerator.prepare(generator);{{$}}
  // CHECK-NEXT: {{^}}    optimG = accelerator.prepare(torch::optim::Adam(generator->parameters(), 0.1));{{$}}
  Gan() {
    optimG = new torch::optim::Adam(generator->parameters(), 0.1);
  }
  // CHECK: {{^}}  ~Gan() {{{$}}
  // CHECK-NEXT: {{^}}  }{{$}}
  ~Gan() {
    delete optimG;
  }
  void fit(torch::Tensor x) {
    optimG->zero_grad();
    generator->forward(x).sum().backward();
    optimG->step();
  }
  torch::nn::Linear generator{4, 4};
  // CHECK: {{^}}  std::optional<accelerate::Optimizer> optimG;{{$}}
  torch::optim::Adam* optimG;
};

struct Initialised {
  torch::nn::Linear net{4, 1};
  // CHECK: {{^}}  accelerate::Optimizer opt = accelerate::Accelerator::current().prepare(torch::optim::SGD(accelerate::Accelerator::current().prepare(net)->parameters(), 0.01));{{$}}
  std::unique_ptr<torch::optim::SGD> opt = std::make_unique<torch::optim::SGD>(net->parameters(), 0.01);
  void fit(torch::Tensor x) {
    opt->zero_grad();
    net->forward(x).sum().backward();
    opt->step();
  }
};

// Negative: the raw pointer is handed on as a pointer, which a prepared optimizer is not.
struct HandsItOn {
  torch::nn::Linear net{4, 1};
  // CHECK: {{^}}  torch::optim::SGD* opt = new torch::optim::SGD(net->parameters(), 0.01);{{$}}
  torch::optim::SGD* opt = new torch::optim::SGD(net->parameters(), 0.01);
  // WARN: members.cpp:[[@LINE-1]]:3: warning: optimizer member 'HandsItOn::opt' not prepared: it is used as a value at line [[@LINE+1]]
  torch::optim::SGD* optimizer() { return opt; }
};

// Negative: built where the tool cannot see it.
struct BuiltElsewhere {
  explicit BuiltElsewhere(torch::optim::SGD* made) { opt.reset(made); }
  // CHECK: {{^}}  std::unique_ptr<torch::optim::SGD> opt;{{$}}
  std::unique_ptr<torch::optim::SGD> opt;
  // WARN: members.cpp:[[@LINE-1]]:3: warning: optimizer member 'BuiltElsewhere::opt' not prepared: it is reset to something other than `new T(...)`
};

int main() {
  Gan gan;
  gan.fit(torch::Tensor());
  Initialised trainer;
  trainer.fit(torch::Tensor());
}

// A default initialiser and a constructor's initialiser list that replaces it: each prepares the model.
struct TwoBuilds {
  TwoBuilds() = default;
  // CHECK: {{^}}  explicit TwoBuilds(double lr) : opt(accelerate::Accelerator::current().prepare(torch::optim::SGD(accelerate::Accelerator::current().prepare(net)->parameters(), lr))) {}{{$}}
  explicit TwoBuilds(double lr) : opt(net->parameters(), lr) {}
  torch::nn::Linear net{4, 1};
  // CHECK: {{^}}  accelerate::Optimizer opt{accelerate::Accelerator::current().prepare(torch::optim::SGD(accelerate::Accelerator::current().prepare(net)->parameters(), 0.1))};{{$}}
  torch::optim::SGD opt{net->parameters(), 0.1};
  void fit(torch::Tensor x) {
    opt.zero_grad();
    net->forward(x).sum().backward();
    opt.step();
  }
};
