// The progress-bar pass, switched on by --progress-bar: a training loop that runs to a step count gets an
// accelerate::ProgressBar over that count, registered as a counter (so a load_state puts it back at the count
// it had reached), advanced where its counter advances and closed after the loop; a training loop over a
// prepared data loader iterates it through accelerate::progress_bar (one bar per epoch, which starts where a
// resumed loader starts); any other training loop is reported with the code to write by hand.
// RUN: %accel-rewrite %s --progress-bar -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s --progress-bar -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=WARN --implicit-check-not=warning:
//
// Without --progress-bar the pass does not run, and nothing of it shows:
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s --check-prefix=PLAIN
// PLAIN-NOT: {{^ *[^/ ].*(ProgressBar|progress_bar|progress[.])}}
//
// A second run on the output changes nothing:
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s --progress-bar -- -std=c++17 -I%S/Inputs > %t/once.cpp 2>/dev/null
// RUN: %accel-rewrite %t/once.cpp --progress-bar --check -- -std=c++17 -I%S/Inputs
//
// With --log-with too (as examples/gpt is built): the trackers start before the bar is declared and finish
// before it closes; the bar shows the loss accelerator.log last got.
// RUN: %accel-rewrite %s --progress-bar --log-with=tensorboard -- -std=c++17 -I%S/Inputs 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=LOGGED
// LOGGED-LABEL: {{^}}void until(
// LOGGED:       {{^}}  int64_t step = 0;{{$}}
// LOGGED-NEXT:  {{^}}  accelerator.init_trackers("progress-bar");{{$}}
// LOGGED-NEXT:  {{^}}  accelerate::ProgressBar progress(steps, "train");{{$}}
// LOGGED-NEXT:  {{^}}  accelerator.register_counter("progress", progress);{{$}}
// LOGGED-NEXT:  {{^}}  while (step < steps) {{[{]}}{{$}}
// LOGGED:       {{^}}        accelerator.log({{[{][{]}}"loss", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, step);{{$}}
// LOGGED-NEXT:  {{^}}      }{{$}}
// LOGGED-NEXT:  {{^}}      progress.update();{{$}}
// LOGGED:       {{^}}  accelerator.end_training();{{$}}
// LOGGED-NEXT:  {{^}}  progress.close();{{$}}
//
// Bad input: the pass without --progress-bar, or --progress-bar with the pass disabled.
// RUN: not %accel-rewrite %s --passes=accelerator,progress-bar -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NEEDS
// RUN: not %accel-rewrite %s --enable=progress-bar -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NEEDS
// NEEDS: accel-rewrite: the progress-bar pass needs --progress-bar (it adds the bar only when asked to)
// RUN: not %accel-rewrite %s --progress-bar --disable=progress-bar -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=DISABLED
// DISABLED: accel-rewrite: --progress-bar needs the progress-bar pass, and --disable=progress-bar leaves it out; drop one of them

#include "datasets.h"

#include <iomanip>
#include <iostream>
#include <utility>

// examples/gpt's shape: an outer loop over the step count, an inner loop over the loader, the counter
// incremented in the condition that decides when to print. The bar's total is the step count (not the
// loader's length); it advances right after the statement that increments the counter, before the `break`.
// CHECK-LABEL: {{^}}void until(
// CHECK:       {{^}}  int64_t step = 0;{{$}}
// CHECK-NEXT:  {{^}}  accelerate::ProgressBar progress(steps, "train");{{$}}
// CHECK-NEXT:  {{^}}  accelerator.register_counter("progress", progress);{{$}}
// CHECK-NEXT:  {{^}}  while (step < steps) {{[{]}}{{$}}
// CHECK-NEXT:  {{^}}    for (auto& batch : *loader) {{[{]}}{{$}}
// CHECK:       {{^}}      if (++step % 10 == 1) {{[{]}}{{$}}
// CHECK-NEXT:  {{^}}        accelerator.print("step ", step, " loss ", {{.*}});{{$}}
// CHECK-NEXT:  {{^}}      }{{$}}
// CHECK-NEXT:  {{^}}      progress.update();{{$}}
// CHECK-NEXT:  {{^}}      if (step == steps) {{[{]}}{{$}}
// CHECK-NEXT:  {{^}}        break;{{$}}
// CHECK-NEXT:  {{^}}      }{{$}}
// CHECK-NEXT:  {{^}}    }{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  progress.close();{{$}}
void until(torch::nn::Linear& model, torch::optim::SGD& optimizer, int64_t steps) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  int64_t step = 0;
  while (step < steps) {
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto loss = model->forward(batch.data).sum();
      loss.backward();
      optimizer.step();
      if (++step % 10 == 1) {
        std::cout << "step " << step << " loss " << std::setprecision(8) << loss.item<double>() << std::endl;
      }
      if (step == steps) {
        break;
      }
    }
  }
}

