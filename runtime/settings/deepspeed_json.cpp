// Reading DeepSpeed's own JSON config as Accelerate's DeepSpeedPlugin does (see deepspeed_json.h).
#include "settings/deepspeed_json.h"

#include "settings/spelling.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace accelerate::settings {
namespace {

using Json = nlohmann::json;

/// How a key that maps to no setting is judged.
enum class Rule {
  Performance, ///< tunes DeepSpeed's speed or memory only: accepted, noted
  Monitoring,  ///< DeepSpeed's logging and monitoring: accepted, noted
  NoEffect,    ///< accepted, noted with `why`
  DefaultOnly, ///< accepted at one of `accepted` (the value that runs here); refused otherwise with `why`
  Refused,     ///< refused whatever its value, with `why`
};

struct KeyRule {
  const char* key;
  Rule rule;
  const char* why = nullptr;
  std::vector<Json> accepted = {};
};

const char* const kPerformance = "tunes DeepSpeed's performance only; accepted, no effect here";
const char* const kMonitoring = "configures DeepSpeed's logging or monitoring; accepted, no effect here";
const char* const kUnknown =
    "is a DeepSpeed setting accelerate-cpp does not run, and it may change results (remove it; "
    "docs/config.md, \"A DeepSpeed JSON config\", lists what is read)";

std::string shown(const Json& value) {
  if (value.is_object()) {
    return "{...}";
  }
  if (value.is_array()) {
    return "[...]";
  }
  return value.dump();
}

bool is_auto(const Json& value) {
  return value.is_string() && value.get<std::string>() == "auto";
}

/// A JSON number with a whole value, as long long.
std::optional<long long> whole(const Json& value) {
  if (value.is_number_integer()) {
    return value.get<long long>();
  }
  if (value.is_number_float()) {
    const double number = value.get<double>();
    if (number == static_cast<double>(static_cast<long long>(number))) {
      return static_cast<long long>(number);
    }
  }
  return std::nullopt;
}

/// One reading of one file: its path, for messages, and the notes gathered.
struct Reader {
  std::string path;
  const std::map<std::string, GivenValue>& given;
  std::vector<std::string> notes;
  std::vector<DeepSpeedJsonSetting> settings;

  [[noreturn]] void refuse(const std::string& key, const Json& value, const std::string& problem) const {
    throw std::invalid_argument("DeepSpeed config " + path + ": " + key + " " + shown(value) + " " + problem);
  }
  void note(const std::string& key, const std::string& why) { notes.push_back(key + ": " + why); }

  std::string at(const std::string& key) const { return "DeepSpeed config " + path + ", key " + key; }

  /// The file's own value for `option`.
  void decided(const std::string& option, const std::string& text, const std::string& key) {
    settings.push_back({option, text, at(key), true});
  }
  /// DeepSpeed's (or Accelerate's) value for `option` where the file has no `key`.
  void absent(const std::string& option, const std::string& text, const std::string& key,
              const std::string& whose) {
    settings.push_back(
        {option, text, "DeepSpeed config " + path + ", " + key + " absent: " + whose + " " + text, true});
  }
  /// `key` is "auto": the value given for `option`, else Accelerate's `fallback`.
  void automatic(const std::string& option, const std::string& key, const std::string& fallback) {
    const std::string prefix = at(key) + " \"auto\": ";
    if (auto it = given.find(option); it != given.end()) {
      settings.push_back({option, it->second.text, prefix + "from " + it->second.origin, false});
    } else {
      settings.push_back({option, fallback, prefix + "Accelerate's " + fallback, false});
    }
  }

  /// Every key of `object` (at `prefix`) but those in `handled`, judged by `rules`.
  void judge(const Json& object, const std::string& prefix, const std::vector<KeyRule>& rules,
             const std::vector<std::string>& handled) {
    for (const auto& [name, value] : object.items()) {
      if (std::find(handled.begin(), handled.end(), name) != handled.end()) {
        continue;
      }
      const std::string key = prefix + name;
      const auto rule =
          std::find_if(rules.begin(), rules.end(), [&](const KeyRule& r) { return name == r.key; });
      if (rule == rules.end()) {
        refuse(key, value, kUnknown);
      }
      switch (rule->rule) {
      case Rule::Performance:
        note(key, kPerformance);
        break;
      case Rule::Monitoring:
        note(key, kMonitoring);
        break;
      case Rule::NoEffect:
        note(key, rule->why);
        break;
      case Rule::DefaultOnly:
        if (std::find(rule->accepted.begin(), rule->accepted.end(), value) == rule->accepted.end()) {
          refuse(key, value, rule->why);
        }
        break;
      case Rule::Refused:
        refuse(key, value, rule->why);
      }
    }
  }

