// ResolvedConfig: the Accelerator's configuration after options, environment and config file are merged.
#pragma once

#include <accelerate/options.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>

namespace accelerate::detail {

/// A resolved option's type: TYPE, or std::optional<TYPE> for an option whose default is std::nullopt.
template <typename Type, typename Default>
using resolved_field_t =
    std::conditional_t<std::is_same_v<std::decay_t<Default>, std::nullopt_t>, std::optional<Type>, Type>;

/// One field per row of <accelerate/detail/option_table.h>, with the row's default; `timeout` holds the
/// option `init_timeout`. `parallel_strategy` is the registered name of the parallel strategy
/// (runtime/parallel.h); "ddp" replicates the model on every process.
struct ResolvedConfig {
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)                     \
  resolved_field_t<TYPE, decltype(DEFAULT)> FIELD = DEFAULT;
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  /// For each option: where its value came from ("options", "environment", "config file PATH", "default").
  std::map<std::string, std::string> sources;
};

/// Merges, highest first: `options`, the `ACCELERATE_*` environment, the YAML file named by
/// `ACCELERATE_CONFIG_FILE` (never the default config path), defaults. A YAML key with dots names nested
/// mappings (`deepspeed_config.zero_stage`); `deepspeed_config.gradient_accumulation_steps` counts when the
/// top-level key is absent. Then selects ZeRO: DeepSpeed asked for (`distributed_type: DEEPSPEED`, a
/// `deepspeed_config` section, `ACCELERATE_USE_DEEPSPEED=true`) without a stage means zero_stage 2, as in
/// Accelerate; zero_stage 1 or 2 makes an unset parallel_strategy "zero"; parallel_strategy "zero" without a
/// stage means stage 2. `sources` names what a derived value came from. Throws `std::invalid_argument` naming
/// the option, the value, where it came from and what is allowed on a bad setting; on FSDP, which this
/// version does not provide; on DeepSpeed settings it does not implement (a `deepspeed_config_file`,
/// parameter or NVMe offload, the stage-3 flags); and on parallel_strategy set to another strategy than
/// "zero" with zero_stage 1 or 2, "zero" with zero_stage 0 set explicitly, or optimizer offload without ZeRO.
ResolvedConfig resolve_config(const AcceleratorOptions& options);

/// `option: value  (source)` lines, one per option in the table's order, for `Accelerator::state()`.
std::string describe(const ResolvedConfig& config);

} // namespace accelerate::detail
