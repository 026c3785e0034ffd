// LoaderContext: what a prepared DataLoader needs from its Accelerator, without seeing the runtime's
// internals.
#pragma once

#include <accelerate/gradient_state.h>

#include <cstdint>
#include <memory>
#include <vector>

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
  uint64_t seed = 0;
  std::shared_ptr<GradientState> gradient_state;
  /// Null with one process.
  std::shared_ptr<Joiner> joiner;
  std::shared_ptr<LoaderRegistry> registry;
};

} // namespace accelerate::detail
