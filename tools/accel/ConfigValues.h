// The value types of Accelerate's config keys and launch flags: checking text against them, their canonical
// spelling, and how a string is written so that PyYAML reads it back as the same string.
#pragma once

#include <climits>
#include <optional>
#include <string>
#include <vector>

namespace accel {

/// What a config key or flag accepts.
enum class ValueType {
  Bool,           ///< true/false (also yes/no, on/off, 1/0: what PyYAML and Accelerate's str_to_bool accept)
  WholeNumber,    ///< an integer within [min, max]
  Number,         ///< a decimal number >= 0, like 1.0
  Text,           ///< any string
  Choice,         ///< one of `choices` (matched without regard to case, written as listed)
  BoolOrChoice,   ///< a Bool or one of `choices` (fsdp_reshard_after_forward: true, or FULL_SHARD for FSDP1)
  ChoiceOrNumber, ///< one of `choices`, or a whole number within [min, max] (Accelerate's enum numbers)
  Map,            ///< a nested map whose keys are not checked (fp8_config, dynamo_config, ...)
  Any,            ///< anything: TPU and SageMaker keys that accel reads past
};

struct ValueRule {
  ValueType type = ValueType::Text;
  std::vector<std::string> choices;
  long long min = LLONG_MIN;
  long long max = LLONG_MAX;
  /// Choice, BoolOrChoice, ChoiceOrNumber: the canonical choice for another spelling Accelerate also reads
  /// (torch's `_HYBRID_SHARD_ZERO2`), tried when `text` is none of the rule's values; null: none.
  std::optional<std::string> (*otherSpelling)(const std::string& text) = nullptr;

  static ValueRule boolean() { return {ValueType::Bool, {}, LLONG_MIN, LLONG_MAX}; }
  static ValueRule text() { return {ValueType::Text, {}, LLONG_MIN, LLONG_MAX}; }
  static ValueRule number() { return {ValueType::Number, {}, LLONG_MIN, LLONG_MAX}; }
  static ValueRule wholeNumber(long long min, long long max = INT_MAX) {
    return {ValueType::WholeNumber, {}, min, max};
  }
  static ValueRule choice(std::vector<std::string> choices) {
    return {ValueType::Choice, std::move(choices), LLONG_MIN, LLONG_MAX};
  }
  static ValueRule boolOrChoice(std::vector<std::string> choices) {
    return {ValueType::BoolOrChoice, std::move(choices), LLONG_MIN, LLONG_MAX};
  }
  static ValueRule choiceOrNumber(std::vector<std::string> choices, long long min, long long max) {
    return {ValueType::ChoiceOrNumber, std::move(choices), min, max};
  }
  /// This rule, also taking what `spelling` reads as one of its choices.
  ValueRule spelledAlsoAs(std::optional<std::string> (*spelling)(const std::string&)) const {
    ValueRule rule = *this;
    rule.otherSpelling = spelling;
    return rule;
  }
  static ValueRule map() { return {ValueType::Map, {}, LLONG_MIN, LLONG_MAX}; }
  static ValueRule any() { return {ValueType::Any, {}, LLONG_MIN, LLONG_MAX}; }

  /// "true or false", "one of no, fp16, bf16, fp8", "a whole number >= 1": for error messages.
  std::string describe() const;
};

/// Why a value was refused: what it must be, ready to follow "<key> must be ".
struct ValueProblem {
  std::string mustBe;
};

/// `text` checked against `rule` and spelled canonically ("True" → "true", "FP16" → "fp16", "007" → "7"), or
/// the problem. Map and Any accept any text unchanged.
std::optional<std::string> canonicalValue(const ValueRule& rule, const std::string& text,
                                          ValueProblem* problem = nullptr);

/// `text` as a YAML scalar PyYAML reads back as this same string: plain when that is safe, else single-quoted
/// ('no', '1', '', 'a: b').
std::string yamlQuotedString(const std::string& text);

} // namespace accel
