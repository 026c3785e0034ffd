// Backward calls that come from a macro expansion are not rewritten: each gets a warning naming the macro,
// and the file is otherwise rewritten as usual.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>%t.stderr | FileCheck %s
// RUN: FileCheck %s --check-prefix=WARN --implicit-check-not=warning: < %t.stderr

#include <torch/torch.h>

void update(torch::optim::SGD& optimizer); // A training file: it takes an optimizer.

#define STEP(l) l.backward()
#define TIMED(x) x
#define LOSS loss

void train(torch::Tensor loss) {
  STEP(loss);
  // CHECK: {{^}}  STEP(loss);{{$}}
  // WARN: macros.cpp:[[@LINE-2]]:3: warning: backward call in a macro expansion not rewritten: it is written in
  // WARN-SAME: the body of macro 'STEP'; call accelerator.backward(<tensor>, ...) there by hand
  TIMED(loss.backward());
  // CHECK: {{^}}  TIMED(loss.backward());{{$}}
  // WARN: macros.cpp:[[@LINE-2]]:3: warning: backward call in a macro expansion not rewritten: it is an argument
  // WARN-SAME: of macro 'TIMED'
  LOSS.backward();
  // CHECK: {{^}}  LOSS.backward();{{$}}
  // WARN: macros.cpp:[[@LINE-2]]:3: warning: backward call in a macro expansion not rewritten: part of it comes
  // WARN-SAME: from macro 'LOSS'
  TIMED(STEP(loss));
  // CHECK: {{^}}  TIMED(STEP(loss));{{$}}
  // WARN: macros.cpp:[[@LINE-2]]:3: warning: backward call in a macro expansion not rewritten: it is written in
  // WARN-SAME: the body of macro 'STEP'
  loss.backward();
  // CHECK: {{^}}  accelerator.backward(loss);{{$}}
}

// A function whose only backward calls are in macros gets no accelerator.
void only_macros(torch::Tensor loss) {
  // CHECK: {{^}}void only_macros(torch::Tensor loss) {{[{]}}{{$}}
  // CHECK-NOT: {{^}}  accelerate::Accelerator accelerator;
  STEP(loss);
  // WARN: macros.cpp:[[@LINE-1]]:3: warning: backward call in a macro expansion not rewritten
}
