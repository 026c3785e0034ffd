// An optimizer member declared in a header: without --headers the header cannot change, so the member is
// reported by name at its first use (the loop is checked at run time); with --headers it is prepared where it
// is built, its declaration in the header retyped.
// RUN: rm -rf %t && mkdir -p %t/proj && cp %s %t/proj/train.cpp && cp %S/Inputs/trainer_member.h %t/proj/
// RUN: %accel-rewrite %t/proj/train.cpp -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN
// RUN: %accel-rewrite %t/proj/train.cpp --headers=%t/proj --output-dir=%t/out -- -std=c++17 -I%S/Inputs \
// RUN:   2>&1 | FileCheck %s --check-prefix=QUIET --allow-empty
// RUN: FileCheck %s < %t/out/train.cpp
// RUN: FileCheck %s --check-prefix=HEADER < %t/out/trainer_member.h

#include "trainer_member.h"

// WARN: train.cpp:[[@LINE+5]]:3: warning: optimizer member 'HeaderTrainer::opt' not prepared: it is declared
// WARN-SAME: in {{.*}}trainer_member.h:10, a header the rewrite may not change, so it cannot become a prepared
// WARN-SAME: optimizer; rewrite the project's headers too (accel-rewrite --headers=DIR;
// WARN-NOT: warning: optimizer member
HeaderTrainer::HeaderTrainer() {
  opt = new torch::optim::SGD(net->parameters(), 0.01);
}
// QUIET-NOT: warning
// CHECK: {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
// CHECK-NEXT: {{^}}  accelerator.prepare(net);{{$}}
// CHECK-NEXT: {{^}}  opt = accelerator.prepare(torch::optim::SGD(net->parameters(), 0.01));{{$}}
// HEADER: {{^}}  std::optional<accelerate::Optimizer> opt;{{$}}

void HeaderTrainer::fit(torch::Tensor x) {
  opt->zero_grad();
  net->forward(x).sum().backward();
  opt->step();
}

int main() {
  HeaderTrainer trainer;
  trainer.fit(torch::Tensor());
}
