// Reading, checking and writing Accelerate's config file (see ConfigFile.h).
#include "ConfigFile.h"

#include "ConfigSchema.h"
#include "settings/deepspeed_json.h"
#include "settings/spelling.h"
#include "settings/strategy.h"

#ifdef ACCEL_HAVE_YAML_CPP
#include <yaml-cpp/yaml.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace accel {

// ------------------------------------------------------------------------------------------- ConfigValue

ConfigValue ConfigValue::scalar(std::string text, bool isString) {
  ConfigValue value;
  value.kind = Kind::Scalar;
  value.text = std::move(text);
  value.isString = isString;
  return value;
}

ConfigValue ConfigValue::list(std::vector<std::string> items) {
  ConfigValue value;
  value.kind = Kind::List;
  value.items = std::move(items);
  return value;
}

const ConfigValue* ConfigValue::find(const std::string& key) const {
  for (const auto& [name, value] : entries)
    if (name == key)
      return &value;
  return nullptr;
}

void ConfigValue::set(const std::string& key, ConfigValue value) {
  auto at = std::lower_bound(entries.begin(), entries.end(), key,
                             [](const auto& entry, const std::string& name) { return entry.first < name; });
  if (at != entries.end() && at->first == key)
    at->second = std::move(value);
  else
    entries.insert(at, {key, std::move(value)});
}

bool ConfigValue::operator==(const ConfigValue& other) const {
  return kind == other.kind && text == other.text && items == other.items && entries == other.entries;
}

std::optional<std::string> ConfigDocument::scalar(const std::string& dottedKey) const {
  const ConfigValue* value = &root;
  std::stringstream parts(dottedKey);
  for (std::string part; std::getline(parts, part, '.');) {
    value = value->kind == ConfigValue::Kind::Map ? value->find(part) : nullptr;
    if (!value)
      return std::nullopt;
  }
  if (value->kind != ConfigValue::Kind::Scalar)
    return std::nullopt;
  return value->text;
}

std::string ConfigDocument::where(const std::string& dottedKey) const {
  const ConfigValue* value = &root;
  std::stringstream parts(dottedKey);
  for (std::string part; value && std::getline(parts, part, '.');)
    value = value->kind == ConfigValue::Kind::Map ? value->find(part) : nullptr;
  if (value && value->line > 0)
    return path + ":" + std::to_string(value->line) + ":" + std::to_string(value->column) + ": ";
  return path + ": ";
}

bool isActivationOffloadWithoutCheckpointing(const std::optional<std::string>& offload,
                                             const std::optional<std::string>& checkpointing) {
  const auto on = [](const std::optional<std::string>& text) {
    return text && accelerate::spelling::boolean(*text).value_or(false);
  };
  return on(offload) && !on(checkpointing);
}

std::string activationOffloadWithoutCheckpointing() {
  return std::string("conflicts with fsdp_activation_checkpointing false: ") +
         accelerate::spelling::kActivationOffloadWithoutCheckpointing;
}

// ------------------------------------------------------------------------------------------- the path

std::string defaultConfigPath() {
  auto variable = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value ? value : "";
  };
  std::string home = variable("HF_HOME");
  if (home.empty()) {
    std::string cache = variable("XDG_CACHE_HOME");
    if (cache.empty())
      cache = variable("HOME") + "/.cache";
    home = cache + "/huggingface";
  }
  if (home.compare(0, 2, "~/") == 0)
    home = variable("HOME") + home.substr(1);
  return home + "/accelerate/default_config.yaml";
}

// ------------------------------------------------------------------------------------------- reading

#ifdef ACCEL_HAVE_YAML_CPP
namespace {

/// Limits that keep a hostile file from exhausting yaml-cpp's recursion (a real config nests 2 levels).
constexpr size_t kMaxConfigBytes = 1 << 20;
constexpr int kMaxNesting = 32;

std::string location(const std::string& path, const YAML::Mark& mark) {
  if (mark.is_null())
    return path + ": ";
  return path + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1) + ": ";
}

