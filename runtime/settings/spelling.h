// How Hugging Face Accelerate spells the values of its settings, and the rules between FSDP settings that
// depend on nothing but those values: the one home of these for the runtime (runtime/settings/config.cpp) and
// for `accel` (tools/accel), which compiles this file in. The standard library only: no torch, no yaml-cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace accelerate::spelling {

/// A boolean as Accelerate's `str_to_bool` (and PyYAML) read it: y, yes, t, true, on, 1 and n, no, f, false,
/// off, 0, in any case; nullopt for anything else.
std::optional<bool> boolean(const std::string& text);

/// The one of `choices` that `text` is, compared without regard to case, spelled as listed; or nullopt.
std::optional<std::string> choice(const std::vector<std::string>& choices, const std::string& text);

/// A whole number as a config file or a variable may write it (an optional `+` or `-`, then digits), when it
/// is within [min, max]; or nullopt.
std::optional<long long> whole_number(const std::string& text, long long min, long long max);

/// A profiler schedule as `profile_schedule` (ACCEL_PROFILE_SCHEDULE) writes it: "wait,warmup,active" or
/// "wait,warmup,active,repeat", whole numbers (spaces allowed around them), active >= 1, the others >= 0;
/// the numbers in that order (repeat 0 when left out), or nullopt. kProfileScheduleForm says what to write.
std::optional<std::vector<int>> profile_schedule(const std::string& text);
inline constexpr const char* kProfileScheduleForm =
    "write \"wait,warmup,active\" or \"wait,warmup,active,repeat\": whole numbers, active >= 1, the "
    "others >= 0 (e.g. \"1,1,3,1\": wait one step, warm up one, record three, once), or leave it empty to "
    "record every step (in ACCEL_PROFILE_SCHEDULE, `accel launch --profile_schedule` or "
    "AcceleratorOptions().profile_schedule)";
/// The option table's check of profile_schedule (empty, or a schedule): throws std::invalid_argument as the
/// settings' other refusals do ("accelerate: KEY='TEXT' (from WHERE) ...").
void profile_schedule_text(const std::string& key, const std::string& text, const std::string& where);

/// Accelerate's mixed-precision modes (mixed_precision, ACCELERATE_MIXED_PRECISION): no, fp16, bf16, fp8.
const std::vector<std::string>& mixed_precision_modes();

/// The ZeRO stages DeepSpeed has: 0 (off) to 3.
constexpr int kMinZeroStage = 0;
constexpr int kMaxZeroStage = 3;
/// FSDP's API versions (fsdp_version): 1 and 2, which behave alike here.
constexpr int kMinFsdpVersion = 1;
constexpr int kMaxFsdpVersion = 2;

/// Accelerate's sharding strategies (FSDP_SHARDING_STRATEGY), in the order of torch's numbers 1 to 5.
const std::vector<std::string>& sharding_strategies();

/// A sharding strategy as Accelerate reads it (FullyShardedDataParallelPlugin): a name of
/// sharding_strategies() in any case, torch's `_HYBRID_SHARD_ZERO2`, or torch's number 1 to 5; the upper-case
/// name, or nullopt.
std::optional<std::string> sharding_strategy(const std::string& text);

/// Whether sharding strategy `name` frees a unit's parameters after its forward (Accelerate's FSDP2
/// conversion: FULL_SHARD and HYBRID_SHARD do, the others do not).
bool reshards_after_forward(const std::string& name);

/// Whether sharding strategy `name` shards within machines and replicates across them (HYBRID_SHARD,
/// HYBRID_SHARD_ZERO2): it needs several machines.
bool is_hybrid_sharding(const std::string& name);

/// The sharding strategy an fsdp_reshard_after_forward value means: a boolean (FSDP2's spelling) true
/// FULL_SHARD, false SHARD_GRAD_OP; a strategy's name (FSDP1's spelling, which Accelerate's questionnaire
/// writes for version 1, and its launcher exports lower-cased; torch's `_HYBRID_SHARD_ZERO2` too) that
/// strategy; nullopt for anything else, numbers included.
std::optional<std::string> reshard_strategy(const std::string& text);

/// Whether fsdp_sharding_strategy `strategy` and fsdp_reshard_after_forward `reshard` ask for the same: a
/// boolean `reshard` agrees with every strategy that reshards after forward (true: FULL_SHARD, HYBRID_SHARD)
/// or does not (false: SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD_ZERO2); a strategy's name with that strategy.
/// False when either is not a value of its setting.
bool sharding_agrees(const std::string& strategy, const std::string& reshard);

/// FSDP1's state dict types, in the order of torch's numbers 1 to 3.
const std::vector<std::string>& state_dict_types();

/// A state dict type as Accelerate reads it: a name of state_dict_types() in any case, or torch's number 1 to
/// 3; the upper-case name, or nullopt. LOCAL_STATE_DICT is a value, which neither FSDP2 nor this runtime
/// writes: kLocalStateDict says why.
std::optional<std::string> state_dict_type(const std::string& text);

/// Accelerate's variables that turn FSDP and DeepSpeed on: its launcher exports them, accel's too, and the
/// runtime reads them (as it reads distributed_type FSDP and DEEPSPEED from a config file).
extern const char* const kUseFsdpVariable;
extern const char* const kUseDeepSpeedVariable;

/// The ZeRO stage DeepSpeed runs when it is asked for without a stage (Accelerate's DeepSpeedPlugin); ZeRO
/// selected by parallel_strategy "zero" alone runs it too.
constexpr int kDefaultZeroStage = 2;

