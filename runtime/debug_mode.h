// ACCELERATE_DEBUG_MODE: collectives checked across processes before any data moves, and a periodic
// checksum that names the process whose replica diverged (runtime-internal).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace accelerate::detail {

struct AcceleratorState;

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

/// Called by `Accelerator::backward` in debug mode: every `ACCELERATE_DEBUG_CHECKSUM_EVERY` optimizer steps
/// (default 100; 0 turns it off), at the first backward of the step, runs `check_replicas_agree`.
void debug_mode_before_backward(AcceleratorState& state);

/// Compares a checksum of every prepared model's parameters and buffers and every prepared optimizer's
/// state across processes (a collective). Throws `std::runtime_error` on every process when they differ,
/// naming the first diverged process and its differing tensors; `when` says where the check ran.
void check_replicas_agree(AcceleratorState& state, const std::string& when);

/// Where the code that called into the runtime is: the innermost stack frame outside libtorch, this
/// runtime and the C and C++ libraries, as `binary+0xoffset` (cheap; see `describe_code_location`).
std::string caller_location();

/// `location` (from `caller_location`) as `file:line (function)` when the binary has debug information and
/// `addr2line` is installed, `function (binary+0xoffset)` with symbols only, else as it is.
std::string describe_code_location(const std::string& location);

} // namespace accelerate::detail