/// The deepest nesting `text` could ask yaml-cpp for: flow brackets, indentation, and block indicators
/// (`- - - x`) on one line. A rough upper bound, which is all the guard needs.
int roughNestingDepth(const std::string& text) {
  int deepest = 0, flowDepth = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t indent = line.find_first_not_of(' ');
    if (indent == std::string::npos)
      continue;
    int blockIndicators = 0;
    for (size_t i = indent; i != std::string::npos && i + 1 < line.size() &&
                            (line[i] == '-' || line[i] == '?' || line[i] == ':') && line[i + 1] == ' ';
         i = line.find_first_not_of(' ', i + 1))
      ++blockIndicators;
    for (char c : line) {
      flowDepth += (c == '[' || c == '{') ? 1 : (c == ']' || c == '}') ? -1 : 0;
      deepest = std::max(deepest, flowDepth);
    }
    deepest = std::max(deepest, static_cast<int>(indent / 2) + blockIndicators);
  }
  return deepest;
}

YAML::Node loadYaml(const std::string& text, const std::string& path) {
  if (text.size() > kMaxConfigBytes)
    throw ConfigError(path + ": is " + std::to_string(text.size()) +
                      " bytes; a config file is a few hundred " + "(is this the right file?)");
  if (roughNestingDepth(text) > kMaxNesting)
    throw ConfigError(path + ": nests deeper than " + std::to_string(kMaxNesting) +
                      " levels; a config file has at most 2 (is this the right file?)");
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& error) {
    throw ConfigError(location(path, error.mark) + "malformed YAML: " + error.msg +
                      " (fix the syntax there)");
  }
}

std::string describeNode(const YAML::Node& node) {
  switch (node.Type()) {
  case YAML::NodeType::Sequence:
    return "a list";
  case YAML::NodeType::Map:
    return "a map";
  case YAML::NodeType::Null:
    return "null";
  default:
    return "'" + node.Scalar() + "'";
  }
}

/// Any node as a ConfigValue, unchecked: for keys accel reads past (fp8_config, tpu_env, ...).
ConfigValue anyValue(const YAML::Node& node) {
  switch (node.Type()) {
  case YAML::NodeType::Scalar:
    // A plain scalar's tag is "?"; a quoted one's "!"; an explicit tag names a type: all but plain stay
    // strings.
    return ConfigValue::scalar(node.Scalar(), node.Tag() != "?");
  case YAML::NodeType::Sequence: {
    std::vector<std::string> items;
    for (const YAML::Node& item : node)
      items.push_back(item.IsScalar() ? item.Scalar() : YAML::Dump(item));
    return ConfigValue::list(std::move(items));
  }
  case YAML::NodeType::Map: {
    ConfigValue map = ConfigValue::map();
    for (const auto& entry : node)
      map.set(entry.first.IsScalar() ? entry.first.Scalar() : YAML::Dump(entry.first),
              anyValue(entry.second));
    return map;
  }
  default:
    return ConfigValue{};
  }
}

class ConfigReader {
public:
  explicit ConfigReader(std::string path) : path_(std::move(path)) {}

  ConfigValue readMap(const YAML::Node& node, const std::vector<ConfigKey>& keys, const std::string& scope);

private:
  ConfigValue readValue(const ConfigKey& key, const YAML::Node& value, const std::string& qualifiedName);
  [[noreturn]] void rejectUnknownKey(const YAML::Node& keyNode, const std::string& name,
                                     const std::vector<ConfigKey>& keys, const std::string& scope) const;

  std::string path_;
};

/// Accelerate reads `version: 2` in fsdp_config as fsdp_version (it adds the prefix); so does accel.
std::string canonicalKeyName(const std::string& name, const std::string& scope) {
  if (scope == "fsdp_config" && name.compare(0, 5, "fsdp_") != 0)
    return "fsdp_" + name;
  return name;
}

ConfigValue ConfigReader::readMap(const YAML::Node& node, const std::vector<ConfigKey>& keys,
                                  const std::string& scope) {
  ConfigValue map = ConfigValue::map();
  for (const auto& entry : node) {
    if (!entry.first.IsScalar())
      throw ConfigError(location(path_, entry.first.Mark()) +
                        "a key must be a name, like num_processes (got " + describeNode(entry.first) + ")");
    std::string name = canonicalKeyName(entry.first.Scalar(), scope);
    const ConfigKey* key = findConfigKey(keys, name);
    if (!key)
      rejectUnknownKey(entry.first, entry.first.Scalar(), keys, scope);
    if (map.find(name))
      throw ConfigError(location(path_, entry.first.Mark()) + "'" + name + "' appears twice (keep one)");
    ConfigValue value = readValue(*key, entry.second, scope.empty() ? name : scope + "." + name);
    value.line = entry.first.Mark().line + 1;
    value.column = entry.first.Mark().column + 1;
    map.set(name, std::move(value));
  }
  return map;
}

