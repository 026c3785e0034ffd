// The keys of Hugging Face Accelerate's config file (ClusterConfig and its nested fsdp_config and
// deepspeed_config), with the values each accepts: the one table `accel config` validates against.
#pragma once

#include "ConfigValues.h"

#include <optional>
#include <string>
#include <vector>

namespace accel {

/// One key of the config file. A nested map (fsdp_config, deepspeed_config) lists its own keys in `nested`;
/// a Map-typed key without `nested` (fp8_config, dynamo_config, ...) is read past unchecked.
struct ConfigKey {
  std::string name;
  ValueRule rule;
  bool nullable = false; ///< `key: null` is allowed (main_process_ip, mixed_precision, ...)
  const std::vector<ConfigKey>* nested = nullptr;
};

/// The keys at the top of the file: every field of Accelerate's ClusterConfig, plus `compute_environment`,
/// and the two older keys Accelerate still converts (`fp16`, `dynamo_backend`).
const std::vector<ConfigKey>& topLevelConfigKeys();
/// The keys of `fsdp_config` and `deepspeed_config`.
const std::vector<ConfigKey>& fsdpConfigKeys();
const std::vector<ConfigKey>& deepspeedConfigKeys();

/// `name` in `keys`, or null.
const ConfigKey* findConfigKey(const std::vector<ConfigKey>& keys, const std::string& name);

/// The distributed_type values Accelerate knows, and those accel can launch (DEEPSPEED runs ZeRO: stage 1 or
/// 2 the runtime's zero strategy, stage 3 its fsdp strategy; FSDP the fsdp strategy).
const std::vector<std::string>& accelerateDistributedTypes();
const std::vector<std::string>& supportedDistributedTypes();

// Accelerate's DeepSpeed and precision option lists (accelerate/utils/constants.py).
const std::vector<std::string>& offloadDevices();
const std::vector<std::string>& mixedPrecisionModes();

// The fsdp_* values' spellings and the rules between them are the runtime's (runtime/settings/spelling.h,
// accelerate::spelling), which accel compiles in: the two judge a setting alike.

} // namespace accel
