// fp8 GEMMs for accelerate::nn::Linear (the torchao Float8Linear recipe): dynamic per-tensor quantisation,
// the _scaled_mm autograd function, device support, and the bf16 fallback with its warning.
#include "precision/fp8.h"

#include <accelerate/nn.h>

#ifdef ACCEL_WITH_CUDA_KERNELS
#include "precision/cuda_kernels.h"
#endif

#include <ATen/autocast_mode.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <atomic>
#include <map>
#include <mutex>
#include <sstream>

namespace accelerate {
namespace detail {
namespace {

thread_local bool fp8_window_open = false;
std::atomic<bool> emulate_on_cpu{false};

/// torchao's floor for amax: an all-zero tensor still gets a finite scale.
constexpr double kAmaxFloor = 1e-12;

double largest_finite(c10::ScalarType fp8_dtype) {
  switch (fp8_dtype) {
  case c10::ScalarType::Float8_e4m3fn:
    return 448.0;
  case c10::ScalarType::Float8_e5m2:
    return 57344.0;
  default:
    TORCH_CHECK(false, "accelerate: fp8 quantisation supports float8_e4m3fn and float8_e5m2 (got ", fp8_dtype,
                ")");
  }
}

bool multiple_of_16(int64_t value) {
  return value > 0 && value % 16 == 0;
}

/// The reference quantisation, in ATen ops: scale = fp8_max / amax computed in float64, then float32.
Fp8Tensor quantize_with_aten(const torch::Tensor& tensor, c10::ScalarType fp8_dtype) {
  const double max = largest_finite(fp8_dtype);
  auto amax = tensor.abs().amax().to(torch::kFloat64).clamp_min(kAmaxFloor);
  auto quant_scale = (torch::full({}, max, amax.options()) / amax).to(torch::kFloat32);
  auto data = (tensor.to(torch::kFloat32) * quant_scale).clamp(-max, max).to(fp8_dtype);
  return {data, quant_scale.reciprocal()};
}

#ifdef ACCEL_WITH_CUDA_KERNELS
/// The same in two small kernels (amax, then scale and cast), with no host synchronisation.
std::optional<Fp8Tensor> quantize_with_cuda_kernels(const torch::Tensor& tensor, c10::ScalarType fp8_dtype) {
  int input_code = -1;
  switch (tensor.scalar_type()) {
  case torch::kFloat32:
    input_code = 0;
    break;
  case torch::kBFloat16:
    input_code = 1;
    break;
  case torch::kFloat16:
    input_code = 2;
    break;
  default:
    return std::nullopt;
  }
  auto input = tensor.contiguous();
  auto data = torch::empty(input.sizes(), input.options().dtype(fp8_dtype));
  auto scalars = torch::empty({2}, input.options().dtype(torch::kFloat32)); // amax workspace, dequant scale
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  auto stream = guard.getStream(input.device());
  cuda::fp8_quantize(input.data_ptr(), input_code, input.numel(), data.data_ptr(),
                     fp8_dtype == c10::ScalarType::Float8_e4m3fn ? 0 : 1, scalars.data_ptr<float>(),
                     scalars.data_ptr<float>() + 1, stream.native_handle());
  return Fp8Tensor{data, scalars[1]};
}
#endif

/// A cast for `_scaled_mm`'s second operand, which must be column-major.
torch::Tensor column_major(const torch::Tensor& matrix) {
  return matrix.t().contiguous().t();
}

/// y = x w^T + b with fp8 GEMMs; the backward re-quantises the saved high-precision x and w.
struct Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               c10::ScalarType out_dtype) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["has_bias"] = bias.defined();
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.defined() ? bias.scalar_type() : out_dtype);
    auto x = quantize_fp8(input, c10::ScalarType::Float8_e4m3fn);
    auto w = quantize_fp8(weight, c10::ScalarType::Float8_e4m3fn);
    // _scaled_mm adds a bias only for half-precision outputs on CUDA: add a float32 one afterwards.
    const bool bias_in_gemm = bias.defined() && out_dtype != torch::kFloat32;
    std::optional<torch::Tensor> gemm_bias;
    if (bias_in_gemm) {
      gemm_bias = bias.to(out_dtype);
    }
    auto output = at::_scaled_mm(x.data, w.data.t(), x.scale, w.scale, gemm_bias, std::nullopt, out_dtype,
                                 /*use_fast_accum=*/true);
    if (bias.defined() && !bias_in_gemm) {
      output.add_(bias.to(out_dtype));
    }
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const auto& input = saved[0];
    const auto& weight = saved[1];
    auto grad_output = grad_outputs[0].contiguous();
    auto g = quantize_fp8(grad_output, c10::ScalarType::Float8_e5m2);
    torch::Tensor grad_input, grad_weight, grad_bias;
    if (ctx->needs_input_grad(0)) {
      // dx [M, K] = dy [M, N] @ w [N, K]
      auto w = quantize_fp8(weight, c10::ScalarType::Float8_e4m3fn);
      grad_input = at::_scaled_mm(g.data, column_major(w.data), g.scale, w.scale, std::nullopt, std::nullopt,
                                  input.scalar_type(), /*use_fast_accum=*/false);
    }
    if (ctx->needs_input_grad(1)) {
      // dw [N, K] = dy^T [N, M] @ x [M, K]
      auto x = quantize_fp8(input, c10::ScalarType::Float8_e4m3fn);
      grad_weight =
          at::_scaled_mm(g.data.t().contiguous(), column_major(x.data), g.scale, x.scale, std::nullopt,
                         std::nullopt, weight.scalar_type(), /*use_fast_accum=*/false);
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) {
      const auto bias_dtype = static_cast<c10::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
      grad_bias = grad_output.sum(0, /*keepdim=*/false, torch::kFloat32).to(bias_dtype);
    }
    return {grad_input, grad_weight, grad_bias, torch::Tensor()};
  }
};

