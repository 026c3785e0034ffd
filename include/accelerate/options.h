// AcceleratorOptions: how an Accelerator is configured when the program says so explicitly; SaveModelOptions:
// how `Accelerator::save_model` writes a model's weights.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accelerate {

/// Options for `Accelerator`, with libtorch-style fluent setters. A value set here wins over the environment
/// (`ACCELERATE_*` variables, then the YAML file named by `ACCELERATE_CONFIG_FILE`); a value left unset is
/// read from there, and otherwise takes its default. `accelerator.state()` prints what was resolved.
///
/// ```
/// accelerate::Accelerator accelerator(
///     accelerate::AcceleratorOptions().mixed_precision("bf16").gradient_accumulation_steps(4));
/// ```
///
/// Every option is one row of <accelerate/detail/option_table.h>: its type, default, environment variable,
/// config-file key, what its values must be, and what it does (docs/api.md's table is generated from it).
/// Each row gives a setter `NAME(TYPE)` and the member `std::optional<TYPE> NAME_` (unset: not given here).
struct AcceleratorOptions {
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)                     \
  AcceleratorOptions& NAME(TYPE value) {                                                                     \
    NAME##_ = std::move(value);                                                                              \
    return *this;                                                                                            \
  }                                                                                                          \
  std::optional<TYPE> NAME##_;
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
};

/// Options for `Accelerator::save_model`, Accelerate's `save_model` arguments.
///
/// ```
/// accelerator.save_model(*model, "final", accelerate::SaveModelOptions().max_shard_size("5GB"));
/// ```
struct SaveModelOptions {
  /// The largest weight file (default "10GB", as Accelerate's): weights larger than this are split into
  /// `model-00001-of-0000N.safetensors` ... with `model.safetensors.index.json`, as transformers writes them.
  /// A size as Accelerate reads it ("500MB" = 500*10^6 bytes, "2GiB" = 2*2^30, a final lower-case "b" for
  /// bits) or a number of bytes; a tensor larger than it gets a file of its own.
  SaveModelOptions& max_shard_size(std::string size) {
    max_shard_size_ = std::move(size);
    return *this;
  }
  SaveModelOptions& max_shard_size(std::uint64_t bytes) {
    max_shard_size_ = std::to_string(bytes);
    return *this;
  }
  /// Accelerate's `safe_serialization` (default true): safetensors files. False asks for pickle files
  /// (`pytorch_model.bin`), which accelerate-cpp does not write: `save_model` refuses it.
  SaveModelOptions& safe_serialization(bool safe) {
    safe_serialization_ = safe;
    return *this;
  }

  std::string max_shard_size_ = "10GB";
  bool safe_serialization_ = true;
};

} // namespace accelerate
