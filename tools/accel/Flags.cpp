// Command-line flag parsing shared by the `accel` subcommands (see Flags.h).
#include "Flags.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace accel {
namespace {

std::string withUnderscores(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string lowercase(std::string text) {
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Levenshtein distance with adjacent transpositions counted as one edit ("nmu" → "num").
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t substitution = d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

const FlagSpec* findLongFlag(const std::vector<FlagSpec>& specs, const std::string& name) {
  for (const FlagSpec& spec : specs)
    if (spec.name == name ||
        std::find(spec.alsoAccepted.begin(), spec.alsoAccepted.end(), name) != spec.alsoAccepted.end())
      return &spec;
  return nullptr;
}

const FlagSpec* findShortFlag(const std::vector<FlagSpec>& specs, char shortName) {
  for (const FlagSpec& spec : specs)
    if (spec.shortName != '\0' && spec.shortName == shortName)
      return &spec;
  return nullptr;
}

// The flag to suggest for an unknown `--typed`: another launcher's name for it, else the closest spelling.
std::optional<std::string> suggestFlag(const std::vector<FlagSpec>& specs, const std::string& typed) {
  std::vector<std::string> names;
  for (const FlagSpec& spec : specs) {
    for (const std::string& other : spec.otherLaunchersNames)
      if (withUnderscores(lowercase(other)) == withUnderscores(lowercase(typed)))
        return spec.name;
    names.push_back(spec.name);
  }
  return closestMatch(withUnderscores(typed), names);
}

[[noreturn]] void throwUnknownFlag(const std::vector<FlagSpec>& specs, const std::string& arg,
                                   const std::string& typedName) {
  std::string message = "unknown flag " + arg;
  if (std::optional<std::string> suggestion = suggestFlag(specs, typedName))
    message += " (did you mean --" + *suggestion + "?)";
  else
    message += " (see --help for the flags)";
  throw UsageError(message);
}

std::string spelled(const FlagSpec& spec) {
  return "--" + spec.name;
}

} // namespace

bool ParsedFlags::has(const std::string& name) const {
  return std::any_of(values.begin(), values.end(), [&](const Value& value) { return value.name == name; });
}

std::optional<std::string> ParsedFlags::last(const std::string& name) const {
  for (auto it = values.rbegin(); it != values.rend(); ++it)
    if (it->name == name)
      return it->text;
  return std::nullopt;
}

ParsedFlags parseFlags(const std::vector<FlagSpec>& specs, const std::vector<std::string>& args) {
  ParsedFlags parsed;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    bool isLongFlag = arg.size() > 2 && arg.compare(0, 2, "--") == 0;
    bool isShortFlag = !isLongFlag && arg.size() == 2 && arg[0] == '-' && arg[1] != '-';
    if (!isLongFlag && !isShortFlag) {
      if (arg.size() > 1 && arg[0] == '-')
        throwUnknownFlag(specs, arg, arg.substr(arg.find_first_not_of('-')));
      break; // the first positional argument: it and everything after it belong to the program
    }

    std::string typedName = isLongFlag ? arg.substr(2) : arg.substr(1);
    std::optional<std::string> inlineValue;
    if (size_t equals = typedName.find('='); isLongFlag && equals != std::string::npos) {
      inlineValue = typedName.substr(equals + 1);
      typedName.resize(equals);
    }
    const FlagSpec* spec =
        isLongFlag ? findLongFlag(specs, withUnderscores(typedName)) : findShortFlag(specs, arg[1]);
    if (!spec)
      throwUnknownFlag(specs, arg, typedName);

    if (!spec->takesValue()) {
      if (inlineValue)
        throw UsageError(spelled(*spec) + " takes no value (got '" + arg + "')");
      parsed.values.push_back({spec->name, ""});
      continue;
    }
    if (!inlineValue) {
      bool valueFollows = i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0;
      if (!valueFollows)
        throw UsageError(spelled(*spec) + " needs a value (e.g. " + spelled(*spec) + " " + spec->valueName +
                         ")");
      inlineValue = args[++i];
    }
    parsed.values.push_back({spec->name, *inlineValue});
  }
  parsed.positionals.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return parsed;
}

std::string formatFlagHelp(const std::vector<FlagSpec>& specs) {
  std::vector<std::string> lefts;
  size_t width = 0;
  for (const FlagSpec& spec : specs) {
    std::string left = spec.shortName != '\0' ? std::string("-") + spec.shortName + ", " : "    ";
    left += spelled(spec);
    if (spec.takesValue())
      left += " " + spec.valueName;
    for (const std::string& other : spec.alsoAccepted)
      left += ", --" + other;
    width = std::max(width, left.size());
    lefts.push_back(left);
  }
  std::ostringstream out;
  for (size_t i = 0; i < specs.size(); ++i)
    out << "  " << lefts[i] << std::string(width - lefts[i].size() + 2, ' ') << specs[i].help << "\n";
  return out.str();
}

std::optional<std::string> closestMatch(const std::string& typed,
                                        const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t bestDistance = std::max<size_t>(2, typed.size() / 3) + 1; // farther than this is not a typo
  for (const std::string& candidate : candidates) {
    size_t distance = editDistance(lowercase(typed), lowercase(candidate));
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  return best;
}

int parseWholeNumberFlag(const std::string& flag, const std::string& text, int min, std::optional<int> max) {
  const std::string range =
      max ? "between " + std::to_string(min) + " and " + std::to_string(*max) : ">= " + std::to_string(min);
  bool allDigits = !text.empty() && std::all_of(text.begin(), text.end(),
                                                [](unsigned char c) { return std::isdigit(c) != 0; });
  if (!allDigits)
    throw UsageError(flag + " must be a whole number " + range + " (got '" + text + "')");
  errno = 0;
  long long value = std::strtoll(text.c_str(), nullptr, 10);
  if (errno == ERANGE || value > max.value_or(std::numeric_limits<int>::max()))
    throw UsageError(flag + " must be " + range + (max ? "" : " and fit in an int") + " (got " + text + ")");
  if (value < min)
    throw UsageError(flag + " must be " + range + " (got " + text + ")");
  return static_cast<int>(value);
}

double parseSecondsFlag(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  double seconds = text.empty() ? -1 : std::strtod(text.c_str(), &end);
  bool wellFormed =
      !text.empty() && end == text.c_str() + text.size() && errno == 0 && std::isfinite(seconds);
  if (!wellFormed || seconds < 0)
    throw UsageError(flag + " must be a number of seconds >= 0, like 5 or 0.5 (got '" + text + "')");
  return seconds;
}

} // namespace accel
