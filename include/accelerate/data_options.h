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
/// ```
struct DataLoaderOptions {
  DataLoaderOptions() = default;
  /* implicit */ DataLoaderOptions(size_t batch_size) : batch_size_(batch_size) {}
  /// Takes `batch_size`, `drop_last` and `workers`; `max_jobs`, `timeout` and `enforce_ordering` only concern
  /// worker threads, which a prepared loader does not use.
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
  /// Must be 0: a prepared loader reads its batches on the calling thread.
  TORCH_ARG(size_t, workers) = 0;
};

} // namespace accelerate
