// A program for `accel launch` tests to launch: reports its rank environment and pid, then exits, fails,
// kills itself, sleeps, or starts a child, as its arguments say.
//
//   launch_probe [--fail RANK CODE] [--kill-self RANK SIGNAL] [--sleep SECONDS] [--ignore-sigterm]
//                [--spawn-child] [--stderr TEXT] [--no-newline TEXT] [--lines N] [--echo-args]
//                [--sync-dir DIR] [--print-env PREFIX]
//
// Every rank first prints `probe pid=<pid> RANK=<..> LOCAL_RANK=<..> ...` on stdout. With --sync-dir, each
// rank then creates DIR/ready.<rank>, and the rank that --fail or --kill-self picks waits (up to 10 s) until
// every rank has done so: the test has every pid before the launcher starts stopping ranks.
// --spawn-child starts a child that sleeps 60 s and prints `probe child pid=<pid>`. --print-env prints every
// variable whose name starts with PREFIX as `NAME=value`, one a line, sorted (as `env` would, after the pid
// line).
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

const char* const kReportedVariables[] = {"RANK",
                                          "LOCAL_RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_WORLD_SIZE",
                                          "GROUP_RANK",
                                          "GROUP_WORLD_SIZE",
                                          "ROLE_NAME",
                                          "ROLE_RANK",
                                          "ROLE_WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "OMP_NUM_THREADS",
                                          "ACCELERATE_RUN_ID",
                                          "TORCHELASTIC_RUN_ID",
                                          "ACCELERATE_STORE_LISTEN_FD"};

struct ProbeActions {
  int failRank = -1;
  int failCode = 0;
  int killRank = -1;
  int killSignal = 0;
  double sleepSeconds = 0;
  bool ignoreSigterm = false;
  bool spawnChild = false;
  bool echoArgs = false;
  int lines = 0;
  std::string syncDir;
  std::string envPrefix;
  std::string stderrText;
  std::string noNewlineText;
};

int myRank() {
  const char* rank = std::getenv("RANK");
  return rank ? std::atoi(rank) : -1;
}

void printEnvironmentLine() {
  std::string line = "probe pid=" + std::to_string(::getpid());
  for (const char* name : kReportedVariables) {
    const char* value = std::getenv(name);
    line += std::string(" ") + name + "=" + (value ? value : "<unset>");
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void printVariablesStartingWith(const std::string& prefix) {
  std::vector<std::string> lines;
  for (char** entry = environ; *entry != nullptr; ++entry)
    if (std::strncmp(*entry, prefix.c_str(), prefix.size()) == 0)
      lines.emplace_back(*entry);
  std::sort(lines.begin(), lines.end());
  for (const std::string& line : lines)
    std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void spawnSleepingChild(const char* self) {
  pid_t child = ::fork();
  if (child == 0) {
    ::execl(self, self, "--child", static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  std::printf("probe child pid=%d\n", static_cast<int>(child));
  std::fflush(stdout);
}

void sleepFor(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void printNumberedLines(int rank, int count) {
  const std::string padding(80, 'x');
  for (int i = 0; i < count; ++i)
    std::printf("line %d %d %s\n", rank, i, padding.c_str());
}

void markReady(const std::string& syncDir, int rank) {
  std::string path = syncDir + "/ready." + std::to_string(rank);
  if (std::FILE* file = std::fopen(path.c_str(), "w"))
    std::fclose(file);
}

void waitUntilEveryRankIsReady(const std::string& syncDir) {
  const char* worldSize = std::getenv("WORLD_SIZE");
  int ranks = worldSize ? std::atoi(worldSize) : 1;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int ready = 0;
    for (int rank = 0; rank < ranks; ++rank)
      ready += ::access((syncDir + "/ready." + std::to_string(rank)).c_str(), F_OK) == 0 ? 1 : 0;
    if (ready == ranks)
      return;
    sleepFor(0.01);
  }
}

ProbeActions parse(int argc, char** argv, std::vector<std::string>* echoed) {
  ProbeActions actions;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    echoed->push_back(arg);
    bool hasOne = i + 1 < argc, hasTwo = i + 2 < argc;
    if (arg == "--fail" && hasTwo) {
      actions.failRank = std::atoi(argv[++i]);
      actions.failCode = std::atoi(argv[++i]);
    } else if (arg == "--kill-self" && hasTwo) {
      actions.killRank = std::atoi(argv[++i]);
      actions.killSignal = std::atoi(argv[++i]);
    } else if (arg == "--sleep" && hasOne) {
      actions.sleepSeconds = std::atof(argv[++i]);
    } else if (arg == "--stderr" && hasOne) {
      actions.stderrText = argv[++i];
    } else if (arg == "--no-newline" && hasOne) {
      actions.noNewlineText = argv[++i];
    } else if (arg == "--lines" && hasOne) {
      actions.lines = std::atoi(argv[++i]);
    } else if (arg == "--sync-dir" && hasOne) {
      actions.syncDir = argv[++i];
    } else if (arg == "--print-env" && hasOne) {
      actions.envPrefix = argv[++i];
    } else if (arg == "--ignore-sigterm") {
      actions.ignoreSigterm = true;
    } else if (arg == "--spawn-child") {
      actions.spawnChild = true;
    } else if (arg == "--echo-args") {
      actions.echoArgs = true;
    }
  }
  return actions;
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--child") { // the process --spawn-child starts
    sleepFor(60);
    return 0;
  }
  std::vector<std::string> echoed;
  ProbeActions actions = parse(argc, argv, &echoed);
  if (actions.ignoreSigterm)
    std::signal(SIGTERM, SIG_IGN);
  printEnvironmentLine();
  if (!actions.envPrefix.empty())
    printVariablesStartingWith(actions.envPrefix);
  if (actions.echoArgs) {
    std::string line = "probe args:";
    for (const std::string& arg : echoed)
      line += " " + arg;
    std::printf("%s\n", line.c_str());
  }
  printNumberedLines(myRank(), actions.lines);
  if (!actions.stderrText.empty())
    std::fprintf(stderr, "%s\n", actions.stderrText.c_str());
  if (!actions.noNewlineText.empty())
    std::printf("%s", actions.noNewlineText.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  if (actions.spawnChild)
    spawnSleepingChild(argv[0]);

  int rank = myRank();
  if (!actions.syncDir.empty()) {
    markReady(actions.syncDir, rank);
    if (rank == actions.failRank || rank == actions.killRank)
      waitUntilEveryRankIsReady(actions.syncDir);
  }
  if (rank == actions.failRank)
    return actions.failCode;
  if (rank == actions.killRank)
    ::kill(::getpid(), actions.killSignal);
  sleepFor(actions.sleepSeconds);
  return 0;
}