/// What `_scaled_mm` needs of the shapes, or what is wrong with them.
std::string shape_problem(int64_t rows, int64_t in_features, int64_t out_features) {
  if (multiple_of_16(rows) && multiple_of_16(in_features) && multiple_of_16(out_features)) {
    return "";
  }
  std::ostringstream out;
  out << "fp8 GEMMs need in_features, out_features and the input's rows (batch x sequence) to be multiples "
         "of 16 "
         "(got in_features="
      << in_features << ", out_features=" << out_features << ", rows=" << rows << ")";
  return out.str();
}

/// The dtype a layer's output has: autocast's while it is on, else the input's.
c10::ScalarType output_dtype_for(const torch::Tensor& input) {
  const auto type = input.device().type();
  if (at::autocast::is_autocast_available(type) && at::autocast::is_autocast_enabled(type)) {
    return at::autocast::get_autocast_dtype(type);
  }
  return input.scalar_type();
}

torch::Tensor bf16_linear(const nn::LinearImpl& layer, const torch::Tensor& input) {
  const auto type = input.device().type();
  if (at::autocast::is_autocast_available(type) && at::autocast::is_autocast_enabled(type) &&
      at::autocast::get_autocast_dtype(type) == torch::kBFloat16) {
    return at::linear(input, layer.weight, layer.bias); // autocast casts (and caches the weight's copy)
  }
  return at::linear(input.to(torch::kBFloat16), layer.weight.to(torch::kBFloat16),
                    layer.bias.defined() ? layer.bias.to(torch::kBFloat16) : layer.bias);
}

} // namespace

bool fp8_autocast_enabled() {
  return fp8_window_open;
}
void set_fp8_autocast_enabled(bool enabled) {
  fp8_window_open = enabled;
}

std::optional<std::pair<int, int>> cuda_capability(c10::DeviceIndex index) {
#ifdef ACCEL_WITH_CUDA_KERNELS
  int major = 0, minor = 0;
  if (cuda::device_capability(index, &major, &minor)) {
    return std::make_pair(major, minor);
  }
#else
  (void)index;
#endif
  return std::nullopt;
}

