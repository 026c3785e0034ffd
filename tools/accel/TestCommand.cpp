// `accel test` (see TestCommand.h): accel launch's flags and checks, with the bundled test program.
#include "TestCommand.h"

#include "Flags.h"
#include "LaunchCommand.h"

#include <iostream>
#include <stdexcept>
#include <unistd.h>

#include <sys/stat.h>

namespace accel {

const char* const kTestSummary =
    "check the configured setup end to end: rendezvous, collectives, data, precision, gradients, checkpoints";

namespace {

constexpr const char* kTestProgramName = "accel-test-program";

std::string testUsage() {
  return "usage: accel test [--config_file PATH] [accel launch's flags]\n"
         "\n"
         "Runs accelerate-cpp's test program on the processes the configuration selects, as `accel launch`\n"
         "would run a training program, and checks the rendezvous, every collective (gather, reduce,\n"
         "broadcast, pad_across_processes, split_between_processes, wait_for_everyone), the sharded data\n"
         "loader, the mixed precision recipe, gradient synchronisation under the selected parallel strategy "
         "and\n"
         "gradient accumulation (against the same steps on the whole batch on one process), and a save_state "
         "/\n"
         "load_state round trip. It prints one line per check and a verdict, and exits 0 only when every "
         "check\n"
         "passed on every process.\n"
         "\n"
         "It takes accel launch's flags (accel launch --help lists them), e.g.\n"
         "  accel test --config_file ~/.cache/huggingface/accelerate/default_config.yaml\n"
         "  accel test --num_processes 2 --mixed_precision bf16 --zero_stage 2\n";
}

} // namespace

std::string testProgramPath() {
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    throw std::runtime_error("cannot find where accel itself is (/proc/self/exe), so not " +
                             std::string(kTestProgramName) + " beside it either");
  }
  std::string folder(self, static_cast<size_t>(length));
  folder = folder.substr(0, folder.rfind('/'));
  const std::string path = folder + "/" + kTestProgramName;
  struct stat info{};
  if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode) || access(path.c_str(), X_OK) != 0) {
    throw std::runtime_error("the test program " + path +
                             " is missing: it is installed with the runtime beside accel; build the target " +
                             kTestProgramName + " (cmake --build BUILD --target " + kTestProgramName +
                             ") or reinstall accelerate-cpp with its runtime");
  }
  return path;
}

int runTestCommand(const std::vector<std::string>& args) {
  ParsedFlags flags = parseFlags(launchFlagSpecs(), args);
  if (flags.has("help")) {
    std::cout << testUsage();
    return 0;
  }
  if (!flags.positionals.empty()) {
    throw UsageError("'" + flags.positionals.front() +
                     "' is not a flag: accel test runs its own program and takes only accel launch's flags "
                     "(accel test --help)");
  }
  std::vector<std::string> launchArgs = args;
  launchArgs.push_back(testProgramPath());
  const int code = runLaunchCommand(launchArgs);
  if (code != 0) {
    std::cerr << "accel test: FAILED: the test program exited with " << code
              << " (the lines above say which check or which process failed)\n";
  }
  return code;
}

} // namespace accel
