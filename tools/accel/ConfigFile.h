// Accelerate's config file on disk: where it lives, reading it with yaml-cpp and checking every key against
// ConfigSchema (errors name file:line:column, the key, the allowed values), and writing it the way
// Python Accelerate does (sorted keys, PyYAML's quoting).
#pragma once

#include "Flags.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel {

/// A value read from or written to the config file.
struct ConfigValue {
  enum class Kind { Null, Scalar, List, Map };
  Kind kind = Kind::Null;
  std::string text;               ///< a Scalar's canonical text (for a Map key of a known type)
  bool isString = false;          ///< a Scalar written as a YAML string (quoted when PyYAML needs it)
  std::vector<std::string> items; ///< a List's items (strings)
  std::vector<std::pair<std::string, ConfigValue>> entries; ///< a Map's entries, sorted by key
  int line = 0, column = 0;                                 ///< where the key stood (1-based; 0 = not read)

  static ConfigValue scalar(std::string text, bool isString);
  static ConfigValue boolean(bool value) { return scalar(value ? "true" : "false", false); }
  static ConfigValue number(long long value) { return scalar(std::to_string(value), false); }
  static ConfigValue string(std::string text) { return scalar(std::move(text), true); }
  static ConfigValue list(std::vector<std::string> items);
  static ConfigValue map() {
    ConfigValue value;
    value.kind = Kind::Map;
    return value;
  }

  /// For a Map: the entry named `key`, or null.
  const ConfigValue* find(const std::string& key) const;
  /// For a Map: sets `key` (keeping entries sorted, as PyYAML's safe_dump writes them).
  void set(const std::string& key, ConfigValue value);
  bool operator==(const ConfigValue& other) const;
};

/// A whole config file: a Map, and where it came from (for messages).
struct ConfigDocument {
  std::string path;
  ConfigValue root = ConfigValue::map();

  /// The scalar text at `key` (`fsdp_config.fsdp_version` reaches into a nested map), if set and not null.
  std::optional<std::string> scalar(const std::string& dottedKey) const;
  /// "path:line:column: " for `dottedKey` when it was read from a file, else "path: ".
  std::string where(const std::string& dottedKey) const;
};

/// A problem with a config file: the driver prints it after `accel <command>: ` and exits with 2.
class ConfigError : public UsageError {
public:
  using UsageError::UsageError;
};

/// Whether `offload` (fsdp_activation_checkpointing_offload) is true while `checkpointing`
/// (fsdp_activation_checkpointing, unset: false) is not; then the refusal follows "<offload setting> ":
/// "conflicts with fsdp_activation_checkpointing false: " and accelerate::spelling's reason.
bool isActivationOffloadWithoutCheckpointing(const std::optional<std::string>& offload,
                                             const std::optional<std::string>& checkpointing);
std::string activationOffloadWithoutCheckpointing();

/// Where `accel config` writes and `accel launch` reads by default, as Accelerate decides it:
/// $HF_HOME/accelerate/default_config.yaml, else $XDG_CACHE_HOME/huggingface/accelerate/..., else
/// ~/.cache/huggingface/accelerate/default_config.yaml.
std::string defaultConfigPath();

/// Parses and checks `text` (named `path` in messages). Throws ConfigError for malformed YAML (with line and
/// column), an unknown key (with a "did you mean"), a value of the wrong kind or out of range (with the
/// allowed values), or a combination accel cannot run (a SageMaker or TPU config, machine_rank >=
/// num_machines, a DeepSpeed key of accelerate::spelling::unsupported_deepspeed_settings() with another value
/// than its default, an FSDP key of accelerate::spelling::fsdp_settings() with a value it does not accept,
/// TRANSFORMER_BASED_WRAP without classes, hybrid sharding, LOCAL_STATE_DICT, fsdp_sharding_strategy and
/// fsdp_reshard_after_forward disagreeing, ZeRO stage 1 or 2 with FSDP).
ConfigDocument parseConfigText(const std::string& text, const std::string& path);
/// Reads `path` and parses it (see parseConfigText); throws ConfigError when it cannot be read.
ConfigDocument readConfigFile(const std::string& path);

/// The YAML text of `document`, as Python Accelerate's `to_yaml_file` would write it.
std::string configYamlText(const ConfigDocument& document);
/// Writes `document` to `path` (creating its folder), atomically: a temporary file renamed over it.
void writeConfigFile(const std::string& path, const ConfigDocument& document);

} // namespace accel
