// Progress bars: which process shows them, how they draw on a terminal and in plain lines, the last logged
// loss they show, and a bar's count as a registered counter (Accelerator::register_counter).
#include <accelerate/accelerator.h>
#include <accelerate/progress.h>

#include "tracking/output_process.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>

namespace accelerate {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> bars_shown{0};

/// The bar last drawn in place on the terminal and not closed: a printed line clears it and draws it again.
std::mutex drawn_mutex;
ProgressState* drawn_in_place = nullptr;

struct LoggedLoss {
  std::mutex mutex;
  std::string name;
  std::optional<double> value;
};
LoggedLoss& logged_loss() {
  static LoggedLoss instance;
  return instance;
}

/// 75 -> "01:15", 3725 -> "1:02:05".
std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    return "?";
  }
  const long long total = static_cast<long long>(seconds);
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(text, sizeof(text), "%02lld:%02lld", total / 60, total % 60);
  }
  return text;
}

std::string rate_text(double per_second) {
  char text[32];
  if (per_second >= 1.0 || per_second <= 0.0) {
    std::snprintf(text, sizeof(text), "%.2fit/s", per_second);
  } else {
    std::snprintf(text, sizeof(text), "%.2fs/it", 1.0 / per_second);
  }
  return text;
}

void write_out(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

} // namespace

struct ProgressState {
  int64_t total = 0;
  int64_t count = 0;
  /// The count `set_count` last gave (a resumed run's position): the rate counts the steps after it, from
  /// `start`, which `set_count` moves to its call.
  int64_t initial = 0;
  std::string description;
  bool terminal = false;
  bool closed = false;
  Clock::time_point start = Clock::now();
  Clock::time_point last_drawn = start;
  /// Plain lines: the tenth of the total last printed (or, without a total, when the last line went out).
  int64_t tenths_printed = 0;
  int64_t count_printed = 0;

  /// The bar's state as text: the terminal's bar, or a plain line's fields.
  std::string render() const {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const double rate = elapsed > 0 ? static_cast<double>(count - initial) / elapsed : 0.0;
    const double remaining = rate > 0 && total > 0 ? static_cast<double>(total - count) / rate : NAN;
    std::string loss;
    {
      auto& last = logged_loss();
      std::lock_guard<std::mutex> lock(last.mutex);
      if (last.value) {
        char value[32];
        std::snprintf(value, sizeof(value), "%.4g", *last.value);
        loss = last.name + "=" + value;
      }
    }
    const std::string label = description.empty() ? "" : description + ": ";
    std::string text = label;
    if (total > 0) {
      const int percent = static_cast<int>(100 * std::min(count, total) / total);
      char head[64];
      std::snprintf(head, sizeof(head), "%3d%%", percent);
      text += head;
      if (terminal) {
        constexpr int kWidth = 20;
        const int filled = static_cast<int>(kWidth * std::min(count, total) / total);
        text += "|" + std::string(static_cast<size_t>(filled), '#') +
                std::string(static_cast<size_t>(kWidth - filled), ' ') + "|";
      }
      text += " " + std::to_string(count) + "/" + std::to_string(total);
    } else {
      text += std::to_string(count);
    }
    text += " [" + clock_text(elapsed) + (total > 0 ? "<" + clock_text(remaining) : std::string()) + ", " +
            rate_text(rate) + (loss.empty() ? "" : ", " + loss) + "]";
    return text;
  }

  /// The count a resumed run stands at (ProgressBar::set_count); a closed bar keeps its own.
  void set_count(int64_t value);