void ConfigReader::rejectUnknownKey(const YAML::Node& keyNode, const std::string& name,
                                    const std::vector<ConfigKey>& keys, const std::string& scope) const {
  std::vector<std::string> names;
  for (const ConfigKey& key : keys)
    names.push_back(key.name);
  std::string message =
      location(path_, keyNode.Mark()) + "unknown key '" + name + "'" + (scope.empty() ? "" : " in " + scope);
  if (auto suggestion = closestMatch(canonicalKeyName(name, scope), names))
    message += " (did you mean '" + *suggestion + "'?)";
  else
    message += " (Accelerate does not know it; see docs/config.md for the keys)";
  throw ConfigError(message);
}

ConfigValue ConfigReader::readValue(const ConfigKey& key, const YAML::Node& value, const std::string& name) {
  const std::string where = location(path_, value.Mark());
  if (value.IsNull()) {
    if (key.nullable || key.rule.type == ValueType::Any)
      return ConfigValue{};
    throw ConfigError(where + name + " is empty; it must be " + key.rule.describe());
  }
  if (key.rule.type == ValueType::Any)
    return anyValue(value);
  if (key.rule.type == ValueType::Map) {
    if (!value.IsMap())
      throw ConfigError(where + name + " must be a map of keys to values (got " + describeNode(value) + ")");
    return key.nested ? readMap(value, *key.nested, name) : anyValue(value);
  }
  if (!value.IsScalar())
    throw ConfigError(where + name + " must be " + key.rule.describe() + " (got " + describeNode(value) +
                      ")");
  ValueProblem problem;
  std::optional<std::string> canonical = canonicalValue(key.rule, value.Scalar(), &problem);
  if (!canonical)
    throw ConfigError(where + name + " must be " + problem.mustBe + " (got '" + value.Scalar() + "')");
  bool isString = key.rule.type == ValueType::Text || key.rule.type == ValueType::Choice ||
                  (key.rule.type == ValueType::BoolOrChoice && !accelerate::spelling::boolean(*canonical)) ||
                  (key.rule.type == ValueType::ChoiceOrNumber &&
                   !std::isdigit(static_cast<unsigned char>(canonical->front())));
  return ConfigValue::scalar(*canonical, isString);
}

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items)
    text += (text.empty() ? "" : ", ") + item;
  return text;
}

bool isFilledSection(const ConfigDocument& document, const std::string& key) {
  const ConfigValue* value = document.root.find(key);
  return value && value->kind == ConfigValue::Kind::Map && !value->entries.empty();
}

/// The ZeRO stage a file asks for: its deepspeed_config.zero_stage, else Accelerate's default 2 where the
/// file asks for DeepSpeed (distributed_type DEEPSPEED or a deepspeed_config section that is not empty), else
/// 0.
std::string zeroStageOf(const ConfigDocument& document) {
  const bool deepspeed = document.scalar("distributed_type") == std::optional<std::string>("DEEPSPEED") ||
                         isFilledSection(document, "deepspeed_config");
  return document.scalar("deepspeed_config.zero_stage")
      .value_or(deepspeed ? std::to_string(accelerate::spelling::kDefaultZeroStage) : "0");
}

