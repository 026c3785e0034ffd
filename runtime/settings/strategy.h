// Which parallel strategy a job runs, from parallel_strategy, DeepSpeed's ZeRO stage and Accelerate's FSDP
// settings, and which of their combinations contradict each other: the one home of this rule for the runtime
// (runtime/settings/config.cpp) and for `accel launch` (tools/accel/LaunchSettings.cpp). Each caller gathers
// the settings from its own sources and names them in its own words; the rule and the messages' reasons are
// here. The standard library only: no torch, no yaml-cpp.
#pragma once

#include <stdexcept>
#include <string>

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
/// fix>" (or ", which ..." where the second setting's value says it), without a program's prefix.
class StrategyConflict : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

/// The strategy `request` selects. Throws StrategyConflict for: a ZeRO stage of 1 or 2 with FSDP; "zero" with
/// stage 0 set, stage 3 or FSDP; "fsdp" with a stage of 1 or 2; another strategy ("ddp", or one registered
/// by a program) with a stage of 1 to 3 or FSDP.
StrategySelection select_strategy(const StrategyRequest& request);

} // namespace accelerate::settings
