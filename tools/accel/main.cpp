// The `accel` command: picks the subcommand (`config`, `launch`, `env`, `estimate-memory`, `test`,
// `merge-weights`) and turns errors into exit codes.
#include "ConfigCommand.h"
#include "EnvCommand.h"
#include "EstimateMemoryCommand.h"
#include "Flags.h"
#include "LaunchCommand.h"
#include "MergeWeightsCommand.h"
#include "TestCommand.h"

#include <algorithm>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

namespace {

/// One `accel` subcommand. Adding one means one line here and a <Name>Command.h/.cpp pair.
struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

const Subcommand kSubcommands[] = {
    {"config", accel::kConfigSummary, accel::runConfigCommand},
    {"launch", accel::kLaunchSummary, accel::runLaunchCommand},
    {"env", accel::kEnvSummary, accel::runEnvCommand},
    {"estimate-memory", accel::kEstimateMemorySummary, accel::runEstimateMemoryCommand},
    {"test", accel::kTestSummary, accel::runTestCommand},
    {"merge-weights", accel::kMergeWeightsSummary, accel::runMergeWeightsCommand},
};

constexpr int kUsageErrorExitCode = 2;
constexpr int kInternalErrorExitCode = 1;

std::string usage() {
  std::string text = "usage: accel <command> [flags] [args...]\n"
                     "\n"
                     "accelerate-cpp's command-line tool.\n"
                     "\n"
                     "commands:\n";
  size_t width = 0;
  for (const Subcommand& subcommand : kSubcommands)
    width = std::max(width, std::string(subcommand.name).size());
  for (const Subcommand& subcommand : kSubcommands)
    text += "  " + std::string(subcommand.name) +
            std::string(width + 2 - std::string(subcommand.name).size(), ' ') + subcommand.summary + "\n";
  text += "\n"
          "Run `accel <command> --help` for a command's flags.\n";
  return text;
}

const Subcommand* findSubcommand(const std::string& name) {
  for (const Subcommand& subcommand : kSubcommands)
    if (name == subcommand.name)
      return &subcommand;
  return nullptr;
}

int rejectUnknownCommand(const std::string& typed) {
  std::vector<std::string> names;
  for (const Subcommand& subcommand : kSubcommands)
    names.push_back(subcommand.name);
  std::string message = "accel: unknown command '" + typed + "'";
  if (auto suggestion = accel::closestMatch(typed, names))
    message += " (did you mean '" + *suggestion + "'?)";
  else
    message += " (see accel --help for the commands)";
  std::cerr << message << "\n";
  return kUsageErrorExitCode;
}

int runSubcommand(const Subcommand& subcommand, const std::vector<std::string>& args) {
  const std::string prefix = std::string("accel ") + subcommand.name + ": ";
  try {
    return subcommand.run(args);
  } catch (const accel::UsageError& error) {
    std::cerr << prefix << error.what() << "\n";
    return kUsageErrorExitCode;
  } catch (const std::exception& error) {
    std::cerr << prefix << error.what() << "\n";
    return kInternalErrorExitCode;
  }
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << usage();
    return kUsageErrorExitCode;
  }
  const std::string& first = args.front();
  if (first == "--help" || first == "-h" || first == "help") {
    std::cout << usage();
    return 0;
  }
  if (first == "--version") {
    std::cout << "accel " << ACCEL_VERSION << "\n";
    return 0;
  }
  if (const Subcommand* subcommand = findSubcommand(first))
    return runSubcommand(*subcommand, std::vector<std::string>(args.begin() + 1, args.end()));
  return rejectUnknownCommand(first);
}
