// One meeting of every process through the job's store (the TCPStore process 0 hosts): each process
// publishes a value, waits within a timeout for every other's, and reads them all. A process that gives up
// names the processes that did not arrive and leaves its message under an abort key, so that a process that
// arrives later fails with the same explanation instead of waiting for processes that have left. Checkpoint
// calls (runtime/checkpoint/commit.cpp) and debug mode's collective check
// (runtime/transport/collective_checks.cpp) meet through it, each with its own keys and messages
// (runtime-internal).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace accelerate::detail {

/// Where one rendezvous meets.
struct RendezvousKeys {
  /// Each process's value is stored under `<prefix><rank>`.
  std::string prefix;
  /// The message of a process that gave up on this rendezvous.
  std::string abort_key;
};

/// The processes whose values were there when the wait ran out, and those whose were not.
struct Absentees {
  std::vector<int> missing;
  std::vector<int> present;
};

/// How a rendezvous ended: every process's value in rank order, or the message it failed with.
struct RendezvousOutcome {
  std::vector<std::string> values;
  std::string failure;
  bool complete() const { return failure.empty(); }
};

/// Publishes `value` as this process's, then waits up to `timeout` for every process's value.
/// - A process that finds the abort key set (another gave up before it arrived) fails with
///   `late(the message published there)`.
/// - A process whose wait runs out fails with `explain(absentees)`, which it first publishes under the abort
///   key for the latecomers.
/// Store failures (process 0, which hosts the store, died) propagate as c10::Error for the caller to explain;
/// so does a wait that timed out although every value is there.
RendezvousOutcome meet_through_store(c10d::Store& store, const RendezvousKeys& keys, int rank, int world,
                                     const std::string& value, std::chrono::milliseconds timeout,
                                     const std::function<std::string(const Absentees&)>& explain,
                                     const std::function<std::string(const std::string& reason)>& late);

/// `meet_through_store`, throwing `Error(message)` when the rendezvous fails; returns every process's value.
template <typename Error>
std::vector<std::string> store_rendezvous(c10d::Store& store, const RendezvousKeys& keys, int rank, int world,
                                          const std::string& value, std::chrono::milliseconds timeout,
                                          const std::function<std::string(const Absentees&)>& explain,
                                          const std::function<std::string(const std::string& reason)>& late) {
  auto outcome = meet_through_store(store, keys, rank, world, value, timeout, explain, late);
  if (!outcome.complete()) {
    throw Error(outcome.failure);
  }
  return std::move(outcome.values);
}

} // namespace accelerate::detail
