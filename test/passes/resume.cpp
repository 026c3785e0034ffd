// The checkpoint pass's resume: where a training loop saves a model and the pass inserts
// accelerator.save_state("checkpoint"), it also loads that checkpoint before the loop when the launcher restarted
// the job (accelerate::restarted_with_checkpoint), and an epoch loop starts at the prepared loader's epoch. With
// --resume (accelerate_target(... RESUME)) the load runs on any start that finds the checkpoint.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN
// RUN: %accel-rewrite %s --explain -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=EXPLAIN
// RUN: %accel-rewrite %s --resume -- -std=c++17 -I%S/Inputs 2>/dev/null | FileCheck %s --check-prefix=RESUME
//
// A second run on the output changes nothing:
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs > %t/once.cpp 2>/dev/null
// RUN: %accel-rewrite %t/once.cpp --check -- -std=c++17 -I%S/Inputs
//
// --resume on a file where no checkpoint is saved: a warning that there is nothing to resume from.
// RUN: %accel-rewrite %S/Inputs/small_loop.cpp --resume -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=NOTHING
// NOTHING: small_loop.cpp:6:1: warning: --resume: nothing to resume from: no accelerator.save_state("checkpoint")
// NOTHING-SAME: is inserted in this file
// NOTHING-SAME: save the model in the training loop, or drop --resume [checkpoint]
// Without --resume, a file with no checkpoint gets no such warning:
// RUN: %accel-rewrite %S/Inputs/small_loop.cpp -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=PLAIN --allow-empty
// PLAIN-NOT: nothing to resume from
//
// --resume needs the checkpoint pass:
// RUN: not %accel-rewrite %s --resume --disable=checkpoint -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=DISABLED
// DISABLED: accel-rewrite: --resume loads the checkpoint the checkpoint pass saves, and the passes chosen leave
// DISABLED-SAME: that pass out (--disable=checkpoint, or --passes without it); drop --resume or run the checkpoint pass

#include "datasets.h"

// An epoch loop over a prepared loader: the load goes right before it, and the epochs start at the loader's.
void epochs() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  // CHECK:      {{^}}  int step = 0;{{$}}
  // CHECK-NEXT: {{^}}  accelerator.register_counter("step", step);{{$}}
  // CHECK-NEXT: {{^}}  if (accelerate::restarted_with_checkpoint("checkpoint")) {{[{]$}}
  // CHECK-NEXT: {{^}}    accelerator.load_state("checkpoint");{{$}}
  // CHECK-NEXT: {{^}}  }{{$}}
  // CHECK-NEXT: {{^}}  for (int epoch = loader->epoch(); epoch < 3; ++epoch) {{[{]$}}
  // RESUME:      {{^}}  if (accelerate::checkpoint_exists("checkpoint")) {{[{]$}}
  // RESUME-NEXT: {{^}}    accelerator.load_state("checkpoint");{{$}}
  // RESUME-NEXT: {{^}}  }{{$}}
  // RESUME-NEXT: {{^}}  for (int epoch = loader->epoch(); epoch < 3; ++epoch) {{[{]$}}
  // EXPLAIN: resume.cpp:[[@LINE+5]]:3: note: [checkpoint] inserted 'accelerator.register_counter("step", step); if (accelerate::restarted_with_checkpoint("checkpoint")) {
  // EXPLAIN-SAME: TORCHELASTIC_RESTART_COUNT > 0
  // EXPLAIN-SAME: the epoch loop starts at the loader's epoch (loader->epoch(): 0 on a fresh start)
  // EXPLAIN-SAME: the loop's counter 'step' is registered, so load_state gives it back the value it had at the checkpoint
  int step = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      model->forward(batch.data).sum().backward();
      optimizer.step();
      if (++step % 10 == 0) {
        torch::save(model, "model.pt");
      }
    }
  }
}

// Epochs counted from 1, and a loader read in one pass: the load before each training loop.
void one_pass_and_epochs_from_one() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  // CHECK:      {{^}}  if (accelerate::restarted_with_checkpoint("checkpoint")) {{[{]$}}
  // CHECK-NEXT: {{^}}    accelerator.load_state("checkpoint");{{$}}
  // CHECK-NEXT: {{^}}  }{{$}}
  // CHECK-NEXT: {{^}}  for (int64_t epoch = 1 + loader->epoch(); epoch <= 3; epoch += 1) {{[{]$}}
  for (int64_t epoch = 1; epoch <= 3; epoch += 1) {
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      model->forward(batch.data).sum().backward();
      optimizer.step();
      torch::save(optimizer, "optimizer.pt");
    }
  }
}

