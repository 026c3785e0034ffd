// The checks keep to their own ground: a correct hand-distributed training file gets no warning from any
// accelerate-* check, and a plain single-device file gets accelerate-distribute-loop's only.
// RUN: %tidy %s -- -std=c++17 -I%passes_inputs 2>&1 | count 0
// RUN: %tidy %passes_inputs/small_loop.cpp -- -std=c++17 -I%passes_inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=PLAIN --implicit-check-not=warning:
// PLAIN: small_loop.cpp:{{[0-9]+}}:{{[0-9]+}}: warning: this training loop runs on one device; distribute it with accelerate {{.*}} [accelerate-distribute-loop]

#include <accelerate/accelerate.h>
#include <torch/torch.h>

#include "datasets.h"

void evaluate(accelerate::Accelerator& accelerator, torch::nn::Linear& model) {
  torch::NoGradGuard no_grad;
  auto loss = model->forward(torch::randn({8, 4})).sum();
  auto total = accelerator.reduce(loss); // every process reduces
  if (accelerator.is_main_process())
    std::cout << "eval " << total << "\n";
}

int main() {
  accelerate::Accelerator accelerator;
  torch::nn::Linear model(4, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto loader = accelerator.prepare_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  int step = 0;
  for (auto& batch : *loader) {
    auto guard = accelerator.accumulate(model);
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
    accelerator.backward(loss);
    optimizer.step();
    if (++step % 100 == 0) {
      accelerator.save_state(); // on every process
      if (accelerator.is_main_process())
        torch::save(model, "model.pt");
      accelerator.wait_for_everyone();
    }
  }
  evaluate(accelerator, model);
  accelerator.save_model(*model, "final");
}
