// What `accel launch` runs with, resolved from three places in Accelerate's order: the config file, then
// the environment, then flags (each later one wins); and the ACCELERATE_* / FSDP_* variables that result,
// spelled as Hugging Face's launcher exports them.
#pragma once

#include "ConfigFile.h"
#include "ConfigValues.h"
#include "Flags.h"
#include "RankEnvironment.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel {

/// One setting that a flag, a config key and an environment variable can each give.
struct SettingSpec {
  std::string name;      ///< the flag, `--<name>` (also the config key inside its section)
  std::string configKey; ///< dotted key in the config file, like fsdp_config.fsdp_version; "" = none
  std::string environmentVariable; ///< what the launcher exports and reads, like FSDP_VERSION; "" = none
  ValueRule rule;
  std::string help;
  bool toggle = false; ///< a flag without a value (`--cpu`) that means true
  /// A row of the runtime's option table that no spec above spells (our own settings, like comm_hook): its
  /// value is checked as the runtime checks it (accelerate::detail::check_option_text) and exported to
  /// every rank as `environmentVariable`.
  bool fromOptionTable = false;
};

/// Every such setting, in the order `accel launch --help` lists them: accel's own list, then a flag for each
/// row of the runtime's option table with an environment variable that list does not name.
const std::vector<SettingSpec>& launchSettingSpecs();

/// Where a resolved value came from; later sources win.
enum class SettingSource { ConfigFile, Environment, Flag };

/// The resolved settings, by SettingSpec name.
class LaunchSettings {
public:
  struct Value {
    std::string text; ///< canonical (ConfigValues.h)
    SettingSource source;
    /// How messages name where it came from, where the source alone does not say: a DeepSpeed JSON's key
    /// ("DeepSpeed config ds.json, key zero_optimization.stage"); "" otherwise.
    std::string origin;
  };

  std::optional<std::string> get(const std::string& name) const;
  bool isTrue(const std::string& name) const { return get(name).value_or("false") == "true"; }
  std::optional<SettingSource> sourceOf(const std::string& name) const;
  /// The origin `set` was given for `name`, or "".
  std::string originOf(const std::string& name) const;
  void set(const std::string& name, std::string text, SettingSource source, std::string origin = "");

private:
  std::map<std::string, Value> values_;
};

/// Which of Accelerate's training setups the launch is.
enum class TrainingMode { Plain, Fsdp, DeepSpeed };

/// The settings from `config` (may be null), then `environment`, then `flags`. Throws UsageError naming the
/// variable or flag and the allowed values for a bad one; config values were checked when it was read.
LaunchSettings resolveLaunchSettings(const ConfigDocument* config, const Environment& environment,
                                     const ParsedFlags& flags);

/// Reads the DeepSpeed JSON config that deepspeed_config_file names (--deepspeed_config_file,
/// ACCELERATE_DEEPSPEED_CONFIG_FILE or the config file's key), by the runtime's rules
/// (runtime/settings/deepspeed_json.h), with `worldSize` ranks: its zero_stage, offload devices,
/// gradient_accumulation_steps, gradient_clipping and mixed_precision replace those of `settings` (the
/// environment's fill its "auto" values, as the runtime's do), DeepSpeed is on, and the path becomes
/// absolute. Returns the notes on the keys accepted without effect. Throws UsageError naming the file, the
/// JSON path and the fix for a file the runtime would refuse, for a flag that contradicts the file, for the
/// config keys the file replaces set beside it, and where a mode flag turned DeepSpeed off.
std::vector<std::string> applyDeepSpeedJson(LaunchSettings& settings, std::optional<long long> worldSize);

/// The ZeRO stage the ranks run with: with DeepSpeed on (use_deepspeed) the stage set, else Accelerate's
/// default 2; otherwise a stage from the environment (the ranks inherit it), else 0.
int zeroStageOf(const LaunchSettings& settings);

/// Where a setting came from, for messages: "--zero_stage 2", "ACCELERATE_DEEPSPEED_ZERO_STAGE=2 in the
/// environment", "deepspeed_config.zero_stage 2 in the config file"; "" when it is not set.
std::string describeSetting(const LaunchSettings& settings, const std::string& name);

/// The parallel strategy the runtime selects for `settings`, by the settings library's rule
/// (runtime/settings/strategy.h): parallel_strategy (--parallel_strategy, ACCELERATE_PARALLEL_STRATEGY),
/// DeepSpeed's ZeRO stage (zeroStageOf) and FSDP (use_fsdp: --use_fsdp, ACCELERATE_USE_FSDP, distributed_type
/// FSDP or an fsdp_config section), each named as describeSetting names it. Throws UsageError naming both
/// settings where they contradict each other.
std::string parallelStrategyOf(const LaunchSettings& settings);

/// The sharding strategy the fsdp strategy runs for `settings` (runtime/settings/config.cpp's rule): from
/// fsdp_sharding_strategy or fsdp_reshard_after_forward (true FULL_SHARD, false SHARD_GRAD_OP, or a
/// strategy's name), FULL_SHARD when neither is set. Throws UsageError naming them when they disagree (a
/// value from the environment that means FULL_SHARD, what Hugging Face's launcher exports when neither was
/// given, gives way to the other), for a hybrid strategy, and for another strategy than FULL_SHARD with ZeRO
/// stage 3.
std::string fsdpShardingOf(const LaunchSettings& settings);

/// Throws UsageError for what `settings` ask that accelerate-cpp does not run, naming the flag, variable or
/// config key: the DeepSpeed settings of accelerate::spelling::unsupported_deepspeed_settings() with another
/// value than their default, NVMe offload, hybrid sharding, LOCAL_STATE_DICT; and under the fsdp `strategy`
/// (what parallelStrategyOf gives) the FSDP settings of accelerate::spelling::fsdp_settings() with a value
/// they do not accept, optimizer offload, and fsdpShardingOf's refusals.
void refuseUnsupportedTraining(const LaunchSettings& settings, const std::string& strategy);

/// The ACCELERATE_* / FSDP_* / CUDA_VISIBLE_DEVICES variables every rank gets for `settings` in `mode`, as
/// Hugging Face's `accelerate launch` spells them (accelerate/utils/launch.py). `config` (may be null)
/// supplies ACCELERATE_CONFIG_DS_FIELDS for DeepSpeed.
std::vector<std::pair<std::string, std::string>>
acceleratorVariables(const LaunchSettings& settings, TrainingMode mode, const ConfigDocument* config);

} // namespace accel
