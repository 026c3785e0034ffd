// Which parallel strategy a job runs, from parallel_strategy, DeepSpeed's ZeRO stage and Accelerate's FSDP
// settings, and which sharding the fsdp strategy runs, from fsdp_sharding_strategy and
// fsdp_reshard_after_forward; and which of their combinations contradict each other: the one home of these
// rules for the runtime (runtime/settings/config.cpp), `accel launch` (tools/accel/LaunchSettings.cpp) and
// the config files accel reads (tools/accel/ConfigFile.cpp). Each caller gathers the settings from its own
// sources and names them in its own words; the rule and the messages' reasons are here. The standard library
// only: no torch, no yaml-cpp.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace accelerate::settings {

/// The settings that select the strategy, each with how messages name it ("--zero_stage 2",
/// "zero_stage='2' (from the environment)").
struct StrategyRequest {
  /// parallel_strategy; "" when nothing set it.
  std::string strategy;
  std::string strategy_origin;
  /// DeepSpeed's ZeRO stage, Accelerate's default stage included where DeepSpeed was asked for without one.
  int zero_stage = 0;
  /// Whether something set the stage (DeepSpeed's default counts); a stage nobody set is 0.
  bool zero_stage_set = false;
  std::string stage_origin;
  /// What asked for FSDP (distributed_type FSDP, an fsdp_config section, ACCELERATE_USE_FSDP, --use_fsdp);
  /// "" when nothing did.
  std::string fsdp_origin;
};

/// What the request selects.
struct StrategySelection {
  /// The strategy's registered name: parallel_strategy when set, else "zero" for a ZeRO stage of 1 or 2,
  /// "fsdp" for stage 3 or FSDP, "ddp".
  std::string strategy;
  /// What selected it.
  enum class By { ParallelStrategy, ZeroStage, Fsdp, Default } by = By::Default;
  /// The ZeRO stage: the request's, or kDefaultZeroStage (settings/spelling.h) for "zero" named without one.
  int zero_stage = 0;
  /// Whether `zero_stage` is that default, given for parallel_strategy "zero".
  bool zero_stage_defaulted = false;
};

/// Two settings that contradict each other. `what()` is "<first> conflicts with <second>: <why, and the
/// fix>" (or ", which ..." where the second setting's value says it), without a program's prefix; `first`
/// and `second` are the two origins as the request gave them.
class StrategyConflict : public std::invalid_argument {
public:
  StrategyConflict(std::string first_origin, std::string second_origin, const std::string& message)
      : std::invalid_argument(message), first(std::move(first_origin)), second(std::move(second_origin)) {}
  std::string first;
  std::string second;
};

/// The strategy `request` selects. Throws StrategyConflict for: a ZeRO stage of 1 or 2 with FSDP; "zero" with
/// stage 0 set, stage 3 or FSDP; "fsdp" with a stage of 1 or 2; another strategy ("ddp", or one registered
/// by a program) with a stage of 1 to 3 or FSDP.
StrategySelection select_strategy(const StrategyRequest& request);

/// The fsdp strategy's sharding settings, each with how messages name it.
struct ShardingRequest {
  /// fsdp_sharding_strategy as given (a name in any case, or torch's number 1 to 5); "" when nothing set it.
  std::string strategy;
  std::string strategy_origin;
  /// Whether it came from the environment, where Hugging Face's launcher exports FULL_SHARD when nothing was
  /// given.
  bool strategy_from_environment = false;
  /// fsdp_reshard_after_forward as given: a boolean (FSDP2's spelling) or a sharding strategy (FSDP1's); ""
  /// when nothing set it.
  std::string reshard;
  std::string reshard_origin;
  bool reshard_from_environment = false;
  /// DeepSpeed's ZeRO stage 3 (which runs the fsdp strategy with FULL_SHARD), and how messages name it.
  bool zero_stage_3 = false;
  std::string stage_origin;
};

/// What the sharding settings select.
struct ShardingSelection {
  /// The upper-case name: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2.
  std::string sharding = "FULL_SHARD";
  /// What selected it: fsdp_sharding_strategy, fsdp_reshard_after_forward, ZeRO stage 3, or nothing.
  enum class By { Strategy, Reshard, ZeroStage3, Default } by = By::Default;
};

/// The sharding `request` selects: fsdp_sharding_strategy, else fsdp_reshard_after_forward (true is
/// FULL_SHARD, false SHARD_GRAD_OP, or the strategy it names), else FULL_SHARD. Where both are set they must
/// agree (spelling::sharding_agrees), except that one from the environment that means FULL_SHARD gives way to
/// the other; under ZeRO stage 3 the result must be FULL_SHARD. Throws StrategyConflict otherwise. The
/// values must be spelled as spelling::sharding_strategy and spelling::reshard_strategy read them (the
/// callers check that first).
ShardingSelection select_sharding(const ShardingRequest& request);

} // namespace accelerate::settings
