// libFuzzer target over accel's config and flag parsing: any input must end in a parsed config or a
// UsageError, never a crash, a sanitizer report or another exception; a config that parses must write back
// to text that parses to the same thing.
//
// The first byte picks what the rest is: a config file (even), or NUL-separated `accel launch` arguments
// whose settings are then resolved, with the last argument also tried as every setting's variable (odd).
#include "ConfigFile.h"
#include "Flags.h"
#include "LaunchSettings.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

/// The strategy the settings select, and what it refuses: UsageError or a result.
void resolveStrategy(const accel::LaunchSettings& settings) {
  try {
    const std::string strategy = accel::parallelStrategyOf(settings);
    accel::refuseUnsupportedTraining(settings, strategy);
    if (strategy == "fsdp")
      accel::fsdpShardingOf(settings);
  } catch (const accel::UsageError&) {
  }
}

void fuzzConfig(const std::string& text) {
  accel::ConfigDocument document;
  try {
    document = accel::parseConfigText(text, "fuzz.yaml");
  } catch (const accel::UsageError&) {
    return;
  }
  accel::ConfigDocument again = accel::parseConfigText(accel::configYamlText(document), "again.yaml");
  if (!(again.root == document.root))
    std::abort(); // what accel writes must read back as what it read
  resolveStrategy(accel::resolveLaunchSettings(&document, accel::Environment(), accel::ParsedFlags{}));
}

std::vector<accel::FlagSpec> launchFlagSpecs() {
  std::vector<accel::FlagSpec> specs = {accel::FlagSpec::withValue("config_file", "PATH", ""),
                                        accel::FlagSpec::toggle("quiet", 'q', "")};
  for (const accel::SettingSpec& spec : accel::launchSettingSpecs())
    specs.push_back(spec.toggle ? accel::FlagSpec::toggle(spec.name, '\0', spec.help)
                                : accel::FlagSpec::withValue(spec.name, "VALUE", spec.help));
  return specs;
}

void fuzzFlags(const std::string& text) {
  static const std::vector<accel::FlagSpec> kSpecs = launchFlagSpecs();
  std::vector<std::string> args;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos)
      end = text.size();
    args.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  try {
    accel::ParsedFlags flags = accel::parseFlags(kSpecs, args);
    accel::Environment environment;
    for (const accel::SettingSpec& spec : accel::launchSettingSpecs())
      if (!spec.environmentVariable.empty())
        environment.set(spec.environmentVariable, args.back());
    accel::LaunchSettings settings = accel::resolveLaunchSettings(nullptr, accel::Environment(), flags);
    accel::acceleratorVariables(settings, accel::TrainingMode::Fsdp, nullptr);
    resolveStrategy(settings);
    resolveStrategy(accel::resolveLaunchSettings(nullptr, environment, flags));
  } catch (const accel::UsageError&) {
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0)
    fuzzConfig(rest);
  else
    fuzzFlags(rest);
  return 0;
}
