// Resolves the Accelerator's configuration: options > ACCELERATE_* environment > ACCELERATE_CONFIG_FILE >
// defaults, for every row of <accelerate/detail/option_table.h>.
#include "config.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <vector>

#ifdef ACCEL_WITH_YAML
#include <yaml-cpp/yaml.h>
#endif

namespace accelerate::detail {
namespace {

/// The table's ENVIRONMENT or YAML_KEY for an option that has none: it is never read from text.
struct Unmapped {};
constexpr Unmapped unmapped{};

const std::vector<std::string> kPrecisions = {"no", "fp16", "bf16", "fp8"};

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return std::nullopt;
  }
  return std::string(value);
}

// ------------------------------------------------------------------------------------------- values as text

template <typename T> std::string text_of(const T& value) {
  std::ostringstream out;
  out << std::boolalpha << value;
  return out.str();
}
std::string text_of(const std::chrono::milliseconds& value) {
  return std::to_string(value.count()) + " ms";
}
template <typename T> std::string text_of(const std::optional<T>& value) {
  return value ? text_of(*value) : "unset";
}

[[noreturn]] void refuse(const std::string& key, const std::string& text, const std::string& where,
                         const std::string& problem) {
  throw std::invalid_argument("accelerate: " + key + "='" + text + "' (from " + where + ") " + problem);
}

// ------------------------------------------------------------------------------------------- parsers
// Text from the environment or the config file to a TYPE of the table. Only an option with an environment
// variable or a YAML key instantiates its parser; a TYPE without one fails to compile when it is mapped.

template <typename T> struct Parser {
  static_assert(!std::is_same_v<T, T>,
                "this option's TYPE has no parser: add a Parser specialisation before giving it an "
                "ENVIRONMENT variable or a YAML_KEY in option_table.h");
};

template <> struct Parser<std::string> {
  static std::string parse(const std::string&, const std::string& text, const std::string&) { return text; }
};

template <> struct Parser<bool> {
  static bool parse(const std::string& key, const std::string& text, const std::string& where) {
    std::string lower = text;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (lower == "1" || lower == "true" || lower == "yes") {
      return true;
    }
    if (lower == "0" || lower == "false" || lower == "no") {
      return false;
    }
    refuse(key, text, where, "is not a boolean; use true or false");
  }
};

