// get_logger: named loggers, their levels (ACCELERATE_LOG_LEVEL) and which process prints.
#include <accelerate/logging.h>

#include "common/durable_file.h"
#include "tracking/output_process.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>

namespace accelerate {
namespace detail {

struct LoggerCore {
  std::string name;
  std::atomic<int> level{static_cast<int>(LogLevel::info)};
};

namespace {

const char* level_name(LogLevel level) {
  switch (level) {
  case LogLevel::debug:
    return "DEBUG";
  case LogLevel::info:
    return "INFO";
  case LogLevel::warning:
    return "WARNING";
  case LogLevel::error:
    return "ERROR";
  case LogLevel::critical:
    return "CRITICAL";
  }
  return "LOG";
}

/// One line to standard error in one write, so lines of several processes do not interleave.
void write_line(const std::string& line) {
  write_all(STDERR_FILENO, line); // nothing to report a failure to
}

/// ACCELERATE_LOG_LEVEL, read once; a value that is no level is reported once and INFO used.
LogLevel environment_level() {
  static const LogLevel level = [] {
    const char* text = std::getenv("ACCELERATE_LOG_LEVEL");
    if (text == nullptr || *text == '\0') {
      return LogLevel::info;
    }
    std::string upper = text;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char c) { return std::toupper(c); });
    for (const LogLevel candidate :
         {LogLevel::debug, LogLevel::info, LogLevel::warning, LogLevel::error, LogLevel::critical}) {
      if (upper == level_name(candidate) || (upper == "WARN" && candidate == LogLevel::warning)) {
        return candidate;
      }
    }
    write_line(std::string("WARNING accelerate: ACCELERATE_LOG_LEVEL='") + text +
               "' is not a level; use DEBUG, INFO, WARNING, ERROR or CRITICAL (any case). INFO is used\n");
    return LogLevel::info;
  }();
  return level;
}

} // namespace

const LaunchEnvironment& output_process() {
  static const LaunchEnvironment environment = [] {
    try {
      return discover_launch_environment();
    } catch (const std::exception&) {
      return LaunchEnvironment();
    }
  }();
  return environment;
}

} // namespace detail

Logger get_logger(const std::string& name, std::optional<LogLevel> level) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<detail::LoggerCore>> loggers;
  std::lock_guard<std::mutex> lock(mutex);
  auto& core = loggers[name];
  if (!core) {
    core = std::make_shared<detail::LoggerCore>();
    core->name = name;
    core->level = static_cast<int>(detail::environment_level());
  }
  if (level) {
    core->level = static_cast<int>(*level);
  }
  return Logger(core, false);
}

Logger Logger::on_every_process() const {
  return Logger(core_, true);
}

bool Logger::enabled_for(LogLevel level) const {
  return static_cast<int>(level) >= core_->level.load() &&
         (every_process_ || detail::output_process().rank == 0);
}

void Logger::set_level(LogLevel level) const {
  core_->level = static_cast<int>(level);
}

LogLevel Logger::level() const {
  return static_cast<LogLevel>(core_->level.load());
}

const std::string& Logger::name() const {
  return core_->name;
}

void Logger::emit(LogLevel level, const std::string& message) const {
  std::string line;
  if (every_process_ && detail::output_process().world_size > 1) {
    line = "[rank " + std::to_string(detail::output_process().rank) + "] ";
  }
  line += std::string(detail::level_name(level)) + " " + core_->name + ": " + message + "\n";
  detail::write_line(line);
}

} // namespace accelerate
