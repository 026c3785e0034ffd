// How Hugging Face Accelerate spells its settings' values (see settings/spelling.h).
#include "settings/spelling.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <stdexcept>

namespace accelerate::spelling {
namespace {

std::string lower_case(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string upper_case(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
  return text;
}

} // namespace

std::optional<bool> boolean(const std::string& text) {
  static const char* const kTrue[] = {"y", "yes", "t", "true", "on", "1"};
  static const char* const kFalse[] = {"n", "no", "f", "false", "off", "0"};
  const std::string lower = lower_case(text);
  for (const char* word : kTrue) {
    if (lower == word) {
      return true;
    }
  }
  for (const char* word : kFalse) {
    if (lower == word) {
      return false;
    }
  }
  return std::nullopt;
}

std::optional<std::string> choice(const std::vector<std::string>& choices, const std::string& text) {
  const std::string upper = upper_case(text);
  for (const std::string& candidate : choices) {
    if (upper_case(candidate) == upper) {
      return candidate;
    }
  }
  return std::nullopt;
}

std::optional<long long> whole_number(const std::string& text, long long min, long long max) {
  const std::size_t digits = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  if (text.size() == digits || text.find_first_not_of("0123456789", digits) != std::string::npos) {
    return std::nullopt;
  }
  errno = 0;
  const long long value = std::strtoll(text.c_str(), nullptr, 10);
  if (errno == ERANGE || value < min || value > max) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::vector<int>> profile_schedule(const std::string& text) {
  std::vector<int> numbers;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::size_t first = part.find_first_not_of(" \t");
    const std::size_t last = part.find_last_not_of(" \t");
    part = first == std::string::npos ? "" : part.substr(first, last - first + 1);
    const long long minimum = numbers.size() == 2 ? 1 : 0;
    const auto number = whole_number(part, minimum, 1000000000);
    if (!number || numbers.size() == 4) {
      return std::nullopt;
    }
    numbers.push_back(static_cast<int>(*number));
    if (comma == std::string::npos) {
      break;
    }
    start = comma + 1;
  }
  if (numbers.size() < 3) {
    return std::nullopt;
  }
  numbers.resize(4, 0);
  return numbers;
}

void profile_schedule_text(const std::string& key, const std::string& text, const std::string& where) {
  if (!text.empty() && !profile_schedule(text)) {
    throw std::invalid_argument("accelerate: " + key + "='" + text + "' (from " + where +
                                ") is not a profiler schedule; " + kProfileScheduleForm);
  }
}

const std::vector<std::string>& mixed_precision_modes() {
  static const std::vector<std::string> kModes = {"no", "fp16", "bf16", "fp8"};
  return kModes;
}

const std::vector<std::string>& sharding_strategies() {
  static const std::vector<std::string> kStrategies = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD",
                                                       "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
  return kStrategies;
}

std::optional<std::string> sharding_strategy(const std::string& text) {
  if (auto name = choice(sharding_strategies(), text)) {
    return name;
  }
  if (upper_case(text) == "_HYBRID_SHARD_ZERO2") {
    return sharding_strategies()[4];
  }
  if (auto number = whole_number(text, 1, 5)) {
    return sharding_strategies()[static_cast<std::size_t>(*number - 1)];
  }
  return std::nullopt;
}

bool reshards_after_forward(const std::string& name) {
  return name == "FULL_SHARD" || name == "HYBRID_SHARD";
}

bool is_hybrid_sharding(const std::string& name) {
  return name.rfind("HYBRID_SHARD", 0) == 0;
}

std::optional<std::string> reshard_strategy(const std::string& text) {
  if (auto value = boolean(text)) {
    return *value ? "FULL_SHARD" : "SHARD_GRAD_OP";
  }
  if (whole_number(text, LLONG_MIN, LLONG_MAX)) {
    return std::nullopt;
  }
  return sharding_strategy(text);
}

bool sharding_agrees(const std::string& strategy, const std::string& reshard) {
  const auto named = sharding_strategy(strategy);
  if (!named) {
    return false;
  }
  if (auto value = boolean(reshard)) {
    return *value == reshards_after_forward(*named);
  }
  const auto meant = reshard_strategy(reshard);
  return meant && *meant == *named;
}

const std::vector<std::string>& state_dict_types() {
  static const std::vector<std::string> kTypes = {"FULL_STATE_DICT", "LOCAL_STATE_DICT",
                                                  "SHARDED_STATE_DICT"};
  return kTypes;
}

std::optional<std::string> state_dict_type(const std::string& text) {
  if (auto name = choice(state_dict_types(), text)) {
    return name;
  }
  if (auto number = whole_number(text, 1, 3)) {
    return state_dict_types()[static_cast<std::size_t>(*number - 1)];
  }
  return std::nullopt;
}

const std::vector<std::string>& auto_wrap_policies() {
  static const std::vector<std::string> kPolicies = {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"};
  return kPolicies;
}

const std::vector<std::string>& backward_prefetch_policies() {
  static const std::vector<std::string> kPolicies = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"};
  return kPolicies;
}

bool transformer_wrap_without_classes(const std::string& policy, const std::optional<std::string>& classes) {
  return upper_case(policy) == "TRANSFORMER_BASED_WRAP" &&
         (!classes || classes->find_first_not_of(" \t,") == std::string::npos);
}

const char* const kShardingDisagreement =
    "fsdp_reshard_after_forward true means FULL_SHARD (or HYBRID_SHARD), false SHARD_GRAD_OP (or NO_SHARD, "
    "HYBRID_SHARD_ZERO2) (set one of the two, or make them agree)";

const char* const kShardingAgainstZeroStage3 =
    "ZeRO stage 3 is fully sharded (FULL_SHARD); leave the sharding strategy unset or make it FULL_SHARD, or "
    "use zero_stage 2 (optimizer state and gradients sharded, as SHARD_GRAD_OP does)";

const char* const kUseFsdpVariable = "ACCELERATE_USE_FSDP";
const char* const kUseDeepSpeedVariable = "ACCELERATE_USE_DEEPSPEED";

const char* const kSixteenBitModelFile =
    "is for ZeRO stage 3's 16-bit whole-model file, which accelerate-cpp does not write (use false; "
    "fsdp_state_dict_type FULL_STATE_DICT puts whole models in checkpoints)";

const char* const kShardedZeroStageAgainstFsdp =
    "a ZeRO stage of 1 or 2 runs the zero strategy, and FSDP the fsdp strategy; ask for one: leave out the "
    "DeepSpeed settings (or use zero_stage 3, which is fully sharded), or the FSDP ones";

const char* const kZeroOffloadAgainstFsdpOffload =
    "under ZeRO stage 3 (the fsdp strategy) DeepSpeed's CPU offload runs as fsdp_offload_params true: the "
    "shards, their gradients and the optimizer state in CPU memory (set the DeepSpeed offload devices to "
    "none, "
    "or fsdp_offload_params true)";

const char* const kParameterOffloadBelowStage3 =
    "DeepSpeed offloads parameters at ZeRO stage 3 only (use zero_stage 3, where it runs as "
    "fsdp_offload_params true, or offload_param_device none)";

const char* const kOptimizerOffloadUnderFsdp =
    "the fsdp strategy keeps the optimizer state in CPU memory with fsdp_offload_params (use none, and "
    "fsdp_offload_params true in fsdp_config, FSDP_OFFLOAD_PARAMS=true or --fsdp_offload_params true: the "
    "shards, their gradients and the optimizer state in CPU memory; ZeRO stage 1 or 2 offloads the optimizer "
    "state alone, and zero_stage 3 takes DeepSpeed's offload as fsdp_offload_params)";

const char* const kTransformerWrapWithoutClasses =
    "makes units of the module classes fsdp_transformer_layer_cls_to_wrap lists, and it lists none (name the "
    "classes, comma-separated, e.g. fsdp_transformer_layer_cls_to_wrap: Block; accelerate-cpp has no "
    "Transformers `_no_split_modules` to take them from; or use SIZE_BASED_WRAP or NO_WRAP)";

const char* const kActivationOffloadWithoutCheckpointing =
    "only the inputs a checkpointed unit keeps can be offloaded, and without activation checkpointing no "
    "unit "
    "keeps them (set fsdp_activation_checkpointing true as well, or fsdp_activation_checkpointing_offload "
    "false)";

const char* const kLocalStateDict =
    "is FSDP1's per-process flat shards, which neither FSDP2 nor accelerate-cpp writes (use "
    "SHARDED_STATE_DICT: "
    "each process writes its shards, or FULL_STATE_DICT: the main process writes whole models)";

const std::vector<FsdpSetting>& fsdp_settings() {
  using Kind = FsdpSetting::Kind;
  static const std::vector<FsdpSetting> kSettings = {
      {"fsdp_ignored_modules",
       "FSDP_IGNORED_MODULES",
       Kind::Text,
       {},
       {},
       "names modules FSDP should leave unsharded, which accelerate-cpp's fsdp strategy does not have "
       "(remove it)"},
      // No effect here: parameters are always broadcast from process 0 when a model is prepared (what
      // sync_module_states and cpu_ram_efficient_loading ask for); use_orig_params is PyTorch FSDP's tuning,
      // which the fsdp strategy does not take. Prefetching is the table's fsdp_*_prefetch options.
      {"fsdp_cpu_ram_efficient_loading",
       "FSDP_CPU_RAM_EFFICIENT_LOADING",
       Kind::Flag,
       {},
       {"true", "false"},
       nullptr},
      {"fsdp_sync_module_states", "FSDP_SYNC_MODULE_STATES", Kind::Flag, {}, {"true", "false"}, nullptr},
      {"fsdp_use_orig_params", "FSDP_USE_ORIG_PARAMS", Kind::Flag, {}, {"true", "false"}, nullptr},
      // Accelerate's older name for fsdp_backward_prefetch: read in its place when that is not set.
      {"fsdp_backward_prefetch_policy", nullptr, Kind::Choice, backward_prefetch_policies(),
       backward_prefetch_policies(), nullptr},
  };
  return kSettings;
}

bool refuses(const FsdpSetting& setting, const std::string& value) {
  return !value.empty() &&
         std::find(setting.accepted.begin(), setting.accepted.end(), value) == setting.accepted.end();
}

const std::vector<UnsupportedDeepSpeedSetting>& unsupported_deepspeed_settings() {
  static const std::vector<UnsupportedDeepSpeedSetting> kSettings = {
      {"offload_optimizer_nvme_path", nullptr, "none",
       "is for NVMe offload, which accelerate-cpp does not have (remove it; offload_optimizer_device takes "
       "none or cpu)"},
      {"offload_param_nvme_path", nullptr, "none",
       "is for NVMe offload, which accelerate-cpp does not have (remove it)"},
      {"zero3_init_flag", "ACCELERATE_DEEPSPEED_ZERO3_INIT", "false",
       "is for ZeRO stage 3's partitioned construction (deepspeed.zero.Init), which accelerate-cpp does not "
       "do: every process builds the whole model and prepare() shards it (use false)"},
      {"zero3_save_16bit_model", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "false",
       kSixteenBitModelFile},
      {"deepspeed_moe_layer_cls_names", "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES", "",
       "names Python module classes for DeepSpeed's mixture-of-experts, which accelerate-cpp does not have "
       "(remove it)"},
  };
  return kSettings;
}

bool is_default_text(const std::string& text, const std::string& default_text) {
  if (default_text == "false") {
    return boolean(text) == std::optional<bool>(false);
  }
  return lower_case(text) == default_text;
}

} // namespace accelerate::spelling
