// Checking and spelling config and flag values (see ConfigValues.h).
#include "ConfigValues.h"

#include "settings/spelling.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>

namespace accel {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items)
    text += (text.empty() ? "" : ", ") + item;
  return text;
}

std::optional<std::string> canonicalWholeNumber(const ValueRule& rule, const std::string& text) {
  if (auto value = accelerate::spelling::whole_number(text, rule.min, rule.max))
    return std::to_string(*value);
  return std::nullopt;
}

std::optional<std::string> canonicalNumber(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  double value = text.empty() ? -1 : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(value) || value < 0)
    return std::nullopt;
  // PyYAML reads "1" as an int: a float key keeps its decimal point.
  if (text.find_first_of(".eE") == std::string::npos)
    return text + ".0";
  return text;
}

} // namespace

std::string ValueRule::describe() const {
  switch (type) {
  case ValueType::Bool:
    return "true or false";
  case ValueType::WholeNumber:
    if (max == INT_MAX || max == LLONG_MAX)
      return "a whole number >= " + std::to_string(min);
    return "a whole number between " + std::to_string(min) + " and " + std::to_string(max);
  case ValueType::Number:
    return "a number >= 0, like 1.0";
  case ValueType::Choice:
    return "one of " + joined(choices);
  case ValueType::BoolOrChoice:
    return "true, false or one of " + joined(choices);
  case ValueType::ChoiceOrNumber:
    return "one of " + joined(choices) + ", or a number from " + std::to_string(min) + " to " +
           std::to_string(max);
  case ValueType::Map:
    return "a map of keys to values";
  case ValueType::Text:
  case ValueType::Any:
    break;
  }
  return "a text value";
}

std::optional<std::string> canonicalValue(const ValueRule& rule, const std::string& text,
                                          ValueProblem* problem) {
  std::optional<std::string> result;
  switch (rule.type) {
  case ValueType::Bool:
    if (auto value = accelerate::spelling::boolean(text))
      result = *value ? "true" : "false";
    break;
  case ValueType::WholeNumber:
    result = canonicalWholeNumber(rule, text);
    break;
  case ValueType::Number:
    result = canonicalNumber(text);
    break;
  case ValueType::Choice:
    result = accelerate::spelling::choice(rule.choices, text);
    break;
  case ValueType::BoolOrChoice:
    if (auto value = accelerate::spelling::boolean(text))
      result = *value ? "true" : "false";
    else
      result = accelerate::spelling::choice(rule.choices, text);
    break;
  case ValueType::ChoiceOrNumber:
    result = accelerate::spelling::choice(rule.choices, text);
    if (!result)
      result = canonicalWholeNumber(rule, text);
    break;
  case ValueType::Text:
  case ValueType::Map:
  case ValueType::Any:
    result = text;
    break;
  }
  if (!result && rule.otherSpelling &&
      (rule.type == ValueType::Choice || rule.type == ValueType::BoolOrChoice ||
       rule.type == ValueType::ChoiceOrNumber))
    result = rule.otherSpelling(text);
  if (!result && problem)
    problem->mustBe = rule.describe();
  return result;
}

std::string yamlQuotedString(const std::string& text) {
  // What PyYAML (YAML 1.1) would read as something other than this string when written plain.
  static const std::regex kNotAPlainString(
      "(|~|null|Null|NULL|y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF"
      "|[-+]?[0-9][0-9_]*(\\.[0-9_]*)?([eE][-+]?[0-9]+)?|[-+]?\\.[0-9_]+([eE][-+]?[0-9]+)?|0[xXoObB][0-9a-fA-"
      "F_]+"
      "|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)|[0-9][0-9_]*(:[0-5]?[0-9])+(\\.[0-9_]*)?)");
  bool hasControlCharacters =
      std::any_of(text.begin(), text.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
  if (hasControlCharacters) {
    // Single quotes would fold a newline into a space: double quotes with escapes keep every byte.
    std::string quoted = "\"";
    for (unsigned char c : text) {
      char escaped[8];
      if (c == '"' || c == '\\')
        quoted += std::string("\\") + static_cast<char>(c);
      else if (c < 0x20 || c == 0x7f) {
        std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
        quoted += escaped;
      } else
        quoted += static_cast<char>(c);
    }
    return quoted + "\"";
  }
  bool needsQuotes = std::regex_match(text, kNotAPlainString) ||
                     std::string("-?:,[]{}#&*!|>'\"%@` ").find(text.front()) != std::string::npos ||
                     text.back() == ' ' || text.back() == ':' || text.find(": ") != std::string::npos ||
                     text.find(" #") != std::string::npos || text.find('\t') != std::string::npos;
  if (!needsQuotes)
    return text;
  std::string quoted = "'";
  for (char c : text)
    quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted + "'";
}

} // namespace accel