  /// Every key of `object` but `enabled` noted as doing nothing: its block is off.
  void off(const Json& object, const std::string& prefix, const std::string& why) {
    for (const auto& [name, value] : object.items()) {
      if (name != "enabled") {
        note(prefix + name, why);
      }
    }
  }
};

// ------------------------------------------------------------------------------------------- the key tables

const std::vector<KeyRule>& top_level_rules() {
  static const std::vector<KeyRule> kRules = {
      {"optimizer", Rule::Refused,
       "is an optimizer for DeepSpeed to build (Accelerate then needs DummyOptim in the program); "
       "accelerate-cpp "
       "prepares the optimizer the program builds: remove the block and build that optimizer in code "
       "(accelerator.prepare(torch::optim::AdamW(model->parameters(), ...)))"},
      {"scheduler", Rule::Refused,
       "is a learning-rate scheduler for DeepSpeed to build (Accelerate then needs DummyScheduler); "
       "accelerate-cpp "
       "prepares the scheduler the program builds: remove the block and build the scheduler in code"},
      {"steps_per_print", Rule::Monitoring},
      {"wall_clock_breakdown", Rule::Monitoring},
      {"memory_breakdown", Rule::Monitoring},
      {"dump_state", Rule::Monitoring},
      {"flops_profiler", Rule::Monitoring},
      {"tensorboard", Rule::Monitoring},
      {"wandb", Rule::Monitoring},
      {"csv_monitor", Rule::Monitoring},
      {"comet", Rule::Monitoring},
      {"comms_logger", Rule::Monitoring},
      {"timers", Rule::Monitoring},
      {"aio", Rule::Performance},
      {"autotuning", Rule::NoEffect,
       "is read by DeepSpeed's autotuner, not by training; accepted, no effect here"},
      {"zero_allow_untested_optimizer", Rule::NoEffect,
       "lets DeepSpeed's ZeRO take an optimizer it did not build; accelerate-cpp's takes any; accepted"},
      {"zero_force_ds_cpu_optimizer", Rule::NoEffect,
       "makes DeepSpeed's CPU offload use its own CPU Adam; accelerate-cpp steps the program's optimizer; "
       "accepted, no effect here"},
      {"activation_checkpointing", Rule::NoEffect,
       "configures deepspeed.checkpointing, which only Python models that call it use; accepted, no effect "
       "here "
       "(accelerate-cpp's is the activation_checkpointing setting, or accelerate::checkpoint in the model)"},
      {"checkpoint", Rule::NoEffect,
       "configures DeepSpeed's checkpoint files; accelerate-cpp writes its own (save_state); accepted, no "
       "effect "
       "here"},
      {"prescale_gradients",
       Rule::DefaultOnly,
       "divides gradients before averaging them, which changes results and accelerate-cpp does not do (use "
       "false)",
       {false}},
      {"gradient_predivide_factor",
       Rule::DefaultOnly,
       "divides gradients before averaging them, which changes results and accelerate-cpp does not do (use "
       "1.0)",
       {1, 1.0}},
      {"sparse_gradients",
       Rule::DefaultOnly,
       "averages embedding gradients as sparse tensors, which accelerate-cpp does not do (use false)",
       {false}},
      {"communication_data_type",
       Rule::DefaultOnly,
       "averages gradients in another dtype, which changes results and accelerate-cpp does not do (remove "
       "it)",
       {nullptr}},
  };
  return kRules;
}

const std::vector<KeyRule>& zero_rules() {
  static const std::vector<KeyRule> kRules = {
      {"overlap_comm", Rule::Performance},
      {"contiguous_gradients", Rule::Performance},
      {"reduce_bucket_size", Rule::Performance},
      {"allgather_bucket_size", Rule::Performance},
      {"allgather_partitions", Rule::Performance},
      {"reduce_scatter", Rule::Performance},
      {"round_robin_gradients", Rule::Performance},
      {"sub_group_size", Rule::Performance},
      {"stage3_prefetch_bucket_size", Rule::Performance},
      {"prefetch_bucket_size", Rule::Performance},
      {"stage3_param_persistence_threshold", Rule::Performance},
      {"param_persistence_threshold", Rule::Performance},
      {"stage3_model_persistence_threshold", Rule::Performance},
      {"model_persistence_threshold", Rule::Performance},
      {"stage3_max_live_parameters", Rule::Performance},
      {"max_live_parameters", Rule::Performance},
      {"stage3_max_reuse_distance", Rule::Performance},
      {"max_reuse_distance", Rule::Performance},
      {"use_multi_rank_bucket_allreduce", Rule::Performance},
      {"memory_efficient_linear", Rule::Performance},
      {"log_trace_cache_warnings", Rule::Monitoring},
      {"ignore_unused_parameters", Rule::NoEffect,
       "lets DeepSpeed's stage 2 tolerate parameters without gradients; accepted, no effect on results"},
      {"elastic_checkpoint", Rule::NoEffect,
       "shapes DeepSpeed's checkpoint files; accelerate-cpp writes its own; accepted, no effect here"},
      {"load_from_fp32_weights", Rule::NoEffect,
       "shapes how DeepSpeed loads its checkpoint files; accelerate-cpp reads its own; accepted, no effect "
       "here"},
      {"stage3_gather_16bit_weights_on_model_save",
       Rule::DefaultOnly,
       spelling::kSixteenBitModelFile,
       {false, "auto"}},
      {"stage3_gather_fp16_weights_on_model_save",
       Rule::DefaultOnly,
       spelling::kSixteenBitModelFile,
       {false, "auto"}},
      {"gather_16bit_weights_on_model_save",
       Rule::DefaultOnly,
       spelling::kSixteenBitModelFile,
       {false, "auto"}},
      {"cpu_offload",
       Rule::DefaultOnly,
       "is DeepSpeed's older spelling of optimizer offload (use \"offload_optimizer\": {\"device\": \"cpu\"} "
       "instead)",
       {false}},
      {"zero_hpz_partition_size",
       Rule::DefaultOnly,
       "shards parameters a second time within each machine (ZeRO++), which accelerate-cpp does not do (use "
       "1)",
       {1}},
      {"zero_quantized_weights",
       Rule::DefaultOnly,
       "quantizes the gathered weights (ZeRO++), which changes results and accelerate-cpp does not do (use "
       "false)",
       {false}},
      {"zero_quantized_nontrainable_weights",
       Rule::DefaultOnly,
       "quantizes frozen weights (ZeRO++), which changes results and accelerate-cpp does not do (use false)",
       {false}},
      {"zero_quantized_gradients",
       Rule::DefaultOnly,
       "quantizes the averaged gradients (ZeRO++), which changes results and accelerate-cpp does not do (use "
       "false)",
       {false}},
      {"mics_shard_size",
       Rule::DefaultOnly,
       "shards within groups of GPUs (MiCS), which accelerate-cpp does not do (use -1)",
       {-1}},
      {"mics_hierarchical_params_gather",
       Rule::DefaultOnly,
       "is for MiCS sharding, which accelerate-cpp does not do (use false)",
       {false}},
  };
  return kRules;
}

const std::vector<KeyRule>& offload_rules(bool parameters) {
  static const std::vector<KeyRule> kOptimizer = {
      {"pin_memory", Rule::Performance},
      {"buffer_count", Rule::Performance},
      {"fast_init", Rule::Performance},
      {"pipeline", Rule::Performance},
      {"pipeline_read", Rule::Performance},
      {"pipeline_write", Rule::Performance},
      {"ratio", Rule::Performance},
      {"nvme_path", Rule::NoEffect, "is read for NVMe offload only; accepted, no effect here"},
  };
  static const std::vector<KeyRule> kParameters = {
      {"pin_memory", Rule::Performance},
      {"buffer_count", Rule::Performance},
      {"buffer_size", Rule::Performance},
      {"max_in_cpu", Rule::Performance},
      {"nvme_path", Rule::NoEffect, "is read for NVMe offload only; accepted, no effect here"},
  };
  return parameters ? kParameters : kOptimizer;
}

/// The fp16 block's loss-scale keys, where fp16 is on: the runtime's scaler is torch.amp.GradScaler's
/// (runtime/precision), which no setting changes, so a key is accepted at the value that scaler runs.
const std::vector<KeyRule>& fp16_rules() {
  static const std::vector<KeyRule> kRules = {
      {"auto_cast", Rule::NoEffect, "autocast follows mixed_precision fp16 here; accepted"},
      {"consecutive_hysteresis", Rule::NoEffect, "does nothing with hysteresis 1, which runs here; accepted"},
      {"loss_scale",
       Rule::DefaultOnly,
       "is a static loss scale; accelerate-cpp scales fp16 losses dynamically, as torch.amp.GradScaler (use "
       "0, "
       "DeepSpeed's dynamic scaling, or remove it)",
       {0, 0.0}},
      {"initial_scale_power",
       Rule::DefaultOnly,
       "sets the first loss scale; accelerate-cpp's starts at 2^16 = 65536 (torch.amp.GradScaler's "
       "init_scale), "
       "which no setting changes (use 16 or remove it)",
       {16}},
      {"loss_scale_window",
       Rule::DefaultOnly,
       "sets how many overflow-free steps double the loss scale; accelerate-cpp's scaler doubles it after "
       "2000 "
       "(torch.amp.GradScaler's growth_interval), which no setting changes (use 2000, or remove it: then "
       "2000 "
       "runs, not DeepSpeed's 1000)",
       {2000}},
      {"hysteresis",
       Rule::DefaultOnly,
       "delays halving the loss scale after an overflow; accelerate-cpp's scaler halves it at every "
       "overflow, as "
       "torch.amp.GradScaler (use 1, or remove it: then 1 runs, not DeepSpeed's 2)",
       {1}},
      {"min_loss_scale", Rule::Refused,
       "is a floor of the loss scale; accelerate-cpp's scaler (torch.amp.GradScaler) has none (remove it)"},
      {"fp16_master_weights_and_grads",
       Rule::DefaultOnly,
       "keeps master weights and gradients in fp16, which changes results and accelerate-cpp does not do "
       "(use "
       "false)",
       {false}},
  };
  return kRules;
}

// ------------------------------------------------------------------------------------------- the settings

/// A boolean key of a block: true, false, "auto" (nullopt), or refused.
std::optional<bool> flag(Reader& reader, const Json& value, const std::string& key) {
  if (value.is_boolean()) {
    return value.get<bool>();
  }
  if (!is_auto(value)) {
    reader.refuse(key, value, "must be true, false or \"auto\"");
  }
  return std::nullopt;
}

void read_stage(Reader& reader, const Json& zero) {
  const std::string key = "zero_optimization.stage";
  if (!zero.contains("stage")) {
    reader.absent("zero_stage", "0", key, "DeepSpeed's");
    return;
  }
  const Json& value = zero["stage"];
  if (is_auto(value)) {
    reader.automatic("zero_stage", key, std::to_string(spelling::kDefaultZeroStage));
    return;
  }
  const auto stage = whole(value);
  if (!stage || *stage < spelling::kMinZeroStage || *stage > spelling::kMaxZeroStage) {
    reader.refuse(key, value,
                  "is not a ZeRO stage; use 0 (off), 1 (optimizer state sharded), 2 (optimizer state and "
                  "gradients sharded), 3 (parameters too: the fsdp strategy) or \"auto\"");
  }
  reader.decided("zero_stage", std::to_string(*stage), key);
}

void read_offload(Reader& reader, const Json& zero, bool parameters) {
  const std::string block = parameters ? "offload_param" : "offload_optimizer";
  const std::string option = parameters ? "offload_param_device" : "offload_optimizer_device";
  const std::string prefix = "zero_optimization." + block;
  const std::string key = prefix + ".device";
  if (!zero.contains(block) || zero[block].is_null()) {
    reader.absent(option, "none", key, "DeepSpeed's");
    return;
  }
  const Json& object = zero[block];
  if (!object.is_object()) {
    reader.refuse(prefix, object, "must be a JSON object, like {\"device\": \"cpu\"}");
  }
  reader.judge(object, prefix + ".", offload_rules(parameters), {"device"});
  if (!object.contains("device")) {
    reader.absent(option, "none", key, "DeepSpeed's");
    return;
  }
  const Json& value = object["device"];
  if (is_auto(value)) {
    reader.automatic(option, key, "none");
    return;
  }
  const std::string device = value.is_string() ? value.get<std::string>() : "";
  if (device == "nvme") {
    reader.refuse(key, value,
                  "is NVMe offload, which accelerate-cpp does not have (use \"none\" or \"cpu\")");
  }
  if (device != "none" && device != "cpu") {
    reader.refuse(key, value, "is not an offload device; use \"none\", \"cpu\" or \"auto\"");
  }
  reader.decided(option, device, key);
}

/// gradient_accumulation_steps: the value, "auto" (given, else 1), absent: 1 (Accelerate writes 1 into a file
/// without it, whatever the program asks).
long long read_accumulation(Reader& reader, const Json& root) {
  const std::string key = "gradient_accumulation_steps";
  if (!root.contains(key)) {
    reader.absent(key, "1", key, "Accelerate's");
    return 1;
  }
  const Json& value = root[key];
  if (is_auto(value)) {
    reader.automatic(key, key, "1");
    const std::string& text = reader.settings.back().text;
    const auto steps = spelling::whole_number(text, 1, 1LL << 40);
    return steps.value_or(1);
  }
  const auto steps = whole(value);
  if (!steps || *steps < 1) {
    reader.refuse(key, value, "must be a whole number >= 1 or \"auto\"");
  }
  reader.decided(key, std::to_string(*steps), key);
  return *steps;
}

void read_clipping(Reader& reader, const Json& root) {
  const std::string key = "gradient_clipping";
  if (!root.contains(key)) {
    reader.absent(key, "0", key, "DeepSpeed's");
    return;
  }
  const Json& value = root[key];
  if (is_auto(value)) {
    // Accelerate's _prepare_deepspeed fills an "auto" clipping nothing gave with 1.0.
    reader.automatic(key, key, "1.0");
    return;
  }
  if (!value.is_number() || !(value.get<double>() >= 0)) {
    reader.refuse(key, value, "must be a number >= 0 (0: off) or \"auto\"");
  }
  reader.decided(key, value.dump(), key);
}

/// fp16.enabled and bf16.enabled to mixed_precision, as Accelerate's DeepSpeedPlugin.set_mixed_precision: an
/// "auto" or absent block follows the mixed precision given (fp16; bf16 for bf16 and fp8); a block without
/// `enabled` is off (DeepSpeed's default); the mode given may not be the other block's, set true.
void read_precision(Reader& reader, const Json& root) {
  const auto given = reader.given.find("mixed_precision");
  const std::string mode = given == reader.given.end() ? "" : given->second.text;
  struct Block {
    std::string name;
    bool present = false;
    std::optional<bool> enabled; ///< nullopt: "auto", or the block absent
    bool on = false;
  };
  Block blocks[2];
  blocks[0].name = "fp16";
  blocks[1].name = "bf16";
  for (Block& block : blocks) {
    // DeepSpeed's older name for bf16.
    const std::string name =
        block.name == "bf16" && !root.contains("bf16") && root.contains("bfloat16") ? "bfloat16" : block.name;
    if (!root.contains(name) || root[name].is_null()) {
      continue;
    }
    const Json& object = root[name];
    if (!object.is_object()) {
      reader.refuse(name, object, "must be a JSON object, like {\"enabled\": true}");
    }
    block.name = name;
    block.present = true;
    block.enabled = object.contains("enabled") ? flag(reader, object["enabled"], name + ".enabled")
                                               : std::optional<bool>(false);
  }
  Block& fp16 = blocks[0];
  Block& bf16 = blocks[1];
  fp16.on = fp16.enabled.value_or(mode == "fp16");
  bf16.on = bf16.enabled.value_or(mode == "bf16" || mode == "fp8");
  for (const Block* block : {&fp16, &bf16}) {
    const Block& other = block == &fp16 ? bf16 : fp16;
    const bool asked = block == &fp16 ? mode == "fp16" : (mode == "bf16" || mode == "fp8");
    if (asked && other.enabled == std::optional<bool>(true)) {
      reader.refuse(
          other.name + ".enabled", true,
          "conflicts with mixed_precision " + mode + " (from " + given->second.origin +
              "), as in Accelerate: set the mode in the DeepSpeed config file only, or make them agree");
    }
  }
  if (fp16.on && bf16.on) {
    reader.refuse(fp16.name + ".enabled", true,
                  "and " + bf16.name + ".enabled are both on; DeepSpeed runs one of them (turn one off)");
  }
  std::string text = mode == "fp8" ? "fp8" : fp16.on ? "fp16" : bf16.on ? "bf16" : "no";
  const Block* decider = fp16.on ? &fp16 : bf16.on ? &bf16 : nullptr;
  if (decider != nullptr && decider->enabled) {
    reader.decided("mixed_precision", text, decider->name + ".enabled");
  } else if (decider == nullptr && fp16.enabled && bf16.enabled) {
    reader.decided("mixed_precision", text, fp16.name + ".enabled and " + bf16.name + ".enabled");
  } else if (given != reader.given.end()) {
    reader.settings.push_back({"mixed_precision", text,
                               "DeepSpeed config " + reader.path +
                                   ", fp16.enabled and bf16.enabled \"auto\" or absent: from " +
                                   given->second.origin,
                               false});
  } else {
    reader.settings.push_back(
        {"mixed_precision", text,
         "DeepSpeed config " + reader.path +
             ", fp16.enabled and bf16.enabled \"auto\", absent or false: no mixed precision",
         false});
  }
  // The blocks' other keys: the loss scale where fp16 runs; nothing where a block is off.
  if (fp16.present) {
    const Json& object = root[fp16.name];
    if (fp16.on) {
      reader.judge(object, fp16.name + ".", fp16_rules(), {"enabled"});
    } else {
      reader.off(object, fp16.name + ".", "fp16 is off; accepted, no effect");
    }
  }
  if (bf16.present) {
    const Json& object = root[bf16.name];
    if (bf16.on) {
      reader.judge(object, bf16.name + ".", {}, {"enabled"});
    } else {
      reader.off(object, bf16.name + ".", "bf16 is off; accepted, no effect");
    }
  }
}

/// train_micro_batch_size_per_gpu and train_batch_size: whole numbers or "auto"; where both are numbers and
/// the world size is known, DeepSpeed's rule train_batch_size = micro batch × accumulation steps × world
/// size.
void read_batch_sizes(Reader& reader, const Json& root, long long steps,
                      std::optional<long long> world_size) {
  std::optional<long long> sizes[2];
  const char* keys[2] = {"train_micro_batch_size_per_gpu", "train_batch_size"};
  for (int i = 0; i < 2; ++i) {
    if (!root.contains(keys[i]) || is_auto(root[keys[i]])) {
      continue;
    }
    sizes[i] = whole(root[keys[i]]);
    if (!sizes[i] || *sizes[i] < 1) {
      reader.refuse(keys[i], root[keys[i]], "must be a whole number >= 1 or \"auto\"");
    }
  }
  if (sizes[0]) {
    reader.note(
        keys[0],
        "accelerate-cpp trains on the batches of the prepared data loader, whose batch size the program "
        "sets; accepted, not checked against it");
  }
  if (sizes[1] && world_size) {
    const long long per_step = steps * *world_size;
    if (sizes[0] ? *sizes[1] != *sizes[0] * per_step : *sizes[1] % per_step != 0) {
      const std::string rule = sizes[0]
                                   ? "train_micro_batch_size_per_gpu " + std::to_string(*sizes[0]) + " x "
                                   : "a micro batch x ";
      const std::string product = sizes[0] ? " = " + std::to_string(*sizes[0] * per_step) : "";
      reader.refuse(keys[1], root[keys[1]],
                    "is not " + rule + "gradient_accumulation_steps " + std::to_string(steps) + " x " +
                        std::to_string(*world_size) + " processes" + product +
                        ", which DeepSpeed requires (make them agree, or use \"auto\")");
    }
  }
}

} // namespace

