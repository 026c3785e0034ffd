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
};

/// Every such setting, in the order `accel launch --help` lists them.
const std::vector<SettingSpec>& launchSettingSpecs();

/// Where a resolved value came from; later sources win.
enum class SettingSource { ConfigFile, Environment, Flag };

/// The resolved settings, by SettingSpec name.
class LaunchSettings {
public:
  struct Value {
    std::string text; ///< canonical (ConfigValues.h)
    SettingSource source;
  };

  std::optional<std::string> get(const std::string& name) const;
  bool isTrue(const std::string& name) const { return get(name).value_or("false") == "true"; }
  std::optional<SettingSource> sourceOf(const std::string& name) const;
  void set(const std::string& name, std::string text, SettingSource source);

private:
  std::map<std::string, Value> values_;
};

/// Which of Accelerate's training setups the launch is.
enum class TrainingMode { Plain, Fsdp, DeepSpeed };

/// The settings from `config` (may be null), then `environment`, then `flags`. Throws UsageError naming the
/// variable or flag and the allowed values for a bad one; config values were checked when it was read.
LaunchSettings resolveLaunchSettings(const ConfigDocument* config, const Environment& environment,
                                     const ParsedFlags& flags);

/// Throws UsageError (shardedTrainingRefusal) when `settings` ask for FSDP or ZeRO (--use_fsdp,
/// --use_deepspeed, ACCELERATE_USE_FSDP, ACCELERATE_USE_DEEPSPEED): sharded training is not supported yet.
void refuseShardedTraining(const LaunchSettings& settings);

/// The ACCELERATE_* / FSDP_* / CUDA_VISIBLE_DEVICES variables every rank gets for `settings` in `mode`, as
/// Hugging Face's `accelerate launch` spells them (accelerate/utils/launch.py). `config` (may be null)
/// supplies ACCELERATE_CONFIG_DS_FIELDS for DeepSpeed.
std::vector<std::pair<std::string, std::string>>
acceleratorVariables(const LaunchSettings& settings, TrainingMode mode, const ConfigDocument* config);

} // namespace accel