void one_pass() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  // CHECK:      {{^}}  if (accelerate::restarted_with_checkpoint("checkpoint")) {{[{]$}}
  // CHECK-NEXT: {{^}}    accelerator.load_state("checkpoint");{{$}}
  // CHECK-NEXT: {{^}}  }{{$}}
  // CHECK-NEXT: {{^}}  for (auto& batch : *loader) {{[{]$}}
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    model->forward(batch.data).sum().backward();
    optimizer.step();
    torch::save(model, "model.pt");
  }
}

// Not resumed, and reported: a loop that counts its own steps (a restart would run all of them again).
void steps() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  // CHECK-LABEL: void steps() {
  // CHECK-NOT: {{^ *}}accelerator.load_state
  // CHECK: {{^}}  for (int step = 0; step < 100; ++step) {{[{]$}}
  // WARN: resume.cpp:[[@LINE+3]]:3: warning: no load_state inserted: a restarted job would start this training loop
  // WARN-SAME: over, and load_state restores the state but not this loop's counter
  // WARN-SAME: load it by hand before the loop: if (accelerate::restarted_with_checkpoint("checkpoint")) accelerator.load_state("checkpoint");
  for (int step = 0; step < 100; ++step) {
    optimizer.zero_grad();
    model->forward(torch::randn({8, 4})).sum().backward();
    optimizer.step();
    if (step % 10 == 0) {
      torch::save(model, "model.pt");
    }
  }
}

// Not resumed, and reported: the loader is made inside the epoch loop (load_state needs it prepared first).
void loader_per_epoch() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  // CHECK-LABEL: void loader_per_epoch() {
  // CHECK-NOT: {{^ *}}accelerator.load_state
  // CHECK: {{^}}  for (int epoch = 0; epoch < 3; ++epoch) {{[{]$}}
  // WARN: resume.cpp:[[@LINE+1]]:3: warning: no load_state inserted: a restarted job would start this training loop
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      model->forward(batch.data).sum().backward();
      optimizer.step();
      torch::save(model, "model.pt");
    }
  }
}

// Not resumed, and reported: an epoch loop whose loader loop can stop early (the loader's epoch falls behind).
void stops_early() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  int step = 0;
  // CHECK-LABEL: void stops_early() {
  // CHECK-NOT: {{^ *}}accelerator.load_state
  // CHECK: {{^}}  for (int epoch = 0; epoch < 3; ++epoch) {{[{]$}}
  // WARN: resume.cpp:[[@LINE+1]]:3: warning: no load_state inserted: a restarted job would start this training loop
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      model->forward(batch.data).sum().backward();
      optimizer.step();
      torch::save(model, "model.pt");
      if (++step == 20) {
        break;
      }
    }
  }
}

// Not resumed, and reported: a function a loop calls (a load at its start would run on every call).
void train_epoch(torch::nn::Linear& model) {
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  // CHECK-LABEL: void train_epoch(
  // CHECK-NOT: {{^ *}}accelerator.load_state
  // CHECK: {{^}}  for (auto& batch : *loader) {{[{]$}}
  // WARN: resume.cpp:[[@LINE+2]]:3: warning: no load_state inserted: a loop of this file calls this function, so a
  // WARN-SAME: load before its training loop would run again on every call
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    model->forward(batch.data).sum().backward();
    optimizer.step();
    torch::save(model, "model.pt");
  }
}

// Left alone without a word: a save under a condition on a tensor gets no save_state, so nothing loads either.
void best_only() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  double best = 1e9;
  // CHECK-LABEL: void best_only() {
  // CHECK-NOT: {{^ *}}accelerator.load_state
  // CHECK: {{^}}  for (auto& batch : *loader) {{[{]$}}
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    auto loss = model->forward(batch.data).sum();
    loss.backward();
    optimizer.step();
    if (loss.item<double>() < best) {
      best = loss.item<double>();
      torch::save(model, "best.pt");
    }
  }
}
// WARN-NOT: warning:

int main() {
  epochs();
  one_pass_and_epochs_from_one();
  one_pass();
  steps();
  loader_per_epoch();
  stops_early();
  torch::nn::Linear model(4, 1);
  for (int epoch = 0; epoch < 2; ++epoch)
    train_epoch(model);
  best_only();
}