const char* const kDeepSpeedConfigFileVariable = "ACCELERATE_DEEPSPEED_CONFIG_FILE";
const char* const kDeepSpeedConfigFileKey = "deepspeed_config.deepspeed_config_file";

const DeepSpeedJsonSetting* DeepSpeedJson::find(const std::string& option) const {
  for (const DeepSpeedJsonSetting& setting : settings) {
    if (setting.option == option) {
      return &setting;
    }
  }
  return nullptr;
}

const std::vector<std::string>& deepspeed_json_options() {
  static const std::vector<std::string> kOptions = {"zero_stage",           "offload_optimizer_device",
                                                    "offload_param_device", "gradient_accumulation_steps",
                                                    "gradient_clipping",    "mixed_precision"};
  return kOptions;
}

bool names_deepspeed_json(const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return !text.empty() && lower != "none";
}

DeepSpeedJson parse_deepspeed_json(const std::string& text, const std::string& path,
                                   const std::map<std::string, GivenValue>& given,
                                   std::optional<long long> world_size) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& error) {
    // The line and column of the byte the parser stopped at (1-based), and its reason without its prefix.
    const std::size_t stop = std::min<std::size_t>(error.byte == 0 ? 0 : error.byte - 1, text.size());
    const std::size_t line_start = stop == 0 ? 0 : text.rfind('\n', stop - 1);
    const std::size_t line =
        1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + stop, '\n'));
    const std::size_t column = line_start == std::string::npos ? stop + 1 : stop - line_start;
    std::string reason = error.what();
    if (const auto colon = reason.find(": "); colon != std::string::npos) {
      reason = reason.substr(colon + 2);
    }
    throw std::invalid_argument("DeepSpeed config " + path + ":" + std::to_string(line) + ":" +
                                std::to_string(column) + ": malformed JSON: " + reason +
                                " (fix the syntax there)");
  }
  if (!root.is_object()) {
    throw std::invalid_argument("DeepSpeed config " + path +
                                " must be a JSON object of DeepSpeed settings (got " +
                                std::string(root.type_name()) + ")");
  }
  Reader reader{path, given, {}, {}};
  if (!root.contains("zero_optimization") || !root["zero_optimization"].is_object()) {
    throw std::invalid_argument(
        "DeepSpeed config " + path +
        " has no zero_optimization object, which Accelerate requires of a DeepSpeed config (add "
        "\"zero_optimization\": {\"stage\": 2}, with the stage to run: 0 to 3)");
  }
  const Json& zero = root["zero_optimization"];
  reader.judge(root, "", top_level_rules(),
               {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "gradient_clipping", "fp16", "bf16", "bfloat16", "zero_optimization", "amp", "elasticity"});
  // Blocks that change results when on, and do nothing when off.
  const std::pair<const char*, const char*> switched[] = {
      {"amp", "is NVIDIA Apex's mixed precision, which accelerate-cpp does not have (use fp16 or bf16)"},
      {"elasticity", "changes the batch size with the number of GPUs, which accelerate-cpp does not do (use "
                     "false)"}};
  for (const auto& [name, problem] : switched) {
    if (!root.contains(name)) {
      continue;
    }
    const Json& block = root[name];
    if (!block.is_object()) {
      reader.refuse(name, block, "must be a JSON object, like {\"enabled\": false}");
    }
    if (block.contains("enabled") && block["enabled"] != false) {
      reader.refuse(std::string(name) + ".enabled", block["enabled"], problem);
    }
    reader.off(block, std::string(name) + ".", std::string(name) + " is off; accepted, no effect");
  }
  reader.judge(zero, "zero_optimization.", zero_rules(), {"stage", "offload_optimizer", "offload_param"});
  read_stage(reader, zero);
  read_offload(reader, zero, false);
  read_offload(reader, zero, true);
  const long long steps = read_accumulation(reader, root);
  read_clipping(reader, root);
  read_precision(reader, root);
  read_batch_sizes(reader, root, steps, world_size);
  DeepSpeedJson result;
  result.path = path;
  result.notes = std::move(reader.notes);
  for (const std::string& option : deepspeed_json_options()) {
    for (DeepSpeedJsonSetting& setting : reader.settings) {
      if (setting.option == option) {
        result.settings.push_back(std::move(setting));
      }
    }
  }
  return result;
}

