// accelerate::nn: layers that use the fastest kernels libtorch has (at::linear, fp8 _scaled_mm).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include <torch/nn/cloneable.h>
#include <torch/nn/options/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace accelerate::nn {

/// A drop-in for `torch::nn::LinearImpl`: the same options (`torch::nn::LinearOptions`), the same parameter
/// names (`weight` [out, in], `bias` [out]) and initialisation, so checkpoints of either load into the other.
///
/// - `forward` calls `at::linear`, which fuses the bias into the GEMM for inputs of any rank (the C++
///   frontend's Linear runs a matmul and a separate bias add above 2-D).
/// - Inside the autocast window of an Accelerator with mixed precision "fp8" on a GPU that has fp8 (CUDA
///   sm_89+), it computes with `at::_scaled_mm`: input and weight in e4m3, the output gradient in e5m2, one
///   dynamic scale per tensor from its amax (the torchao Float8Linear recipe). Layers whose features or rows
///   are not multiples of 16 compute in bf16 instead, with one warning naming the layer.
///
/// ```
/// struct Net : torch::nn::Module {
///   accelerate::nn::Linear fc{nullptr};
///   Net() { fc = register_module("fc", accelerate::nn::Linear(784, 512)); }
///   torch::Tensor forward(torch::Tensor x) { return fc(x); }
/// };
/// ```
class LinearImpl : public torch::nn::Cloneable<LinearImpl> {
public:
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(torch::nn::LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(const torch::nn::LinearOptions& options_);

  void reset() override;
  /// Kaiming-uniform weight and uniform bias, exactly as `torch::nn::LinearImpl::reset_parameters`.
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;
  /// `at::linear(input, weight, bias)` for input [..., in_features]; fp8 GEMMs inside an fp8 autocast window.
  torch::Tensor forward(const torch::Tensor& input);

  torch::nn::LinearOptions options;
  /// [out_features, in_features]
  torch::Tensor weight;
  /// [out_features]; undefined when `options.bias()` is false.
  torch::Tensor bias;
  /// Where the layer sits in the model it was prepared with ("blocks.0.fc"), for messages; set by
  /// `accelerator.prepare(model)`.
  std::string qualified_name;
  /// Internal: this layer already warned that it computes in bf16 instead of fp8.
  bool warned_fp8_fallback = false;
};
TORCH_MODULE(Linear);

/// `input @ weight.T + bias` with fp8 GEMMs, differentiable (what `Linear` runs under fp8): input and weight
/// are cast to e4m3 and the output gradient to e5m2, each with a dynamic per-tensor scale (amax / the
/// format's largest value) and a saturating cast; the high-precision input and weight are saved for the
/// backward, which runs two more `_scaled_mm`. Needs 2-D `input` [rows, in] and `weight` [out, in] with rows,
/// in and out multiples of 16, on a CUDA sm_89+ GPU (or the CPU under `testing::emulate_fp8_on_cpu`). The
/// output has `out_dtype`, by default the input's dtype.
///
/// ```
/// auto y = accelerate::nn::fp8_linear(x, weight, bias, torch::kBFloat16);
/// ```
torch::Tensor fp8_linear(const torch::Tensor& input, const torch::Tensor& weight,
                         const torch::Tensor& bias = {},
                         std::optional<c10::ScalarType> out_dtype = std::nullopt);

namespace testing {
/// Test-only: lets the fp8 path run on the CPU (libtorch 2.11's CPU `_scaled_mm` emulates it), so fp8
/// numerics are testable without a GPU. Set it before constructing the Accelerator.
void emulate_fp8_on_cpu(bool enabled);
bool fp8_emulated_on_cpu();
} // namespace testing

} // namespace accelerate::nn
