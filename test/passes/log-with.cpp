// The tracking pass, switched on by --log-with: the accelerator gets the trackers in its options, each training
// loop is wrapped in init_trackers / end_training, and each printed loss is also logged, as its mean over the
// processes, under the label printed before it, at the loop's step counter (or one the pass declares). Other
// printed numbers (means, sums, counts): log-metrics.cpp.
// RUN: %accel-rewrite %s --log-with=tensorboard -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s --log-with=tensorboard -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=WARN --implicit-check-not=warning:
//
// Several trackers, names the runtime does not know among them (a program may register its own; init_trackers
// names the unknown ones at run time), each once:
// RUN: %accel-rewrite %s --log-with=tensorboard,jsonl --log-with=my_tracker,jsonl -- -std=c++17 -I%S/Inputs \
// RUN:   | FileCheck %s --check-prefix=NAMES
// NAMES: {{^}}  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().log_with({"tensorboard", "jsonl", "my_tracker"}));{{$}}
//
// --project-name names the project instead of the file's stem (accelerate_target() gives the target's name):
// RUN: %accel-rewrite %s --log-with=csv --project-name=mnist -- -std=c++17 -I%S/Inputs 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=PROJECT
// PROJECT: {{^}}  accelerator.init_trackers("mnist");{{$}}
//
// Without --log-with the pass does not run, and nothing of it shows:
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s --check-prefix=PLAIN
// PLAIN: {{^}}  accelerate::Accelerator accelerator;{{$}}
// PLAIN-NOT: {{^ *}}accelerate::Accelerator accelerator(
// PLAIN-NOT: {{^ *}}accelerator{{[.]}}init_trackers
// PLAIN-NOT: {{^ *}}accelerator{{[.]}}log(
// PLAIN-NOT: {{^ *}}accelerator{{[.]}}end_training
//
// A second run on the output changes nothing:
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s --log-with=tensorboard -- -std=c++17 -I%S/Inputs > %t/once.cpp 2>/dev/null
// RUN: %accel-rewrite %t/once.cpp --log-with=tensorboard --check -- -std=c++17 -I%S/Inputs
//
// Bad input: an empty tracker name, the pass without trackers, or the pass both asked for and disabled.
// RUN: not %accel-rewrite %s --log-with= -- -std=c++17 -I%S/Inputs 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not %accel-rewrite %s --log-with=tensorboard, -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=EMPTY
// EMPTY: accel-rewrite: --log-with got an empty tracker name; give the trackers to log to, comma-separated, e.g.
// EMPTY-SAME: --log-with=tensorboard or --log-with=tensorboard,jsonl
// RUN: not %accel-rewrite %s '--log-with=tensor"board' -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=QUOTE
// QUOTE: accel-rewrite: --log-with: 'tensor"board' is not a tracker name (printable ASCII without quotes or backslashes)
// RUN: not %accel-rewrite %s --passes=accelerator,tracking -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NEEDS
// NEEDS: accel-rewrite: the tracking pass needs --log-with=NAME,... (the trackers to log to, e.g. --log-with=tensorboard)
// RUN: not %accel-rewrite %s --project-name=mnist -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=PROJECT-ALONE
// PROJECT-ALONE: accel-rewrite: --project-name names the project of the trackers of --log-with; give --log-with too
// RUN: not %accel-rewrite %s --log-with=csv --project-name=runs/mnist -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=PROJECT-BAD
// PROJECT-BAD: accel-rewrite: --project-name: 'runs/mnist' is not a project name (a directory name: printable ASCII without quotes, backslashes or '/')
// RUN: not %accel-rewrite %s --log-with=jsonl --disable=tracking -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck %s --check-prefix=DISABLED
// DISABLED: accel-rewrite: --log-with needs the tracking pass, and --disable=tracking leaves it out; drop one of them

#include <torch/torch.h>

#include <cstdio>
#include <iomanip>
#include <iostream>

