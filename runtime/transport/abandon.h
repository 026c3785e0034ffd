// Abandoning a process group mid-collective: how one process that cannot go on (out of memory inside
// `find_executable_batch_size`, include/accelerate/memory.h) releases the others from the collectives they
// wait in, so that every process leaves the attempt and a new group replaces the old one (runtime-internal).
//
// Gloo cannot interrupt a collective a peer never joins, and a group with such a collective in flight cannot
// be destroyed (its worker thread is joined). So, while an `AbandonWatch` lives, every collective's work is
// issued abandonable (the recording backend wraps it): its wait and its future fail with `GroupAbandoned`
// as soon as any process abandons the group, the shared-memory collectives stop waiting, and the backends of
// works still in flight are kept for the rest of the process (never destroyed, never joined). The signal is
// one key in the job's store, which a thread of each process reads every 50 ms.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace accelerate::detail {

/// Thrown by a collective of an abandoned group: another process (or this one) gave up the attempt.
class GroupAbandoned : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// While alive, this process's collectives can be abandoned, and a thread (none when `store` is null: a job
/// of one process) reads the key of the attempt begun last in `store`: when any process sets it
/// (`abandon`), this process's collectives in flight and every later one fail with `GroupAbandoned`
/// carrying the key's text. One at a time per process. The thread is made once, at construction (an attempt
/// that ran out of memory may leave no room for another).
class AbandonWatch {
public:
  explicit AbandonWatch(c10::intrusive_ptr<c10d::Store> store);
  AbandonWatch(const AbandonWatch&) = delete;
  AbandonWatch& operator=(const AbandonWatch&) = delete;
  ~AbandonWatch();

  /// Starts watching `key` (an attempt begins): clears the abandoned state of the previous attempt.
  void begin(const std::string& key);
  /// Stops watching (the attempt ended): collectives are issued plainly again until the next `begin`.
  void end();
  /// Abandons the group for every process: sets the key to `why` (which names this process) and fails this
  /// process's collectives at once.
  void abandon(const std::string& why);

private:
  void poll();

  c10::intrusive_ptr<c10d::Store> store_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::string key_; // empty between attempts
  bool stop_ = false;
  std::thread thread_;
};

/// Whether the group was abandoned in the attempt being watched (an atomic read: the shared-memory
/// collectives' wait loops call it).
bool group_abandoned();

/// Throws `GroupAbandoned` with the abandoning process's text.
[[noreturn]] void throw_group_abandoned();

/// `work` as a collective issued by `backend` should be returned: unchanged while no watch lives, else
/// wrapped so that its wait and future fail when the group is abandoned (CPU works with a future; others
/// are returned unchanged).
c10::intrusive_ptr<c10d::Work> abandonable(c10::intrusive_ptr<c10d::Work> work,
                                           const c10::intrusive_ptr<c10d::Backend>& backend);

} // namespace accelerate::detail
