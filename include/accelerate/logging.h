// get_logger: named loggers that print once per job (or on every process, with the rank), as Accelerate's.
//
// Self-contained, on purpose: spdlog and glog from the distribution build on their own fmt, and torch's
// headers bundle another fmt under the same include path, so the two cannot meet in one translation unit.
#pragma once

#include <memory>
#include <optional>
#include <sstream>
#include <string>

namespace accelerate {

/// Python's logging levels, with their numbers.
enum class LogLevel { debug = 10, info = 20, warning = 30, error = 40, critical = 50 };

namespace detail {
struct LoggerCore;
}

class Logger;
/// The logger called `name` (one per name in a process). Its level: `level` when given, else
/// `ACCELERATE_LOG_LEVEL` (`DEBUG`, `INFO`, `WARNING`, `ERROR`, `CRITICAL`, any case: Accelerate's variable),
/// else INFO. A level given here also changes the logger an earlier call returned.
Logger get_logger(const std::string& name, std::optional<LogLevel> level = std::nullopt);

/// A named logger, as Accelerate's `get_logger` gives (`MultiProcessAdapter`): a message prints on the main
/// process only, unless it is sent through `on_every_process()`, which prints it on every process with the
/// rank in front (when the job has more than one process). Messages below the logger's level are dropped
/// before their arguments are formatted. Lines go to standard error whole (one `write` each), as `LEVEL name:
/// message`.
///
/// ```
/// auto logger = accelerate::get_logger("train");
/// logger.info("epoch ", epoch, " loss ", loss.item<double>());   // INFO train: epoch 1 loss 0.25
/// logger.on_every_process().warning("shard ", rank, " is empty");  // [rank 1] WARNING train: ...
/// ```
class Logger {
public:
  template <typename... Args> void debug(const Args&... args) const { write(LogLevel::debug, args...); }
  template <typename... Args> void info(const Args&... args) const { write(LogLevel::info, args...); }
  template <typename... Args> void warning(const Args&... args) const { write(LogLevel::warning, args...); }
  template <typename... Args> void error(const Args&... args) const { write(LogLevel::error, args...); }
  template <typename... Args> void critical(const Args&... args) const { write(LogLevel::critical, args...); }

  /// This logger, printing on every process with `[rank r]` in front (when the job has more than one
  /// process).
  Logger on_every_process() const;
  /// True when a message at `level` would print on this process.
  bool enabled_for(LogLevel level) const;
  /// Changes the level of every logger of this name.
  void set_level(LogLevel level) const;
  LogLevel level() const;
  const std::string& name() const;

private:
  friend Logger get_logger(const std::string& name, std::optional<LogLevel> level);
  Logger(std::shared_ptr<detail::LoggerCore> core, bool every_process)
      : core_(std::move(core)), every_process_(every_process) {}

  template <typename... Args> void write(LogLevel level, const Args&... args) const {
    if (!enabled_for(level)) {
      return;
    }
    std::ostringstream message;
    (message << ... << args);
    emit(level, message.str());
  }
  void emit(LogLevel level, const std::string& message) const;

  std::shared_ptr<detail::LoggerCore> core_;
  bool every_process_ = false;
};

} // namespace accelerate
