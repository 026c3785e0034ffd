// The runtime's own CUDA kernels (runtime/precision/cuda_kernels.cu): built when CMake finds a CUDA compiler,
// which defines ACCEL_WITH_CUDA_KERNELS. Plain C types, so the C++ translation units need no CUDA headers.
#pragma once

#include <cstdint>

namespace accelerate::detail::cuda {

/// The compute capability of CUDA device `device`; false when the query fails.
bool device_capability(int device, int* major, int* minor);

/// Fused dynamic per-tensor fp8 quantisation of `count` contiguous elements, on `stream`, without host
/// synchronisation: amax = max |in|, quant = fp8_max / max(amax, 1e-12) (in double, then float),
/// out[i] = saturating_cast(in[i] * quant), *dequant_scale = 1 / quant. `input_dtype`: 0 float32, 1 bfloat16,
/// 2 float16; `fp8_format`: 0 e4m3fn, 1 e5m2. `amax_workspace` is one device float the call overwrites.
/// The same numbers as ATen's abs().amax(), mul, clamp and .to(fp8) (round to nearest even).
void fp8_quantize(const void* input, int input_dtype, int64_t count, void* output, int fp8_format,
                  float* amax_workspace, float* dequant_scale, void* stream);

} // namespace accelerate::detail::cuda
