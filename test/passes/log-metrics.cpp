// The tracking pass logs every training number a loop prints, not only `loss.item<T>()`: an epoch's mean loss
// (`total / n`), a running average, an accuracy (`correct / seen`), each as the main-process pass prints it
// (this process's sums and counts reduced with SUM, means of losses with MEAN), under the text printed before
// it, at the step counter for a line printed every step and at the epoch counter for a line printed once per
// epoch. A line that prints no training number is not logged; a number of this process's share that the
// rewriter cannot combine over the processes, a value printed by printf and a value with an update in it are
// reported, not logged.
// RUN: %accel-rewrite %s --log-with=jsonl -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s --log-with=jsonl -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=WARN --implicit-check-not=warning:
//
// A second run on the output changes nothing:
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s --log-with=jsonl -- -std=c++17 -I%S/Inputs > %t/once.cpp 2>/dev/null
// RUN: %accel-rewrite %t/once.cpp --log-with=jsonl --check -- -std=c++17 -I%S/Inputs

#include "datasets.h"

#include <cstdint>
#include <cstdio>
#include <iostream>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

// A prepared loader: each process sums over its share of the batches. The running average is printed every
// 10 steps and logged at the loop's step counter; the epoch's mean loss and accuracy are printed once per epoch
// and logged at the epoch counter, each as the printed line reduces it. The learning rate is no training
// number: that line is not logged.
// CHECK-LABEL: {{^}}void train(
// CHECK:       {{^}}  accelerator.init_trackers("log-metrics");{{$}}
// CHECK-NEXT:  {{^}}  for (int epoch = 0; epoch < 3; ++epoch) {{[{]}}{{$}}
// CHECK:       {{^}}        accelerator.print("step ", step, " running loss ", accelerator.reduce(running, accelerate::ReduceOp::MEAN) / 10);{{$}}
// CHECK-NEXT:  {{^}}        accelerator.log({{[{][{]}}"running_loss", accelerator.reduce(running, accelerate::ReduceOp::MEAN) / 10}}, step);{{$}}
// CHECK:       {{^}}    accelerator.print("epoch ", epoch, " mean loss ", accelerator.reduce(total, accelerate::ReduceOp::MEAN) / batches, " acc ", static_cast<double>(accelerator.reduce(correct, accelerate::ReduceOp::SUM)) / accelerator.reduce(seen, accelerate::ReduceOp::SUM));{{$}}
// CHECK-NEXT:  {{^}}    accelerator.log({{[{][{]}}"mean_loss", accelerator.reduce(total, accelerate::ReduceOp::MEAN) / batches}, {"acc", static_cast<double>(accelerator.reduce(correct, accelerate::ReduceOp::SUM)) / accelerator.reduce(seen, accelerate::ReduceOp::SUM)}}, epoch);{{$}}
// CHECK-NEXT:  {{^}}    accelerator.print("epoch ", epoch, " lr ", optimizer.param_groups()[0].options().get_lr());{{$}}
// CHECK-NEXT:  {{^}}    double ratio = total / seen;{{$}}
// CHECK-NEXT:  {{^}}    std::cout << "ratio " << ratio << std::endl;{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  accelerator.end_training();{{$}}
// WARN: log-metrics.cpp:[[@LINE+30]]:5: warning: output not rewritten: 'ratio' is computed from this process's share of the data{{.*}} [main-process]
// WARN: log-metrics.cpp:[[@LINE+29]]:5: warning: not logged: 'ratio' is computed from this process's share of the data, and the rewriter cannot tell how to combine it over the processes (the main-process pass leaves this line to every process too); logged as it is, it would be the main process's share only. Reduce its parts before computing it (accelerator.reduce(sum, accelerate::ReduceOp::SUM) for sums and counts) and run again [tracking]
void train(Net& net, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  int64_t step = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    double total = 0, running = 0;
    int64_t correct = 0, seen = 0;
    int batches = 0;
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto output = net.forward(batch.data);
      auto loss = output.sum();
      loss.backward();
      optimizer.step();
      ++step;
      total += loss.item<double>();
      running += loss.item<double>();
      correct += output.argmax(1).eq(batch.target).sum().item<int64_t>();
      seen += batch.data.size(0);
      ++batches;
      if (step % 10 == 0) {
        std::cout << "step " << step << " running loss " << running / 10 << std::endl;
        running = 0;
      }
    }
    std::cout << "epoch " << epoch << " mean loss " << total / batches << " acc "
              << static_cast<double>(correct) / seen << std::endl;
    std::cout << "epoch " << epoch << " lr " << optimizer.param_groups()[0].options().get_lr() << std::endl;
    double ratio = total / seen;
    std::cout << "ratio " << ratio << std::endl;
  }
}