/// The DeepSpeed keys accel cannot run: the keys of spelling::unsupported_deepspeed_settings() with another
/// value than their default, NVMe offload, and parameter offload below stage 3. Stages 0 to 3 (3 runs the
/// fsdp strategy), offload of the optimizer state to the CPU (stages 1 and 2; at stage 3 with the parameters,
/// as fsdp_offload_params), the clipping and the accumulation steps are run; the multi-node launcher keys are
/// accepted (accel starts each machine's ranks).
void checkDeepSpeedSection(const ConfigDocument& document) {
  // A DeepSpeed JSON replaces Accelerate's own DeepSpeed keys, which Accelerate refuses beside it.
  if (auto file = document.scalar(accelerate::settings::kDeepSpeedConfigFileKey);
      file && accelerate::settings::names_deepspeed_json(*file)) {
    const std::vector<std::string> replaced = accelerate::settings::keys_replaced_by_deepspeed_json(
        [&](const std::string& dotted) { return document.scalar(dotted).has_value(); });
    if (!replaced.empty()) {
      const std::string first = replaced.front() == "mixed_precision" ||
                                        (replaced.front() == "gradient_accumulation_steps" &&
                                         !document.scalar("deepspeed_config.gradient_accumulation_steps"))
                                    ? replaced.front()
                                    : "deepspeed_config." + replaced.front();
      throw ConfigError(document.where(first) + accelerate::settings::deepspeed_json_conflict(replaced));
    }
  }
  for (const char* key :
       {"deepspeed_config.offload_optimizer_device", "deepspeed_config.offload_param_device"})
    if (auto device = document.scalar(key); device && *device == "nvme")
      throw ConfigError(document.where(key) + key +
                        " nvme: accelerate-cpp does not offload to NVMe (use none or cpu)");
  const std::string stage = zeroStageOf(document);
  if (document.scalar("deepspeed_config.offload_param_device") == std::optional<std::string>("cpu") &&
      stage != "3")
    throw ConfigError(document.where("deepspeed_config.offload_param_device") +
                      "deepspeed_config.offload_param_device cpu conflicts with zero_stage " + stage +
                      (document.scalar("deepspeed_config.zero_stage") ? "" : " (Accelerate's default)") +
                      ": " + accelerate::spelling::kParameterOffloadBelowStage3);
  for (const accelerate::spelling::UnsupportedDeepSpeedSetting& setting :
       accelerate::spelling::unsupported_deepspeed_settings()) {
    const std::string dotted = std::string("deepspeed_config.") + setting.key;
    if (auto value = document.scalar(dotted);
        value && !accelerate::spelling::is_default_text(*value, setting.default_text))
      throw ConfigError(document.where(dotted) + dotted + " " + *value + " " + setting.problem);
  }
}

