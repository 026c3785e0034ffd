// What the benchmark programs share for their command lines and exits: `--name value` options, and a rank's
// failure said in one line.
#pragma once

#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

namespace accelerate_bench {

/// When argv[i] is `name` and a value follows it: returns the value and moves `i` onto it; otherwise null.
inline const char* option_value(int argc, char** argv, int& i, const char* name) {
  if (std::strcmp(argv[i], name) == 0 && i + 1 < argc) {
    return argv[++i];
  }
  return nullptr;
}

/// Runs `run(argc, argv)`; an exception (an allocation refused under a memory limit, a refused option) is
/// said as "<program>: rank R failed: <its message's first line>" (libtorch's go on with a backtrace),
/// exit 1.
inline int run_saying_failure(const char* program, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    const std::string message = error.what();
    std::cerr << program << ": rank " << (std::getenv("RANK") ? std::getenv("RANK") : "?")
              << " failed: " << message.substr(0, message.find('\n')) << std::endl;
    return 1;
  }
}

} // namespace accelerate_bench
