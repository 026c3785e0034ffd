// accelerate-unprepared-optimizer-step: in a file that uses an accelerator, a plain torch::optim optimizer
// over a model never prepared trains each process's copy apart; no fix. Optimizers over prepared models, and
// files without an accelerator (accelerate-distribute-loop's), are left alone.
// RUN: %tidy -checks=-*,accelerate-unprepared-optimizer-step %s -- -std=c++17 -I%passes_inputs 2>&1 \
// RUN:   | FileCheck %s --implicit-check-not=warning:
// RUN: %tidy -checks=-*,accelerate-unprepared-optimizer-step %S/distribute-loop.cpp -- -std=c++17 \
// RUN:   -I%passes_inputs 2>&1 | count 0

#include <accelerate/accelerate.h>
#include <torch/torch.h>

#include <memory>

struct Trainer {
  torch::nn::Linear critic{4, 1};
  torch::optim::Adam critic_optimizer{critic->parameters()};
  void step() { critic_optimizer.step(); }
  // CHECK: unprepared-optimizer-step.cpp:[[@LINE-1]]:17: warning: 'critic_optimizer' is a plain torch::optim optimizer over the parameters of 'critic', which is never passed to accelerator.prepare
};

int main() {
  accelerate::Accelerator accelerator;
  torch::nn::Linear model(4, 1);
  torch::nn::Linear head(1, 1);
  torch::nn::Linear prepared_head(1, 1);
  accelerator.prepare(model);
  accelerator.prepare_model(*prepared_head);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  torch::optim::SGD head_optimizer(head->parameters(), 0.1);
  auto shared_optimizer = std::make_shared<torch::optim::Adam>(head->parameters());
  torch::optim::SGD prepared_head_optimizer(prepared_head->parameters(), 0.1);
  for (int step = 0; step < 10; ++step) {
    auto loss = head->forward(model->forward(torch::randn({8, 4}))).sum();
    accelerator.backward(loss);
    optimizer.step();
    head_optimizer.step();
    // CHECK: unprepared-optimizer-step.cpp:[[@LINE-1]]:5: warning: 'head_optimizer' is a plain torch::optim optimizer over the parameters of 'head', which is never passed to accelerator.prepare, although this file uses an accelerator: nothing synchronises its gradients, so with more than one process every process trains its own copy of 'head' on its own share of the data and the copies drift apart; prepare the model (accelerator.prepare(head)) and the optimizer (auto optimizer = accelerator.prepare(torch::optim::...(head->parameters(), ...))) [accelerate-unprepared-optimizer-step]
    shared_optimizer->step();
    // CHECK: unprepared-optimizer-step.cpp:[[@LINE-1]]:5: warning: 'shared_optimizer' is a plain torch::optim optimizer over the parameters of 'head'
    prepared_head_optimizer.step();
  }
}
