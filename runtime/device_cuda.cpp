// CUDA-only translation unit: NCCL backend, current device, caching allocator (built when NCCL is found).
#include "device.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace accelerate::detail {

c10::intrusive_ptr<c10d::Backend> create_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                      int world_size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

void set_current_cuda_device(c10::DeviceIndex index) {
  c10::cuda::set_device(index);
}

void empty_device_cache() {
  if (c10::cuda::device_count() > 0) {
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
}

} // namespace accelerate::detail