DeepSpeedJson read_deepspeed_json(const std::string& path, const std::string& named_by,
                                  const std::map<std::string, GivenValue>& given,
                                  std::optional<long long> world_size) {
  std::ifstream file(path);
  if (!file) {
    throw std::invalid_argument("DeepSpeed config " + path + " cannot be read (" + std::strerror(errno) +
                                "; named by " + named_by +
                                "): fix the path (a relative one is from the "
                                "working directory, as in Accelerate)");
  }
  std::ostringstream text;
  text << file.rdbuf();
  return parse_deepspeed_json(text.str(), path, given, world_size);
}

const std::vector<std::string>& keys_replaced_by_deepspeed_json() {
  static const std::vector<std::string> kKeys = {
      "gradient_accumulation_steps", "gradient_clipping",      "zero_stage",
      "offload_optimizer_device",    "offload_param_device",   "offload_param_nvme_path",
      "offload_optimizer_nvme_path", "zero3_save_16bit_model", "mixed_precision"};
  return kKeys;
}

std::string deepspeed_json_conflict(const std::vector<std::string>& keys) {
  std::string listed;
  for (const std::string& key : keys) {
    listed += (listed.empty() ? "" : ", ") + key;
  }
  return "with deepspeed_config_file set, Accelerate ignores these config keys and refuses them: " + listed +
         ". Give them in the DeepSpeed config file (gradient_accumulation_steps, gradient_clipping, "
         "zero_optimization.stage, zero_optimization.offload_optimizer.device, "
         "zero_optimization.offload_param.device, fp16.enabled or bf16.enabled) and remove them here";
}

