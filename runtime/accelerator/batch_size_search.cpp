// find_executable_batch_size (include/accelerate/memory.h): attempts at shrinking batch sizes, each under an
// AbandonWatch (transport/abandon.h), with every process's outcome agreed through the job's store.
#include <accelerate/accelerator.h>
#include <accelerate/memory.h>

#include "accelerator/state.h"
#include "settings/config.h"
#include "transport/abandon.h"
#include "transport/device.h"
#include "transport/environment.h"
#include "transport/process_group.h"
#include "transport/store_rendezvous.h"

#include <chrono>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

namespace accelerate {

bool should_reduce_batch_size(const std::exception& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr ||
      dynamic_cast<const std::bad_alloc*>(&error) != nullptr) {
    return true;
  }
  const std::string text = error.what();
  for (const char* statement : {" out of memory.", "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
                                "DefaultCPUAllocator: can't allocate memory"}) {
    if (text.find(statement) != std::string::npos) {
      return true;
    }
  }
  return false;
}

int64_t reduce_batch_size(int64_t batch_size) {
  return static_cast<int64_t>(static_cast<double>(batch_size) * 0.9);
}

namespace detail {
namespace {

/// How an attempt ended on one process (the first character of its outcome key).
enum Outcome : char { kFits = 'f', kOutOfMemory = 'm', kAbandoned = 'a', kFailed = 'e' };

/// The first line of an error's text (c10 errors append a backtrace).
std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

Accelerator* live_accelerator() {
  try {
    return &Accelerator::current();
  } catch (const std::logic_error&) {
    return nullptr;
  }
}

} // namespace

void run_batch_size_search(int64_t starting_batch_size, const std::function<void(int64_t)>& attempt,
                           const std::function<int64_t(int64_t)>& reduce_batch_size_fn) {
  if (starting_batch_size <= 0) {
    throw std::invalid_argument("accelerate::find_executable_batch_size: the starting batch size must be "
                                "positive (got " +
                                std::to_string(starting_batch_size) + ")");
  }
  const auto reduce = reduce_batch_size_fn ? reduce_batch_size_fn : accelerate::reduce_batch_size;
  // The job as the Accelerator made before the call sees it, else as one made now would.
  Accelerator* accelerator = live_accelerator();
  LaunchEnvironment environment;
  std::chrono::milliseconds timeout{};
  if (accelerator != nullptr) {
    environment = internal_state(*accelerator).environment;
    timeout = internal_state(*accelerator).config.timeout;
  } else {
    const auto config = resolve_config(AcceleratorOptions());
    environment = discover_launch_environment();
    if (!config.run_id.empty()) {
      environment.run_id = config.run_id;
    }
    timeout = config.timeout;
  }
  const int rank = environment.rank;
  const int world = environment.world_size;
  // Every process makes its searches in the same order: the n-th ones meet under the same keys.
  static int searches = 0;
  const c10::intrusive_ptr<c10d::Store> store =
      world > 1 ? job_store(environment, timeout,
                            "accelerate/batch_size_search_" + std::to_string(searches++) + "/")
                : nullptr;

  AbandonWatch watch(store);
  int64_t batch_size = starting_batch_size;
  int64_t smallest_tried = 0;
  for (int attempt_number = 0;; ++attempt_number) {
    if (batch_size <= 0) {
      throw std::runtime_error("accelerate::find_executable_batch_size: no executable batch size found, "
                               "reached zero (out of memory at every batch size from " +
                               std::to_string(starting_batch_size) + " down to " +
                               std::to_string(smallest_tried) + ")");
    }
    const std::string prefix = std::to_string(attempt_number) + "/";
    const std::string at = " at batch size " + std::to_string(batch_size);
    Outcome outcome = kFits;
    std::string text;
    std::exception_ptr error;
    {
      watch.begin(prefix + "abandoned");
      try {
        attempt(batch_size);
      } catch (const std::exception& caught) {
        if (should_reduce_batch_size(caught)) {
          outcome = kOutOfMemory;
          text = first_line(caught.what());
          watch.abandon("process " + std::to_string(rank) + " ran out of memory" + at);
        } else if (group_abandoned()) {
          outcome = kAbandoned; // another process left the attempt (its message says why)
          text = first_line(caught.what());
        } else {
          outcome = kFailed;
          error = std::current_exception();
          text = first_line(caught.what());
          watch.abandon("process " + std::to_string(rank) + " failed" + at + ": " + text);
        }
      } catch (...) {
        outcome = kFailed;
        error = std::current_exception();
        text = "an exception not derived from std::exception";
        watch.abandon("process " + std::to_string(rank) + " failed" + at + ": " + text);
      }
      watch.end();
    }
    // Every process's outcome, and process 0's next batch size: `<outcome><next>:<text>`, one store
    // rendezvous.
    int64_t next = reduce(batch_size);
    std::vector<std::string> outcomes{std::string(1, outcome) + std::to_string(next) + ":" + text};
    if (store) {
      outcomes = store_rendezvous<std::runtime_error>(
          *store, {prefix + "outcome/", prefix + "gave_up"}, rank, world, outcomes.front(), timeout,
          [&](const Absentees& absent) {
            std::string list;
            for (int process : absent.missing) {
              list += (list.empty() ? "" : ", ") + std::to_string(process);
            }
            return "accelerate::find_executable_batch_size: process(es) " + list +
                   " did not report the attempt" + at + " within " + std::to_string(timeout.count()) +
                   " ms; see their output for why they stopped";
          },
          [](const std::string& reason) { return reason; });
      next = std::stoll(outcomes.front().substr(1));
    }
    for (auto& reported : outcomes) {
      reported.erase(1, reported.find(':')); // `<outcome><text>`
    }
    // A process that ran out of memory leaves its collectives, so the others may fail with the network's
    // errors (a peer closed the connection) before they learn why: where any process ran out of memory, the
    // attempt is retried. Only a failure with none out of memory ends the search.
    std::string out_of_memory;
    int failed = -1;
    for (size_t index = 0; index < outcomes.size(); ++index) {
      const int process = store ? static_cast<int>(index) : rank;
      if (outcomes[index].front() == kOutOfMemory) {
        out_of_memory += (out_of_memory.empty() ? "" : ", ") + std::to_string(process);
      } else if (outcomes[index].front() == kFailed && failed < 0) {
        failed = static_cast<int>(index);
      }
    }
    if (out_of_memory.empty() && failed >= 0) {
      if (error) {
        std::rethrow_exception(error);
      }
      throw std::runtime_error("accelerate::find_executable_batch_size: process " + std::to_string(failed) +
                               " failed" + at + " (not out of memory: " + outcomes[failed].substr(1) +
                               "), so every process stops");
    }
    if (out_of_memory.empty()) {
      return; // the attempt ran on every process
    }
    smallest_tried = batch_size;
    if (rank == 0) {
      std::fprintf(stderr,
                   "accelerate: find_executable_batch_size: out of memory at batch size %lld (process %s); "
                   "trying %lld\n",
                   static_cast<long long>(batch_size), out_of_memory.c_str(), static_cast<long long>(next));
      std::fflush(stderr);
    }
    // What the failed attempt held goes: the prepared objects and the device cache, and, with several
    // processes, the process group it abandoned.
    if (accelerator != nullptr && live_accelerator() == accelerator) {
      try {
        replace_process_group(*accelerator);
      } catch (const std::exception& failure) {
        throw std::runtime_error(
            "accelerate::find_executable_batch_size: after the attempt at batch size " +
            std::to_string(batch_size) + " ran out of memory, process " + std::to_string(rank) +
            " could not form a new process group (" + first_line(failure.what()) +
            "): too little memory is left outside the training function; free what it holds before the call");
      }
    } else {
      empty_device_cache();
    }
    batch_size = next;
  }
}

} // namespace detail
} // namespace accelerate
