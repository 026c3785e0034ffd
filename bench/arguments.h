// What the benchmark programs share for their command lines: `--name value` options.
#pragma once

#include <cstring>

namespace accelerate_bench {

/// When argv[i] is `name` and a value follows it: returns the value and moves `i` onto it; otherwise null.
inline const char* option_value(int argc, char** argv, int& i, const char* name) {
  if (std::strcmp(argv[i], name) == 0 && i + 1 < argc) {
    return argv[++i];
  }
  return nullptr;
}

} // namespace accelerate_bench
