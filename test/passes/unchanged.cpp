// A file with nothing to rewrite comes out byte for byte as it went in, on stdout, with -o and with -i.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs > %t/stdout.cpp 2> %t/stderr
// RUN: diff %s %t/stdout.cpp
// RUN: count 0 < %t/stderr
// RUN: %accel-rewrite %s -o %t/out.cpp -- -std=c++17 -I%S/Inputs
// RUN: diff %s %t/out.cpp
// RUN: cp %s %t/inplace.cpp && %accel-rewrite %t/inplace.cpp -i -- -std=c++17 -I%S/Inputs
// RUN: diff %s %t/inplace.cpp

#include <torch/torch.h>

// Not tensors: left alone.
struct Scheduler {
  void backward() {}
};

int main() {
  Scheduler scheduler;
  scheduler.backward();
  torch::Tensor x = torch::randn({2, 2});
  torch::Tensor y = x * x;	 // A tab and trailing spaces survive.   
  (void)y;
}
