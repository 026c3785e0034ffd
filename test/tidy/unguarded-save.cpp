// accelerate-unguarded-save: in distributed code, a torch::save every process runs writes the same file from
// each; the fix writes it on the main process only, unless the function reads it back (then no fix: the
// others would need to wait for it). Saves the main process alone makes, and saves outside distributed code,
// are left alone.
// RUN: rm -rf %t && mkdir -p %t && cp %s %t/train.cpp
// RUN: %tidy -checks=-*,accelerate-unguarded-save %t/train.cpp -- -std=c++17 -I%passes_inputs 2>&1 \
// RUN:   | FileCheck %s --implicit-check-not=warning:
// RUN: %tidy -checks=-*,accelerate-unguarded-save --fix --format-style=none %t/train.cpp -- -std=c++17 \
// RUN:   -I%passes_inputs > %t/fix.log 2>&1
// RUN: FileCheck %s --check-prefix=FIXED --input-file=%t/train.cpp
// RUN: %tidy -checks=-*,accelerate-unguarded-save %t/train.cpp -- -std=c++17 -I%passes_inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=AGAIN --implicit-check-not=warning:

#include <accelerate/accelerate.h>
#include <torch/torch.h>

void export_weights(torch::nn::Linear& net) { torch::save(net, "export.pt"); }
// CHECK: train.cpp:[[@LINE-1]]:47: warning: torch::save runs on every process here: with more than one process they all write the same file at once (a torn or clobbered file); write it on the main process only: if (accelerate::Accelerator::current().is_main_process()) { ... } (a model: accelerate::Accelerator::current().save_model(model, directory), called on every process, writes it once and also gathers a sharded model) [accelerate-unguarded-save]
// FIXED: {{^}}void export_weights(torch::nn::Linear& net) { if (accelerate::Accelerator::current().is_main_process()) { torch::save(net, "export.pt"); } }

void save_on_main(torch::nn::Linear& net) { torch::save(net, "main.pt"); } // only the main process calls it

void plain(torch::nn::Linear& other) { torch::save(other, "plain.pt"); } // no accelerator, no prepared model

void round_trip(accelerate::Accelerator& accelerator, torch::nn::Linear& net) {
  torch::save(net, "round.pt");
  // CHECK: train.cpp:[[@LINE-1]]:3: warning: {{.*}}; write it on the main process only: if (accelerator.is_main_process()) { ... }, then accelerator.wait_for_everyone() before any process reads it back (a model: accelerator.save_model(model, directory)
  // AGAIN: train.cpp:[[@LINE-2]]:3: warning: {{.*}} before any process reads it back
  accelerator.wait_for_everyone();
  torch::load(net, "round.pt");
}

int main() {
  accelerate::Accelerator accelerator;
  torch::nn::Linear model(4, 1);
  torch::nn::Linear other(4, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  for (int step = 0; step < 10; ++step) {
    accelerator.backward(model->forward(torch::randn({8, 4})).sum());
    optimizer.step();
    if (step % 5 == 0)
      torch::save(model, "model.pt");
    // CHECK: train.cpp:[[@LINE-1]]:7: warning: torch::save runs on every process here{{.*}} { ... } (a model:
    // AGAIN: train.cpp:[[@LINE-2]]:7: warning: torch::save runs on every process here
    // FIXED: {{^ *}}torch::save(model, "model.pt");
    if (accelerator.is_main_process())
      torch::save(model, "guarded.pt");
  }
  torch::save(optimizer.unwrap(), "optimizer.pt");
  // CHECK: train.cpp:[[@LINE-1]]:3: warning: {{.*}}; write it on the main process only: if (accelerator.is_main_process()) { ... }
  // FIXED: {{^}}  if (accelerator.is_main_process()) { torch::save(optimizer.unwrap(), "optimizer.pt"); }
  export_weights(model);
  if (accelerator.is_main_process())
    save_on_main(model);
  plain(other);
  round_trip(accelerator, model);
  if (!accelerator.is_main_process())
    return 0;
  torch::save(model, "final.pt");
}
