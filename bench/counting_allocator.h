// A counting CPU allocator: wraps libtorch's default CPU allocator and keeps the live bytes of every CPU
// tensor made through it, and their peak. Install it before the tensors to count exist:
//
//   static accelerate_bench::counting::CountingAllocator counting(c10::GetDefaultCPUAllocator());
//   c10::SetCPUAllocator(&counting, std::numeric_limits<uint8_t>::max());
//
// Used by bench/zero_memory.cpp (memory per strategy) and by the FSDP tests (a unit's backward holds at most
// two unit-sized buffers). Header-only; one allocator per process.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace accelerate_bench::counting {

// Live bytes of every CPU tensor and their peak; plain atomics, so tensors freed after `main` returns still
// find them (no destructor runs).
inline std::atomic<int64_t> live_bytes{0};
inline std::atomic<int64_t> peak_bytes{0};

inline void count_allocation(int64_t bytes) {
  const int64_t live = live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (live > peak && !peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

inline std::atomic<int64_t> dropped_peak_bytes{0}; // the largest peak `reset_peak` started again from

/// The peak starts again from the bytes live now (one thread calls it, between allocations of its own).
inline void reset_peak() {
  const int64_t dropped = peak_bytes.exchange(live_bytes.load());
  dropped_peak_bytes.store(std::max(dropped_peak_bytes.load(), dropped));
}

/// The peak live bytes since the allocator was installed.
inline int64_t peak_bytes_overall() {
  return std::max(dropped_peak_bytes.load(), peak_bytes.load());
}

/// Wraps the default CPU allocator, whose allocations are simple (the context is the data, freed by its raw
/// deleter): the counting one keeps them simple, so kernels that allocate through `raw_allocate` (which
/// asserts it) work, and looks each allocation's size up by its address when it is freed.
class CountingAllocator final : public c10::Allocator {
public:
  explicit CountingAllocator(c10::Allocator* wrapped)
      : wrapped_(wrapped), wrapped_deleter_(wrapped->raw_deleter()) {
    if (wrapped_deleter_ == nullptr) {
      throw std::runtime_error(
          "counting allocator: the default CPU allocator has no raw deleter to count through");
    }
    self_ = this;
  }

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = wrapped_->allocate(n);
    const c10::Device device = inner.device();
    if (inner.get() != inner.get_context() || inner.get_deleter() != wrapped_deleter_) {
      throw std::runtime_error(
          "counting allocator: the default CPU allocator returned an allocation that is not "
          "simple; the counting allocator cannot count it");
    }
    void* data = inner.release_context();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[data] = static_cast<int64_t>(n);
    }
    count_allocation(static_cast<int64_t>(n));
    return {data, data, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    wrapped_->copy_data(dest, src, count);
  }

private:
  static void release(void* data) {
    if (data == nullptr) {
      return;
    }
    int64_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(self_->mutex_);
      auto found = self_->sizes_.find(data);
      if (found != self_->sizes_.end()) {
        bytes = found->second;
        self_->sizes_.erase(found);
      }
    }
    live_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    self_->wrapped_deleter_(data);
  }

  static inline CountingAllocator* self_ = nullptr;
  c10::Allocator* wrapped_;
  c10::DeleterFnPtr wrapped_deleter_;
  std::mutex mutex_;
  std::unordered_map<void*, int64_t> sizes_;
};

} // namespace accelerate_bench::counting