std::vector<std::string>
keys_replaced_by_deepspeed_json(const std::function<bool(const std::string&)>& is_set) {
  std::vector<std::string> found;
  for (const std::string& key : keys_replaced_by_deepspeed_json()) {
    if (is_set(key == "mixed_precision" ? key : "deepspeed_config." + key) ||
        (key == "gradient_accumulation_steps" && is_set(key))) {
      found.push_back(key);
    }
  }
  return found;
}

void DeepSpeedJsonRequest::named_in_environment(const std::string& text) {
  if (names_deepspeed_json(text)) {
    path = text;
    named_by = std::string(kDeepSpeedConfigFileVariable) + " in the environment";
  }
}

void DeepSpeedJsonRequest::named_in_file(const std::string& text, const std::vector<std::string>& replaced,
                                         const std::string& label) {
  if (names_deepspeed_json(text) && !names_deepspeed_json(path)) {
    path = text;
    named_by = std::string(kDeepSpeedConfigFileKey) + " in " + label;
  }
  replaced_keys = replaced;
  replaced_keys_origin = label;
}

void DeepSpeedJsonRequest::give(const std::string& option, const std::string& text,
                                const std::string& origin) {
  const auto& decided = deepspeed_json_options();
  if (std::find(decided.begin(), decided.end(), option) != decided.end()) {
    given[option] = {text, origin};
  }
}

