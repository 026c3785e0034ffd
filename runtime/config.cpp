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
    refuse(key, text_of(value), where,
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

/// What to tell a user who asked for ZeRO or FSDP; `what` names the setting, `where` its source.
[[noreturn]] void refuse_sharding(const std::string& what, const std::string& where) {
  throw std::invalid_argument(
      "accelerate: " + what + " (from " + where +
      ") asks for sharded training (ZeRO / FSDP), which accelerate-cpp does not support yet. Use data "
      "parallelism instead: distributed_type: MULTI_GPU (or MULTI_CPU), without a deepspeed_config or "
      "fsdp_config section, and ACCELERATE_USE_DEEPSPEED / ACCELERATE_USE_FSDP unset");
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
  for (const char* variable : {"ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"}) {
    if (auto value = environment(variable);
        value && Parser<bool>::parse(variable, *value, "the environment")) {
      refuse_sharding(std::string(variable) + "=" + *value, "the environment");
    }
  }
  return settings;
}

Settings read_config_file(const std::string& path) {
  Settings settings;
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
  if (root["distributed_type"] && root["distributed_type"].IsScalar()) {
    auto type = root["distributed_type"].as<std::string>();
    if (type == "FSDP" || type == "DEEPSPEED") {
      refuse_sharding("distributed_type: " + type, label);
    }
  }
  for (const char* section : {"deepspeed_config", "fsdp_config"}) {
    if (root[section] && root[section].IsMap() && root[section].size() > 0) {
      refuse_sharding("the " + std::string(section) + " section", label);
    }
  }
  auto read = [&](const auto& yaml_key) {
    if constexpr (!std::is_same_v<std::decay_t<decltype(yaml_key)>, Unmapped>) {
      if (root[yaml_key] && root[yaml_key].IsScalar()) {
        settings[yaml_key] = root[yaml_key].template as<std::string>();
      }
    }
  };
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC) read(YAML_KEY);
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
#else
  throw std::invalid_argument("accelerate: ACCELERATE_CONFIG_FILE='" + path +
                              "' is set, but this build of the runtime has no YAML support (yaml-cpp was not "
                              "found when it was built); unset the variable or rebuild with libyaml-cpp-dev");
#endif
  return settings;
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
  Settings file;
  std::string file_label;
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
  } else if (auto text = lookup(sources.file, yaml_key)) {
    if constexpr (!std::is_same_v<YamlKey, Unmapped>) {
      where = sources.file_label;
      field = Parser<T>::parse(key, *text, where);
      source = sources.file_label;
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
