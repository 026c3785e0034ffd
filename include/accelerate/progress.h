// Progress bars on the local main process: over a prepared loader (or any range), or over a step count.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace accelerate {

class Accelerator;

namespace detail {
struct ProgressState;

template <typename Range, typename = void> struct has_size : std::false_type {};
template <typename Range>
struct has_size<Range, std::void_t<decltype(std::declval<const Range&>().size())>> : std::true_type {};

/// A range that says where its pass begins (a prepared loader resumed mid-epoch: `DataLoader::pass_start`).
template <typename Range, typename = void> struct has_pass_start : std::false_type {};
template <typename Range>
struct has_pass_start<Range, std::void_t<decltype(std::declval<const Range&>().pass_start())>>
    : std::true_type {};
} // namespace detail

/// A progress bar, as Accelerate's `tqdm(main_process_only=True)` gives: it shows on the local main process
/// only (local rank 0) and prints nothing on the others. It shows the count, the rate, the elapsed and the
/// remaining time, and the last loss given to `accelerator.log` (the value named `loss`, else the first whose
/// name holds `loss`). On a terminal it redraws one line in place (at most ten times a second); when standard
/// output is not a terminal (a pipe, a log file) it prints plain lines: one at every tenth of the total
/// (every ten seconds when the total is not known) and one at the end.
///
/// A resumed run's bar goes on from where it stood: given to `Accelerator::register_counter`, its count is
/// saved by `save_state` and put back by `load_state` (`accel-rewrite --progress-bar` registers the bars it
/// writes over a step count); a bar over a prepared loader (`progress_bar`) starts at the batch the resumed
/// loader starts at.
///
/// ```
/// accelerate::ProgressBar bar(num_steps, "train");
/// accelerator.register_counter("progress", bar);
/// for (int64_t step = 0; step < num_steps; ++step) {
///   ...
///   bar.update();
/// }
/// ```
class ProgressBar {
public:
  /// A bar over `total` steps (0: not known), labelled `description`.
  explicit ProgressBar(int64_t total = 0, std::string description = "");
  ~ProgressBar();
  ProgressBar(ProgressBar&& other) noexcept;
  ProgressBar& operator=(ProgressBar&& other) noexcept;
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// `steps` more steps done.
  void update(int64_t steps = 1);
  /// Puts the bar at `count` steps done, as a resumed run stands (tqdm's `initial`): the elapsed time, the
  /// rate and the remaining time count from there. `load_state` calls it for a registered bar.
  void set_count(int64_t count);
  /// Draws the last state and ends the line; the destructor does it when this was not called.
  void close();
  int64_t count() const;
  /// True on the process that shows it.
  bool shown() const;

private:
  friend class Accelerator; // register_counter holds the state, which outlives the bar
  std::shared_ptr<detail::ProgressState> state_;
};

/// A range that iterates another (a prepared loader, any range with `begin()` and `end()`) and advances a
/// `ProgressBar` over it by one per element; the total is the range's `size()` when it has one. A range with
/// `pass_start()` (a prepared loader) starts the bar there: a loader resumed mid-epoch by `load_state` skips
/// the batches the checkpoint had consumed, and its bar shows them as done.
template <typename Range> class ProgressRange {
public:
  using Inner = decltype(std::declval<Range&>().begin());

  class Iterator {
  public:
    using iterator_category = std::input_iterator_tag;
    using reference = decltype(*std::declval<const Inner&>());
    using value_type = std::remove_cv_t<std::remove_reference_t<reference>>;
    using difference_type = std::ptrdiff_t;
    using pointer = std::add_pointer_t<reference>;

    Iterator(Inner inner, ProgressBar* bar) : inner_(std::move(inner)), bar_(bar) {}
    reference operator*() const { return *inner_; }
    Iterator& operator++() {
      ++inner_;
      bar_->update();
      return *this;
    }
    bool operator==(const Iterator& other) const { return inner_ == other.inner_; }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

  private:
    Inner inner_;
    ProgressBar* bar_;
  };

  ProgressRange(Range& range, std::string description)
      : range_(range), bar_(total_of(range), std::move(description)) {}
  Iterator begin() {
    Iterator first(range_.begin(), &bar_);
    if constexpr (detail::has_pass_start<Range>::value) {
      bar_.set_count(static_cast<int64_t>(range_.pass_start()));
    }
    return first;
  }
  Iterator end() { return Iterator(range_.end(), &bar_); }
  ProgressBar& bar() { return bar_; }

private:
  static int64_t total_of(const Range& range) {
    if constexpr (detail::has_size<Range>::value) {
      return static_cast<int64_t>(range.size());
    } else {
      return 0;
    }
  }
  Range& range_;
  ProgressBar bar_;
};

/// Iterates `range` with a progress bar over it: `for (auto& batch : accelerate::progress_bar(*loader))`.
template <typename Range> ProgressRange<Range> progress_bar(Range& range, std::string description = "") {
  return ProgressRange<Range>(range, std::move(description));
}

namespace detail {
/// True while a progress bar shows on this process (`Accelerator::log` then reads the loss for it).
bool progress_bar_shown();
/// The loss `Accelerator::log` was last given, for the bars: its name and value.
void note_logged_loss(const std::string& name, double value);
} // namespace detail

} // namespace accelerate