std::string fp8_unsupported_reason(const torch::Device& device) {
  if (device.is_cpu()) {
    return nn::testing::fp8_emulated_on_cpu() ? "" : "this process runs on the CPU";
  }
  if (!device.is_cuda()) {
    std::ostringstream out;
    out << "this process runs on " << device;
    return out.str();
  }
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, std::string> verdicts;
  std::lock_guard<std::mutex> lock(mutex);
  const auto index = device.has_index() ? device.index() : c10::DeviceIndex(0);
  if (auto it = verdicts.find(index); it != verdicts.end()) {
    return it->second;
  }
  std::ostringstream reason;
  if (auto capability = cuda_capability(index)) {
    if (*capability < std::make_pair(8, 9)) {
      reason << "cuda:" << static_cast<int>(index) << " has compute capability " << capability->first << "."
             << capability->second;
    }
  } else {
    // Built without the CUDA kernels: ask _scaled_mm itself, once.
    try {
      auto options = torch::TensorOptions(torch::kFloat32).device(torch::kCUDA, index);
      auto a = torch::zeros({16, 16}, options).to(c10::ScalarType::Float8_e4m3fn);
      auto one = torch::ones({}, options);
      (void)at::_scaled_mm(a, a.t(), one, one, std::nullopt, std::nullopt, torch::kBFloat16);
    } catch (const std::exception& error) {
      std::string what = error.what();
      reason << "cuda:" << static_cast<int>(index) << " cannot run at::_scaled_mm ("
             << what.substr(0, what.find('\n')) << ")";
    }
  }
  return verdicts[index] = reason.str();
}

Fp8Tensor quantize_fp8(const torch::Tensor& tensor, c10::ScalarType fp8_dtype) {
#ifdef ACCEL_WITH_CUDA_KERNELS
  if (tensor.is_cuda()) {
    if (auto fused = quantize_with_cuda_kernels(tensor, fp8_dtype)) {
      return *fused;
    }
  }
#endif
  return quantize_with_aten(tensor, fp8_dtype);
}

torch::Tensor fp8_layer_forward(nn::LinearImpl& layer, const torch::Tensor& input) {
  const int64_t in_features = layer.options.in_features();
  const int64_t out_features = layer.options.out_features();
  const int64_t rows = input.dim() == 0 || in_features == 0 ? 0 : input.numel() / in_features;
  auto problem = shape_problem(rows, in_features, out_features);
  if (problem.empty()) {
    problem = fp8_unsupported_reason(input.device());
  }
  if (!problem.empty()) {
    if (!layer.warned_fp8_fallback) {
      layer.warned_fp8_fallback = true;
      std::ostringstream name;
      if (!layer.qualified_name.empty()) {
        name << "'" << layer.qualified_name << "' (";
        layer.pretty_print(name);
        name << ")";
      } else {
        layer.pretty_print(name);
      }
      TORCH_WARN("accelerate: ", name.str(), ": ", problem,
                 "; this layer computes in bf16 instead of fp8. (Warned once per layer.)");
    }
    return bf16_linear(layer, input);
  }
  auto flat = input.reshape({rows, in_features});
  auto output = Fp8LinearFunction::apply(flat, layer.weight, layer.bias, output_dtype_for(input));
  auto sizes = input.sizes().vec();
  sizes.back() = out_features;
  return output.view(sizes);
}

} // namespace detail

namespace nn {

torch::Tensor fp8_linear(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                         std::optional<c10::ScalarType> out_dtype) {
  TORCH_CHECK(input.dim() == 2 && weight.dim() == 2,
              "accelerate::nn::fp8_linear: input and weight must be 2-D (got input of shape ", input.sizes(),
              ", weight of shape ", weight.sizes(), "); flatten the leading dimensions of the input first");
  TORCH_CHECK(input.size(1) == weight.size(1), "accelerate::nn::fp8_linear: input has ", input.size(1),
              " features but weight [out, in] expects ", weight.size(1));
  const auto problem = detail::shape_problem(input.size(0), weight.size(1), weight.size(0));
  TORCH_CHECK(problem.empty(), "accelerate::nn::fp8_linear: ", problem,
              "; pad them, or use at::linear for this layer");
  const auto unsupported = detail::fp8_unsupported_reason(input.device());
  TORCH_CHECK(unsupported.empty(),
              "accelerate::nn::fp8_linear: fp8 needs a CUDA GPU with compute capability 8.9 or ",
              "newer, but ", unsupported, "; use at::linear in bf16 there");
  return detail::Fp8LinearFunction::apply(input, weight, bias, out_dtype.value_or(input.scalar_type()));
}

namespace testing {
void emulate_fp8_on_cpu(bool enabled) {
  detail::emulate_on_cpu.store(enabled);
}
bool fp8_emulated_on_cpu() {
  return detail::emulate_on_cpu.load();
}
} // namespace testing

} // namespace nn
} // namespace accelerate
