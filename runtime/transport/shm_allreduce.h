// Same-machine all-reduce (and the reduce-scatter and all-gather of sharded strategies) through shared
// memory, in front of Gloo for CPU tensors (runtime-internal).
//
// Gloo moves every CPU all-reduce through TCP sockets and its own worker threads, even when all processes run
// on one machine. There, a segment every process maps does the same work with a few memory copies: each
// process writes its tensor into its own slot, reduces one 1/N share of all slots, and copies every share
// back. Every process gets bit-identical results (each share is reduced once, by one process).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace accelerate::detail {

/// Wraps the CPU backend `inner` so that all-reduces (sum, min, max) of one dense CPU tensor of a real or
/// integer dtype go through a shared-memory segment; every other call goes to `inner`. A collective: every
/// process of the group calls it. `ACCELERATE_SHM_ALLREDUCE` decides: unset or `auto` uses the segment when
/// every process can map it (one machine, one /dev/shm) and quietly returns `inner` otherwise; `0` always
/// returns `inner`; `1` throws `std::runtime_error` with the reason when the segment cannot be used. Every
/// process reaches the same decision. An all-reduce waits at most `timeout` for the other processes, and
/// throws at once, naming it, when one of them has exited. A non-empty `apart` says why the processes must
/// not share memory even where they could (they are on different machines, by the launcher's account): then
/// `inner` is returned (with `1`, the reason is thrown), without a collective. The segment's name carries
/// `run_id` (run_file_name), so what a job leaves in /dev/shm says which job it was.
c10::intrusive_ptr<c10d::Backend> wrap_backend_with_shared_memory(
    c10::intrusive_ptr<c10d::Backend> inner, const c10::intrusive_ptr<c10d::Store>& store,
    std::chrono::milliseconds timeout, const std::string& apart = "", const std::string& run_id = "");

/// Whether `backend` (as `wrap_backend_with_shared_memory` returned it) all-reduces through shared memory.
bool uses_shared_memory_allreduce(const c10::intrusive_ptr<c10d::Backend>& backend);

/// Replaces every element of `tensors` (dense contiguous CPU tensors of one floating dtype) by its average
/// over the processes, as one collective over their concatenation: every process passes tensors of the same
/// total size and dtype (how they are split may differ). The sum is taken in rank order in the dtype's math
/// type (float for bfloat16 and half), then divided by the world size, once per element, by one process;
/// every process gets the same bits. `backend` must be one `uses_shared_memory_allreduce` accepts.
void average_in_shared_memory(const c10::intrusive_ptr<c10d::Backend>& backend,
                              const std::vector<at::Tensor>& tensors);

/// Reduce-scatter with averaging, for sharded strategies: process r's `output` (S elements) becomes the
/// average over the processes of elements [r * S, (r + 1) * S) of their `input` (world * S elements), with
/// the arithmetic of `average_in_shared_memory`, so it holds exactly the bits `average_in_shared_memory` of
/// the whole `input` would leave there. Both are dense contiguous CPU tensors of one floating dtype; every
/// process passes the same S. `output` may be this process's own range of `input` (`input.narrow(0, r * S,
/// S)`), and must not otherwise overlap it. A collective, with the same waiting and failure rules as the
/// all-reduce; `backend` must be one `uses_shared_memory_allreduce` accepts.
void reduce_scatter_average_in_shared_memory(const c10::intrusive_ptr<c10d::Backend>& backend,
                                             const at::Tensor& output, const at::Tensor& input);

/// All-gather: `output` (world * S elements) becomes the concatenation, in rank order, of every process's
/// `input` (S elements). Dense contiguous CPU tensors of one dtype, the same S on every process. `input` may
/// be this process's own range of `output` (`output.narrow(0, r * S, S)`: in place), and must not otherwise
/// overlap it. A collective, like `reduce_scatter_average_in_shared_memory`.
void all_gather_in_shared_memory(const c10::intrusive_ptr<c10d::Backend>& backend, const at::Tensor& output,
                                 const at::Tensor& input);

} // namespace accelerate::detail