/// What the fsdp strategy cannot run, where the file runs it (distributed_type FSDP, an fsdp_config section
/// that is not empty, or DeepSpeed's zero_stage 3): the keys of spelling::fsdp_settings() with a value they
/// do not accept, hybrid sharding, LOCAL_STATE_DICT, DeepSpeed's optimizer offload without zero_stage 3 or
/// its CPU offload against fsdp_offload_params false, fsdp_sharding_strategy and fsdp_reshard_after_forward
/// disagreeing (or not FULL_SHARD under zero_stage 3); and ZeRO stage 1 or 2 asked for with FSDP. The
/// runtime's rules (runtime/settings/config.cpp) for a file it reads.
void checkFsdpSettings(const ConfigDocument& document) {
  const std::string type = document.scalar("distributed_type").value_or("");
  const bool fsdp = type == "FSDP" || isFilledSection(document, "fsdp_config");
  const std::string stage = zeroStageOf(document);
  const std::string fsdpKey = type == "FSDP" ? "distributed_type" : "fsdp_config";
  const std::string fsdpWhat = type == "FSDP" ? "distributed_type FSDP" : "the fsdp_config section";
  if (fsdp && (stage == "1" || stage == "2"))
    throw ConfigError(document.where(fsdpKey) + fsdpWhat + " conflicts with DeepSpeed's zero_stage " + stage +
                      (document.scalar("deepspeed_config.zero_stage") ? "" : " (Accelerate's default)") +
                      ": " + accelerate::spelling::kShardedZeroStageAgainstFsdp);
  if (!fsdp && stage != "3")
    return;
  for (const accelerate::spelling::FsdpSetting& setting : accelerate::spelling::fsdp_settings()) {
    // The others take every value of their kind, which the schema checks.
    if (setting.problem == nullptr)
      continue;
    const std::string dotted = std::string("fsdp_config.") + setting.key;
    if (auto value = document.scalar(dotted); value && accelerate::spelling::refuses(setting, *value))
      throw ConfigError(document.where(dotted) + dotted + " " + *value + " " + setting.problem);
  }
  if (auto policy = document.scalar("fsdp_config.fsdp_auto_wrap_policy");
      policy && accelerate::spelling::transformer_wrap_without_classes(
                    *policy, document.scalar("fsdp_config.fsdp_transformer_layer_cls_to_wrap")))
    throw ConfigError(document.where("fsdp_config.fsdp_auto_wrap_policy") +
                      "fsdp_config.fsdp_auto_wrap_policy " + *policy + " " +
                      accelerate::spelling::kTransformerWrapWithoutClasses);
  if (auto offload = document.scalar("fsdp_config.fsdp_activation_checkpointing_offload");
      isActivationOffloadWithoutCheckpointing(offload,
                                              document.scalar("fsdp_config.fsdp_activation_checkpointing")))
    throw ConfigError(document.where("fsdp_config.fsdp_activation_checkpointing_offload") +
                      "fsdp_config.fsdp_activation_checkpointing_offload " + *offload + " " +
                      activationOffloadWithoutCheckpointing());
  if (auto type = document.scalar("fsdp_config.fsdp_state_dict_type");
      type && accelerate::spelling::state_dict_type(*type) == std::optional<std::string>("LOCAL_STATE_DICT"))
    throw ConfigError(document.where("fsdp_config.fsdp_state_dict_type") +
                      "fsdp_config.fsdp_state_dict_type " + *type + " " +
                      accelerate::spelling::kLocalStateDict);
  // The sharding the two keys select (the settings library's rule), the error placed at the first key named.
  accelerate::settings::ShardingRequest request;
  const std::string strategyKey = "fsdp_config.fsdp_sharding_strategy";
  const std::string reshardKey = "fsdp_config.fsdp_reshard_after_forward";
  request.strategy = document.scalar(strategyKey).value_or("");
  request.strategy_origin = strategyKey + " " + request.strategy;
  request.reshard = document.scalar(reshardKey).value_or("");
  request.reshard_origin = reshardKey + " " + request.reshard;
  request.zero_stage_3 = stage == "3";
  request.stage_origin = "deepspeed_config.zero_stage 3";
  try {
    accelerate::settings::select_sharding(request);
  } catch (const accelerate::settings::StrategyConflict& conflict) {
    throw ConfigError(document.where(conflict.first == request.strategy_origin ? strategyKey : reshardKey) +
                      conflict.what());
  }
  // DeepSpeed's CPU offload under zero_stage 3 runs as fsdp_offload_params true (the runtime's
  // resolve_zero_offload).
  for (const char* key :
       {"deepspeed_config.offload_optimizer_device", "deepspeed_config.offload_param_device"}) {
    if (document.scalar(key) != std::optional<std::string>("cpu"))
      continue;
    const auto offload = document.scalar("fsdp_config.fsdp_offload_params");
    if (stage == "3" && offload && accelerate::spelling::boolean(*offload) == std::optional<bool>(false))
      throw ConfigError(document.where(key) + key + " cpu conflicts with fsdp_config.fsdp_offload_params " +
                        *offload + ": " + accelerate::spelling::kZeroOffloadAgainstFsdpOffload);
    if (stage != "3")
      throw ConfigError(document.where(key) + key + " cpu conflicts with " + fsdpWhat + ": " +
                        accelerate::spelling::kOptimizerOffloadUnderFsdp);
  }
}

/// What accel cannot launch even though Accelerate knows it, and cross-key rules.
void checkLaunchable(const ConfigDocument& document) {
  if (document.scalar("compute_environment").value_or("LOCAL_MACHINE") != "LOCAL_MACHINE")
    throw ConfigError(
        document.where("compute_environment") +
        "compute_environment AMAZON_SAGEMAKER is for SageMaker jobs, which accel does not launch "
        "(use LOCAL_MACHINE)");
  std::optional<std::string> type = document.scalar("distributed_type");
  if (!type)
    throw ConfigError(document.path + ": distributed_type is missing (add one of " +
                      joined(supportedDistributedTypes()) + "; `accel config` writes a complete file)");
  checkDeepSpeedSection(document);
  checkFsdpSettings(document);
  const auto& supported = supportedDistributedTypes();
  if (std::find(supported.begin(), supported.end(), *type) == supported.end())
    throw ConfigError(
        document.where("distributed_type") + "distributed_type " + *type +
        " is not supported by accelerate-cpp, which runs libtorch on CPUs and CUDA GPUs (use one of " +
        joined(supported) + ")");
  if (document.scalar("num_processes") == std::optional<std::string>("0"))
    throw ConfigError(
        document.where("num_processes") +
        "num_processes must be a whole number >= 1, or -1 to give --num_processes at launch (got 0)");
  long long machines = std::stoll(document.scalar("num_machines").value_or("1"));
  long long rank = std::stoll(document.scalar("machine_rank").value_or("0"));
  if (rank >= machines)
    throw ConfigError(document.where("machine_rank") + "machine_rank must be below num_machines " +
                      std::to_string(machines) + " (got " + std::to_string(rank) + ")");
}

} // namespace

