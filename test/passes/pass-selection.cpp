// --passes runs only the passes named (and passes that are off by default, when named); --disable leaves some
// out.
// RUN: %accel-rewrite %S/Inputs/small_loop.cpp --passes=backward,accelerator -- -std=c++17 -I%S/Inputs 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=ONLY
// RUN: %accel-rewrite %S/Inputs/small_loop.cpp --disable=device -- -std=c++17 -I%S/Inputs 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=DISABLED

// ONLY:      {{^}}  accelerate::Accelerator accelerator;{{$}}
// ONLY-NEXT: {{^}}  torch::Device device(torch::kCUDA);{{$}}
// ONLY:      {{^}}  model->to(device);{{$}}
// ONLY-NEXT: {{^}}  torch::optim::SGD optimizer(model->parameters(), 0.1);{{$}}
// ONLY:      {{^}}    accelerator.backward(loss);{{$}}

// DISABLED:      {{^}}  torch::Device device(torch::kCUDA);{{$}}
// DISABLED:      {{^}}  model->to(device);{{$}}
// DISABLED-NEXT: {{^}}  accelerator.prepare(model);{{$}}
// DISABLED-NEXT: {{^}}  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));{{$}}
