// The runtime's configuration as a program sees it, for config_test.py: resolves the Accelerator's options
// (runtime/settings/config.cpp's resolve_config, compiled in) from the environment, ACCELERATE_CONFIG_FILE
// and the options given as arguments, and prints `accelerator.state()`'s option lines, or the refusal.
//
//   config_probe [NAME=VALUE ...]   each sets AcceleratorOptions().NAME(VALUE), VALUE read as the option's
//   type
//
// Exit codes: 0 resolved (the lines on stdout), 3 refused (`error: <message>` on stderr), 2 bad arguments.
#include "settings/config.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

void set_from_text(std::optional<std::string>& option, const std::string& text) {
  option = text;
}
void set_from_text(std::optional<bool>& option, const std::string& text) {
  if (text != "true" && text != "false") {
    throw std::runtime_error("a boolean option takes true or false, not '" + text + "'");
  }
  option = text == "true";
}
void set_from_text(std::optional<int>& option, const std::string& text) {
  option = std::stoi(text);
}
void set_from_text(std::optional<double>& option, const std::string& text) {
  option = std::stod(text);
}
void set_from_text(std::optional<std::int64_t>& option, const std::string& text) {
  option = std::stoll(text);
}
void set_from_text(std::optional<std::uint64_t>& option, const std::string& text) {
  option = std::stoull(text);
}
void set_from_text(std::optional<std::chrono::milliseconds>& option, const std::string& text) {
  option = std::chrono::milliseconds(std::stoll(text));
}

void set_from_text(std::optional<std::vector<std::string>>& option, const std::string& text) {
  std::vector<std::string> names;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    names.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  option = names;
}

} // namespace

int main(int argc, char** argv) {
  accelerate::AcceleratorOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    const auto equals = argument.find('=');
    const std::string name = argument.substr(0, equals);
    bool known = false;
    try {
#define ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)                     \
  if (name == #NAME) {                                                                                       \
    set_from_text(options.NAME##_, argument.substr(equals + 1));                                             \
    known = true;                                                                                            \
  }
#include <accelerate/detail/option_table.h>
#undef ACCELERATE_OPTION
    } catch (const std::exception& error) {
      std::cerr << "config_probe: " << argument << ": " << error.what() << "\n";
      return 2;
    }
    if (equals == std::string::npos || !known) {
      std::cerr << "config_probe: '" << argument << "' is not NAME=VALUE for an option of the table\n";
      return 2;
    }
  }
  try {
    std::cout << accelerate::detail::describe(accelerate::detail::resolve_config(options));
  } catch (const std::invalid_argument& error) {
    std::cerr << "error: " << error.what() << "\n";
    return 3;
  }
  return 0;
}
