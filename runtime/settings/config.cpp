// Resolves the Accelerator's configuration: options > ACCELERATE_* environment > ACCELERATE_CONFIG_FILE >
// defaults, for every row of <accelerate/detail/option_table.h>.
#include "settings/config.h"

#include "settings/deepspeed_json.h"
#include "settings/spelling.h"
#include "settings/strategy.h"

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
std::string text_of(const std::vector<std::string>& values) {
  std::string text = "[";
  for (const auto& value : values) {
    text += (text.size() > 1 ? ", " : "") + value;
  }
  return text + "]";
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

/// Accelerate's str_to_bool: true, yes, on, y, t, 1 and their opposites, in any case.
template <> struct Parser<bool> {
  static bool parse(const std::string& key, const std::string& text, const std::string& where) {
    if (auto value = spelling::boolean(text)) {
      return *value;
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

template <> struct Parser<std::int64_t> {
  static std::int64_t parse(const std::string& key, const std::string& text, const std::string& where) {
    return parse_number(
        key, text, where,
        [](const std::string& s, std::size_t* used) -> std::int64_t { return std::stoll(s, used); },
        "a whole number");
  }
};

/// A duration from text: seconds, as a number (`600`, `0.5`), as the launchers' timeouts are given.
template <> struct Parser<std::chrono::milliseconds> {
  static std::chrono::milliseconds parse(const std::string& key, const std::string& text,
                                         const std::string& where) {
    const double seconds = parse_number(
        key, text, where, [](const std::string& s, std::size_t* used) { return std::stod(s, used); },
        "a number of seconds");
    if (!(seconds >= 0) || seconds > 1e9) {
      refuse(key, text, where, "is not a number of seconds >= 0");
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000 + 0.5));
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
  const auto& modes = spelling::mixed_precision_modes();
  if (std::find(modes.begin(), modes.end(), value) == modes.end()) {
    std::string listed;
    for (const auto& mode : modes) {
      listed += (listed.empty() ? "" : ", ") + mode;
    }
    refuse(key, value, where, "is not one of " + listed);
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

void not_negative_count(const std::string& key, std::int64_t value, const std::string& where) {
  if (value < 0) {
    refuse(key, text_of(value), where, "must be a whole number >= 0 (parameter elements)");
  }
}

void one_of_zero_stages(const std::string& key, int value, const std::string& where) {
  if (value < spelling::kMinZeroStage || value > spelling::kMaxZeroStage) {
    refuse(key, text_of(value), where,
           "is not a ZeRO stage; use 0 (off), 1 (optimizer state sharded), 2 (optimizer state and gradients "
           "sharded) or 3 (parameters too: the fsdp strategy)");
  }
}

const char* const kShardingChoices =
    "use FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2 (Accelerate's names, in any "
    "case, or its numbers 1 to 5)";

void one_of_sharding_strategies(const std::string& key, const std::string& value, const std::string& where) {
  if (!spelling::sharding_strategy(value)) {
    refuse(key, value, where, std::string("is not a sharding strategy; ") + kShardingChoices);
  }
}

void one_of_fsdp_versions(const std::string& key, int value, const std::string& where) {
  if (value < spelling::kMinFsdpVersion || value > spelling::kMaxFsdpVersion) {
    refuse(key, text_of(value), where, "is not an FSDP version; use 1 or 2 (the same behaviour here)");
  }
}

void one_of_state_dict_types(const std::string& key, const std::string& value, const std::string& where) {
  const auto name = spelling::state_dict_type(value);
  if (!name) {
    refuse(key, value, where,
           "is not a state dict type; use SHARDED_STATE_DICT (each process writes its shards) or "
           "FULL_STATE_DICT (the main process writes whole models)");
  }
  if (*name == "LOCAL_STATE_DICT") {
    refuse(key, value, where, spelling::kLocalStateDict);
  }
}

void one_of_backward_prefetches(const std::string& key, const std::string& value, const std::string& where) {
  if (!spelling::choice(spelling::backward_prefetch_policies(), value)) {
    refuse(key, value, where,
           "is not a backward prefetch policy; use BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH");
  }
}

void one_of_auto_wrap_policies(const std::string& key, const std::string& value, const std::string& where) {
  if (!spelling::choice(spelling::auto_wrap_policies(), value)) {
    refuse(key, value, where,
           "is not an automatic wrapping policy; use TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP "
           "(Accelerate's names, in any case)");
  }
}

void one_of_offload_devices(const std::string& key, const std::string& value, const std::string& where) {
  if (value != "none" && value != "cpu") {
    refuse(key, value, where, "is not an offload device this runtime has; use none or cpu (no NVMe offload)");
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

void not_negative(const std::string& key, std::chrono::milliseconds value, const std::string& where) {
  if (value.count() < 0) {
    refuse(key, text_of(value), where, "must be >= 0");
  }
}

/// A run id names keys, files and shared-memory segments: letters, digits and `-_.:@` only, at most 128.
void run_id_text(const std::string& key, const std::string& value, const std::string& where) {
  if (value.size() > 128 || value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                    "0123456789-_.:@") != std::string::npos) {
    refuse(key, value, where, "is not a run id: use at most 128 letters, digits and -_.:@");
  }
}

// ------------------------------------------------------------------------------------------- sharding

// ------------------------------------------------------------------------------------------- sources

/// Settings read from one source, as text, by the source's name for them (variable or YAML key).
using Settings = std::map<std::string, std::string>;

/// The environment variable and YAML key of fsdp_reshard_after_forward, whose text may be a boolean (FSDP2's
/// spelling) or a sharding strategy (FSDP1's: Accelerate's questionnaire writes the strategy under this key,
/// and its launcher exports it lower-cased).
constexpr const char* kReshardVariable = "FSDP_RESHARD_AFTER_FORWARD";
constexpr const char* kReshardKey = "fsdp_config.fsdp_reshard_after_forward";

/// Reads fsdp_reshard_after_forward's text in `settings` under `name`: a boolean stays; a sharding strategy
/// (FSDP1's spelling) becomes the boolean Accelerate's FSDP2 conversion gives it (FULL_SHARD and HYBRID_SHARD
/// true, the others false), and the strategy goes to `strategy`; anything else is refused.
void read_reshard_text(Settings& settings, const std::string& name, const std::string& where,
                       std::optional<std::string>& strategy) {
  auto it = settings.find(name);
  if (it == settings.end() || spelling::boolean(it->second)) {
    return;
  }
  const auto named = spelling::reshard_strategy(it->second);
  if (!named) {
    refuse("fsdp_reshard_after_forward", it->second, where,
           "is neither true nor false (FSDP2's spelling) nor a sharding strategy (FSDP1's: FULL_SHARD, "
           "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2, in any case)");
  }
  strategy = *named;
  it->second = spelling::reshards_after_forward(*named) ? "true" : "false";
}

struct EnvironmentSettings {
  Settings settings;
  /// FSDP_RESHARD_AFTER_FORWARD named this sharding strategy (FSDP1's spelling).
  std::optional<std::string> reshard_strategy;
};

EnvironmentSettings read_environment() {
  EnvironmentSettings read;
  Settings& settings = read.settings;
  auto add = [&](const auto& variable) {
    if constexpr (!std::is_same_v<std::decay_t<decltype(variable)>, Unmapped>) {
      if (auto value = environment(variable)) {
        settings[variable] = *value;
      }
    }
  };
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC) add(ENVIRONMENT);
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  for (const char* variable : {spelling::kUseDeepSpeedVariable, spelling::kUseFsdpVariable}) {
    add(variable);
  }
  for (const auto& setting : spelling::fsdp_settings()) {
    if (setting.variable != nullptr) {
      add(setting.variable);
    }
  }
  for (const auto& setting : spelling::unsupported_deepspeed_settings()) {
    if (setting.variable == nullptr) {
      continue;
    }
    if (auto value = environment(setting.variable);
        value && !spelling::is_default_text(*value, setting.default_text)) {
      refuse(setting.variable, *value, "the environment", setting.problem);
    }
  }
  read_reshard_text(settings, kReshardVariable, "the environment", read.reshard_strategy);
  return read;
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

/// A mapping that is not empty: older Accelerate versions write empty fsdp_config and deepspeed_config
/// sections for every distributed_type, which ask for nothing.
bool is_filled_section(const YAML::Node& node) {
  return node && node.IsMap() && node.size() > 0;
}
#endif

/// What a config file holds for the table, plus what it says about DeepSpeed and FSDP.
struct FileSettings {
  Settings settings;
  /// For a setting read from another key than the table's (gradient_accumulation_steps from
  /// deepspeed_config): the key it came from.
  std::map<std::string, std::string> read_from;
  /// What asked for DeepSpeed (ZeRO), like "distributed_type: DEEPSPEED"; empty when nothing did.
  std::string deepspeed;
  /// What asked for FSDP, like "distributed_type: FSDP"; empty when nothing did.
  std::string fsdp;
  /// fsdp_config.fsdp_reshard_after_forward named this sharding strategy (FSDP1's spelling).
  std::optional<std::string> reshard_strategy;
  /// deepspeed_config.deepspeed_config_file ("" when absent), and the keys set that it replaces.
  std::string deepspeed_config_file;
  std::vector<std::string> replaced_keys;
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
  // FSDP: asked for by its distributed_type, or by an fsdp_config section that is not empty. Accelerate reads
  // a key of that section without the fsdp_ prefix (`version: 2`) as the prefixed one; so does this runtime.
  if (const YAML::Node section = root["fsdp_config"]; is_filled_section(section)) {
    YAML::Node prefixed(YAML::NodeType::Map);
    for (const auto& entry : section) {
      const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : "";
      prefixed[name.rfind("fsdp_", 0) == 0 ? name : "fsdp_" + name] = entry.second;
    }
    root["fsdp_config"] = prefixed;
  }
  if (type_text == "FSDP") {
    file.fsdp = "distributed_type: FSDP";
  } else if (is_filled_section(root["fsdp_config"])) {
    file.fsdp = "the fsdp_config section";
  }
  // DeepSpeed (ZeRO): asked for by its distributed_type, or by a deepspeed_config section that is not empty.
  if (type_text == "DEEPSPEED") {
    file.deepspeed = "distributed_type: DEEPSPEED";
  } else if (is_filled_section(root["deepspeed_config"])) {
    file.deepspeed = "the deepspeed_config section";
  }
  for (const auto& setting : spelling::unsupported_deepspeed_settings()) {
    const YAML::Node value = yaml_at(root, std::string("deepspeed_config.") + setting.key);
    if (value && value.IsScalar() && !spelling::is_default_text(value.Scalar(), setting.default_text)) {
      refuse(std::string("deepspeed_config.") + setting.key, value.Scalar(), label, setting.problem);
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
  // The classes of TRANSFORMER_BASED_WRAP may be a YAML list: read as the comma-separated text Accelerate's
  // launcher exports.
  if (const YAML::Node classes = yaml_at(root, "fsdp_config.fsdp_transformer_layer_cls_to_wrap");
      classes && classes.IsSequence()) {
    std::string text;
    for (const auto& item : classes) {
      text += (text.empty() ? "" : ",") + (item.IsScalar() ? item.Scalar() : YAML::Dump(item));
    }
    file.settings["fsdp_config.fsdp_transformer_layer_cls_to_wrap"] = text;
  }
  for (const auto& setting : spelling::fsdp_settings()) {
    // A list (of module classes, say) is refused as its YAML text.
    const std::string key = std::string("fsdp_config.") + setting.key;
    if (const YAML::Node value = yaml_at(root, key); value && (value.IsSequence() || value.IsMap())) {
      file.settings[key] = YAML::Dump(value);
    } else {
      read(key);
    }
  }
  // Accelerate keeps the accumulation steps of a DeepSpeed run in its section: they count when the
  // top-level key is absent.
  if (const YAML::Node steps = yaml_at(root, "deepspeed_config.gradient_accumulation_steps");
      steps && steps.IsScalar() && file.settings.count("gradient_accumulation_steps") == 0) {
    file.settings["gradient_accumulation_steps"] = steps.Scalar();
    file.read_from["gradient_accumulation_steps"] = "deepspeed_config.gradient_accumulation_steps";
  }
  read_reshard_text(file.settings, kReshardKey, label, file.reshard_strategy);
  if (const YAML::Node named = yaml_at(root, settings::kDeepSpeedConfigFileKey); named && named.IsScalar()) {
    file.deepspeed_config_file = named.Scalar();
  }
  file.replaced_keys = settings::keys_replaced_by_deepspeed_json([&](const std::string& dotted) {
    const YAML::Node value = yaml_at(root, dotted);
    return value && !value.IsNull();
  });
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
  EnvironmentSettings environment;
  FileSettings file;
  std::string file_label;
  /// What a DeepSpeed JSON (deepspeed_config_file) decides, by option, and what named it; empty without one.
  std::map<std::string, settings::DeepSpeedJsonSetting> deepspeed_json;
  std::string deepspeed_json_named_by;

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
  // A DeepSpeed JSON's own value wins over the environment (which only fills its "auto", as in Accelerate),
  // and is refused beside another in AcceleratorOptions.
  const auto json = sources.deepspeed_json.find(key);
  if (option.has_value()) {
    field = *option;
    where = "AcceleratorOptions";
    source = "options";
    if (json != sources.deepspeed_json.end()) {
      settings::check_given_against(json->second, text_of(*option),
                                    key + "='" + text_of(*option) + "' (from AcceleratorOptions)",
                                    "accelerate: ");
    }
  } else if (json != sources.deepspeed_json.end()) {
    if constexpr (!std::is_same_v<Environment, Unmapped>) { // each option a JSON decides has a variable
      where = json->second.origin;
      field = Parser<T>::parse(key, json->second.text, where);
      source = where;
    }
  } else if (auto text = lookup(sources.environment.settings, variable)) {
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

/// The DeepSpeed JSON named by ACCELERATE_DEEPSPEED_CONFIG_FILE, else by the config file's
/// deepspeed_config.deepspeed_config_file, read into `sources` (settings/deepspeed_json.h): its "auto" values
/// take the options' values, else the environment's; refused beside the config keys it replaces.
void read_deepspeed_json_source(const AcceleratorOptions& options, Sources& sources) {
  settings::DeepSpeedJsonRequest request;
  request.named_in_environment(environment(settings::kDeepSpeedConfigFileVariable).value_or(""));
  request.named_in_file(sources.file.deepspeed_config_file, sources.file.replaced_keys, sources.file_label);
  request.launcher_fields = environment("ACCELERATE_CONFIG_DS_FIELDS").value_or("");
  auto add = [&](const char* name, const auto& option, const auto& variable) {
    if (option) {
      request.give(name, text_of(*option), "AcceleratorOptions");
    } else if (auto text = lookup(sources.environment.settings, variable)) {
      request.give(name, *text, "the environment");
    }
  };
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)                     \
  add(#NAME, options.NAME##_, ENVIRONMENT);
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  request.world_size = spelling::whole_number(environment("WORLD_SIZE").value_or(""), 1, 1LL << 31);
  if (auto json = settings::read_requested_deepspeed_json(request, "accelerate: ")) {
    sources.deepspeed_json_named_by = request.named_by;
    for (auto& setting : json->settings) {
      sources.deepspeed_json[setting.option] = setting;
    }
  }
}

// ------------------------------------------------------------------------------------------- strategies

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

/// What turned a mode on, with where, or "" when nothing did: the ACCELERATE_USE_* `variable` decides when
/// set, else what the config file said (`from_file`, like "distributed_type: DEEPSPEED").
std::string request(const Sources& sources, const std::string& variable, const std::string& from_file) {
  const Settings& environment = sources.environment.settings;
  if (auto it = environment.find(variable); it != environment.end()) {
    return Parser<bool>::parse(it->first, it->second, "the environment")
               ? variable + "=" + it->second + " in the environment"
               : "";
  }
  return from_file.empty() ? "" : from_file + " in " + sources.file_label;
}

std::string deepspeed_request(const Sources& sources) {
  if (!sources.deepspeed_json_named_by.empty()) {
    return "deepspeed_config_file (" + sources.deepspeed_json_named_by + ")";
  }
  return request(sources, spelling::kUseDeepSpeedVariable, sources.file.deepspeed);
}

/// distributed_type: FSDP or an fsdp_config section in the file, or ACCELERATE_USE_FSDP=true.
std::string fsdp_request(const Sources& sources) {
  return request(sources, spelling::kUseFsdpVariable, sources.file.fsdp);
}

[[noreturn]] void refuse_conflict(const std::string& first, const std::string& second,
                                  const std::string& problem) {
  throw std::invalid_argument("accelerate: " + first + " conflicts with " + second + ": " + problem);
}

/// "key='value' (from where)" for a resolved option.
std::string named(const ResolvedConfig& config, const std::string& key, const std::string& value) {
  auto it = config.sources.find(key);
  return key + "='" + value + "' (from " + origin(it == config.sources.end() ? "default" : it->second) + ")";
}

/// The fsdp strategy's settings, once parallel_strategy is "fsdp": fsdp_sharding_strategy and
/// fsdp_reshard_after_forward as one sharding strategy (the two must agree where both are set; a value from
/// the environment that means FULL_SHARD, what Hugging Face's launcher exports for both when neither was
/// given, gives way to the other; zero_stage 3 means FULL_SHARD), the names upper-case, and Accelerate's
/// other FSDP settings (spelling::fsdp_settings()) from the environment, else the file.
void resolve_fsdp(ResolvedConfig& config, const Sources& sources) {
  std::string& strategy_source = config.sources["fsdp_sharding_strategy"];
  std::string& reshard_source = config.sources["fsdp_reshard_after_forward"];
  const std::string strategy = *spelling::sharding_strategy(config.fsdp_sharding_strategy);
  std::optional<std::string>
      reshard_strategy; // FSDP1's spelling in the source fsdp_reshard_after_forward came from
  if (reshard_source == "environment") {
    reshard_strategy = sources.environment.reshard_strategy;
  } else if (reshard_source != "options" && reshard_source != "default") {
    reshard_strategy = sources.file.reshard_strategy;
  }
  const std::string reshard_text = reshard_strategy                    ? *reshard_strategy
                                   : config.fsdp_reshard_after_forward ? "true"
                                                                       : "false";
  settings::ShardingRequest request;
  if (strategy_source != "default") {
    request.strategy = strategy;
    request.strategy_from_environment = strategy_source == "environment";
  }
  request.strategy_origin = named(config, "fsdp_sharding_strategy", config.fsdp_sharding_strategy);
  if (reshard_source != "default") {
    request.reshard = reshard_text;
    request.reshard_from_environment = reshard_source == "environment";
  }
  request.reshard_origin = named(config, "fsdp_reshard_after_forward", reshard_text);
  request.zero_stage_3 = config.zero_stage == 3;
  request.stage_origin = named(config, "zero_stage", "3");
  settings::ShardingSelection selection;
  try {
    selection = settings::select_sharding(request);
  } catch (const settings::StrategyConflict& conflict) {
    throw std::invalid_argument(std::string("accelerate: ") + conflict.what());
  }
  using By = settings::ShardingSelection::By;
  // Which of the two settings stand (one from the environment may have given way to the other).
  const bool strategy_set = selection.by == By::Strategy;
  const bool reshard_set =
      !request.reshard.empty() &&
      (selection.by == By::Reshard || (strategy_set && spelling::sharding_agrees(strategy, reshard_text)));
  const std::string resolved = selection.sharding;
  const std::string& stage_source = config.sources["zero_stage"];
  // Derived values name what they came from.
  if (!strategy_set) {
    strategy_source = reshard_set
                          ? "fsdp_reshard_after_forward " + reshard_text + " from " + origin(reshard_source)
                      : config.zero_stage == 3 ? "zero_stage 3 from " + origin(stage_source)
                                               : std::string("default");
  }
  if (!reshard_set) {
    config.fsdp_reshard_after_forward = spelling::reshards_after_forward(resolved);
    if (strategy_set || config.zero_stage == 3) {
      reshard_source = strategy_set
                           ? "fsdp_sharding_strategy " + resolved + " from " + origin(strategy_source)
                           : strategy_source;
    }
  }
  config.fsdp_sharding_strategy = resolved;

  for (const spelling::FsdpSetting& setting : spelling::fsdp_settings()) {
    std::string key;
    std::string where;
    std::optional<std::string> text;
    if (setting.variable != nullptr) {
      text = lookup(sources.environment.settings, std::string(setting.variable));
      key = setting.variable;
      where = "the environment";
    }
    if (!text) {
      key = std::string("fsdp_config.") + setting.key;
      text = lookup(sources.file.settings, key);
      where = sources.file_label;
    }
    if (!text || text->empty()) {
      continue;
    }
    std::string value = *text;
    switch (setting.kind) {
    case spelling::FsdpSetting::Kind::Flag:
      value = Parser<bool>::parse(key, *text, where) ? "true" : "false";
      break;
    case spelling::FsdpSetting::Kind::WholeNumber:
      if (text->empty() || text->find_first_not_of("0123456789") != std::string::npos) {
        refuse(key, *text, where, "is not a whole number >= 0");
      }
      value = std::to_string(std::stoull(*text));
      break;
    case spelling::FsdpSetting::Kind::Choice: {
      const auto chosen = spelling::choice(setting.choices, *text);
      if (chosen) {
        value = *chosen;
      } else {
        std::string choices;
        for (const std::string& choice : setting.choices) {
          choices += (choices.empty() ? "" : ", ") + choice;
        }
        refuse(key, *text, where, "is not one of " + choices);
      }
      break;
    }
    case spelling::FsdpSetting::Kind::Text:
      break;
    }
    if (spelling::refuses(setting, value)) {
      refuse(key, *text, where, setting.problem);
    }
  }
  if (spelling::transformer_wrap_without_classes(config.fsdp_auto_wrap_policy,
                                                 config.fsdp_transformer_layer_cls_to_wrap)) {
    throw std::invalid_argument(
        "accelerate: " + named(config, "fsdp_auto_wrap_policy", config.fsdp_auto_wrap_policy) + " " +
        spelling::kTransformerWrapWithoutClasses);
  }
  if (config.fsdp_activation_checkpointing_offload && !config.fsdp_activation_checkpointing) {
    refuse_conflict(named(config, "fsdp_activation_checkpointing_offload", "true"),
                    named(config, "fsdp_activation_checkpointing", "false"),
                    spelling::kActivationOffloadWithoutCheckpointing);
  }
  const std::string older = "fsdp_config.fsdp_backward_prefetch_policy";
  if (auto text = lookup(sources.file.settings, older);
      text && !text->empty() && config.sources["fsdp_backward_prefetch"] == "default") {
    config.fsdp_backward_prefetch = // checked with the settings above
        *spelling::choice(spelling::backward_prefetch_policies(), *text);
    config.sources["fsdp_backward_prefetch"] = sources.file_source(older);
  }
}

/// DeepSpeed's offload devices: offload_param_device "cpu" needs zero_stage 3, as in DeepSpeed; under
/// zero_stage 3 (the fsdp strategy) either device "cpu" runs as fsdp_offload_params true, which must not be
/// set false.
void resolve_zero_offload(ResolvedConfig& config) {
  const bool parameters = config.offload_param_device == "cpu";
  if (parameters && config.zero_stage != 3) {
    refuse_conflict(named(config, "offload_param_device", config.offload_param_device),
                    named(config, "zero_stage", std::to_string(config.zero_stage)),
                    spelling::kParameterOffloadBelowStage3);
  }
  if (config.zero_stage != 3 || (!parameters && config.offload_optimizer_device != "cpu")) {
    return;
  }
  const std::string device = parameters ? "offload_param_device" : "offload_optimizer_device";
  std::string& offload_source = config.sources["fsdp_offload_params"];
  if (config.fsdp_offload_params) {
    return;
  }
  // false from the environment gives way: Hugging Face's launcher exports FSDP_OFFLOAD_PARAMS=false when
  // it was not given.
  if (offload_source != "default" && offload_source != "environment") {
    refuse_conflict(named(config, device, "cpu"), named(config, "fsdp_offload_params", "false"),
                    spelling::kZeroOffloadAgainstFsdpOffload);
  }
  config.fsdp_offload_params = true;
  offload_source = device + " cpu with zero_stage 3 from " + origin(config.sources[device]);
}

/// The rules between zero_stage, parallel_strategy, Accelerate's FSDP settings and offload_optimizer_device,
/// after each was resolved:
/// - DeepSpeed on (distributed_type: DEEPSPEED, a deepspeed_config section, ACCELERATE_USE_DEEPSPEED=true)
///   with no zero_stage set anywhere: zero_stage 2;
/// - with parallel_strategy not set: zero_stage 1 or 2 makes it "zero"; zero_stage 3, or FSDP asked for
///   (distributed_type: FSDP, an fsdp_config section, ACCELERATE_USE_FSDP=true), makes it "fsdp";
/// - parallel_strategy "zero" with zero_stage not set: zero_stage 2;
/// - refused: zero_stage 1 or 2 with FSDP asked for; parallel_strategy "zero" with zero_stage 0 set
///   explicitly, zero_stage 3 or FSDP asked for; "fsdp" with zero_stage 1 or 2; another parallel_strategy
///   with any of them; offload_optimizer_device "cpu" without ZeRO (under zero_stage 3 it runs as
///   fsdp_offload_params, resolve_zero_offload); an fsdp_* option set in
///   AcceleratorOptions without the fsdp strategy;
/// - under "fsdp": resolve_fsdp.
/// A derived value's source names what it was derived from.
void resolve_strategy(ResolvedConfig& config, const Sources& sources) {
  std::string& stage_source = config.sources["zero_stage"];
  std::string& strategy_source = config.sources["parallel_strategy"];
  if (stage_source == "default") {
    if (const std::string asked = deepspeed_request(sources); !asked.empty()) {
      config.zero_stage = spelling::kDefaultZeroStage;
      stage_source = "Accelerate's DeepSpeed default stage, for " + asked;
    }
  }
  settings::StrategyRequest request;
  if (strategy_source != "default") {
    request.strategy = config.parallel_strategy;
  }
  request.strategy_origin = named(config, "parallel_strategy", config.parallel_strategy);
  request.zero_stage = config.zero_stage;
  request.zero_stage_set = stage_source != "default";
  request.stage_origin = named(config, "zero_stage", std::to_string(config.zero_stage));
  request.fsdp_origin = fsdp_request(sources);
  settings::StrategySelection selection;
  try {
    selection = settings::select_strategy(request);
  } catch (const settings::StrategyConflict& conflict) {
    throw std::invalid_argument(std::string("accelerate: ") + conflict.what());
  }
  using By = settings::StrategySelection::By;
  if (selection.by == By::ZeroStage) {
    strategy_source = "zero_stage " + std::to_string(config.zero_stage) + " from " + origin(stage_source);
  } else if (selection.by == By::Fsdp) {
    strategy_source = request.fsdp_origin;
  }
  config.parallel_strategy = selection.strategy;
  if (selection.zero_stage_defaulted) {
    config.zero_stage = selection.zero_stage;
    stage_source = "ZeRO's default stage, for parallel_strategy zero from " + origin(strategy_source);
  }
  resolve_zero_offload(config);
  if (config.offload_optimizer_device != "none" && config.parallel_strategy == "fsdp" &&
      config.zero_stage != 3) {
    refuse_conflict(named(config, "offload_optimizer_device", config.offload_optimizer_device),
                    named(config, "parallel_strategy", config.parallel_strategy),
                    spelling::kOptimizerOffloadUnderFsdp);
  }
  if (config.offload_optimizer_device != "none" && config.parallel_strategy != "zero" &&
      config.parallel_strategy != "fsdp") {
    throw std::invalid_argument(
        "accelerate: offload_optimizer_device='" + config.offload_optimizer_device + "' (from " +
        origin(config.sources["offload_optimizer_device"]) +
        ") applies under ZeRO only, and parallel_strategy is '" + config.parallel_strategy + "' (from " +
        origin(strategy_source) +
        "): set zero_stage to 1 or 2 (or distributed_type: DEEPSPEED in the config file), or use none");
  }
  // The names are upper case whatever the strategy (the engine reads these fields).
  config.fsdp_state_dict_type = *spelling::state_dict_type(config.fsdp_state_dict_type);
  config.fsdp_backward_prefetch =
      *spelling::choice(spelling::backward_prefetch_policies(), config.fsdp_backward_prefetch);
  config.fsdp_auto_wrap_policy =
      *spelling::choice(spelling::auto_wrap_policies(), config.fsdp_auto_wrap_policy);
  // Gradient communication hooks are a step of DDP's Reducer: a sharded strategy has none.
  if (config.comm_hook != "no" &&
      (config.parallel_strategy == "zero" || config.parallel_strategy == "fsdp")) {
    refuse_conflict(
        named(config, "comm_hook", config.comm_hook),
        named(config, "parallel_strategy", config.parallel_strategy),
        "a gradient communication hook is a step of the ddp strategy's Reducer; the zero and fsdp "
        "strategies synchronise gradients their own way. Unset comm_hook, or use the "
        "ddp strategy");
  }
  if (config.parallel_strategy == "fsdp") {
    resolve_fsdp(config, sources);
    return;
  }
  const std::pair<const char*, std::string> fsdp_options[] = {
      {"fsdp_sharding_strategy", config.fsdp_sharding_strategy},
      {"fsdp_reshard_after_forward", text_of(config.fsdp_reshard_after_forward)},
      {"fsdp_version", text_of(config.fsdp_version)},
      {"fsdp_state_dict_type", config.fsdp_state_dict_type},
      {"fsdp_forward_prefetch", text_of(config.fsdp_forward_prefetch)},
      {"fsdp_backward_prefetch", config.fsdp_backward_prefetch},
      {"fsdp_auto_wrap_policy", config.fsdp_auto_wrap_policy},
      {"fsdp_transformer_layer_cls_to_wrap", config.fsdp_transformer_layer_cls_to_wrap},
      {"fsdp_min_num_params", text_of(config.fsdp_min_num_params)},
      {"fsdp_activation_checkpointing", text_of(config.fsdp_activation_checkpointing)},
      {"fsdp_activation_checkpointing_offload", text_of(config.fsdp_activation_checkpointing_offload)},
      {"fsdp_offload_params", text_of(config.fsdp_offload_params)}};
  for (const auto& [option, value] : fsdp_options) {
    if (config.sources[option] == "options") {
      refuse_conflict(
          named(config, option, value), named(config, "parallel_strategy", config.parallel_strategy),
          std::string(option) +
              " applies under the fsdp strategy only (here it would do nothing). Set "
              "parallel_strategy(\"fsdp\") too (or distributed_type: FSDP in the config file), or "
              "leave " +
              option + " unset");
    }
  }
  config.fsdp_sharding_strategy = *spelling::sharding_strategy(config.fsdp_sharding_strategy);
}

} // namespace

namespace {

std::string mapped_text(Unmapped) {
  return "";
}
std::string mapped_text(const char* text) {
  return text;
}

/// `text` parsed as a TYPE and checked, for an option read from text; a logic error for one never read so.
template <typename T, typename Environment, typename YamlKey, typename Check>
void check_text(const std::string& key, const std::string& text, const std::string& where, const Environment&,
                const YamlKey&, Check check) {
  if constexpr (std::is_same_v<Environment, Unmapped> && std::is_same_v<YamlKey, Unmapped>) {
    throw std::logic_error("accelerate: option " + key +
                           " is never read from text (no environment variable, "
                           "no YAML key)");
  } else {
    check(key, Parser<T>::parse(key, text, where), where);
  }
}

} // namespace

const std::vector<OptionRow>& option_rows() {
  static const std::vector<OptionRow> rows = {
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)                     \
  OptionRow{#NAME, mapped_text(ENVIRONMENT), mapped_text(YAML_KEY), DOC},
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  };
  return rows;
}

void check_option_text(const std::string& name, const std::string& text, const std::string& where) {
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)                     \
  if (name == #NAME) {                                                                                       \
    check_text<TYPE>(                                                                                        \
        name, text, where, ENVIRONMENT, YAML_KEY,                                                            \
        [](const std::string& key, const auto& value, const std::string& at) { CHECK(key, value, at); });    \
    return;                                                                                                  \
  }
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  throw std::logic_error("accelerate: no option is named " + name);
}

ResolvedConfig resolve_config(const AcceleratorOptions& options) {
  ResolvedConfig config;
  Sources sources;
  sources.environment = read_environment();
  if (auto path = environment("ACCELERATE_CONFIG_FILE")) {
    sources.file = read_config_file(*path);
    sources.file_label = "config file " + *path;
  }
  read_deepspeed_json_source(options, sources);
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)                     \
  resolve_option<TYPE>(config, sources, #NAME, options.NAME##_, config.FIELD, ENVIRONMENT, YAML_KEY,         \
                       [](const std::string& key, const auto& value, const std::string& where) {             \
                         CHECK(key, value, where);                                                           \
                       });
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
  resolve_strategy(config, sources);
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