// The loop keeps its own step counter (declared before it, incremented once per step): the log uses it. The
// trackers start right before the training loop (the file's stem names the project) and finish right after it;
// the printed loss is logged under its label, the text printed before it (manipulators skipped).
// CHECK-LABEL: {{^}}int main() {
// CHECK-NEXT:  {{^}}  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().log_with({"tensorboard"}));{{$}}
// CHECK:       {{^}}  int step = 0;{{$}}
// CHECK-NEXT:  {{^}}  accelerator.init_trackers("log-with");{{$}}
// CHECK-NEXT:  {{^}}  for (int epoch = 0; epoch < 2; ++epoch) {{[{]}}{{$}}
// CHECK:       {{^}}      accelerator.print("step ", step, " loss ", std::setprecision(8), accelerator.reduce(loss, accelerate::ReduceOp::MEAN).item<double>());{{$}}
// CHECK-NEXT:  {{^}}      accelerator.log({{[{][{]}}"loss", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, step);{{$}}
// CHECK-NEXT:  {{^}}    }{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  accelerator.end_training();{{$}}
// CHECK-NEXT:  {{^}}  return 0;{{$}}
int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  int step = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int i = 0; i < 10; ++i) {
      optimizer.zero_grad();
      auto loss = model->forward(torch::randn({8, 4})).sum();
      loss.backward();
      optimizer.step();
      ++step;
      std::cout << "step " << step << " loss " << std::setprecision(8) << loss.item<double>() << std::endl;
    }
  }
  return 0;
}

// The loop's own `for` variable is its step; a line printed under a condition on the step is logged under the
// same condition (in braces, also on one line).
// CHECK-LABEL: {{^}}void every_tenth(
// CHECK-NEXT:  {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
// CHECK-NEXT:  {{^}}  accelerator.init_trackers("log-with");{{$}}
// CHECK-NEXT:  {{^}}  for (int iteration = 0; iteration < 100; ++iteration) {{[{]}}{{$}}
// CHECK:       {{^}}    if (iteration % 10 == 0) {{[{]}}{{$}}
// CHECK-NEXT:  {{^}}      accelerator.print("iteration ", iteration, ", train loss: ", accelerator.reduce(loss, accelerate::ReduceOp::MEAN).item<float>());{{$}}
// CHECK-NEXT:  {{^}}      accelerator.log({{[{][{]}}"train_loss", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, iteration);{{$}}
// CHECK-NEXT:  {{^}}    }{{$}}
// CHECK-NEXT:  {{^}}    if (iteration == 99) { if (accelerator.is_main_process()) std::cerr << "last: " << loss.item<float>() << std::endl; accelerator.log({{[{][{]}}"last", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, iteration); }{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  accelerator.end_training();{{$}}
void every_tenth(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  for (int iteration = 0; iteration < 100; ++iteration) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
    if (iteration % 10 == 0)
      std::cout << "iteration " << iteration << ", train loss: " << loss.item<float>() << "\n";
    if (iteration == 99) std::cerr << "last: " << loss.item<float>() << std::endl;
  }
}

// examples/gpt's shape: the counter is incremented in the condition that decides when to print.
// CHECK-LABEL: {{^}}void until(
// CHECK-NEXT:  {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
// CHECK-NEXT:  {{^}}  int64_t step = 0;{{$}}
// CHECK-NEXT:  {{^}}  accelerator.init_trackers("log-with");{{$}}
// CHECK-NEXT:  {{^}}  while (step < steps) {{[{]}}{{$}}
// CHECK:       {{^}}      if (++step % 10 == 1) {{[{]}}{{$}}
// CHECK-NEXT:  {{^}}        accelerator.print("step ", step, " loss ", {{.*}});{{$}}
// CHECK-NEXT:  {{^}}        accelerator.log({{[{][{]}}"loss", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, step);{{$}}
// CHECK-NEXT:  {{^}}      }{{$}}
// CHECK:       {{^}}  accelerator.end_training();{{$}}
void until(torch::nn::Linear& model, torch::optim::SGD& optimizer, int64_t steps) {
  int64_t step = 0;
  while (step < steps) {
    for (int i = 0; i < 10; ++i) {
      optimizer.zero_grad();
      auto loss = model->forward(torch::randn({8, 4})).sum();
      loss.backward();
      optimizer.step();
      if (++step % 10 == 1) {
        std::cout << "step " << step << " loss " << loss.item<double>() << std::endl;
      }
    }
  }
}

