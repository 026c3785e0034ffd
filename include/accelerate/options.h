// AcceleratorOptions: how an Accelerator is configured when the program says so explicitly.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace accelerate {

#define ACCELERATE_OPTION(TYPE, NAME)                                                                        \
  AcceleratorOptions& NAME(TYPE value) {                                                                     \
    NAME##_ = std::move(value);                                                                              \
    return *this;                                                                                            \
  }                                                                                                          \
  std::optional<TYPE> NAME##_

/// Options for `Accelerator`, with libtorch-style fluent setters. A value set here wins over the environment
/// (`ACCELERATE_*` variables, then the YAML file named by `ACCELERATE_CONFIG_FILE`); a value left unset is
/// read from there, and otherwise takes the default shown. `accelerator.state()` prints what was resolved.
///
/// ```
/// accelerate::Accelerator accelerator(
///     accelerate::AcceleratorOptions().mixed_precision("bf16").gradient_accumulation_steps(4));
/// ```
struct AcceleratorOptions {
  /// "no" (default), "fp16", "bf16" or "fp8" (`ACCELERATE_MIXED_PRECISION`).
  ACCELERATE_OPTION(std::string, mixed_precision);
  /// Micro-steps per optimizer step inside `accumulate` (`ACCELERATE_GRADIENT_ACCUMULATION_STEPS`; default
  /// 1).
  ACCELERATE_OPTION(int, gradient_accumulation_steps);
  /// Run on the CPU even when CUDA is available (`ACCELERATE_USE_CPU`; default false).
  ACCELERATE_OPTION(bool, cpu);
  /// The loader's batch size is the global batch, split across processes (default false: per process).
  ACCELERATE_OPTION(bool, split_batches);
  /// Pad the last batches with wrapped samples so every process gets as many batches (default true).
  ACCELERATE_OPTION(bool, even_batches);
  /// The prepared scheduler steps only when the optimizer really stepped (default true); false: on every
  /// call.
  ACCELERATE_OPTION(bool, step_scheduler_with_optimizer);
  /// Reproduce Hugging Face Accelerate's scheduler, which steps `num_processes` times per optimizer step
  /// (default false: once per optimizer step).
  ACCELERATE_OPTION(bool, scheduler_steps_per_process);
  /// Where `save_state()` without a directory writes (`project_dir/checkpoints/checkpoint_<n>`).
  ACCELERATE_OPTION(std::string, project_dir);
  ACCELERATE_OPTION(bool, automatic_checkpoint_naming);
  /// How many automatically named checkpoints to keep (0: all).
  ACCELERATE_OPTION(int, total_limit);
  /// DDP: gradient bucket size in MiB (default 25).
  ACCELERATE_OPTION(double, bucket_cap_mb);
  /// DDP: tolerate parameters the loss does not reach (default false).
  ACCELERATE_OPTION(bool, find_unused_parameters);
  /// DDP: gradients are views into the communication buckets, saving one copy (default false).
  ACCELERATE_OPTION(bool, gradient_as_bucket_view);
  /// DDP: the set of used parameters never changes between iterations (default false).
  ACCELERATE_OPTION(bool, static_graph);
  /// Capture the step that `Accelerator::graphed_step` wraps in a CUDA graph and replay it (default false):
  /// one launch per step instead of one per kernel, for static shapes. Without a CUDA device the step runs
  /// as it is written.
  ACCELERATE_OPTION(bool, cuda_graph);
  /// How long forming the process group, and each collective, may take (default 10 minutes).
  ACCELERATE_OPTION(std::chrono::milliseconds, init_timeout);
  /// Seed every generator and the data sampler with `set_seed(seed)` at construction.
  ACCELERATE_OPTION(uint64_t, seed);
  /// Emit `ACCELERATE_DEBUG_MODE` checks (`ACCELERATE_DEBUG_MODE`; default false).
  ACCELERATE_OPTION(bool, debug);
};

#undef ACCELERATE_OPTION

} // namespace accelerate
