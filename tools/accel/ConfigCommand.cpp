// `accel config`: the questionnaire, `accel config default`, and `accel config --validate FILE` (see
// ConfigCommand.h).
#include "ConfigCommand.h"

#include "ConfigFile.h"
#include "ConfigQuestionnaire.h"
#include "ConfigSchema.h"
#include "Flags.h"
#include "SystemInfo.h"

#include <iostream>
#include <sys/stat.h>
#include <unistd.h>

namespace accel {

const char* const kConfigSummary =
    "write or check Accelerate's config file (the questions, default, --validate)";

namespace {

const std::vector<FlagSpec>& configFlags() {
  static const std::vector<FlagSpec> kFlags = {
      FlagSpec::withValue("config_file", "PATH",
                          "where to write the config (default: " + defaultConfigPath() + ")"),
      FlagSpec::withValue("validate", "FILE",
                          "check FILE (every key, value and line) instead of writing one"),
      FlagSpec::toggle("help", 'h', "show this help"),
  };
  return kFlags;
}

const std::vector<FlagSpec>& defaultFlags() {
  static const std::vector<FlagSpec> kFlags = {
      FlagSpec::withValue("config_file", "PATH",
                          "where to write the config (default: " + defaultConfigPath() + ")"),
      FlagSpec::withValue("mixed_precision", "MODE", "no, fp16, bf16 or fp8 (default no)"),
      FlagSpec::toggle("help", 'h', "show this help"),
  };
  return kFlags;
}

std::string configUsage() {
  return "usage: accel config [--config_file PATH]\n"
         "       accel config default [--config_file PATH] [--mixed_precision MODE]\n"
         "       accel config --validate FILE\n"
         "\n"
         "Asks how you train (machines, processes, GPUs, mixed precision) and writes the "
         "answers\n"
         "as Hugging Face Accelerate's config file, with exactly the keys `accelerate config` writes: one "
         "file\n"
         "serves `accel launch` and Python's `accelerate launch`. Answer each question with a number, a "
         "name,\n"
         "or Enter for the default in brackets; answers can also be piped in, one per line.\n"
         "`default` writes a config without questions: one process per GPU found, else one CPU process.\n"
         "`--validate` checks a file (ours or Python Accelerate's) and names the line of anything wrong.\n"
         "\n"
         "flags:\n" +
         formatFlagHelp(configFlags()) + "\n" + "flags of `accel config default`:\n" +
         formatFlagHelp(defaultFlags());
}

std::string summaryOf(const ConfigDocument& document) {
  std::string summary = "distributed_type " + document.scalar("distributed_type").value_or("?");
  summary += ", " + document.scalar("num_processes").value_or("1") + " process(es)";
  if (auto machines = document.scalar("num_machines"); machines && *machines != "1")
    summary += " on " + *machines + " machines";
  summary += ", mixed_precision " + document.scalar("mixed_precision").value_or("no");
  return summary;
}

int validate(const std::string& path) {
  ConfigDocument document = readConfigFile(path);
  std::cout << path << ": valid (" << summaryOf(document) << ")\n";
  return 0;
}

/// Writes `document` to `path` after checking it reads back as written: what accel writes, accel accepts.
void save(ConfigDocument document, const std::string& path) {
  document.path = path;
#ifdef ACCEL_HAVE_YAML_CPP
  parseConfigText(configYamlText(document), path);
#endif
  writeConfigFile(path, document);
  std::cout << "accelerate configuration saved at " << path << "\n";
}

int runDefault(const std::vector<std::string>& args) {
  ParsedFlags flags = parseFlags(defaultFlags(), args);
  if (flags.has("help")) {
    std::cout << configUsage();
    return 0;
  }
  if (!flags.positionals.empty())
    throw UsageError("unexpected argument '" + flags.positionals.front() +
                     "' (accel config default takes only flags; see --help)");
  std::string mixedPrecision = "no";
  if (auto value = flags.last("mixed_precision")) {
    auto canonical = canonicalValue(ValueRule::choice(mixedPrecisionModes()), *value);
    if (!canonical)
      throw UsageError("--mixed_precision must be one of no, fp16, bf16, fp8 (got '" + *value + "')");
    mixedPrecision = *canonical;
  }
  const std::string path = flags.last("config_file").value_or(defaultConfigPath());
  struct stat info{};
  if (::stat(path.c_str(), &info) == 0) {
    std::cout << "Configuration already exists at " << path
              << ", left unchanged (run `accel config` to change it, "
              << "or give another --config_file)\n";
    return 0;
  }
  save(defaultConfig(static_cast<int>(cudaDevices().size()), mixedPrecision), path);
  return 0;
}

} // namespace

int runConfigCommand(const std::vector<std::string>& args) {
  if (!args.empty() && args.front() == "default")
    return runDefault(std::vector<std::string>(args.begin() + 1, args.end()));
  ParsedFlags flags = parseFlags(configFlags(), args);
  if (flags.has("help")) {
    std::cout << configUsage();
    return 0;
  }
  if (!flags.positionals.empty()) {
    const std::string& typed = flags.positionals.front();
    throw UsageError("unknown subcommand '" + typed + "' (" +
                     (closestMatch(typed, {"default"})
                          ? "did you mean 'default'?"
                          : "accel config takes `default`, or flags; see --help") +
                     ")");
  }
  if (auto file = flags.last("validate"))
    return validate(*file);
  Prompter prompter(std::cin, std::cout, ::isatty(STDIN_FILENO) == 0);
  ConfigDocument document = askConfigQuestions(prompter);
  save(document, flags.last("config_file").value_or(defaultConfigPath()));
  return 0;
}

} // namespace accel
