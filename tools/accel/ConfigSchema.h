// The keys of Hugging Face Accelerate's config file (ClusterConfig and its nested fsdp_config and
// deepspeed_config), with the values each accepts: the one table `accel config` validates against.
#pragma once

#include "ConfigValues.h"

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

/// The distributed_type values Accelerate knows, and those accel can launch (DEEPSPEED runs ZeRO stage 1 or
/// 2; FSDP is read, and refused: it is not supported yet; see fsdpRefusal in ConfigFile.h).
const std::vector<std::string>& accelerateDistributedTypes();
const std::vector<std::string>& supportedDistributedTypes();

// Accelerate's FSDP and DeepSpeed option lists (accelerate/utils/constants.py).
const std::vector<std::string>& fsdpShardingStrategies();
const std::vector<std::string>& fsdpAutoWrapPolicies();
const std::vector<std::string>& fsdpBackwardPrefetchPolicies();
const std::vector<std::string>& fsdpStateDictTypes();  ///< FSDP1
const std::vector<std::string>& fsdp2StateDictTypes(); ///< FSDP2
const std::vector<std::string>& offloadDevices();
const std::vector<std::string>& mixedPrecisionModes();

} // namespace accel
