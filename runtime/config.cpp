// Resolves the Accelerator's configuration: options > ACCELERATE_* environment > ACCELERATE_CONFIG_FILE >
// defaults.
#include "config.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <vector>

#ifdef ACCEL_WITH_YAML
#include <yaml-cpp/yaml.h>
#endif

namespace accelerate::detail {
namespace {

const std::vector<std::string> kPrecisions = {"no", "fp16", "bf16", "fp8"};

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return std::nullopt;
  }
  return std::string(value);
}

bool parse_bool(const std::string& key, const std::string& text, const std::string& where) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "1" || lower == "true" || lower == "yes") {
    return true;
  }
  if (lower == "0" || lower == "false" || lower == "no") {
    return false;
  }
  throw std::invalid_argument("accelerate: " + key + "='" + text + "' (from " + where +
                              ") is not a boolean; use true or false");
}

int parse_positive_int(const std::string& key, const std::string& text, const std::string& where) {
  std::size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 1) {
    throw std::invalid_argument("accelerate: " + key + "='" + text + "' (from " + where +
                                ") must be an integer >= 1");
  }
  return value;
}

std::string check_precision(const std::string& text, const std::string& where) {
  if (std::find(kPrecisions.begin(), kPrecisions.end(), text) == kPrecisions.end()) {
    throw std::invalid_argument("accelerate: mixed_precision='" + text + "' (from " + where +
                                ") is not one of no, fp16, bf16, fp8");
  }
  return text;
}

void refuse_sharding(const std::string& what, const std::string& where) {
  throw std::invalid_argument(
      "accelerate: " + what + " (from " + where +
      ") asks for sharded training, which this version of the runtime does not provide "
      "yet; it refuses rather than silently running plain data parallelism. Use "
      "distributed_type MULTI_CPU or MULTI_GPU (accel config), or unset it");
}

/// Settings read from one source, as text, by key.
using Settings = std::map<std::string, std::string>;