/// Whole text as a number by `convert` (std::stoi, std::stod, ...), or the option is refused.
template <typename Convert>
auto parse_number(const std::string& key, const std::string& text, const std::string& where, Convert convert,
                  const char* kind) {
  std::size_t used = 0;
  decltype(convert(text, &used)) value{};
  try {
    value = convert(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    refuse(key, text, where, std::string("is not ") + kind);
  }
  return value;
}

template <> struct Parser<int> {
  static int parse(const std::string& key, const std::string& text, const std::string& where) {
    return parse_number(
        key, text, where, [](const std::string& s, std::size_t* used) { return std::stoi(s, used); },
        "a whole number");
  }
};

template <> struct Parser<double> {
  static double parse(const std::string& key, const std::string& text, const std::string& where) {
    return parse_number(
        key, text, where, [](const std::string& s, std::size_t* used) { return std::stod(s, used); },
        "a number");
  }
};

template <> struct Parser<std::uint64_t> {
  static std::uint64_t parse(const std::string& key, const std::string& text, const std::string& where) {
    if (text.empty() || text.front() == '-') {
      refuse(key, text, where, "is not a whole number >= 0");
    }
    return parse_number(
        key, text, where,
        [](const std::string& s, std::size_t* used) -> std::uint64_t { return std::stoull(s, used); },
        "a whole number >= 0");
  }
};

// ------------------------------------------------------------------------------------------- checks
// The table's CHECK column: what a value must be, wherever it came from (options included).

template <typename T> void any_value(const std::string&, const T&, const std::string&) {}

void one_of_precisions(const std::string& key, const std::string& value, const std::string& where) {
  if (std::find(kPrecisions.begin(), kPrecisions.end(), value) == kPrecisions.end()) {
    refuse(key, value, where, "is not one of no, fp16, bf16, fp8");
  }
}

void at_least_one(const std::string& key, int value, const std::string& where) {
  if (value < 1) {
    refuse(key, text_of(value), where, "must be a whole number >= 1");
  }
}

void not_negative(const std::string& key, int value, const std::string& where) {
  if (value < 0) {
    refuse(key, text_of(value), where,
           "must be >= 0 (the number of automatically named checkpoints to keep; 0 keeps all)");
  }
}

void not_negative_number(const std::string& key, double value, const std::string& where) {
  if (!(value >= 0)) {
    refuse(key, text_of(value), where, "must be >= 0 (0: off)");
  }
}

void one_of_zero_stages(const std::string& key, int value, const std::string& where) {
  if (value == 3) {
    refuse(key, text_of(value), where,
           "asks for ZeRO stage 3 (parameters sharded too), which needs the fully sharded strategy that this "
           "version does not have yet; use zero_stage 1 or 2");
  }
  if (value < 0 || value > 3) {
    refuse(
        key, text_of(value), where,
        "is not a ZeRO stage; use 0 (off), 1 (optimizer state sharded) or 2 (optimizer state and gradients "
        "sharded)");
  }
}

void one_of_offload_devices(const std::string& key, const std::string& value, const std::string& where) {
  if (value != "none" && value != "cpu") {
    refuse(key, value, where, "is not an optimizer offload device this runtime has; use none or cpu");
  }
}

void positive(const std::string& key, double value, const std::string& where) {
  if (!(value > 0)) {
    refuse(key, text_of(value), where, "must be > 0");
  }
}

void positive(const std::string& key, std::chrono::milliseconds value, const std::string& where) {
  if (value.count() <= 0) {
    refuse(key, text_of(value), where, "must be > 0");
  }
}

// ------------------------------------------------------------------------------------------- sharding

/// What to tell a user who asked for FSDP; `what` names the setting, `where` its source.
[[noreturn]] void refuse_fsdp(const std::string& what, const std::string& where) {
  throw std::invalid_argument(
      "accelerate: " + what + " (from " + where +
      ") asks for FSDP (fully sharded training), which accelerate-cpp does not support yet. Use data "
      "parallelism or ZeRO instead: distributed_type: MULTI_GPU (or MULTI_CPU, or DEEPSPEED with "
      "deepspeed_config.zero_stage 1 or 2), without an fsdp_config section, and ACCELERATE_USE_FSDP unset");
}

/// DeepSpeed settings this runtime does not implement: each is refused when set to anything but its default
/// (Hugging Face's default: "none" for a path or device, false for a flag). `yaml_key` is the key inside
/// deepspeed_config, `variable` the ACCELERATE_* variable Hugging Face's launcher exports for it.
struct UnsupportedDeepSpeedSetting {
  const char* yaml_key;
  const char* variable; ///< nullptr: Hugging Face has no variable for it
  const char* default_text;
  const char* problem;
};

const std::vector<UnsupportedDeepSpeedSetting>& unsupported_deepspeed_settings() {
  static const std::vector<UnsupportedDeepSpeedSetting> kSettings = {
      {"deepspeed_config_file", "ACCELERATE_DEEPSPEED_CONFIG_FILE", "none",
       "names a DeepSpeed JSON config, which this runtime does not read; remove it and give zero_stage, "
       "offload_optimizer_device, gradient_clipping and gradient_accumulation_steps in the deepspeed_config "
       "section (or their ACCELERATE_* variables) instead"},
      {"offload_param_device", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "none",
       "asks to offload parameters, which needs ZeRO stage 3 (not in this version); use none"},
      {"offload_optimizer_nvme_path", nullptr, "none",
       "is for NVMe offload, which this runtime does not have; remove it (offload_optimizer_device takes "
       "none or "
       "cpu)"},
      {"offload_param_nvme_path", nullptr, "none",
       "is for NVMe offload, which this runtime does not have; remove it"},
      {"zero3_init_flag", "ACCELERATE_DEEPSPEED_ZERO3_INIT", "false",
       "is for ZeRO stage 3 (not in this version); use false"},
      {"zero3_save_16bit_model", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "false",
       "is for ZeRO stage 3 (not in this version); use false"},
  };
  return kSettings;
}

/// Whether `text` is `default_text` as Hugging Face would read it (a flag as a boolean, else case-blind).
bool is_default_text(const std::string& text, const std::string& default_text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (default_text == "false") {
    return lower == "false" || lower == "0" || lower == "no";
  }
  return lower == default_text;
}

// ------------------------------------------------------------------------------------------- sources

/// Settings read from one source, as text, by the source's name for them (variable or YAML key).
using Settings = std::map<std::string, std::string>;

Settings read_environment() {
  Settings settings;
  auto read = [&](const auto& variable) {
    if constexpr (!std::is_same_v<std::decay_t<decltype(variable)>, Unmapped>) {
      if (auto value = environment(variable)) {
        settings[variable] = *value;
      }
    }
  };
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC) read(ENVIRONMENT);
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  if (auto value = environment("ACCELERATE_USE_FSDP");
      value && Parser<bool>::parse("ACCELERATE_USE_FSDP", *value, "the environment")) {
    refuse_fsdp("ACCELERATE_USE_FSDP=" + *value, "the environment");
  }
  if (auto value = environment("ACCELERATE_USE_DEEPSPEED")) {
    settings["ACCELERATE_USE_DEEPSPEED"] = *value;
  }
  for (const auto& setting : unsupported_deepspeed_settings()) {
    if (setting.variable == nullptr) {
      continue;
    }
    if (auto value = environment(setting.variable); value && !is_default_text(*value, setting.default_text)) {
      refuse(setting.variable, *value, "the environment", setting.problem);
    }
  }
  return settings;
}