// A loop over a step count with its own `for` variable: the bar advances after the training step. A name the
// function already uses is not taken (`progress` here), and a counter that does not start at 0 counts the
// steps left.
// CHECK-LABEL: {{^}}void plain_steps(
// CHECK:       {{^}}  accelerate::ProgressBar train_progress(n, "train");{{$}}
// CHECK-NEXT:  {{^}}  accelerator.register_counter("train_progress", train_progress);{{$}}
// CHECK-NEXT:  {{^}}  for (int64_t i = 0; i < n; ++i) {{[{]}}{{$}}
// CHECK:       {{^}}    optimizer.step();{{$}}
// CHECK-NEXT:  {{^}}    train_progress.update();{{$}}
// CHECK-NEXT:  {{^}}    progress += 1.0;{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  train_progress.close();{{$}}
// CHECK-NEXT:  {{^}}  int64_t done = n / 2;{{$}}
// CHECK-NEXT:  {{^}}  accelerate::ProgressBar progress_2((2 * n) - done, "train");{{$}}
// CHECK-NEXT:  {{^}}  accelerator.register_counter("progress_2", progress_2);{{$}}
// CHECK-NEXT:  {{^}}  while (done < 2 * n) {{[{]}}{{$}}
// CHECK:       {{^}}    done++;{{$}}
// CHECK-NEXT:  {{^}}    progress_2.update();{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  progress_2.close();{{$}}
void plain_steps(torch::nn::Linear& model, torch::optim::SGD& optimizer, int64_t n) {
  double progress = 0;
  for (int64_t i = 0; i < n; ++i) {
    optimizer.zero_grad();
    model->forward(torch::randn({8, 4})).sum().backward();
    optimizer.step();
    progress += 1.0;
  }
  int64_t done = n / 2;
  while (done < 2 * n) {
    optimizer.zero_grad();
    model->forward(torch::randn({8, 4})).sum().backward();
    optimizer.step();
    done++;
  }
  std::cout << progress << std::endl;
}

// An epoch loop around a loop over a prepared loader: one bar per epoch, over the loader's batches.
// CHECK-LABEL: {{^}}void epochs(
// CHECK:       {{^}}  for (int epoch = 0; epoch < 3; ++epoch) {{[{]}}{{$}}
// CHECK-NEXT:  {{^}}    for (auto& batch : accelerate::progress_bar(*loader, "epoch " + std::to_string(epoch))) {{[{]}}{{$}}
// CHECK-NOT:   {{^ *}}accelerate::ProgressBar
// CHECK-LABEL: {{^}}void one_pass(
void epochs(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      model->forward(batch.data).sum().backward();
      optimizer.step();
    }
  }
}

// One pass over a prepared loader, as the training loop itself.
// CHECK:       {{^}}  for (auto& batch : accelerate::progress_bar(*loader, "train")) {{[{]}}{{$}}
void one_pass(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    model->forward(batch.data).sum().backward();
    optimizer.step();
  }
}

// An epoch loop that saves a checkpoint: on a restart the checkpoint pass loads it before the loop, and the
// resumed loader's first pass starts after the batches the checkpoint had consumed, where progress_bar starts
// its bar (DataLoader::pass_start); the loader's position is the bar's, so nothing more is registered.
// CHECK-LABEL: {{^}}void checkpointed(
// CHECK:       {{^}}  accelerator.load_state("checkpoint");{{$}}
// CHECK-NOT:   register_counter
// CHECK:       {{^}}  for (int epoch = loader->epoch(); epoch < 3; ++epoch) {{[{]}}{{$}}
// CHECK-NEXT:  {{^}}    for (auto& batch : accelerate::progress_bar(*loader, "epoch " + std::to_string(epoch))) {{[{]}}{{$}}
// CHECK-NOT:   register_counter
// CHECK-LABEL: {{^}}void unsupported(
void checkpointed(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      model->forward(batch.data).sum().backward();
      optimizer.step();
      torch::save(model, "model.pt");
    }
  }
}

// Loops whose length is not known, and a loop where the bar cannot go: reported, left as they are.
// CHECK-NOT:   {{^ *[^/ ].*(ProgressBar|progress_bar|progress[.])}}
// CHECK-LABEL: {{^}}int main(
// WARN: progress-bar.cpp:[[@LINE+6]]:3: warning: progress bar not added: the loop neither runs to a step count (`while (step < steps)` with a counter it increments once per step, `for (int64_t i = 0; i < n; ++i)`) nor over a prepared data loader, so the bar's total is not known here; write it by hand: 'accelerate::ProgressBar progress(total_steps, "train");' before the loop and 'progress.update();' after each training step, or iterate a prepared loader through 'accelerate::progress_bar(*loader, "train")' [progress-bar]
// WARN: progress-bar.cpp:[[@LINE+14]]:5: warning: progress bar not added: this training loop is the body of an if or a loop written without braces, where the bar's declaration cannot go beside it; put it in braces { ... } and run again [progress-bar]
// WARN: progress-bar.cpp:[[@LINE+20]]:3: warning: data loader 'plain' not rewritten
// WARN: progress-bar.cpp:[[@LINE+21]]:3: warning: progress bar not added: its loader 'plain' is not prepared (accelerate::progress_bar iterates a prepared loader; see the data-loader pass); write it by hand:
void unsupported(torch::nn::Linear& model, torch::optim::SGD& optimizer, int64_t steps, bool train) {
  bool converged = false;
  while (!converged) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
    converged = loss.item<double>() < 0.1;
  }
  int64_t step = 0;
  if (train)
    while (step < steps) {
      optimizer.zero_grad();
      model->forward(torch::randn({8, 4})).sum().backward();
      optimizer.step();
      ++step;
    }
  // A loader with its own sampler object stays libtorch's (the data-loader pass says why).
  auto plain = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()),
                                             torch::data::samplers::RandomSampler(64), 8);
  for (auto& batch : *plain) {
    optimizer.zero_grad();
    model->forward(batch.data).sum().backward();
    optimizer.step();
  }
}

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  until(model, optimizer, 100);
  plain_steps(model, optimizer, 100);
  epochs(model, optimizer);
  one_pass(model, optimizer);
  checkpointed(model, optimizer);
  unsupported(model, optimizer, 100, true);
  return 0;
}
