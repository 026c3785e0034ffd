// The memory of the units' flat buffers: SparePool, which keeps released CPU blocks for the next buffer of
// their size, and the helpers that give a buffer its memory, make one from the pool and give it back.
#include "parallel/fsdp/internal.h"

#include <algorithm>

namespace accelerate::detail::fsdp_internal {

at::DataPtr SparePool::take(size_t bytes, const c10::Device& device, c10::Allocator* allocator) {
  if (device.is_cpu()) {
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->first == bytes) {
        auto block = std::move(it->second);
        blocks_.erase(it);
        return block;
      }
    }
  }
  return allocator->allocate(bytes);
}

void SparePool::give(at::DataPtr block, size_t bytes) {
  if (!block || block.device().type() != c10::DeviceType::CPU) {
    return;
  }
  const auto same =
      std::count_if(blocks_.begin(), blocks_.end(), [&](const auto& kept) { return kept.first == bytes; });
  if (static_cast<size_t>(same) < keep_) {
    blocks_.emplace_back(bytes, std::move(block));
  }
}

void allocate_storage(const torch::Tensor& tensor, size_t bytes, SparePool& pool) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->nbytes() >= bytes) {
    return;
  }
  storage->set_data_ptr_noswap(pool.take(bytes, tensor.device(), storage->allocator()));
  storage->set_nbytes(bytes);
}

void release_storage(const torch::Tensor& tensor, SparePool& pool) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  const size_t bytes = storage->nbytes();
  if (bytes == 0) {
    return;
  }
  pool.give(storage->set_data_ptr(at::DataPtr(nullptr, tensor.device())), bytes);
  storage->set_nbytes(0);
}

torch::Tensor empty_from(SparePool& pool, int64_t numel, const torch::TensorOptions& options,
                         c10::Allocator* allocator) {
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, pool.take(bytes, options.device(), allocator),
                       allocator, /*resizable=*/true);
  return torch::empty({0}, options).set_(storage, 0, {numel}, {1});
}

torch::Tensor empty_from(SparePool& pool, const torch::Tensor& like) {
  return empty_from(pool, like.numel(), like.options(), like.storage().unsafeGetStorageImpl()->allocator());
}

torch::Tensor zeros_from(SparePool& pool, const torch::Tensor& like) {
  return empty_from(pool, like).zero_();
}

void give_back(SparePool& pool, torch::Tensor& tensor) {
  if (!tensor.defined()) {
    return;
  }
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  if (tensor.use_count() == 1 && tensor.storage().use_count() == 1) {
    const size_t bytes = storage->nbytes();
    pool.give(storage->set_data_ptr(at::DataPtr(nullptr, tensor.device())), bytes);
    storage->set_nbytes(0);
  }
  tensor.reset();
}

} // namespace accelerate::detail::fsdp_internal