#ifdef ACCEL_WITH_YAML
/// The node at `dotted_key` under `map`: a key with dots names nested mappings (`deepspeed_config.zero_stage`
/// is `zero_stage` inside `deepspeed_config`), at any depth. Null when a level is missing or not a mapping.
YAML::Node yaml_at(const YAML::Node& map, const std::string& dotted_key) {
  if (!map.IsMap()) {
    return YAML::Node(YAML::NodeType::Undefined);
  }
  const auto dot = dotted_key.find('.');
  const YAML::Node child = map[dotted_key.substr(0, dot)];
  if (dot == std::string::npos || !child) {
    return child;
  }
  return yaml_at(child, dotted_key.substr(dot + 1));
}
#endif

/// What a config file holds for the table, plus what it says about DeepSpeed.
struct FileSettings {
  Settings settings;
  /// For a setting read from another key than the table's (gradient_accumulation_steps from
  /// deepspeed_config): the key it came from.
  std::map<std::string, std::string> read_from;
  /// What asked for DeepSpeed (ZeRO), like "distributed_type: DEEPSPEED"; empty when nothing did.
  std::string deepspeed;
};

FileSettings read_config_file(const std::string& path) {
  FileSettings file;
#ifdef ACCEL_WITH_YAML
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument("accelerate: ACCELERATE_CONFIG_FILE='" + path +
                                "' cannot be read; fix the path or unset the variable");
  } catch (const YAML::ParserException& error) {
    throw std::invalid_argument("accelerate: " + path + ":" + std::to_string(error.mark.line + 1) + ":" +
                                std::to_string(error.mark.column + 1) + ": malformed YAML: " + error.msg);
  }
  if (!root.IsMap()) {
    throw std::invalid_argument("accelerate: " + path + " is not a YAML mapping of Accelerate config keys");
  }
  const std::string label = "config file " + path;
  const YAML::Node type = root["distributed_type"];
  const std::string type_text = type && type.IsScalar() ? type.Scalar() : "";
  if (type_text == "FSDP") {
    refuse_fsdp("distributed_type: FSDP", label);
  }
  if (const YAML::Node section = root["fsdp_config"]; section && section.IsMap() && section.size() > 0) {
    refuse_fsdp("the fsdp_config section", label);
  }
  // DeepSpeed (ZeRO): asked for by its distributed_type, or by a deepspeed_config section that is not empty
  // (older Accelerate versions write an empty one for every type).
  const YAML::Node deepspeed = root["deepspeed_config"];
  if (type_text == "DEEPSPEED") {
    file.deepspeed = "distributed_type: DEEPSPEED";
  } else if (deepspeed && deepspeed.IsMap() && deepspeed.size() > 0) {
    file.deepspeed = "the deepspeed_config section";
  }
  for (const auto& setting : unsupported_deepspeed_settings()) {
    const YAML::Node value = yaml_at(root, std::string("deepspeed_config.") + setting.yaml_key);
    if (value && value.IsScalar() && !is_default_text(value.Scalar(), setting.default_text)) {
      refuse(std::string("deepspeed_config.") + setting.yaml_key, value.Scalar(), label, setting.problem);
    }
  }
  auto read = [&](const auto& yaml_key) {
    if constexpr (!std::is_same_v<std::decay_t<decltype(yaml_key)>, Unmapped>) {
      if (const YAML::Node value = yaml_at(root, yaml_key); value && value.IsScalar()) {
        file.settings[yaml_key] = value.Scalar();
      }
    }
  };
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC) read(YAML_KEY);
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  // Accelerate keeps the accumulation steps of a DeepSpeed run in its section: they count when the
  // top-level key is absent.
  if (const YAML::Node steps = yaml_at(root, "deepspeed_config.gradient_accumulation_steps");
      steps && steps.IsScalar() && file.settings.count("gradient_accumulation_steps") == 0) {
    file.settings["gradient_accumulation_steps"] = steps.Scalar();
    file.read_from["gradient_accumulation_steps"] = "deepspeed_config.gradient_accumulation_steps";
  }
