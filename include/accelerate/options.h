// AcceleratorOptions: how an Accelerator is configured when the program says so explicitly.
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

} // namespace accelerate