Settings read_environment() {
  Settings settings;
  const std::pair<const char*, const char*> names[] = {
      {"ACCELERATE_MIXED_PRECISION", "mixed_precision"},
      {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "gradient_accumulation_steps"},
      {"ACCELERATE_USE_CPU", "cpu"},
      {"ACCELERATE_DEBUG_MODE", "debug"},
  };
  for (const auto& [variable, key] : names) {
    if (auto value = environment(variable)) {
      settings[key] = *value;
    }
  }
  for (const char* variable : {"ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"}) {
    if (auto value = environment(variable); value && parse_bool(variable, *value, "the environment")) {
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
  const std::pair<const char*, const char*> keys[] = {
      {"mixed_precision", "mixed_precision"},
      {"gradient_accumulation_steps", "gradient_accumulation_steps"},
      {"use_cpu", "cpu"},
      {"debug", "debug"},
  };
  for (const auto& [yaml_key, key] : keys) {
    if (root[yaml_key] && root[yaml_key].IsScalar()) {
      settings[key] = root[yaml_key].as<std::string>();
    }
  }
  if (root["distributed_type"] && root["distributed_type"].IsScalar()) {
    auto type = root["distributed_type"].as<std::string>();
    if (type == "FSDP" || type == "DEEPSPEED") {
      refuse_sharding("distributed_type: " + type, "config file " + path);
    }
  }
#else
  throw std::invalid_argument("accelerate: ACCELERATE_CONFIG_FILE='" + path +
                              "' is set, but this build of the runtime has no YAML support (yaml-cpp was not "
                              "found when it was built); unset the variable or rebuild with libyaml-cpp-dev");
#endif
  return settings;
}

} // namespace

ResolvedConfig resolve_config(const AcceleratorOptions& options) {
  ResolvedConfig config;
  const Settings from_environment = read_environment();
  Settings from_file;
  std::string file_label;
  if (auto path = environment("ACCELERATE_CONFIG_FILE")) {
    from_file = read_config_file(*path);
    file_label = "config file " + *path;
  }

  // Picks, for one key, the option if set, else the environment, else the file; records where from.
  auto resolve = [&](const std::string& key, const auto& option, auto& target, auto parse) {
    if (option.has_value()) {
      target = *option;
      config.sources[key] = "options";
    } else if (auto it = from_environment.find(key); it != from_environment.end()) {
      target = parse(it->second, "the environment");
      config.sources[key] = "environment";
    } else if (auto it = from_file.find(key); it != from_file.end()) {
      target = parse(it->second, file_label);
      config.sources[key] = file_label;
    } else {
      config.sources[key] = "default";
    }
  };
  auto as_bool = [](const std::string& key) {
    return [key](const std::string& text, const std::string& where) { return parse_bool(key, text, where); };
  };
  auto as_int = [](const std::string& key) {
    return [key](const std::string& text, const std::string& where) {
      return parse_positive_int(key, text, where);
    };
  };
  auto fixed = [](const auto&, const std::string&) -> bool { return false; };

  resolve("mixed_precision", options.mixed_precision_, config.mixed_precision, check_precision);
  if (options.mixed_precision_) {
    check_precision(config.mixed_precision, "AcceleratorOptions");
  }
  resolve("gradient_accumulation_steps", options.gradient_accumulation_steps_,
          config.gradient_accumulation_steps, as_int("gradient_accumulation_steps"));
  if (config.gradient_accumulation_steps < 1) {
    throw std::invalid_argument("accelerate: gradient_accumulation_steps must be >= 1 (got " +
                                std::to_string(config.gradient_accumulation_steps) + ")");
  }
  resolve("cpu", options.cpu_, config.cpu, as_bool("cpu"));
  resolve("debug", options.debug_, config.debug, as_bool("debug"));
  resolve("split_batches", options.split_batches_, config.split_batches, fixed);
  resolve("even_batches", options.even_batches_, config.even_batches, fixed);
  resolve("step_scheduler_with_optimizer", options.step_scheduler_with_optimizer_,
          config.step_scheduler_with_optimizer, fixed);
  resolve("scheduler_steps_per_process", options.scheduler_steps_per_process_,
          config.scheduler_steps_per_process, fixed);
  resolve("project_dir", options.project_dir_, config.project_dir,
          [](const std::string& text, const std::string&) { return text; });
  resolve("automatic_checkpoint_naming", options.automatic_checkpoint_naming_,
          config.automatic_checkpoint_naming, fixed);
  resolve("total_limit", options.total_limit_, config.total_limit,
          [](const auto&, const auto&) { return 0; });
  resolve("bucket_cap_mb", options.bucket_cap_mb_, config.bucket_cap_mb,
          [](const auto&, const auto&) { return 25.0; });
  if (!(config.bucket_cap_mb > 0)) {
    throw std::invalid_argument("accelerate: bucket_cap_mb must be > 0 (got " +
                                std::to_string(config.bucket_cap_mb) + ")");
  }
  resolve("find_unused_parameters", options.find_unused_parameters_, config.find_unused_parameters, fixed);
  resolve("gradient_as_bucket_view", options.gradient_as_bucket_view_, config.gradient_as_bucket_view, fixed);
  resolve("static_graph", options.static_graph_, config.static_graph, fixed);
  resolve("cuda_graph", options.cuda_graph_, config.cuda_graph, fixed);
  resolve("init_timeout", options.init_timeout_, config.timeout,
          [](const auto&, const auto&) { return std::chrono::milliseconds(std::chrono::minutes(10)); });
  if (config.timeout.count() <= 0) {
    throw std::invalid_argument("accelerate: init_timeout must be positive");
  }
  if (options.seed_) {
    config.seed = *options.seed_;
    config.sources["seed"] = "options";
  }
  return config;
}

std::string describe(const ResolvedConfig& config) {
  std::ostringstream out;
  auto line = [&](const std::string& key, const auto& value) {
    out << key << ": " << value;
    if (auto it = config.sources.find(key); it != config.sources.end()) {
      out << "  (" << it->second << ")";
    }
    out << "\n";
  };
  out << std::boolalpha;
  line("mixed_precision", config.mixed_precision);
  line("gradient_accumulation_steps", config.gradient_accumulation_steps);
  line("cpu", config.cpu);
  line("split_batches", config.split_batches);
  line("even_batches", config.even_batches);
  line("step_scheduler_with_optimizer", config.step_scheduler_with_optimizer);
  line("scheduler_steps_per_process", config.scheduler_steps_per_process);
  line("bucket_cap_mb", config.bucket_cap_mb);
  line("find_unused_parameters", config.find_unused_parameters);
  line("gradient_as_bucket_view", config.gradient_as_bucket_view);
  line("static_graph", config.static_graph);
  line("cuda_graph", config.cuda_graph);
  line("init_timeout_ms", config.timeout.count());
  line("debug", config.debug);
  if (config.seed) {
    line("seed", *config.seed);
  }
  if (!config.project_dir.empty()) {
    line("project_dir", config.project_dir);
  }
  return out.str();
}

} // namespace accelerate::detail
