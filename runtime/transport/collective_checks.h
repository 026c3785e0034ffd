// Debug mode's check of collectives (ACCELERATE_DEBUG_MODE): a c10d Backend wrapper that compares every
// collective across processes before any data moves, and the caller locations its messages name
// (runtime-internal; the locations themselves are watch/stacks.h).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace accelerate::detail {

/// Wraps `backend` so that every collective first publishes its fingerprint (operation, reduce op or root,
/// dtypes, shapes, devices, and the calling code) through `store`, and compares it with every other
/// process's before the data moves. Throws on every process, naming the processes and the operations, when
/// the fingerprints differ or when a process does not arrive within `timeout`. Point-to-point operations and
/// coalescing markers pass through unchecked.
c10::intrusive_ptr<c10d::Backend> wrap_backend_for_debug_mode(c10::intrusive_ptr<c10d::Backend> backend,
                                                              c10::intrusive_ptr<c10d::Store> store,
                                                              std::chrono::milliseconds timeout);

/// While it lives, says what this thread's collectives are for ("all-gather of fsdp unit 'block2'"): debug
/// mode compares it with the rest of each fingerprint, so that a process which skipped one of a run of
/// collectives of the same shapes is named at the first one it skipped. Costs nothing outside debug mode.
class CollectivePurpose {
public:
  explicit CollectivePurpose(std::string purpose);
  ~CollectivePurpose();
  CollectivePurpose(const CollectivePurpose&) = delete;
  CollectivePurpose& operator=(const CollectivePurpose&) = delete;

private:
  std::string purpose_;
  const std::string* previous_;
};

/// "process 2" or "processes 0, 3": how debug mode's messages name processes.
std::string name_processes(const std::vector<int>& ranks);

} // namespace accelerate::detail
