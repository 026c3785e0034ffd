// The clip pass: libtorch's gradient clipping becomes the accelerator's; `.item<double>()` is added where the
// norm's value is used; a call with error_if_nonfinite is reported and left alone.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs -Wno-unused-value | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs -Wno-unused-value 2>&1 >/dev/null | FileCheck %s \
// RUN:   --check-prefix=WARN --implicit-check-not=warning:

#include <torch/torch.h>

void step(torch::nn::Linear& model, torch::optim::SGD& optimizer, torch::Tensor weight) {
  model->forward(weight).sum().backward();
  torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
  // CHECK: {{^}}  accelerator.clip_grad_norm_(model->parameters(), 1.0);{{$}}
  double norm = torch::nn::utils::clip_grad_norm_(model->parameters(), 0.5, 2.0);
  // CHECK: {{^}}  double norm = accelerator.clip_grad_norm_(model->parameters(), 0.5, 2.0).item<double>();{{$}}
  if (torch::nn::utils::clip_grad_norm_({weight}, 0.5) > 10)
    // CHECK: {{^}}  if (accelerator.clip_grad_norm_({weight}, 0.5).item<double>() > 10){{$}}
    (void)norm;
  (void)torch::nn::utils::clip_grad_norm_(model->parameters(), 2.0);
  // CHECK: {{^}}  (void)accelerator.clip_grad_norm_(model->parameters(), 2.0);{{$}}
  torch::nn::utils::clip_grad_value_(model->parameters(), 0.1);
  // CHECK: {{^}}  accelerator.clip_grad_value_(model->parameters(), 0.1);{{$}}
  torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0, 2.0, /*error_if_nonfinite=*/true);
  // CHECK: {{^}}  torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0, 2.0, /*error_if_nonfinite=*/true);{{$}}
  // WARN: clip.cpp:[[@LINE-2]]:3: warning: gradient clipping not rewritten: accelerator.clip_grad_norm_ has no
  // WARN-SAME: error_if_nonfinite; drop that argument and check the returned norm with torch::isfinite instead [clip]
  optimizer.step();
}
