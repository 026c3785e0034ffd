// ResolvedConfig: the Accelerator's configuration after options, environment and config file are merged.
#pragma once

#include <accelerate/options.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace accelerate::detail {

/// A resolved option's type: TYPE, or std::optional<TYPE> for an option whose default is std::nullopt.
template <typename Type, typename Default>
using resolved_field_t =
    std::conditional_t<std::is_same_v<std::decay_t<Default>, std::nullopt_t>, std::optional<Type>, Type>;

/// One field per row of <accelerate/detail/option_table.h>, with the row's default; `timeout` holds the
/// option `init_timeout`. `parallel_strategy` is the registered name of the parallel strategy
/// (runtime/parallel/engine.h); "ddp" replicates the model on every process.
struct ResolvedConfig {
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)                     \
  resolved_field_t<TYPE, decltype(DEFAULT)> FIELD = DEFAULT;
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  /// For each option: where its value came from ("options", "environment", "config file PATH", "default").
  std::map<std::string, std::string> sources;
};

/// Merges, highest first: `options`, the `ACCELERATE_*` / `FSDP_*` environment, the YAML file named by
/// `ACCELERATE_CONFIG_FILE` (never the default config path), defaults. A DeepSpeed JSON config named by
/// `ACCELERATE_DEEPSPEED_CONFIG_FILE` or the file's `deepspeed_config.deepspeed_config_file`
/// (settings/deepspeed_json.h) decides zero_stage, the offload devices, gradient_accumulation_steps,
/// gradient_clipping and mixed_precision above the environment, which only fills its "auto" values; one of
/// them set in `options` to another value, or the config file's keys it replaces, are refused. A YAML key
/// with dots names nested mappings (`deepspeed_config.zero_stage`);
/// `deepspeed_config.gradient_accumulation_steps` counts when the top-level key is absent; a key of
/// `fsdp_config` without the `fsdp_` prefix counts as the prefixed one, as in Accelerate. Then selects the
/// strategy:
/// - ZeRO: DeepSpeed asked for (`distributed_type: DEEPSPEED`, a `deepspeed_config` section,
///   `ACCELERATE_USE_DEEPSPEED=true`) without a stage means zero_stage 2, as in Accelerate; zero_stage 1 or 2
///   makes an unset parallel_strategy "zero"; parallel_strategy "zero" without a stage means stage 2;
/// - FSDP: zero_stage 3, or FSDP asked for (`distributed_type: FSDP`, an `fsdp_config` section,
///   `ACCELERATE_USE_FSDP=true`), makes an unset parallel_strategy "fsdp". Under "fsdp",
///   `fsdp_sharding_strategy` is one of "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD" (read from it or from
///   `fsdp_reshard_after_forward`, which must agree with it where both are set; zero_stage 3 means
///   FULL_SHARD), `fsdp_version` 1 or 2 and `fsdp_state_dict_type` "FULL_STATE_DICT" or "SHARDED_STATE_DICT",
///   whatever spelling Accelerate accepts was given; `fsdp_auto_wrap_policy` upper-case, and
///   TRANSFORMER_BASED_WRAP refused without classes.
/// `sources` names what a derived value came from. Throws `std::invalid_argument` naming the option, the
/// value, where it came from and what is allowed on a bad setting; on DeepSpeed and FSDP settings this
/// version does not implement (a DeepSpeed JSON key that would change results, parameter or NVMe offload,
/// offload of checkpointed activations, hybrid sharding, optimizer offload under fsdp, ...); and on settings
/// that contradict each other (parallel_strategy set to another strategy than the one zero_stage or FSDP
/// selects, "zero" with zero_stage 0 set explicitly, ZeRO's stage 1 or 2 with FSDP, optimizer offload without
/// ZeRO, an fsdp_* option set in `options` without the fsdp strategy).
ResolvedConfig resolve_config(const AcceleratorOptions& options);

/// One row of the option table as text: what `accel` (its flags for the rows only the runtime reads) and the
/// generated docs see of it. `environment` and `yaml_key` are "" where the row has none.
struct OptionRow {
  std::string name;
  std::string environment;
  std::string yaml_key;
  std::string doc;
};

/// The rows of <accelerate/detail/option_table.h>, in its order.
const std::vector<OptionRow>& option_rows();

/// Checks `text` as a value of option `name` given by `where` ("--comm_hook", "ACCEL_COMM_HOOK in the
/// environment"), as the runtime reads it: parsed by the option's type, then its CHECK. Throws
/// `std::invalid_argument` with the runtime's message for a bad value, `std::logic_error` for a name that is
/// no row or a row never read from text (no environment variable, no YAML key).
void check_option_text(const std::string& name, const std::string& text, const std::string& where);

/// `option: value  (source)` lines, one per option in the table's order, for `Accelerator::state()`.
std::string describe(const ResolvedConfig& config);

} // namespace accelerate::detail
