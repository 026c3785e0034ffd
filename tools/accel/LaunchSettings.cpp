// Resolving `accel launch`'s settings from config file < environment < flags, and the variables they
// export (see LaunchSettings.h).
#include "LaunchSettings.h"

#include "ConfigSchema.h"
#include "settings/config.h"
#include "settings/deepspeed_json.h"
#include "settings/spelling.h"
#include "settings/strategy.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <stdexcept>
#include <unistd.h>

namespace accel {
namespace {

SettingSpec toggle(std::string name, std::string configKey, std::string variable, std::string help) {
  return {std::move(name),      std::move(configKey), std::move(variable),
          ValueRule::boolean(), std::move(help),      true};
}

SettingSpec valued(std::string name, std::string configKey, std::string variable, ValueRule rule,
                   std::string help) {
  return {std::move(name), std::move(configKey), std::move(variable),
          std::move(rule), std::move(help),      false};
}

/// The rule of the config file's `dottedKey` (ConfigSchema.h: the one place accel writes what a key takes).
const ValueRule& configRuleOf(const std::string& dottedKey) {
  const auto dot = dottedKey.find('.');
  const ConfigKey* key = findConfigKey(topLevelConfigKeys(), dottedKey.substr(0, dot));
  if (key && dot != std::string::npos)
    key = key->nested ? findConfigKey(*key->nested, dottedKey.substr(dot + 1)) : nullptr;
  if (!key)
    throw std::logic_error("accel: " + dottedKey + " is no key of ConfigSchema.cpp's tables");
  return key->rule;
}

/// A setting the runtime's settings library names (runtime/settings): a row of the option table, or one of
/// the FSDP and DeepSpeed settings it refuses or accepts without effect (settings/spelling.h). Its config key
/// and environment variable come from there, its rule from the config file's schema; `configKey` replaces the
/// library's key where the launcher reads another (see gradient_accumulation_steps).
SettingSpec known(const std::string& name, std::string help, bool isToggle = false,
                  std::optional<std::string> configKey = std::nullopt) {
  std::optional<std::pair<std::string, std::string>> found; // config key, variable
  for (const auto& row : accelerate::detail::option_rows())
    if (row.name == name)
      found.emplace(row.yaml_key, row.environment);
  for (const auto& setting : accelerate::spelling::fsdp_settings())
    if (!found && setting.key == name)
      found.emplace("fsdp_config." + name, setting.variable ? setting.variable : "");
  for (const auto& setting : accelerate::spelling::unsupported_deepspeed_settings())
    if (!found && setting.key == name)
      found.emplace("deepspeed_config." + name, setting.variable ? setting.variable : "");
  if (!found)
    throw std::logic_error("accel: " + name + " is no setting of the runtime's settings library");
  if (configKey)
    found->first = *configKey;
  SettingSpec spec =
      valued(name, found->first, found->second,
             found->first.empty() ? ValueRule::text() : configRuleOf(found->first), std::move(help));
  spec.toggle = isToggle;
  return spec;
}

/// The modes a flag can select; Accelerate allows one at a time.
const char* const kModeFlags[] = {"cpu", "multi_gpu", "use_fsdp", "use_deepspeed"};

} // namespace

namespace {

/// accel's own list of settings: those of Accelerate's launcher and config file.
std::vector<SettingSpec> acceleratesSettingSpecs() {
  return {
      known("cpu", "train on the CPU even where CUDA is available", true),
      toggle("multi_gpu", "", "", "one rank per GPU (distributed_type MULTI_GPU)"),
      valued("num_processes", "num_processes", "", ValueRule::wholeNumber(1),
             "how many ranks in total, over all machines (default 1; with --multi_gpu, one per GPU)"),
      valued("num_machines", "num_machines", "", ValueRule::wholeNumber(1), "how many machines (default 1)"),
      valued("machine_rank", "machine_rank", "", ValueRule::wholeNumber(0),
             "this machine's rank, 0 to num_machines - 1 (default 0)"),
      valued("main_process_ip", "main_process_ip", "", ValueRule::text(),
             "where rank 0 serves the rendezvous, exported as MASTER_ADDR (default 127.0.0.1)"),
      valued("main_process_port", "main_process_port", "", ValueRule::wholeNumber(0, 65535),
             "rendezvous port, exported as MASTER_PORT; 0 picks a free one on one machine (default 29500)"),
      valued("gpu_ids", "gpu_ids", "", ValueRule::text(),
             "the GPUs of this machine to use, like 0,1 or all; exported as CUDA_VISIBLE_DEVICES"),
      toggle("same_network", "same_network", "", "all machines share a local network (accepted; no effect)"),
      valued("rdzv_backend", "rdzv_backend", "", ValueRule::text(),
             "accepted for Accelerate's configs; accel always uses a static TCPStore rendezvous"),
      known("mixed_precision", "no, fp16, bf16 or fp8 (default no)"),
      // Accelerate's config files keep it in deepspeed_config (the runtime reads the top-level key too).
      known("gradient_accumulation_steps", "steps to accumulate gradients over before each optimizer step",
            false, "deepspeed_config.gradient_accumulation_steps"),
      known("debug", "check collectives for mismatches while running", true),
      // FSDP (Accelerate's --fsdp_* flags and fsdp_config keys).
      toggle("use_fsdp", "", accelerate::spelling::kUseFsdpVariable,
             "FSDP (distributed_type FSDP): the runtime's \"fsdp\" strategy, with the --fsdp_* settings"),
      known("fsdp_version", "1 or 2 (default 1; the same behaviour in accelerate-cpp)"),
      known("fsdp_sharding_strategy",
            "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2, or 1-5 (default "
            "FULL_SHARD); the HYBRID ones shard within each machine, replicate across machines"),
      known("fsdp_reshard_after_forward", "true (FULL_SHARD) or false (SHARD_GRAD_OP), FSDP2's spelling; or "
                                          "a sharding strategy, FSDP1's (default true)"),
      known("fsdp_offload_params", "true: on a GPU each process's shards, their gradients and the optimizer "
                                   "step in CPU memory; a no-op on a CPU run (default false)"),
      known("fsdp_min_num_params", "SIZE_BASED_WRAP's threshold: a unit holds at least this many parameter "
                                   "elements (default 100000000)"),
      known("fsdp_auto_wrap_policy",
            "which modules calling accelerate::fsdp::unit are units: TRANSFORMER_BASED_WRAP (the listed "
            "classes), SIZE_BASED_WRAP (by parameter count) or NO_WRAP (all of them; the runtime's default)"),
      known("fsdp_transformer_layer_cls_to_wrap",
            "TRANSFORMER_BASED_WRAP's module classes, comma-separated (Block also names BlockImpl)"),
      known("fsdp_backward_prefetch", "BACKWARD_PRE (the runtime's default), BACKWARD_POST or NO_PREFETCH: "
                                      "when the next unit's all-gather starts in backward"),
      known("fsdp_state_dict_type",
            "SHARDED_STATE_DICT (the runtime's default) or FULL_STATE_DICT; LOCAL_STATE_DICT is refused"),
      known("fsdp_forward_prefetch",
            "true: a unit's forward starts the next unit's all-gather (default false)"),
      known("fsdp_use_orig_params", "accepted, no effect"),
      known("fsdp_cpu_ram_efficient_loading",
            "accepted, no effect: parameters are always broadcast from rank 0 at prepare"),
      known("fsdp_sync_module_states",
            "accepted, no effect: parameters are always broadcast from rank 0 at prepare"),
      known("fsdp_activation_checkpointing", "true: every unit but the model keeps only its inputs and runs "
                                             "its body again in backward (default false)"),
      known("fsdp_activation_checkpointing_offload",
            "true (with --fsdp_activation_checkpointing true): on a GPU the inputs checkpointed units keep "
            "live in CPU memory until their backward; a no-op on the CPU (default false)"),
      known("fsdp_ignored_modules", "refused: no ignored modules"),
      // ZeRO (Accelerate's DeepSpeed flags and deepspeed_config keys).
      toggle("use_deepspeed", "", accelerate::spelling::kUseDeepSpeedVariable,
             "ZeRO (distributed_type DEEPSPEED): the runtime's \"zero\" strategy, stage --zero_stage "
             "(default 2); stage 3 runs its \"fsdp\" strategy"),
      known("zero_stage", "ZeRO stage: 0 (replicate), 1 (optimizer state sharded), 2 (and gradients; the "
                          "default), 3 (and parameters: the \"fsdp\" strategy, FULL_SHARD)"),
      known("offload_optimizer_device", "where the optimizer state and step live: none or cpu (with "
                                        "--zero_stage 3 it runs as --fsdp_offload_params true)"),
      known("offload_param_device", "none, or cpu with --zero_stage 3 (runs as --fsdp_offload_params true)"),
      known("offload_optimizer_nvme_path", "refused: no NVMe offload"),
      known("offload_param_nvme_path", "refused: no NVMe offload"),
      known("gradient_clipping", "clip the gradients' total norm to this in every optimizer step"),
      known("zero3_init_flag", "false only (no partitioned construction)"),
      known("zero3_save_16bit_model", "false only (see --fsdp_state_dict_type)"),
      valued("deepspeed_config_file", accelerate::settings::kDeepSpeedConfigFileKey,
             accelerate::settings::kDeepSpeedConfigFileVariable,
             configRuleOf(accelerate::settings::kDeepSpeedConfigFileKey),
             "a DeepSpeed JSON config: its zero_optimization, gradient_accumulation_steps, gradient_clipping "
             "and "
             "fp16/bf16 set the settings above (docs/config.md, \"A DeepSpeed JSON config\")"),
      known("deepspeed_moe_layer_cls_names", "refused: no DeepSpeed mixture-of-experts"),
  };
}

} // namespace

const std::vector<SettingSpec>& launchSettingSpecs() {
  static const std::vector<SettingSpec> kSpecs = [] {
    std::vector<SettingSpec> specs = acceleratesSettingSpecs();
    // Each row of the runtime's option table with a variable no spec above names gets a flag of its name: a
    // setting added to the table reaches the launcher without a line here.
    for (const auto& row : accelerate::detail::option_rows()) {
      const bool named = std::any_of(specs.begin(), specs.end(),
                                     [&](const SettingSpec& spec) { return spec.name == row.name; });
      if (row.environment.empty() || named)
        continue;
      SettingSpec spec = valued(row.name, row.yaml_key, row.environment, ValueRule::text(), row.doc);
      spec.fromOptionTable = true;
      specs.push_back(std::move(spec));
    }
    return specs;
  }();
  return kSpecs;
}

// ------------------------------------------------------------------------------------------- LaunchSettings

std::optional<std::string> LaunchSettings::get(const std::string& name) const {
  auto found = values_.find(name);
  if (found == values_.end())
    return std::nullopt;
  return found->second.text;
}

std::optional<SettingSource> LaunchSettings::sourceOf(const std::string& name) const {
  auto found = values_.find(name);
  if (found == values_.end())
    return std::nullopt;
  return found->second.source;
}

std::string LaunchSettings::originOf(const std::string& name) const {
  auto found = values_.find(name);
  return found == values_.end() ? "" : found->second.origin;
}

void LaunchSettings::set(const std::string& name, std::string text, SettingSource source,
                         std::string origin) {
  values_[name] = {std::move(text), source, std::move(origin)};
}

// ------------------------------------------------------------------------------------------- resolving

namespace {

void applyConfig(LaunchSettings& settings, const ConfigDocument& config) {
  for (const SettingSpec& spec : launchSettingSpecs()) {
    if (spec.configKey.empty())
      continue;
    std::optional<std::string> value = config.scalar(spec.configKey);
    // num_processes -1 is Accelerate's "given at launch": no value here.
    if (value && !(spec.name == "num_processes" && *value == "-1"))
      settings.set(spec.name, *value, SettingSource::ConfigFile);
  }
  // distributed_type selects the mode the mode flags would.
  const std::string type = config.scalar("distributed_type").value_or("NO");
  if (type == "MULTI_GPU")
    settings.set("multi_gpu", "true", SettingSource::ConfigFile);
  // FSDP, as the runtime reads the file: its distributed_type, or an fsdp_config section that is not empty
  // (older Accelerate versions write an empty one for every type).
  const ConfigValue* fsdp = config.root.find("fsdp_config");
  if (type == "FSDP" || (fsdp && fsdp->kind == ConfigValue::Kind::Map && !fsdp->entries.empty()))
    settings.set("use_fsdp", "true", SettingSource::ConfigFile);
  // DeepSpeed (ZeRO), as the runtime reads the file: its distributed_type, or a deepspeed_config section
  // that is not empty (older Accelerate versions write an empty one for every type).
  const ConfigValue* deepspeed = config.root.find("deepspeed_config");
  if (type == "DEEPSPEED" ||
      (deepspeed && deepspeed->kind == ConfigValue::Kind::Map && !deepspeed->entries.empty()))
    settings.set("use_deepspeed", "true", SettingSource::ConfigFile);
  if (type == "MULTI_CPU")
    settings.set("cpu", "true", SettingSource::ConfigFile);
}

/// A setting of the option table checked as the runtime will check it, so that a bad value stops the launch
/// before any rank starts.
void checkAsTheRuntimeDoes(const SettingSpec& spec, const std::string& text, const std::string& where) {
  if (!spec.fromOptionTable)
    return;
  try {
    accelerate::detail::check_option_text(spec.name, text, where);
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    const std::string prefix = "accelerate: ";
    throw UsageError(message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size())
                                                                    : message);
  }
}

void applyEnvironment(LaunchSettings& settings, const Environment& environment) {
  for (const SettingSpec& spec : launchSettingSpecs()) {
    if (spec.environmentVariable.empty())
      continue;
    std::optional<std::string> value = environment.get(spec.environmentVariable);
    if (!value || value->empty())
      continue;
    ValueProblem problem;
    std::optional<std::string> canonical = canonicalValue(spec.rule, *value, &problem);
    if (!canonical)
      throw UsageError(spec.environmentVariable + "=" + *value + " in the environment must be " +
                       problem.mustBe + " (fix or unset it; it overrides the config file)");
    checkAsTheRuntimeDoes(spec, *canonical, spec.environmentVariable + " in the environment");
    settings.set(spec.name, *canonical, SettingSource::Environment);
  }
}

std::string flagList(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + ("--" + names[i]);
  return text;
}

void applyFlags(LaunchSettings& settings, const ParsedFlags& flags) {
  for (const SettingSpec& spec : launchSettingSpecs()) {
    if (!flags.has(spec.name))
      continue;
    if (spec.toggle) {
      settings.set(spec.name, "true", SettingSource::Flag);
      continue;
    }
    const std::string text = *flags.last(spec.name);
    ValueProblem problem;
    std::optional<std::string> canonical = canonicalValue(spec.rule, text, &problem);
    if (!canonical)
      throw UsageError("--" + spec.name + " must be " + problem.mustBe + " (got '" + text + "')");
    checkAsTheRuntimeDoes(spec, *canonical, "--" + spec.name);
    settings.set(spec.name, *canonical, SettingSource::Flag);
  }
  std::vector<std::string> modeFlags;
  for (const char* mode : kModeFlags)
    if (flags.has(mode))
      modeFlags.push_back(mode);
  if (modeFlags.size() > 1)
    throw UsageError("use one of --cpu, --multi_gpu, --use_fsdp, --use_deepspeed at a time (got " +
                     flagList(modeFlags) + ")");
  // A mode flag replaces the mode the config file or environment chose, as in Accelerate. --cpu only picks
  // the device: ZeRO stays on (the runtime runs it on CPUs too), and FSDP stays on so that it is refused
  // (refuseUnsupportedTraining) rather than run as DDP.
  if (modeFlags.empty())
    return;
  for (const std::string mode : {"multi_gpu", "use_fsdp", "use_deepspeed"})
    if (mode != modeFlags.front() && (modeFlags.front() != "cpu" || mode == "multi_gpu"))
      settings.set(mode, "false", SettingSource::Flag);
}

} // namespace

