// AcceleratorOptions: how an Accelerator is configured when the program says so explicitly.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace accelerate {

/// Options for `Accelerator`, with libtorch-style fluent setters. A value set here wins over the
/// environment (`ACCELERATE_*`, torchrun's variables); a value left unset is read from there.
///
/// ```
/// accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
/// ```
struct AcceleratorOptions {
  /// Run on the CPU even when CUDA is available (`ACCELERATE_USE_CPU`).
  AcceleratorOptions& cpu(bool value) {
    cpu_ = value;
    return *this;
  }
  /// How long forming the process group may take before it fails with a message.
  AcceleratorOptions& init_timeout(std::chrono::milliseconds value) {
    init_timeout_ = value;
    return *this;
  }

  std::optional<bool> cpu_;
  std::optional<std::chrono::milliseconds> init_timeout_;
};

} // namespace accelerate