// No loader: every process computes the same numbers, printed and logged as they are. The epoch loop keeps no
// counter of its own (a `while`), so its line is logged at the step counter, which the pass declares.
// CHECK-LABEL: {{^}}void full_batch(
// CHECK:       {{^}}  accelerator.init_trackers("log-metrics");{{$}}
// CHECK-NEXT:  {{^}}  int64_t step = 0;{{$}}
// CHECK-NEXT:  {{^}}  accelerator.register_counter("step", step);{{$}}
// CHECK-NEXT:  {{^}}  while (epoch < 3) {{[{]}}{{$}}
// CHECK:       {{^}}      optimizer.step();{{$}}
// CHECK-NEXT:  {{^}}      ++step;{{$}}
// CHECK:       {{^}}    accelerator.print("epoch ", epoch, " average: ", sum / 10);{{$}}
// CHECK-NEXT:  {{^}}    accelerator.log({{[{][{]}}"average", sum / 10}}, step);{{$}}
// CHECK-NEXT:  {{^}}    ++epoch;{{$}}
void full_batch(Net& net, torch::optim::SGD& optimizer, const torch::Tensor& inputs) {
  int epoch = 0;
  while (epoch < 3) {
    double sum = 0;
    for (int i = 0; i < 10; ++i) {
      optimizer.zero_grad();
      auto loss = net.forward(inputs).sum();
      loss.backward();
      optimizer.step();
      sum += loss.item<double>();
    }
    std::cout << "epoch " << epoch << " average: " << sum / 10 << std::endl;
    ++epoch;
  }
}

// A loop that prints no training number: the trackers start and finish, nothing is logged, and the warning says
// how to log by hand.
// CHECK-LABEL: {{^}}void no_numbers(
// CHECK-NOT:   {{^ *}}accelerator{{[.]}}log(
// CHECK:       {{^}}  accelerator.end_training();{{$}}
// WARN: log-metrics.cpp:[[@LINE+2]]:43: warning: nothing logged from this training loop: it prints no loss (loss.item<T>() of a tensor it runs backward on) and no number computed from its batches (a sum, count or mean over steps), in a std::cout or std::cerr line, so the trackers were started and finished but get no values; log what you watch by hand, e.g. accelerator.log({{[{][{]}}"loss", accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)}}, step) [tracking]
void no_numbers(Net& net, torch::optim::SGD& optimizer, const torch::Tensor& inputs) {
  for (int epoch = 0; epoch < 3; ++epoch) {
    optimizer.zero_grad();
    auto loss = net.forward(inputs).sum();
    loss.backward();
    optimizer.step();
    std::cout << "epoch " << epoch << " done" << std::endl;
  }
}

// Values the pass does not log, each reported: a number printed by printf (its label is in the format; the
// warning gives the call to write), and a printed value with an update in it (logging it would run it again).
// CHECK-LABEL: {{^}}void unlogged_values(
// CHECK-NOT:   {{^ *}}accelerator{{[.]}}log(
// CHECK:       {{^}}    accelerator.print("mean loss ", accelerator.reduce(total, accelerate::ReduceOp::MEAN) / batches--);{{$}}
// CHECK-NEXT:  {{^}}  }{{$}}
// CHECK-NEXT:  {{^}}  accelerator.end_training();{{$}}
// WARN: log-metrics.cpp:[[@LINE+16]]:5: warning: output not rewritten: it prints numbers computed from this process's share of the data{{.*}} [main-process]
// WARN: log-metrics.cpp:[[@LINE+15]]:5: warning: value not logged: its label is in a printf format, which the rewriter does not read; log it by hand after this line: accelerator.log({{[{][{]}}"total", accelerator.reduce(total, accelerate::ReduceOp::MEAN) / batches}}, epoch) [tracking]
// WARN: log-metrics.cpp:[[@LINE+15]]:5: warning: not logged: 'batches--' may change what the program computes next, and logging what this line prints would run it a second time; evaluate it into a variable on the line before, and run again [tracking]
void unlogged_values(Net& net, torch::optim::SGD& optimizer) {
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  for (int epoch = 0; epoch < 3; ++epoch) {
    double total = 0;
    int batches = 0;
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto loss = net.forward(batch.data).sum();
      loss.backward();
      optimizer.step();
      total += loss.item<double>();
      ++batches;
    }
    std::printf("mean loss %f\n", total / batches);
    std::cout << "mean loss " << total / batches-- << std::endl;
  }
}
