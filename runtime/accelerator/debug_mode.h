// ACCELERATE_DEBUG_MODE: a periodic checksum that names the process whose replica diverged; the check of
// every collective is transport/collective_checks.h (runtime-internal).
#pragma once

#include <string>

namespace accelerate::detail {

struct AcceleratorState;

/// Called by `Accelerator::backward` in debug mode: every `ACCELERATE_DEBUG_CHECKSUM_EVERY` optimizer steps
/// (default 100; 0 turns it off), at the first backward of the step, runs `check_replicas_agree`.
void debug_mode_before_backward(AcceleratorState& state);

/// Compares a checksum of every prepared model's parameters and buffers and every prepared optimizer's
/// state across processes (a collective). Throws `std::runtime_error` on every process when they differ,
/// naming the first diverged process and its differing tensors; `when` says where the check ran.
void check_replicas_agree(AcceleratorState& state, const std::string& when);

} // namespace accelerate::detail
