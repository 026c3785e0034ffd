// LoaderContext: what a prepared DataLoader needs from its Accelerator, without seeing the runtime's
// internals.
#pragma once

#include <accelerate/gradient_state.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace accelerate::detail {

/// Lets a process whose loader ran out (even_batches false) keep answering the gradient collectives of the
/// processes that still train, as torch's `Join` does, so nothing hangs.
class Joiner {
public:
  virtual ~Joiner() = default;
  /// Called by every process before each batch: how many processes still have a batch this step.
  virtual int64_t processes_with_batches(bool has_batch) = 0;
  /// Called by a process whose loader is exhausted, right after its `processes_with_batches(false)`: takes
  /// part in the others' gradient synchronisation (with zero gradients) until every process is exhausted,
  /// then makes every prepared model equal to the one of the process that trained longest (as DDP's Join).
  virtual void join_until_all_exhausted() = 0;
};

/// Carries batches from the main process, which alone reads the data, to the others
/// (`AcceleratorOptions::dispatch_batches`): point to point, so a process whose batches ran out (uneven
/// batches) is never waited for. Every call is made by the processes it names, in the same order on each.
class BatchDispatcher {
public:
  virtual ~BatchDispatcher() = default;
  /// Called by every process when a loader is built: the main process's `own` reaches every process (the
  /// others' `own` is not used: they may be unable to read the data at all).
  virtual std::optional<size_t> dataset_size(std::optional<size_t> own) = 0;
  /// Main process: sends process r the tensors `batches[r]` (dense; on any device) for each r > 0 that has a
  /// value, and returns once they are sent. Throws `std::invalid_argument` for a tensor it cannot send.
  virtual void send(const std::vector<std::optional<std::vector<at::Tensor>>>& batches) = 0;
  /// Main process: tells each of `processes`, waiting in `receive`, that their batch could not be read.
  virtual void send_error(const std::vector<int>& processes, const std::string& message) = 0;
  /// Another process: the tensors of its next batch, on the CPU (in pinned memory when `pin`). Throws
  /// `std::runtime_error` with the main process's message when the main process could not read it.
  virtual std::vector<at::Tensor> receive(bool pin) = 0;
};

/// Copies batches to a CUDA device on a side stream, so that the copy of the next batch overlaps the step on
/// the current batch (`pin_memory` with `AcceleratorOptions::non_blocking`, on CUDA;
/// runtime/transport/device_cuda.cpp).
class SideStreamCopier {
public:
  virtual ~SideStreamCopier() = default;
  /// `tensor` copied to `device` asynchronously on the side stream (`tensor` itself when it is there
  /// already); its memory is kept from reuse until the work the calling thread's current stream has queued
  /// when it is freed is done. Called on the training thread.
  virtual at::Tensor copy(const at::Tensor& tensor, c10::Device device) = 0;
  /// After the copies of one batch: marks the point the current stream must wait for.
  virtual void record() = 0;
  /// Makes the current stream wait until the copies before the last `record` are done.
  virtual void wait() = 0;
};

class LoaderCore;

/// The prepared loaders of one Accelerator, so `save_state` can record their data position and `set_seed`
/// can reach them. Loaders add their core when they are built.
struct LoaderRegistry {
  std::vector<std::weak_ptr<LoaderCore>> cores;
};

/// Everything a prepared loader reads from the Accelerator that built it.
struct LoaderContext {
  c10::Device device{c10::kCPU};
  int num_processes = 1;
  int process_index = 0;
  bool even_batches = true;
  bool split_batches = false;
  /// Copy batches to the device asynchronously (`AcceleratorOptions::non_blocking`).
  bool non_blocking = false;
  /// `AcceleratorOptions::dispatch_batches`: the main process reads every process's batches.
  bool dispatch_batches = false;
  /// Sends them; null with one process or without `dispatch_batches`.
  std::shared_ptr<BatchDispatcher> dispatcher;
  /// Null unless the device is CUDA and `non_blocking` is on (test/runtime/data_unit_test.cpp gives a CPU
  /// stand-in). Used by loaders with `pin_memory` that do not dispatch.
  std::shared_ptr<SideStreamCopier> copier;
  uint64_t seed = 0;
  std::shared_ptr<GradientState> gradient_state;
  /// Null with one process.
  std::shared_ptr<Joiner> joiner;
  std::shared_ptr<LoaderRegistry> registry;
};

} // namespace accelerate::detail