ConfigDocument parseConfigText(const std::string& text, const std::string& path) {
  YAML::Node root = loadYaml(text, path);
  if (root.IsNull())
    throw ConfigError(path + ": is empty (run `accel config` to write one)");
  if (!root.IsMap())
    throw ConfigError(location(path, root.Mark()) + "must be a map of keys to values, like " +
                      "`distributed_type: MULTI_CPU` (got " + describeNode(root) + ")");
  ConfigDocument document;
  document.path = path;
  document.root = ConfigReader(path).readMap(root, topLevelConfigKeys(), "");
  checkLaunchable(document);
  return document;
}

#else

ConfigDocument parseConfigText(const std::string&, const std::string& path) {
  throw ConfigError(path + ": this accel was built without yaml-cpp, so it cannot read config files (install "
                           "libyaml-cpp-dev and rebuild)");
}

#endif

ConfigDocument readConfigFile(const std::string& path) {
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0)
    throw ConfigError(path + ": cannot read the config file: " + std::strerror(errno) +
                      " (check the path, or run `accel config` to write one)");
  if (S_ISDIR(info.st_mode))
    throw ConfigError(path + ": is a folder, not a config file (give the file, like " + path +
                      "/default_config.yaml)");
  std::ifstream file(path, std::ios::binary);
  if (!file)
    throw ConfigError(path + ": cannot read the config file: " + std::strerror(errno) +
                      " (check its permissions)");
  std::ostringstream text;
  text << file.rdbuf();
  return parseConfigText(text.str(), path);
}

// ------------------------------------------------------------------------------------------- writing

namespace {

void writeValue(std::ostream& out, const std::string& key, const ConfigValue& value, int indent) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  switch (value.kind) {
  case ConfigValue::Kind::Null:
    out << pad << yamlQuotedString(key) << ": null\n";
    break;
  case ConfigValue::Kind::Scalar:
    out << pad << yamlQuotedString(key) << ": "
        << (value.isString ? yamlQuotedString(value.text) : value.text) << "\n";
    break;
  case ConfigValue::Kind::List:
    if (value.items.empty()) {
      out << pad << yamlQuotedString(key) << ": []\n";
      break;
    }
    out << pad << yamlQuotedString(key) << ":\n";
    for (const std::string& item : value.items)
      out << pad << "- " << yamlQuotedString(item) << "\n";
    break;
  case ConfigValue::Kind::Map:
    if (value.entries.empty()) {
      out << pad << yamlQuotedString(key) << ": {}\n";
      break;
    }
    out << pad << yamlQuotedString(key) << ":\n";
    for (const auto& [name, nested] : value.entries)
      writeValue(out, name, nested, indent + 2);
    break;
  }
}

} // namespace

std::string configYamlText(const ConfigDocument& document) {
  std::ostringstream out;
  for (const auto& [name, value] : document.root.entries)
    writeValue(out, name, value, 0);
  return out.str();
}

void writeConfigFile(const std::string& path, const ConfigDocument& document) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1))
    ::mkdir(path.substr(0, slash).c_str(), 0755); // an existing folder is fine; a failure shows below
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << configYamlText(document);
    if (!file.flush())
      throw std::runtime_error("cannot write " + temporary + ": " + std::strerror(errno) +
                               " (check that its folder is writable, or give another --config_file)");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    int error = errno;
    std::remove(temporary.c_str());
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(error) +
                             " (check that its folder is writable, or give another --config_file)");
  }
}

} // namespace accel