#else
  throw std::invalid_argument("accelerate: ACCELERATE_CONFIG_FILE='" + path +
                              "' is set, but this build of the runtime has no YAML support (yaml-cpp was not "
                              "found when it was built); unset the variable or rebuild with libyaml-cpp-dev");
#endif
  return file;
}

/// The text `settings` holds under `name`, unless the option has no such mapping.
template <typename Name> std::optional<std::string> lookup(const Settings& settings, const Name& name) {
  if constexpr (std::is_same_v<Name, Unmapped>) {
    return std::nullopt;
  } else {
    auto it = settings.find(name);
    return it == settings.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
}

/// Where each source's settings came from, for messages and `state()`.
struct Sources {
  Settings environment;
  FileSettings file;
  std::string file_label;

  /// The source of a setting read from the file under `yaml_key`, naming the key it was really read from
  /// when that differs.
  std::string file_source(const std::string& yaml_key) const {
    auto it = file.read_from.find(yaml_key);
    return it == file.read_from.end() ? file_label : file_label + ", key " + it->second;
  }
};

/// One option: the value set in `option`, else its environment variable, else its YAML key, else the
/// default already in `field`; then `check` on the value wherever it came from.
template <typename T, typename Field, typename Environment, typename YamlKey, typename Check>
void resolve_option(ResolvedConfig& config, const Sources& sources, const std::string& key,
                    const std::optional<T>& option, Field& field, const Environment& variable,
                    const YamlKey& yaml_key, Check check) {
  std::string where;
  std::string source;
  if (option.has_value()) {
    field = *option;
    where = "AcceleratorOptions";
    source = "options";
  } else if (auto text = lookup(sources.environment, variable)) {
    if constexpr (!std::is_same_v<Environment, Unmapped>) {
      where = "the environment";
      field = Parser<T>::parse(key, *text, where);
      source = "environment";
    }
  } else if (auto text = lookup(sources.file.settings, yaml_key)) {
    if constexpr (!std::is_same_v<YamlKey, Unmapped>) {
      where = sources.file_source(yaml_key);
      field = Parser<T>::parse(key, *text, where);
      source = where;
    }
  } else {
    where = "the default";
    source = "default";
  }
  config.sources[key] = source;
  if constexpr (std::is_same_v<Field, T>) {
    check(key, field, where);
  } else if (field.has_value()) {
    check(key, *field, where);
  }
}

// ------------------------------------------------------------------------------------------- ZeRO

/// A source as a message names it: "options" is "AcceleratorOptions", "environment" "the environment",
/// "default" "the default".
std::string origin(const std::string& source) {
  if (source == "options") {
    return "AcceleratorOptions";
  }
  if (source == "environment") {
    return "the environment";
  }
  if (source == "default") {
    return "the default";
  }
  return source;
}

/// What turned DeepSpeed on, with where, or "" when nothing did: ACCELERATE_USE_DEEPSPEED decides when set,
/// else the config file (distributed_type: DEEPSPEED or a deepspeed_config section).
std::string deepspeed_request(const Sources& sources) {
  if (auto it = sources.environment.find("ACCELERATE_USE_DEEPSPEED"); it != sources.environment.end()) {
    return Parser<bool>::parse(it->first, it->second, "the environment")
               ? "ACCELERATE_USE_DEEPSPEED=" + it->second + " in the environment"
               : "";
  }
  return sources.file.deepspeed.empty() ? "" : sources.file.deepspeed + " in " + sources.file_label;
}

/// Accelerate's DeepSpeedPlugin uses ZeRO stage 2 when DeepSpeed is on and no stage is given; so does ZeRO
/// selected by parallel_strategy "zero" alone.
constexpr int kDefaultZeroStage = 2;

/// The rules between zero_stage, parallel_strategy and offload_optimizer_device, after each was resolved:
/// - DeepSpeed on (distributed_type: DEEPSPEED, a deepspeed_config section, ACCELERATE_USE_DEEPSPEED=true)
///   with no zero_stage set anywhere: zero_stage 2;
/// - zero_stage 1 or 2 with parallel_strategy not set: parallel_strategy "zero";
/// - parallel_strategy "zero" with zero_stage not set: zero_stage 2;
/// - refused: parallel_strategy "zero" with zero_stage 0 set explicitly, another parallel_strategy set
///   explicitly with zero_stage 1 or 2, and offload_optimizer_device "cpu" without ZeRO.
/// A derived value's source names what it was derived from.
void resolve_zero(ResolvedConfig& config, const Sources& sources) {
  std::string& stage_source = config.sources["zero_stage"];
  std::string& strategy_source = config.sources["parallel_strategy"];
  if (stage_source == "default") {
    if (const std::string request = deepspeed_request(sources); !request.empty()) {
      config.zero_stage = kDefaultZeroStage;
      stage_source = "Accelerate's DeepSpeed default stage, for " + request;
    }
  }
  const bool sharded_stage = config.zero_stage == 1 || config.zero_stage == 2;
  if (strategy_source == "default") {
    if (sharded_stage) {
      config.parallel_strategy = "zero";
      strategy_source = "zero_stage " + std::to_string(config.zero_stage) + " from " + origin(stage_source);
    }
  } else if (config.parallel_strategy == "zero") {
    if (config.zero_stage == 0 && stage_source == "default") {
      config.zero_stage = kDefaultZeroStage;
      stage_source = "ZeRO's default stage, for parallel_strategy zero from " + origin(strategy_source);
    } else if (config.zero_stage == 0) {
      throw std::invalid_argument(
          "accelerate: parallel_strategy='zero' (from " + origin(strategy_source) +
          ") conflicts with zero_stage='0' (from " + origin(stage_source) +
          "), which means no sharding: set zero_stage to 1 or 2 (or leave it unset: ZeRO then uses stage 2), "
          "or use parallel_strategy ddp");
    }
  } else if (sharded_stage) {
    throw std::invalid_argument(
        "accelerate: parallel_strategy='" + config.parallel_strategy + "' (from " + origin(strategy_source) +
        ") conflicts with zero_stage='" + std::to_string(config.zero_stage) + "' (from " +
        origin(stage_source) +
        "): a ZeRO stage of 1 or 2 runs the \"zero\" strategy. Leave parallel_strategy unset "
        "(zero_stage then selects zero) or set it to zero, or set zero_stage to 0 to replicate the model");
  }
  if (config.offload_optimizer_device != "none" && config.parallel_strategy != "zero") {
    throw std::invalid_argument(
        "accelerate: offload_optimizer_device='" + config.offload_optimizer_device + "' (from " +
        origin(config.sources["offload_optimizer_device"]) +
        ") applies under ZeRO only, and parallel_strategy is '" + config.parallel_strategy + "' (from " +
        origin(strategy_source) +
        "): set zero_stage to 1 or 2 (or distributed_type: DEEPSPEED in the config file), or use none");
  }
}

} // namespace

ResolvedConfig resolve_config(const AcceleratorOptions& options) {
  ResolvedConfig config;
  Sources sources;
  sources.environment = read_environment();
  if (auto path = environment("ACCELERATE_CONFIG_FILE")) {
    sources.file = read_config_file(*path);
    sources.file_label = "config file " + *path;
  }
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)                     \
  resolve_option<TYPE>(config, sources, #NAME, options.NAME##_, config.FIELD, ENVIRONMENT, YAML_KEY,         \
                       [](const std::string& key, const auto& value, const std::string& where) {             \
                         CHECK(key, value, where);                                                           \
                       });
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  resolve_zero(config, sources);
  return config;
}

std::string describe(const ResolvedConfig& config) {
  std::ostringstream out;
  auto line = [&](const std::string& key, const auto& value) {
    std::string text = text_of(value);
    out << key << ": " << (text.empty() ? "\"\"" : text);
    if (auto it = config.sources.find(key); it != config.sources.end()) {
      out << "  (" << it->second << ")";
    }
    out << "\n";
  };
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)                     \
  line(#NAME, config.FIELD);
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  return out.str();
}

} // namespace accelerate::detail