  void draw(bool final, bool now_anyway = false) {
    const auto now = Clock::now();
    if (terminal) {
      if (final || now_anyway || now - last_drawn >= std::chrono::milliseconds(100)) {
        // \r returns to the start of the line, \033[K clears what a longer earlier state left.
        write_out("\r" + render() + "\033[K" + (final ? "\n" : ""));
        last_drawn = now;
        std::lock_guard<std::mutex> lock(drawn_mutex);
        drawn_in_place = final ? (drawn_in_place == this ? nullptr : drawn_in_place) : this;
      }
      return;
    }
    bool due = false;
    if (total > 0) {
      const int64_t tenths = 10 * std::min(count, total) / total;
      due = tenths > tenths_printed;
      tenths_printed = std::max(tenths_printed, tenths);
    } else {
      due = now - last_drawn >= std::chrono::seconds(10);
    }
    if (due || (final && count != count_printed)) {
      write_out(render() + "\n");
      last_drawn = now;
      count_printed = count;
    }
  }
};

void ProgressState::set_count(int64_t value) {
  if (closed || value == count) {
    return;
  }
  count = value;
  initial = value;
  start = Clock::now();
  if (terminal) {
    draw(false, /*now_anyway=*/true);
  }
  // In plain lines, the next update prints the tenth it reaches, so the first line after a resume shows it.
}

bool progress_bar_shown() {
  return bars_shown.load() > 0;
}

void before_printed_line() {
  std::lock_guard<std::mutex> lock(drawn_mutex);
  if (drawn_in_place != nullptr) {
    write_out("\r\033[K"); // the line goes where the bar was
  }
}

void after_printed_line() {
  std::lock_guard<std::mutex> lock(drawn_mutex);
  if (drawn_in_place != nullptr) {
    std::fflush(stdout);
    write_out("\r" + drawn_in_place->render() + "\033[K");
    drawn_in_place->last_drawn = Clock::now();
  }
}

void note_logged_loss(const std::string& name, double value) {
  auto& last = logged_loss();
  std::lock_guard<std::mutex> lock(last.mutex);
  last.name = name;
  last.value = value;
}

} // namespace detail

ProgressBar::ProgressBar(int64_t total, std::string description) {
  if (detail::output_process().local_rank != 0) {
    return; // other processes hold no state: every call is a no-op
  }
  state_ = std::make_shared<detail::ProgressState>();
  state_->total = std::max<int64_t>(total, 0);
  state_->description = std::move(description);
  state_->terminal = ::isatty(STDOUT_FILENO) == 1;
  ++detail::bars_shown;
  if (state_->terminal) {
    state_->draw(false, /*now_anyway=*/true); // the bar shows from the start, at 0
  }
}

ProgressBar::~ProgressBar() {
  close();
}

ProgressBar::ProgressBar(ProgressBar&& other) noexcept = default;

ProgressBar& ProgressBar::operator=(ProgressBar&& other) noexcept {
  if (this != &other) {
    close();
    state_ = std::move(other.state_);
  }
  return *this;
}

void ProgressBar::update(int64_t steps) {
  if (!state_ || state_->closed) {
    return;
  }
  state_->count += steps;
  state_->draw(false);
}

void ProgressBar::set_count(int64_t count) {
  if (state_) {
    state_->set_count(count);
  }
}

void Accelerator::register_counter(const std::string& name, ProgressBar& bar) {
  // The registration holds the bar's state, not the bar: a bar of a function that has returned (the job's
  // accelerator outlives it) is saved at its last count and set no more, never read after it is gone. No
  // state (a process that does not show the bar): 0, and nothing to set.
  std::shared_ptr<detail::ProgressState> state = bar.state_;
  register_counter_entry(
      name, [state] { return state ? state->count : int64_t{0}; },
      [state](int64_t value) {
        if (state) {
          state->set_count(value);
        }
      });
}

void ProgressBar::close() {
  if (!state_ || state_->closed) {
    return;
  }
  state_->closed = true;
  state_->draw(true);
  {
    std::lock_guard<std::mutex> lock(detail::drawn_mutex);
    if (detail::drawn_in_place == state_.get()) {
      detail::drawn_in_place = nullptr;
    }
  }
  --detail::bars_shown;
}

int64_t ProgressBar::count() const {
  return state_ ? state_->count : 0;
}

bool ProgressBar::shown() const {
  return state_ != nullptr;
}

} // namespace accelerate
