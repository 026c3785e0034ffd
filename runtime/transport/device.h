// What the runtime needs from CUDA, behind functions so that only one translation unit includes CUDA headers.
#pragma once

#include <chrono>

#include <accelerate/detail/loader_context.h>

#include <memory>

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace accelerate::detail {

/// A ProcessGroupNCCL backend for CUDA tensors. Throws when the runtime was built without NCCL.
c10::intrusive_ptr<c10d::Backend> create_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                      int world_size, std::chrono::milliseconds timeout);

/// Makes `index` the calling thread's current CUDA device (NCCL and the caching allocator follow it).
void set_current_cuda_device(c10::DeviceIndex index);

/// Returns the CUDA caching allocator's unused blocks to the driver; nothing without CUDA.
void empty_device_cache();

/// A side stream on CUDA `device` for prepared loaders' copies (LoaderContext::copier); null in a build
/// without CUDA support.
std::shared_ptr<SideStreamCopier> make_side_stream_copier(c10::Device device);

} // namespace accelerate::detail