LaunchSettings resolveLaunchSettings(const ConfigDocument* config, const Environment& environment,
                                     const ParsedFlags& flags) {
  LaunchSettings settings;
  if (config)
    applyConfig(settings, *config);
  applyEnvironment(settings, environment);
  applyFlags(settings, flags);
  return settings;
}

std::string describeSetting(const LaunchSettings& settings, const std::string& name) {
  auto value = settings.get(name);
  if (!value)
    return "";
  if (const std::string origin = settings.originOf(name); !origin.empty())
    return name + " " + *value + " (from " + origin + ")";
  const auto& specs = launchSettingSpecs();
  auto spec = std::find_if(specs.begin(), specs.end(), [&](const SettingSpec& s) { return s.name == name; });
  switch (settings.sourceOf(name).value_or(SettingSource::Flag)) {
  case SettingSource::Environment:
    return spec->environmentVariable + "=" + *value + " in the environment";
  case SettingSource::ConfigFile:
    if (spec->configKey.empty()) // the mode toggles: set by distributed_type (or a section)
      return name == "use_deepspeed" ? "the config file's DeepSpeed settings"
             : name == "use_fsdp"    ? "the config file's FSDP settings"
                                     : "distributed_type in the config file";
    return spec->configKey + " " + *value + " in the config file";
  case SettingSource::Flag:
    break;
  }
  return spec->toggle ? "--" + name : "--" + name + " " + *value;
}

