// Stand-ins for runtime/transport/device_cuda.cpp in a build without NCCL: CUDA training across processes is
// refused.
#include "transport/device.h"

#include <stdexcept>

namespace accelerate::detail {

c10::intrusive_ptr<c10d::Backend> create_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                      std::chrono::milliseconds) {
  throw std::runtime_error(
      "accelerate: this build of the runtime has no NCCL support (nccl.h was not found when "
      "it was built), so CUDA tensors cannot be synchronised across processes. Rebuild on a "
      "machine with the CUDA toolkit and NCCL, or train on the CPU "
      "(AcceleratorOptions().cpu(true), ACCELERATE_USE_CPU=true)");
}

void set_current_cuda_device(c10::DeviceIndex) {}

void empty_device_cache() {}

std::shared_ptr<SideStreamCopier> make_side_stream_copier(c10::Device) {
  return nullptr; // batches are copied on the current stream
}

} // namespace accelerate::detail
