// fp8 internals shared by runtime/precision/precision.cpp and runtime/precision/nn_linear.cpp: the
// thread-local fp8 switch of the autocast window, device support, and dynamic per-tensor quantisation
// (runtime-internal).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include <torch/torch.h>

namespace accelerate::nn {
class LinearImpl;
}

namespace accelerate::detail {

/// True on this thread while the autocast window of an fp8 Accelerator is open (thread-local, like autocast).
bool fp8_autocast_enabled();
void set_fp8_autocast_enabled(bool enabled);

/// The compute capability of CUDA device `index` (major, minor); nullopt when the runtime was built without
/// its CUDA kernels and cannot ask.
std::optional<std::pair<int, int>> cuda_capability(c10::DeviceIndex index);
/// Empty when `device` runs `at::_scaled_mm` (CUDA sm_89+, or the CPU under the test-only emulation switch);
/// otherwise why not, in words, for a message.
std::string fp8_unsupported_reason(const torch::Device& device);

/// A tensor cast to fp8 with one per-tensor scale: `data * scale` approximates the original.
struct Fp8Tensor {
  torch::Tensor data;  // float8_e4m3fn or float8_e5m2, same shape
  torch::Tensor scale; // 0-dim float32 dequantisation scale (amax / fp8 max)
};
/// Dynamic per-tensor quantisation: scale from amax, saturating cast (values beyond the format's range clamp
/// to its largest finite value instead of becoming nan/inf).
Fp8Tensor quantize_fp8(const torch::Tensor& tensor, c10::ScalarType fp8_dtype);

/// `accelerate::nn::Linear::forward` inside an fp8 window: `_scaled_mm` when the shapes allow, else bf16 with
/// one warning naming the layer.
torch::Tensor fp8_layer_forward(nn::LinearImpl& layer, const torch::Tensor& input);

} // namespace accelerate::detail
