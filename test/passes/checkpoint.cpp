// The checkpoint pass: torch::save in training and evaluation code runs on the main process only, at the
// user's path; where the training loop saves a model or an optimizer, every process also saves a resumable
// checkpoint with accelerator.save_state, once per block, unless a condition on a tensor decides.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s --explain -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=EXPLAIN

#include <torch/torch.h>

#include <string>

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  torch::load(model, "model.pt"); // Every process reads the same file: unchanged.
  // CHECK: {{^}}  torch::load(model, "model.pt"); // Every process reads the same file: unchanged.{{$}}
  double best = 1e9;
  double running = 0, best_average = 1e9;
  for (int step = 1; step <= 100; ++step) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
    if (step % 10 == 0) {
      torch::save(model, "model-" + std::to_string(step) + ".pt");
      // CHECK:      {{^}}      accelerator.save_state("checkpoint");{{$}}
      // CHECK-NEXT: {{^}}      if (accelerator.is_main_process()) torch::save(model, "model-" + std::to_string(step) + ".pt");{{$}}
      // EXPLAIN: checkpoint.cpp:[[@LINE-3]]:7: note: [checkpoint] inserted 'accelerator.save_state("checkpoint");';
      // EXPLAIN-SAME: inserted 'if (accelerator.is_main_process())': every process holds the same weights, so the
      // EXPLAIN-SAME: main process alone writes them, at this path; accelerator.save_state("checkpoint") before it
      // EXPLAIN-SAME: saves, from every process, what resumes training on any number of processes
      torch::save(optimizer, "optimizer.pt");
      // CHECK-NOT: {{^}} *accelerator.save_state
      // CHECK: {{^}}      if (accelerator.is_main_process()) torch::save(optimizer.unwrap(), "optimizer.pt");{{$}}
    }
    if (loss.item<double>() < best)
      torch::save(model, "best.pt"); // A condition on the local loss: the guard takes no collective.
    // CHECK: {{^}}      if (accelerator.is_main_process()) torch::save(model, "best.pt");
    // EXPLAIN: checkpoint.cpp:[[@LINE-2]]:7: note: [checkpoint] {{.*}}; no resumable checkpoint
    // EXPLAIN-SAME: (accelerator.save_state) is added here: a condition on a tensor's value decides whether this
    // EXPLAIN-SAME: runs (directly, or through a number computed from one
    // "Best so far" on a number accumulated from the local loss: the value differs between processes, so the
    // collective save_state must not run under it.
    running += loss.item<double>();
    double average = running / step;
    if (average < best_average) {
      best_average = average;
      torch::save(model, "best-average.pt");
    }
    // CHECK-NOT: {{^}} *accelerator.save_state
    // CHECK: {{^}}      if (accelerator.is_main_process()) torch::save(model, "best-average.pt");{{$}}
    // EXPLAIN: checkpoint.cpp:[[@LINE-4]]:7: note: [checkpoint] {{.*}}; no resumable checkpoint
    // EXPLAIN-SAME: (accelerator.save_state) is added here: a condition on a tensor's value decides whether this
    // EXPLAIN-SAME: runs (directly, or through a number computed from one, such as a best-so-far loss or accuracy)
    torch::save(loss.detach(), "loss.pt");
    // CHECK: {{^}}    if (accelerator.is_main_process()) torch::save(loss.detach(), "loss.pt");{{$}}
    // EXPLAIN: checkpoint.cpp:[[@LINE-2]]:5: note: [checkpoint] inserted 'if (accelerator.is_main_process())':
    // EXPLAIN-SAME: the main process alone writes this file, once per job instead of once per process
  }
}

// In a template (a frozen feature extractor of any type, a new head), an accuracy summed from
// `.template item<float>()` and compared with the best so far is per-process too: the head is saved by the main
// process, with no collective under the condition.
template <typename Features>
void train_best_accuracy(Features& features, torch::nn::Linear& head, torch::optim::SGD& optimizer) {
  float best_accuracy = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    float correct = 0;
    for (int step = 0; step < 10; ++step) {
      optimizer.zero_grad();
      auto output = head->forward(features->forward(torch::randn({8, 4})));
      auto loss = output.sum();
      loss.backward();
      optimizer.step();
      correct += output.argmax(1).sum().template item<float>();
    }
    if (correct / 80 > best_accuracy) {
      best_accuracy = correct / 80;
      torch::save(head, "best-head.pt");
    }
    // CHECK-NOT: {{^}} *accelerator.save_state
    // CHECK: {{^}}      if (accelerator.is_main_process()) torch::save(head, "best-head.pt");{{$}}
  }
}

void run_best_accuracy() {
  torch::nn::Linear features(4, 4), head(4, 1);
  torch::optim::SGD optimizer(head->parameters(), 0.1);
  train_best_accuracy(features, head, optimizer);
}

// Negative: outside training and evaluation code.
void export_weights(torch::nn::Linear& model) {
  torch::save(model, "export.pt");
  // CHECK: {{^}}  torch::save(model, "export.pt");{{$}}
}