// No counter the loop keeps (the inner index restarts every epoch, `step` names something else): the pass
// declares one, free of the function's names, and counts it after the last optimizer step. Two losses on one
// line are logged together; a loss printed without a label is logged under its variable's name.
// CHECK-LABEL: {{^}}void gan(
// CHECK:       {{^}}  const char* step = "adversarial";{{$}}
// CHECK-NEXT:  {{^}}  accelerator.init_trackers("log-with");{{$}}
// CHECK-NEXT:  {{^}}  int64_t global_step = 0;{{$}}
// CHECK-NEXT:  {{^}}  accelerator.register_counter("global_step", global_step);{{$}}
// CHECK-NEXT:  {{^}}  for (int epoch = 0; epoch < 2; ++epoch) {{[{]}}{{$}}
// CHECK:       {{^}}      g_optimizer.step();{{$}}
// CHECK-NEXT:  {{^}}      ++global_step;{{$}}
// CHECK-NEXT:  {{^}}      accelerator.print("[", epoch, "/", i, "] D loss = ", {{.*}});{{$}}
// CHECK-NEXT:  {{^}}      accelerator.log({{[{][{]}}"D_loss", accelerator.reduce(d_loss.detach(), accelerate::ReduceOp::MEAN)}, {"G_loss", accelerator.reduce(g_loss.detach(), accelerate::ReduceOp::MEAN)}}, global_step);{{$}}
// CHECK-NEXT:  {{^}}      accelerator.print(accelerator.reduce(g_loss, accelerate::ReduceOp::MEAN).item<float>());{{$}}
// CHECK-NEXT:  {{^}}      accelerator.log({{[{][{]}}"g_loss", accelerator.reduce(g_loss.detach(), accelerate::ReduceOp::MEAN)}}, global_step);{{$}}
// CHECK-NEXT:  {{^}}    }{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  accelerator.end_training();{{$}}
void gan(torch::nn::Linear& generator, torch::nn::Linear& discriminator, torch::optim::SGD& g_optimizer,
         torch::optim::SGD& d_optimizer) {
  const char* step = "adversarial";
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int i = 0; i < 10; ++i) {
      d_optimizer.zero_grad();
      auto d_loss = discriminator->forward(torch::randn({8, 4})).sum();
      d_loss.backward();
      d_optimizer.step();
      g_optimizer.zero_grad();
      auto g_loss = discriminator->forward(generator->forward(torch::randn({8, 4}))).sum();
      g_loss.backward();
      g_optimizer.step();
      std::cout << "[" << epoch << "/" << i << "] D loss = " << d_loss.item<float>() << " | G loss = "
                << g_loss.item<float>() << std::endl;
      std::cout << g_loss.item<float>() << std::endl;
    }
  }
  std::cout << step << std::endl;
}