std::string fsdpShardingOf(const LaunchSettings& settings) {
  accelerate::settings::ShardingRequest request;
  request.strategy = settings.get("fsdp_sharding_strategy").value_or("");
  request.strategy_origin = describeSetting(settings, "fsdp_sharding_strategy");
  request.strategy_from_environment =
      settings.sourceOf("fsdp_sharding_strategy") == SettingSource::Environment;
  request.reshard = settings.get("fsdp_reshard_after_forward").value_or("");
  request.reshard_origin = describeSetting(settings, "fsdp_reshard_after_forward");
  request.reshard_from_environment =
      settings.sourceOf("fsdp_reshard_after_forward") == SettingSource::Environment;
  request.zero_stage_3 = zeroStageOf(settings) == 3;
  request.stage_origin = describeSetting(settings, "zero_stage");
  try {
    return accelerate::settings::select_sharding(request).sharding;
  } catch (const accelerate::settings::StrategyConflict& conflict) {
    throw UsageError(conflict.what());
  }
}

void refuseUnsupportedTraining(const LaunchSettings& settings, const std::string& strategy) {
  // A config file's values were checked when it was read (ConfigFile.cpp); these come from the environment
  // or flags.
  for (const char* device : {"offload_optimizer_device", "offload_param_device"})
    if (settings.get(device) == std::optional<std::string>("nvme"))
      throw UsageError(describeSetting(settings, device) +
                       ": accelerate-cpp does not offload to NVMe (use none or cpu)");
  if (settings.get("offload_param_device") == std::optional<std::string>("cpu") && zeroStageOf(settings) != 3)
    throw UsageError(describeSetting(settings, "offload_param_device") + " conflicts with zero_stage " +
                     std::to_string(zeroStageOf(settings)) + ": " +
                     accelerate::spelling::kParameterOffloadBelowStage3);
  for (const accelerate::spelling::UnsupportedDeepSpeedSetting& setting :
       accelerate::spelling::unsupported_deepspeed_settings())
    if (auto value = settings.get(setting.key);
        value && !accelerate::spelling::is_default_text(*value, setting.default_text))
      throw UsageError(describeSetting(settings, setting.key) + " " + setting.problem);
  // The runtime checks these options' values wherever the strategy (the ranks inherit the environment).
  if (auto type = settings.get("fsdp_state_dict_type");
      type && accelerate::spelling::state_dict_type(*type) == std::optional<std::string>("LOCAL_STATE_DICT"))
    throw UsageError(describeSetting(settings, "fsdp_state_dict_type") + " " +
                     accelerate::spelling::kLocalStateDict);
  if (strategy != "fsdp")
    return;
  for (const accelerate::spelling::FsdpSetting& setting : accelerate::spelling::fsdp_settings())
    // The others take every value of their kind, which the flag's rule checks.
    if (auto value = settings.get(setting.key);
        setting.problem != nullptr && value && accelerate::spelling::refuses(setting, *value))
      throw UsageError(describeSetting(settings, setting.key) + " " + setting.problem);
  if (auto policy = settings.get("fsdp_auto_wrap_policy");
      policy && accelerate::spelling::transformer_wrap_without_classes(
                    *policy, settings.get("fsdp_transformer_layer_cls_to_wrap")))
    throw UsageError(describeSetting(settings, "fsdp_auto_wrap_policy") + " " +
                     accelerate::spelling::kTransformerWrapWithoutClasses);
  if (isActivationOffloadWithoutCheckpointing(settings.get("fsdp_activation_checkpointing_offload"),
                                              settings.get("fsdp_activation_checkpointing")))
    throw UsageError(describeSetting(settings, "fsdp_activation_checkpointing_offload") + " " +
                     activationOffloadWithoutCheckpointing());
  if (const std::string sharding = fsdpShardingOf(settings);
      accelerate::spelling::is_hybrid_sharding(sharding)) {
    const auto machines = settings.get("num_machines");
    if (!machines || *machines == "1") {
      const char* setting =
          settings.get("fsdp_sharding_strategy") &&
                  accelerate::spelling::sharding_strategy(*settings.get("fsdp_sharding_strategy")) == sharding
              ? "fsdp_sharding_strategy"
              : "fsdp_reshard_after_forward";
      throw UsageError(describeSetting(settings, setting) +
                       " shards within each machine and replicates across " +
                       "machines, but the job runs on one machine (num_machines " + machines.value_or("1") +
                       "), where there is nothing to replicate: use " +
                       (sharding == "HYBRID_SHARD" ? "FULL_SHARD" : "SHARD_GRAD_OP") +
                       " on one machine, or launch on several (--num_machines N --machine_rank R "
                       "--main_process_ip ADDRESS on each)");
    }
  }
  // DeepSpeed's CPU offload under zero_stage 3 runs as fsdp_offload_params true (the runtime's
  // resolve_zero_offload); false from the environment gives way, as Hugging Face's launcher exports it unset.
  for (const char* device : {"offload_optimizer_device", "offload_param_device"}) {
    if (settings.get(device) != std::optional<std::string>("cpu"))
      continue;
    const auto offload = settings.get("fsdp_offload_params");
    if (zeroStageOf(settings) == 3 && offload &&
        accelerate::spelling::boolean(*offload) == std::optional<bool>(false) &&
        settings.sourceOf("fsdp_offload_params") != SettingSource::Environment)
      throw UsageError(describeSetting(settings, device) + " conflicts with " +
                       describeSetting(settings, "fsdp_offload_params") + ": " +
                       accelerate::spelling::kZeroOffloadAgainstFsdpOffload);
    if (zeroStageOf(settings) != 3 &&
        (settings.isTrue("use_deepspeed") || settings.sourceOf(device) == SettingSource::Environment))
      throw UsageError(describeSetting(settings, device) + " conflicts with the fsdp strategy: " +
                       accelerate::spelling::kOptimizerOffloadUnderFsdp);
  }
}

