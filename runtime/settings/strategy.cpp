// The parallel strategy a job's settings select (settings/strategy.h).
#include "settings/strategy.h"

#include "settings/spelling.h"

#include <optional>

namespace accelerate::settings {
namespace {

[[noreturn]] void conflict(const std::string& first, const std::string& second, const std::string& why) {
  throw StrategyConflict(first, second, first + " conflicts with " + second + ": " + why);
}

} // namespace

StrategySelection select_strategy(const StrategyRequest& request) {
  const std::string& stage = request.stage_origin;
  const std::string& strategy = request.strategy_origin;
  const std::string& fsdp = request.fsdp_origin;
  const bool sharded_stage = request.zero_stage == 1 || request.zero_stage == 2;
  if (sharded_stage && !fsdp.empty()) {
    conflict(stage, fsdp, spelling::kShardedZeroStageAgainstFsdp);
  }
  StrategySelection selection;
  selection.zero_stage = request.zero_stage;
  if (request.strategy.empty()) {
    if (sharded_stage) {
      selection.strategy = "zero";
      selection.by = StrategySelection::By::ZeroStage;
    } else if (request.zero_stage == 3) {
      selection.strategy = "fsdp";
      selection.by = StrategySelection::By::ZeroStage;
    } else if (!fsdp.empty()) {
      selection.strategy = "fsdp";
      selection.by = StrategySelection::By::Fsdp;
    } else {
      selection.strategy = "ddp";
    }
    return selection;
  }
  selection.strategy = request.strategy;
  selection.by = StrategySelection::By::ParallelStrategy;
  if (request.strategy == "zero") {
    if (request.zero_stage == 0 && !request.zero_stage_set) {
      selection.zero_stage = spelling::kDefaultZeroStage;
      selection.zero_stage_defaulted = true;
    } else if (request.zero_stage == 0) {
      throw StrategyConflict(
          strategy, stage,
          strategy + " conflicts with " + stage +
              ", which means no sharding: set zero_stage to 1 or 2 (or leave it unset: ZeRO "
              "then uses stage 2), or use parallel_strategy ddp");
    } else if (request.zero_stage == 3) {
      conflict(strategy, stage,
               "ZeRO stage 3 shards the parameters too, which the \"fsdp\" strategy runs. Leave "
               "parallel_strategy unset (zero_stage 3 then selects fsdp) or set it to fsdp, or set "
               "zero_stage to 1 or 2");
    }
    if (!fsdp.empty()) {
      conflict(strategy, fsdp,
               "FSDP runs the \"fsdp\" strategy. Leave parallel_strategy unset or set it to fsdp, or leave "
               "out the FSDP settings");
    }
  } else if (request.strategy == "fsdp") {
    if (sharded_stage) {
      conflict(strategy, stage,
               "a ZeRO stage of 1 or 2 runs the \"zero\" strategy. Set zero_stage to 3 (fully sharded, "
               "as fsdp) or 0, or leave it unset; or set parallel_strategy to zero");
    }
  } else if (sharded_stage) {
    conflict(strategy, stage,
             "a ZeRO stage of 1 or 2 runs the \"zero\" strategy. Leave parallel_strategy unset "
             "(zero_stage then selects zero) or set it to zero, or set zero_stage to 0 to replicate the "
             "model");
  } else if (request.zero_stage == 3) {
    conflict(strategy, stage,
             "ZeRO stage 3 runs the \"fsdp\" strategy. Leave parallel_strategy unset (zero_stage 3 then "
             "selects fsdp) or set it to fsdp, or set zero_stage to 0 to replicate the model");
  } else if (!fsdp.empty()) {
    conflict(strategy, fsdp,
             "FSDP runs the \"fsdp\" strategy. Leave parallel_strategy unset or set it to fsdp, or leave "
             "out the FSDP settings (distributed_type MULTI_GPU or MULTI_CPU without an fsdp_config "
             "section, ACCELERATE_USE_FSDP unset)");
  }
  return selection;
}

ShardingSelection select_sharding(const ShardingRequest& request) {
  std::optional<std::string> by_strategy;
  std::optional<std::string> by_reshard;
  if (!request.strategy.empty()) {
    by_strategy = spelling::sharding_strategy(request.strategy);
  }
  if (!request.reshard.empty()) {
    by_reshard = spelling::reshard_strategy(request.reshard);
  }
  if (by_strategy && by_reshard && !spelling::sharding_agrees(request.strategy, request.reshard)) {
    // What Hugging Face's launcher exports for both when neither was given gives way to the other.
    if (request.strategy_from_environment && *by_strategy == "FULL_SHARD") {
      by_strategy.reset();
    } else if (request.reshard_from_environment && *by_reshard == "FULL_SHARD") {
      by_reshard.reset();
    } else {
      conflict(request.strategy_origin, request.reshard_origin, spelling::kShardingDisagreement);
    }
  }
  ShardingSelection selection;
  if (by_strategy) {
    selection.sharding = *by_strategy;
    selection.by = ShardingSelection::By::Strategy;
  } else if (by_reshard) {
    selection.sharding = *by_reshard;
    selection.by = ShardingSelection::By::Reshard;
  } else if (request.zero_stage_3) {
    selection.by = ShardingSelection::By::ZeroStage3;
  }
  if (request.zero_stage_3 && selection.sharding != "FULL_SHARD") {
    conflict(by_strategy ? request.strategy_origin : request.reshard_origin, request.stage_origin,
             spelling::kShardingAgainstZeroStage3);
  }
  return selection;
}

} // namespace accelerate::settings