// A loop that prints no loss: the trackers still start and finish, and the warning says how to log by hand.
// CHECK-LABEL: {{^}}void silent(
// CHECK-NEXT:  {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
// CHECK-NEXT:  {{^}}  accelerator.init_trackers("log-with");{{$}}
// CHECK-NEXT:  {{^}}  for (int i = 0; i < 10; ++i) {{[{]}}{{$}}
// CHECK-NOT:   {{^ *}}accelerator{{[.]}}log(
// CHECK:       {{^}}  accelerator.end_training();{{$}}
// WARN: log-with.cpp:[[@LINE+2]]:32: warning: nothing logged from this training loop: it prints no loss (loss.item<T>() of a tensor it runs backward on) and no number computed from its batches (a sum, count or mean over steps), in a std::cout or std::cerr line, so the trackers were started and finished but get no values; log what you watch by hand, e.g. accelerator.log({{[{][{]}}"loss", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, step) [tracking]
void silent(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  for (int i = 0; i < 10; ++i) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
  }
}

// Losses the pass does not log, each reported with the call to write (at the loop's step counter): in a printf
// (the label is in the format), and under a condition on a tensor (the mean over the processes is a collective).
// CHECK-LABEL: {{^}}void unlogged(
// CHECK-NOT:   {{^ *}}accelerator{{[.]}}log(
// CHECK:       {{^}}  accelerator.end_training();{{$}}
// WARN: log-with.cpp:[[@LINE+8]]:5: warning: loss not logged: its label is in a printf format, which the rewriter does not read; log it by hand after this line: accelerator.log({{[{][{]}}"loss", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, i) [tracking]
// WARN: log-with.cpp:[[@LINE+9]]:7: warning: loss not logged: this line prints under a condition on a tensor, which the processes could disagree on, and the mean over the processes is a collective every process must take; log it outside the condition: accelerator.log({{[{][{]}}"loss", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, i) [tracking]
void unlogged(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  for (int i = 0; i < 10; ++i) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
    std::printf("loss %f\n", loss.item<float>());
    if (loss.item<double>() < 0.1)
      std::cout << "converged, loss " << loss.item<double>() << std::endl;
  }
}

// A training loop written as the unbraced body of an `if`: nothing can go beside it, so nothing is added.
// CHECK-LABEL: {{^}}void unbraced(
// CHECK-NOT:   {{^ *}}accelerator{{[.]}}init_trackers
// CHECK-NOT:   {{^ *}}accelerator{{[.]}}log(
// CHECK-NOT:   {{^ *}}accelerator{{[.]}}end_training
// WARN: log-with.cpp:[[@LINE+3]]:5: warning: trackers not started: this training loop is the body of an if or a loop written without braces, where accelerator.init_trackers() and accelerator.end_training() cannot go beside it; put it in braces { ... } and run again [tracking]
void unbraced(torch::nn::Linear& model, torch::optim::SGD& optimizer, bool train) {
  if (train)
    for (int i = 0; i < 10; ++i) {
      optimizer.zero_grad();
      auto loss = model->forward(torch::randn({8, 4})).sum();
      loss.backward();
      optimizer.step();
      std::cout << "loss " << loss.item<float>() << std::endl;
    }
}

// A function that a training loop calls once per epoch is part of that loop's run: the trackers start around
// the caller's loop, not in the callee.
// CHECK-LABEL: {{^}}void train_epoch(
// CHECK-NOT:   {{^ *}}accelerator{{[.]}}init_trackers
// CHECK-NOT:   {{^ *}}accelerator{{[.]}}end_training
void train_epoch(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  for (int i = 0; i < 10; ++i) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
  }
}

// CHECK-LABEL: {{^}}void calls_a_training_function(
// CHECK-NEXT:  {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
// CHECK-NEXT:  {{^}}  accelerator.init_trackers("log-with");{{$}}
// CHECK-NEXT:  {{^}}  for (int epoch = 0; epoch < 3; ++epoch){{$}}
// CHECK-NEXT:  {{^}}    train_epoch(model, optimizer);{{$}}
// CHECK-NEXT:  {{^}}  accelerator.end_training();{{$}}
// WARN: log-with.cpp:[[@LINE+3]]:5: warning: nothing logged from this training loop
void calls_a_training_function(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  for (int epoch = 0; epoch < 3; ++epoch)
    train_epoch(model, optimizer);
}