std::vector<std::string> applyDeepSpeedJson(LaunchSettings& settings, std::optional<long long> worldSize) {
  namespace ds = accelerate::settings;
  ds::DeepSpeedJsonRequest request;
  request.path = settings.get("deepspeed_config_file").value_or("");
  if (!ds::names_deepspeed_json(request.path))
    return {};
  request.named_by = describeSetting(settings, "deepspeed_config_file");
  if (settings.get("use_deepspeed") == std::optional<std::string>("false"))
    throw UsageError(request.named_by +
                     " names a DeepSpeed config, and a mode flag turned DeepSpeed off (use "
                     "--use_deepspeed, or leave the other mode flag out)");
  // The config keys the file replaces (a config file naming it was refused with them when it was read; here
  // the file is named by a flag or the environment).
  for (const std::string& key : ds::keys_replaced_by_deepspeed_json())
    if (settings.sourceOf(key) == SettingSource::ConfigFile)
      request.replaced_keys.push_back(key);
  request.replaced_keys_origin = "the config file";
  for (const std::string& option : ds::deepspeed_json_options())
    if (auto value = settings.get(option); value && settings.sourceOf(option) != SettingSource::ConfigFile)
      request.give(option, *value, describeSetting(settings, option));
  request.world_size = worldSize;
  std::optional<ds::DeepSpeedJson> json;
  try {
    json = ds::read_requested_deepspeed_json(request, "");
    for (const ds::DeepSpeedJsonSetting& setting : json->settings)
      if (settings.sourceOf(setting.option) == SettingSource::Flag)
        ds::check_given_against(setting, *settings.get(setting.option),
                                describeSetting(settings, setting.option), "");
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
  const auto& specs = launchSettingSpecs();
  for (const ds::DeepSpeedJsonSetting& setting : json->settings) {
    // An "auto" that took a flag's or the environment's value: that value stays, exported as it is.
    if (!setting.decided_by_file && request.given.count(setting.option))
      continue;
    auto spec = std::find_if(specs.begin(), specs.end(),
                             [&](const SettingSpec& s) { return s.name == setting.option; });
    std::optional<std::string> canonical = canonicalValue(spec->rule, setting.text, nullptr);
    settings.set(setting.option, canonical.value_or(setting.text), SettingSource::ConfigFile, setting.origin);
  }
  if (!settings.isTrue("use_deepspeed"))
    settings.set("use_deepspeed", "true", SettingSource::ConfigFile, request.named_by);
  // The ranks may run elsewhere than accel's working directory.
  if (request.path.front() != '/') {
    char directory[PATH_MAX];
    if (::getcwd(directory, sizeof directory) != nullptr)
      settings.set("deepspeed_config_file", std::string(directory) + "/" + request.path,
                   *settings.sourceOf("deepspeed_config_file"));
  }
  std::vector<std::string> notes;
  for (const std::string& note : json->notes)
    notes.push_back("DeepSpeed config " + request.path + ": " + note);
  return notes;
}

int zeroStageOf(const LaunchSettings& settings) {
  auto stage = settings.get("zero_stage");
  if (settings.isTrue("use_deepspeed"))
    return stage ? std::stoi(*stage) : accelerate::spelling::kDefaultZeroStage;
  if (stage && settings.sourceOf("zero_stage") == SettingSource::Environment)
    return std::stoi(*stage);
  return 0;
}

std::string parallelStrategyOf(const LaunchSettings& settings) {
  accelerate::settings::StrategyRequest request;
  request.strategy = settings.get("parallel_strategy").value_or("");
  request.strategy_origin = describeSetting(settings, "parallel_strategy");
  request.zero_stage = zeroStageOf(settings);
  request.zero_stage_set = settings.get("zero_stage") || settings.isTrue("use_deepspeed");
  request.stage_origin = describeSetting(settings, "zero_stage");
  if (request.stage_origin.empty())
    request.stage_origin = describeSetting(settings, "use_deepspeed") + " (Accelerate's default zero_stage " +
                           std::to_string(accelerate::spelling::kDefaultZeroStage) + ")";
  if (settings.isTrue("use_fsdp"))
    request.fsdp_origin = describeSetting(settings, "use_fsdp");
  try {
    return accelerate::settings::select_strategy(request).strategy;
  } catch (const accelerate::settings::StrategyConflict& conflict) {
    throw UsageError(conflict.what());
  }
}

// ------------------------------------------------------------------------------------------- exporting

namespace {

std::string lowercase(std::string text) {
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

/// Accelerate's launcher exports these FSDP variables even when unset, with its flags' defaults.
const std::map<std::string, std::string>& fsdpDefaults() {
  static const std::map<std::string, std::string> kDefaults = {
      {"fsdp_version", "1"},
      {"fsdp_sharding_strategy", "FULL_SHARD"},
      {"fsdp_reshard_after_forward", "true"},
      {"fsdp_offload_params", "false"},
      {"fsdp_min_num_params", "100000000"},
      {"fsdp_forward_prefetch", "false"},
      {"fsdp_use_orig_params", "true"},
      {"fsdp_cpu_ram_efficient_loading", "true"},
      {"fsdp_sync_module_states", "true"},
      {"fsdp_activation_checkpointing", "false"},
      {"fsdp_activation_checkpointing_offload", "false"},
  };
  return kDefaults;
}

/// Values Accelerate exports lowercased (str(value).lower()).
bool exportedLowercase(const std::string& name) {
  return name == "fsdp_reshard_after_forward" || name == "offload_optimizer_device" ||
         name == "offload_param_device" || name == "gradient_clipping" ||
         (fsdpDefaults().count(name) && name != "fsdp_version" && name != "fsdp_sharding_strategy" &&
          name != "fsdp_min_num_params");
}

void addSectionVariables(std::vector<std::pair<std::string, std::string>>& variables,
                         const LaunchSettings& settings, const std::string& section,
                         const std::map<std::string, std::string>& defaults) {
  for (const SettingSpec& spec : launchSettingSpecs()) {
    if (spec.environmentVariable.empty() ||
        spec.configKey.compare(0, section.size() + 1, section + ".") != 0 ||
        spec.name == "gradient_accumulation_steps")
      continue;
    std::optional<std::string> value = settings.get(spec.name);
    // A value from a DeepSpeed JSON: the ranks read the file (ACCELERATE_DEEPSPEED_CONFIG_FILE), as in
    // Accelerate.
    if (value && !settings.originOf(spec.name).empty())
      continue;
    if (!value) {
      auto fallback = defaults.find(spec.name);
      if (fallback == defaults.end())
        continue;
      value = fallback->second;
    }
    variables.emplace_back(spec.environmentVariable,
                           exportedLowercase(spec.name) ? lowercase(*value) : *value);
  }
}

std::string deepspeedFieldsFromConfig(const LaunchSettings& settings, const ConfigDocument* config) {
  std::string fields;
  if (config)
    if (const ConfigValue* section = config->root.find("deepspeed_config"))
      for (const auto& entry : section->entries)
        fields += (fields.empty() ? "" : ",") + entry.first;
  if (settings.sourceOf("mixed_precision") == SettingSource::ConfigFile &&
      settings.originOf("mixed_precision").empty())
    fields += std::string(fields.empty() ? "" : ",") + "mixed_precision";
  return lowercase(fields);
}

} // namespace

namespace {

/// The variable setting `name` is exported as (from the runtime's settings library, through `known`).
const std::string& variableOf(const std::string& name) {
  for (const SettingSpec& spec : launchSettingSpecs())
    if (spec.name == name && !spec.environmentVariable.empty())
      return spec.environmentVariable;
  throw std::logic_error("accel: setting " + name + " has no environment variable");
}

} // namespace

std::vector<std::pair<std::string, std::string>>
acceleratorVariables(const LaunchSettings& settings, TrainingMode mode, const ConfigDocument* config) {
  std::vector<std::pair<std::string, std::string>> variables;
  const bool useCpu = settings.isTrue("cpu");
  variables.emplace_back(variableOf("cpu"), useCpu ? "True" : "False");
  // Values from a DeepSpeed JSON are not exported: the ranks read the file, as in Accelerate.
  auto exported = [&](const std::string& name) {
    return settings.originOf(name).empty() ? settings.get(name) : std::nullopt;
  };
  variables.emplace_back(variableOf("mixed_precision"), exported("mixed_precision").value_or("no"));
  if (settings.isTrue("debug"))
    variables.emplace_back(variableOf("debug"), "true");
  if (auto steps = exported("gradient_accumulation_steps"))
    variables.emplace_back(variableOf("gradient_accumulation_steps"), *steps);
  if (auto gpuIds = settings.get("gpu_ids"); gpuIds && *gpuIds != "all" && !useCpu)
    variables.emplace_back("CUDA_VISIBLE_DEVICES", *gpuIds);
  for (const SettingSpec& spec : launchSettingSpecs())
    if (auto value = settings.get(spec.name); value && spec.fromOptionTable)
      variables.emplace_back(spec.environmentVariable, *value);
  if (mode == TrainingMode::Fsdp) {
    variables.emplace_back(accelerate::spelling::kUseFsdpVariable, "true");
    addSectionVariables(variables, settings, "fsdp_config", fsdpDefaults());
  }
  // DeepSpeed's variables also with FSDP when both were asked for, which only ZeRO stage 3 allows (the
  // runtime then reads the stage too).
  if (mode == TrainingMode::DeepSpeed || (mode == TrainingMode::Fsdp && settings.isTrue("use_deepspeed"))) {
    variables.emplace_back(accelerate::spelling::kUseDeepSpeedVariable, "true");
    variables.emplace_back("ACCELERATE_CONFIG_DS_FIELDS", deepspeedFieldsFromConfig(settings, config));
    addSectionVariables(variables, settings, "deepspeed_config", {});
  }
  return variables;
}

} // namespace accel