std::optional<DeepSpeedJson> read_requested_deepspeed_json(const DeepSpeedJsonRequest& request,
                                                           const std::string& prefix) {
  if (!names_deepspeed_json(request.path)) {
    return std::nullopt;
  }
  if (!request.replaced_keys.empty()) {
    throw std::invalid_argument(prefix + request.replaced_keys_origin + ": " +
                                deepspeed_json_conflict(request.replaced_keys));
  }
  std::vector<std::string> fields;
  for (const std::string& key : keys_replaced_by_deepspeed_json()) {
    if (("," + request.launcher_fields + ",").find("," + key + ",") != std::string::npos) {
      fields.push_back(key);
    }
  }
  if (!fields.empty()) {
    throw std::invalid_argument(prefix + "ACCELERATE_CONFIG_DS_FIELDS='" + request.launcher_fields +
                                "' (from the environment: the config file's DeepSpeed keys, as Accelerate's "
                                "launcher exports them): " +
                                deepspeed_json_conflict(fields));
  }
  try {
    return read_deepspeed_json(request.path, request.named_by, request.given, request.world_size);
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(prefix + error.what());
  }
}

void check_given_against(const DeepSpeedJsonSetting& setting, const std::string& text,
                         const std::string& given, const std::string& prefix) {
  if (setting.decided_by_file && !same_setting_text(text, setting.text)) {
    throw std::invalid_argument(
        prefix + given + " conflicts with " + setting.option + "='" + setting.text + "' (from " +
        setting.origin +
        "): the DeepSpeed config file decides it (as in Accelerate, a value given "
        "elsewhere only fills an \"auto\"): make the two agree, set the key to \"auto\" "
        "in the file, or leave the other unset");
  }
}

bool same_setting_text(const std::string& first, const std::string& second) {
  if (first == second) {
    return true;
  }
  try {
    std::size_t used_first = 0;
    std::size_t used_second = 0;
    const double a = std::stod(first, &used_first);
    const double b = std::stod(second, &used_second);
    return used_first == first.size() && used_second == second.size() && a == b;
  } catch (const std::exception&) {
    return false;
  }
}

} // namespace accelerate::settings
