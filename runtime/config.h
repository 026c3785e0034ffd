// ResolvedConfig: the Accelerator's configuration after options, environment and config file are merged.
#pragma once

#include <accelerate/options.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace accelerate::detail {

struct ResolvedConfig {
  std::string mixed_precision = "no";
  int gradient_accumulation_steps = 1;
  bool cpu = false;
  bool split_batches = false;
  bool even_batches = true;
  bool step_scheduler_with_optimizer = true;
  bool scheduler_steps_per_process = false;
  std::string project_dir;
  bool automatic_checkpoint_naming = false;
  int total_limit = 0;
  double bucket_cap_mb = 25.0;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
  bool cuda_graph = false;
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  std::optional<uint64_t> seed;
  bool debug = false;
  /// The parallel strategy's registered name (runtime/parallel.h); "ddp" replicates the model on every
  /// process.
  std::string parallel_strategy = "ddp";
  /// For each key: where its value came from ("options", "environment", "config file PATH", "default").
  std::map<std::string, std::string> sources;
};

/// Merges, highest first: `options`, the `ACCELERATE_*` environment, the YAML file named by
/// `ACCELERATE_CONFIG_FILE` (never the default config path), defaults. Throws `std::invalid_argument`
/// naming the key, the value and the allowed values on a bad setting.
ResolvedConfig resolve_config(const AcceleratorOptions& options);

/// `key: value  (source)` lines, for `Accelerator::state()`.
std::string describe(const ResolvedConfig& config);

} // namespace accelerate::detail
