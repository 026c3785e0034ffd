// The distributed pass, and every other pass: a function that already calls the runtime or c10d is left alone,
// with a note (with --explain) when it still has code a pass would otherwise rewrite.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2> %t.stderr | FileCheck %s
// RUN: FileCheck %s --check-prefix=SUMMARY --implicit-check-not=warning: < %t.stderr
// RUN: %accel-rewrite %s --explain -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=NOTE

#include <torch/torch.h>
#include <accelerate/accelerate.h>

// Converted by hand, half way: left as it is.
void by_hand(accelerate::Accelerator& accelerator, torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  accelerator.prepare(model);
  auto loss = model->forward(torch::randn({2, 4})).sum();
  loss.backward();
  // CHECK: {{^}}  loss.backward();{{$}}
  optimizer.step();
}
// NOTE: distributed.cpp:[[@LINE-7]]:1: note: [distributed] 'by_hand' left alone: it already calls the runtime or
// NOTE-SAME: c10d, so its training step is taken to be distributed by hand
// SUMMARY: accel-rewrite: {{.*}}distributed.cpp: 0 changes, 0 not rewritten, 1 left alone
