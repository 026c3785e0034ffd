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

// Accelerate's FSDP and DeepSpeed option lists (accelerate/utils/constants.py).
const std::vector<std::string>& fsdpShardingStrategies();
const std::vector<std::string>& fsdpAutoWrapPolicies();
const std::vector<std::string>& fsdpBackwardPrefetchPolicies();
const std::vector<std::string>& fsdpStateDictTypes();  ///< FSDP1
const std::vector<std::string>& fsdp2StateDictTypes(); ///< FSDP2
const std::vector<std::string>& offloadDevices();
const std::vector<std::string>& mixedPrecisionModes();

// The rules of the fsdp_* values both accel and the runtime (runtime/config.cpp, which keeps its own copy:
// the two are not linked together) read, with Accelerate's spellings.

/// A sharding strategy as Accelerate reads it (FullyShardedDataParallelPlugin): one of
/// fsdpShardingStrategies() in any case, torch's `_HYBRID_SHARD_ZERO2`, or its number 1 to 5; the
/// upper-case name of fsdpShardingStrategies(), or nullopt.
std::optional<std::string> fsdpShardingStrategyName(const std::string& text);
/// The sharding strategy an fsdp_reshard_after_forward value means: true (FSDP2's spelling) FULL_SHARD,
/// false SHARD_GRAD_OP, a strategy's name (FSDP1's spelling, which Accelerate's questionnaire writes for
/// version 1) that strategy; nullopt when it is none of these.
std::optional<std::string> fsdpReshardStrategy(const std::string& text);
/// Whether fsdp_sharding_strategy `strategy` and fsdp_reshard_after_forward `reshard` ask for the same: a
/// boolean `reshard` agrees with every strategy that reshards after forward (true: FULL_SHARD, HYBRID_SHARD)
/// or not (false: SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD_ZERO2); a strategy's name with that strategy.
bool fsdpShardingAgrees(const std::string& strategy, const std::string& reshard);
/// Whether sharding strategy `name` frees a unit's parameters after its forward (FULL_SHARD, HYBRID_SHARD).
bool reshardsAfterForward(const std::string& name);
/// Whether sharding strategy `name` shards within machines and replicates across them (HYBRID_SHARD,
/// HYBRID_SHARD_ZERO2): it needs several machines.
bool isHybridSharding(const std::string& name);
/// A state dict type as Accelerate reads it: one of fsdpStateDictTypes() in any case, or torch's number 1
/// to 3; the upper-case name, or nullopt.
std::optional<std::string> fsdpStateDictTypeName(const std::string& text);

} // namespace accel
