// DataLoaderOptions: how a prepared data loader batches and orders a dataset.
#pragma once

#include <cstddef>

#include <torch/arg.h>
#include <torch/data/dataloader_options.h>

namespace accelerate {

/// Options for `Accelerator::prepare_data_loader`: libtorch's `torch::data::DataLoaderOptions` plus
/// `shuffle`, which libtorch expresses through the sampler type instead (`RandomSampler`, the default of
/// `make_data_loader`, shuffles; `SequentialSampler` does not). Converts implicitly from libtorch's options
/// and from a batch size, so existing calls keep compiling.
///
/// ```
/// auto train = accelerator.prepare_data_loader(dataset, accelerate::DataLoaderOptions(64).drop_last(true));
/// auto eval = accelerator.prepare_data_loader(test_set, accelerate::DataLoaderOptions(256).shuffle(false));
/// auto same = accelerator.prepare_data_loader(dataset, torch::data::DataLoaderOptions(64)); // shuffles
/// auto ahead = accelerator.prepare_data_loader(dataset, accelerate::DataLoaderOptions(64).workers(2));
/// ```
struct DataLoaderOptions {
  DataLoaderOptions() = default;
  /* implicit */ DataLoaderOptions(size_t batch_size) : batch_size_(batch_size) {}
  /// Takes `batch_size`, `drop_last` and `workers`. A prepared loader always hands batches out in order
  /// (`enforce_ordering`), bounds its read-ahead with `prefetch_factor` rather than `max_jobs`, and waits
  /// for a worker's batch without a `timeout`.
  /* implicit */ DataLoaderOptions(const torch::data::DataLoaderOptions& options)
      : batch_size_(options.batch_size()), drop_last_(options.drop_last()), workers_(options.workers()) {}

  /// Samples per process per batch; with `AcceleratorOptions::split_batches`, the global batch, split
  /// evenly across processes (it must then be a multiple of the number of processes).
  TORCH_ARG(size_t, batch_size) = 1;
  /// Draw a new order of the whole dataset every epoch, from the seed and the epoch (default true, like
  /// `make_data_loader`'s `RandomSampler`); false keeps the dataset's order.
  TORCH_ARG(bool, shuffle) = true;
  /// Drop the final global batch when it is not full, so every batch of every process is full.
  TORCH_ARG(bool, drop_last) = false;
  /// Threads that read and collate batches ahead of the training loop (0: read on the calling thread). The
  /// batches, their order and the checkpointed position are the same for every number of workers; each
  /// worker reads its own copy of the dataset (made when the loader is built, as libtorch's loader does),
  /// so the dataset must be copyable and its `get` must not depend on which thread runs it (draw random
  /// augmentation from `accelerate::sample_generator(index)`). More workers than hardware threads is
  /// allowed, and said once.
  TORCH_ARG(size_t, workers) = 0;
  /// Batches each worker reads ahead: at most `workers × prefetch_factor` batches wait in memory
  /// (>= 1; PyTorch's default, 2). Ignored without workers.
  TORCH_ARG(size_t, prefetch_factor) = 2;
  /// Workers copy each batch into pinned (page-locked) host memory, so the copy to a CUDA device can be
  /// asynchronous (`AcceleratorOptions::non_blocking`). A no-op, said once, when training on the CPU.
  TORCH_ARG(bool, pin_memory) = false;
};

} // namespace accelerate
