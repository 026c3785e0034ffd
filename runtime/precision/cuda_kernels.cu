// CUDA kernels of the runtime: fused amax / scale / saturating fp8 cast for accelerate::nn::Linear under fp8,
// and the device capability query (see cuda_kernels.h). Pure CUDA: no libtorch headers in this file.
#include "precision/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace accelerate::detail::cuda {
namespace {

constexpr int kThreads = 256;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("accelerate: CUDA error in ") + what + ": " +
                             cudaGetErrorString(status));
  }
}

template <typename T> __device__ float load(const T* data, int64_t i);
template <> __device__ float load<float>(const float* data, int64_t i) {
  return data[i];
}
template <> __device__ float load<__nv_bfloat16>(const __nv_bfloat16* data, int64_t i) {
  return __bfloat162float(data[i]);
}
template <> __device__ float load<__half>(const __half* data, int64_t i) {
  return __half2float(data[i]);
}

/// |x| >= 0, so the float's bit pattern orders like an int: atomicMax on ints is a float max (nan included).
__device__ void atomic_max_nonnegative(float* address, float value) {
  atomicMax(reinterpret_cast<int*>(address), __float_as_int(value));
}

template <typename T> __global__ void amax_kernel(const T* input, int64_t count, float* amax) {
  float local = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float value = fabsf(load(input, i));
    local = (value > local || value != value) ? value : local;
  }
  __shared__ float shared[kThreads];
  shared[threadIdx.x] = local;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float other = shared[threadIdx.x + stride];
      if (other > shared[threadIdx.x] || other != other) {
        shared[threadIdx.x] = other;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomic_max_nonnegative(amax, shared[0]);
  }
}

template <typename T>
__global__ void cast_kernel(const T* input, int64_t count, __nv_fp8_storage_t* output,
                            __nv_fp8_interpretation_t format, float fp8_max, const float* amax,
                            float* dequant_scale) {
  const double floor_amax = fmax(static_cast<double>(*amax), 1e-12);
  const float quant = static_cast<float>(static_cast<double>(fp8_max) / floor_amax);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *dequant_scale = 1.0f / quant;
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float scaled = load(input, i) * quant;
    if (scaled == scaled) { // clamp as ATen does, letting nan through as nan
      scaled = fminf(fmaxf(scaled, -fp8_max), fp8_max);
    }
    output[i] = __nv_cvt_float_to_fp8(scaled, __NV_SATFINITE, format);
  }
}

template <typename T>
void quantize(const T* input, int64_t count, void* output, int fp8_format, float* amax, float* dequant_scale,
              cudaStream_t stream) {
  const int grid = static_cast<int>(std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, 1024));
  check(cudaMemsetAsync(amax, 0, sizeof(float), stream), "fp8_quantize (amax reset)");
  amax_kernel<T><<<grid, kThreads, 0, stream>>>(input, count, amax);
  check(cudaGetLastError(), "fp8_quantize (amax)");
  const auto format = fp8_format == 0 ? __NV_E4M3 : __NV_E5M2;
  const float fp8_max = fp8_format == 0 ? 448.0f : 57344.0f;
  auto* fp8_output = static_cast<__nv_fp8_storage_t*>(output);
  cast_kernel<T>
      <<<grid, kThreads, 0, stream>>>(input, count, fp8_output, format, fp8_max, amax, dequant_scale);
  check(cudaGetLastError(), "fp8_quantize (cast)");
}

} // namespace

bool device_capability(int device, int* major, int* minor) {
  if (cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError(); // clear the sticky-free error so later calls do not see it
    return false;
  }
  return true;
}

void fp8_quantize(const void* input, int input_dtype, int64_t count, void* output, int fp8_format,
                  float* amax_workspace, float* dequant_scale, void* stream) {
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  switch (input_dtype) {
  case 0:
    quantize(static_cast<const float*>(input), count, output, fp8_format, amax_workspace, dequant_scale,
             cuda_stream);
    break;
  case 1:
    quantize(static_cast<const __nv_bfloat16*>(input), count, output, fp8_format, amax_workspace,
             dequant_scale, cuda_stream);
    break;
  case 2:
    quantize(static_cast<const __half*>(input), count, output, fp8_format, amax_workspace, dequant_scale,
             cuda_stream);
    break;
  default:
    throw std::invalid_argument(
        "accelerate: fp8_quantize supports float32, bfloat16 and float16 inputs (got code " +
        std::to_string(input_dtype) + ")");
  }
}

} // namespace accelerate::detail::cuda