/// Why fsdp_sharding_strategy and fsdp_reshard_after_forward disagree (sharding_agrees false), and the fix;
/// follows "<strategy setting> conflicts with <reshard setting>: ".
extern const char* const kShardingDisagreement;

/// A sharding strategy other than FULL_SHARD (fsdp_sharding_strategy or fsdp_reshard_after_forward) with ZeRO
/// stage 3: why, and the fix; follows "<sharding setting> conflicts with <zero_stage setting>: ".
extern const char* const kShardingAgainstZeroStage3;

/// ZeRO stage 1 or 2 with FSDP asked for: why, and the fix; follows "<one> conflicts with <the other>: " (the
/// zero_stage setting and what asked for FSDP, in either order).
extern const char* const kShardedZeroStageAgainstFsdp;

/// Why ZeRO stage 3's 16-bit whole-model file is refused (Accelerate's zero3_save_16bit_model, DeepSpeed's
/// stage3_gather_16bit_weights_on_model_save), and the fix; follows "<setting> ".
extern const char* const kSixteenBitModelFile;

/// DeepSpeed's CPU offload under ZeRO stage 3 (offload_optimizer_device or offload_param_device `cpu`), which
/// runs as the fsdp strategy's fsdp_offload_params true, against fsdp_offload_params false: why, and the fix;
/// follows "<offload setting> conflicts with <fsdp_offload_params setting>: ".
extern const char* const kZeroOffloadAgainstFsdpOffload;

/// DeepSpeed's parameter offload (offload_param_device cpu) with a ZeRO stage other than 3: why, and the fix;
/// follows "<offload_param_device setting> conflicts with <zero_stage setting>: ".
extern const char* const kParameterOffloadBelowStage3;

/// DeepSpeed's optimizer offload (offload_optimizer_device cpu) with FSDP asked for other than through
/// zero_stage 3: why, and the fix; follows "<offload setting> conflicts with <what asked for FSDP>: ".
extern const char* const kOptimizerOffloadUnderFsdp;

/// Accelerate's automatic wrapping policies (FSDP_AUTO_WRAP_POLICY).
const std::vector<std::string>& auto_wrap_policies();

/// Accelerate's backward prefetch policies (FSDP_BACKWARD_PREFETCH).
const std::vector<std::string>& backward_prefetch_policies();

/// Whether fsdp_auto_wrap_policy `policy` is TRANSFORMER_BASED_WRAP while `classes`
/// (fsdp_transformer_layer_cls_to_wrap, unset or comma-separated) names no class: there is nothing to wrap.
bool transformer_wrap_without_classes(const std::string& policy, const std::optional<std::string>& classes);

/// Why TRANSFORMER_BASED_WRAP needs classes, and the fix; follows "<policy setting> ".
extern const char* const kTransformerWrapWithoutClasses;

/// Why fsdp_activation_checkpointing_offload true needs fsdp_activation_checkpointing true, and the fix;
/// follows "<offload setting> conflicts with <checkpointing setting>: ".
extern const char* const kActivationOffloadWithoutCheckpointing;

/// Why LOCAL_STATE_DICT is refused, and the fix; follows "<state dict type setting> ".
extern const char* const kLocalStateDict;

/// Accelerate's FSDP settings other than the option table's fsdp_* options (FullyShardedDataParallelPlugin's,
/// read from fsdp_config keys and the FSDP_* variables Accelerate's launcher exports), checked by accel and
/// the runtime where the fsdp strategy runs: each value must be of its kind; one of `accepted` is taken (it
/// asks for nothing accelerate-cpp lacks, or has no effect here); any other is refused with `problem`.
struct FsdpSetting {
  enum class Kind { Flag, WholeNumber, Choice, Text };
  const char* key;      ///< inside fsdp_config; also `accel launch`'s flag
  const char* variable; ///< nullptr: Accelerate has no variable for it
  Kind kind;
  std::vector<std::string> choices;  ///< Kind::Choice: the values (upper case; matched in any case)
  std::vector<std::string> accepted; ///< canonical values taken; empty for Kind::Text: none is
  const char* problem;               ///< why another value is refused, and the fix; follows "<setting> "
};
const std::vector<FsdpSetting>& fsdp_settings();
/// Whether `setting` refuses `value`, spelled as its `accepted` are (a flag "true" or "false", a choice
/// upper-case): a value that is not empty and not one of them.
bool refuses(const FsdpSetting& setting, const std::string& value);

/// A DeepSpeed setting accelerate-cpp does not implement, refused by accel and the runtime alike when set to
/// anything but its default (is_default_text).
struct UnsupportedDeepSpeedSetting {
  const char* key;          ///< inside deepspeed_config; also `accel launch`'s flag
  const char* variable;     ///< the ACCELERATE_* variable Accelerate's launcher exports; nullptr: none
  const char* default_text; ///< Accelerate's default: "none" for a path, "false" for a flag, "" for a list
  const char* problem;      ///< why, and the fix; follows "<setting> "
};
const std::vector<UnsupportedDeepSpeedSetting>& unsupported_deepspeed_settings();

/// Whether `text` is `default_text` as Accelerate reads it: a flag's default ("false") as a boolean, another
/// without regard to case (`None` is the path default "none").
bool is_default_text(const std::string& text, const std::string& default_text);

} // namespace accelerate::spelling
