// A file that trains nothing (autograd, but no optimizer: the public corpus's autograd demo) comes out byte for
// byte as it went in, with nothing on stderr.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs > %t/out.cpp 2> %t/stderr
// RUN: diff %s %t/out.cpp
// RUN: count 0 < %t/stderr
// RUN: %accel-rewrite %s --check -- -std=c++17 -I%S/Inputs

#include <torch/torch.h>

#include <iostream>

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto x = torch::randn({2, 2}, device);
  auto y = (x * x).sum();
  y.backward();
  std::cout << "gradient computed" << std::endl;
  auto z = x.cuda();
  (void)z;
}
