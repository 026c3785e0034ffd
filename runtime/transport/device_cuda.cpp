// CUDA-only translation unit: NCCL backend, current device, caching allocator (built when NCCL is found).
#include "transport/device.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
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

namespace {

class CudaSideStreamCopier final : public SideStreamCopier {
public:
  explicit CudaSideStreamCopier(c10::Device device)
      : index_(device.index()), stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index_)) {}

  at::Tensor copy(const at::Tensor& tensor, c10::Device device) override {
    const c10::cuda::CUDAStream consumer = c10::cuda::getCurrentCUDAStream(index_);
    at::Tensor copied;
    {
      c10::cuda::CUDAStreamGuard guard(stream_);
      copied = tensor.to(device, /*non_blocking=*/true);
    }
    // Allocated for the side stream: freed while the current stream still reads it, the block would be handed
    // to the next copy.
    if (copied.is_cuda() && !copied.is_same(tensor)) {
      copied.record_stream(consumer);
    }
    return copied;
  }

  void record() override { event_.record(stream_); }

  void wait() override { event_.block(c10::cuda::getCurrentCUDAStream(index_)); }

private:
  c10::DeviceIndex index_;
  c10::cuda::CUDAStream stream_;
  at::cuda::CUDAEvent event_;
};

} // namespace

std::shared_ptr<SideStreamCopier> make_side_stream_copier(c10::Device device) {
  return std::make_shared<CudaSideStreamCopier>(device);
}

} // namespace accelerate::detail
