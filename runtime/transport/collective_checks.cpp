// Debug mode's check of every collective across processes, and the caller locations its messages name
// (collective_checks.h).
#include "transport/collective_checks.h"

#include "transport/forwarding_backend.h"
#include "transport/store_rendezvous.h"
#include "watch/stacks.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace accelerate::detail {
namespace {

/// What this thread's collectives are for (CollectivePurpose), or null.
thread_local const std::string* current_purpose = nullptr;

// ---- The collective fingerprint --------------------------------------------------------------------------

std::string describe(const at::Tensor& tensor) {
  if (!tensor.defined()) {
    return "undefined";
  }
  std::ostringstream out;
  out << c10::toString(tensor.scalar_type()) << tensor.sizes() << " " << tensor.device().type();
  return out.str();
}

std::string describe(const std::vector<at::Tensor>& tensors) {
  std::string text;
  for (const auto& tensor : tensors) {
    text += (text.empty() ? "" : ", ") + describe(tensor);
  }
  return "(" + text + ")";
}

std::string describe(const std::vector<std::vector<at::Tensor>>& lists) {
  std::string text;
  for (const auto& list : lists) {
    text += (text.empty() ? "" : ", ") + describe(list);
  }
  return "[" + text + "]";
}

/// A Backend that checks each collective across processes, through the store, before running it.
class DebugModeBackend final : public ForwardingBackend {
public:
  DebugModeBackend(c10::intrusive_ptr<c10d::Backend> inner, c10::intrusive_ptr<c10d::Store> store,
                   std::chrono::milliseconds timeout)
      : ForwardingBackend(std::move(inner)), store_(std::move(store)), timeout_(timeout) {}

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    check("broadcast(root " + std::to_string(opts.rootRank) + ") " + describe(tensors));
    return inner_->broadcast(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    check(std::string("allreduce(") + reduce_op_name(opts.reduceOp.op_) + ") " + describe(tensors));
    return inner_->allreduce(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override {
    check(std::string("allreduce_sparse(") + reduce_op_name(opts.reduceOp.op_) + ") " + describe(tensors));
    return inner_->allreduce_sparse(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    check(std::string("allreduce_coalesced(") + reduce_op_name(opts.reduceOp.op_) + ") " + describe(tensors));
    return inner_->allreduce_coalesced(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    check(std::string("reduce(") + reduce_op_name(opts.reduceOp.op_) + ", root " +
          std::to_string(opts.rootRank) + ") " + describe(tensors));
    return inner_->reduce(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    check("allgather " + describe(inputs) + " -> " + describe(outputs));
    return inner_->allgather(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    check("allgather_into_tensor (" + describe(input) + ") -> (" + describe(output) + ")");
    return inner_->_allgather_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    check("allgather_coalesced " + describe(inputs) + " -> " + describe(outputs));
    return inner_->allgather_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work>
  allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::AllgatherOptions& opts) override {
    check("allgather_into_tensor_coalesced " + describe(inputs) + " -> " + describe(outputs));
    return inner_->allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    // Only the root passes output lists: the fingerprint compares the inputs.
    check("gather(root " + std::to_string(opts.rootRank) + ") " + describe(inputs));
    return inner_->gather(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    check("scatter(root " + std::to_string(opts.rootRank) + ") -> " + describe(outputs));
    return inner_->scatter(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    check(std::string("reduce_scatter(") + reduce_op_name(opts.reduceOp.op_) + ") " + describe(inputs) +
          " -> " + describe(outputs));
    return inner_->reduce_scatter(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    check(std::string("reduce_scatter_tensor(") + reduce_op_name(opts.reduceOp.op_) + ") (" +
          describe(input) + ") -> (" + describe(output) + ")");
    return inner_->_reduce_scatter_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work>
  reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::ReduceScatterOptions& opts) override {
    check(std::string("reduce_scatter_tensor_coalesced(") + reduce_op_name(opts.reduceOp.op_) + ") " +
          describe(inputs) + " -> " + describe(outputs));
    return inner_->reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    // Split sizes legitimately differ between processes; dtypes and devices must not.
    check("alltoall_base " + std::string(c10::toString(input.scalar_type())) + " -> " +
          std::string(c10::toString(output.scalar_type())));
    return inner_->alltoall_base(output, input, output_splits, input_splits, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    check("alltoall of " + std::to_string(inputs.size()) + " tensors");
    return inner_->alltoall(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    check("barrier");
    return inner_->barrier(opts);
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    check("monitored_barrier");
    inner_->monitoredBarrier(opts, wait_all_ranks);
  }
  // Point-to-point operations pass through unchecked (ForwardingBackend).

private:
  /// The store key of process `rank`'s fingerprint of collective `sequence` (-1: the keys' common prefix).
  std::string key(uint64_t sequence, int rank) const {
    return "collective/" + std::to_string(sequence) + "/" + (rank < 0 ? "" : std::to_string(rank));
  }

  /// Publishes this process's fingerprint of collective number `sequence_ + 1` and compares it with every
  /// other process's; throws on every process that sees a difference or a missing process.
  void check(const std::string& operation) {
    const uint64_t sequence = ++sequence_;
    const std::string fingerprint =
        current_purpose == nullptr ? operation : operation + " for the " + *current_purpose;
    const std::string mine = fingerprint + "\n" + watch::caller_location();
    std::vector<std::string> values;
    try {
      if (sequence > 2) {
        // Every process has passed collective sequence - 1, so all have read sequence - 2's fingerprints.
        store_->deleteKey(key(sequence - 2, rank_));
      }
      values = store_rendezvous<std::runtime_error>(
          *store_, {key(sequence, /*rank=*/-1), "abort/" + std::to_string(sequence)}, rank_, size_, mine,
          timeout_,
          [&](const Absentees& absent) {
            return "accelerate debug mode: " + name_processes(absent.missing) +
                   " did not reach collective #" + std::to_string(sequence) + " within " +
                   std::to_string(timeout_.count()) + " ms, while " + name_processes(absent.present) +
                   " called " + fingerprint + " from " +
                   watch::describe_code_location(mine.substr(mine.find('\n') + 1)) + ". " +
                   (absent.missing.size() == 1 ? "It" : "They") +
                   " skipped this collective, is stuck before it, or died: every process must issue "
                   "the same collectives in the same order (look for a rank-dependent branch, e.g. "
                   "under is_main_process(), around the call named)";
          },
          [&](const std::string& reason) {
            return "accelerate debug mode: another process gave up on collective #" +
                   std::to_string(sequence) + " (this process, " + std::to_string(rank_) +
                   ", arrived late with " + fingerprint + "): " + reason;
          });
    } catch (const c10::Error& error) {
      throw std::runtime_error(
          "accelerate debug mode: the store that checks collectives (hosted by process 0) "
          "stopped answering at collective #" +
          std::to_string(sequence) + " (" + fingerprint +
          "); process 0 has probably died. Cause: " + error.what_without_backtrace());
    }

    std::map<std::string, std::vector<int>> groups; // fingerprint -> ranks
    std::vector<std::string> locations(values.size());
    for (size_t rank = 0; rank < values.size(); ++rank) {
      const auto newline = values[rank].find('\n');
      groups[values[rank].substr(0, newline)].push_back(static_cast<int>(rank));
      locations[rank] = values[rank].substr(newline + 1);
    }
    if (groups.size() == 1) {
      return;
    }
    // The reference: the fingerprint a strict majority shares, else process 0's.
    std::string reference = values[0].substr(0, values[0].find('\n'));
    for (const auto& [print, ranks] : groups) {
      if (2 * ranks.size() > values.size()) {
        reference = print;
      }
    }
    std::vector<int> deviants;
    std::string lines;
    for (const auto& [print, ranks] : groups) {
      if (print != reference) {
        deviants.insert(deviants.end(), ranks.begin(), ranks.end());
      }
      lines += "\n  " + name_processes(ranks) + ": " + print + ", called from " +
               watch::describe_code_location(locations[static_cast<size_t>(ranks.front())]);
    }
    std::sort(deviants.begin(), deviants.end());
    throw std::runtime_error(
        "accelerate debug mode: processes disagree on collective #" + std::to_string(sequence) +
        ", so nothing was sent:" + lines + "\n" + name_processes(deviants) + " differ" +
        (deviants.size() == 1 ? "s" : "") + " from " + name_processes(groups.at(reference)) +
        ". Every process must issue the same collectives, in the same order, with the same "
        "dtypes and shapes: look for a rank-dependent branch or shape at the calls named");
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  uint64_t sequence_ = 0;
};

} // namespace

CollectivePurpose::CollectivePurpose(std::string purpose)
    : purpose_(std::move(purpose)), previous_(current_purpose) {
  current_purpose = &purpose_;
}

CollectivePurpose::~CollectivePurpose() {
  current_purpose = previous_;
}

c10::intrusive_ptr<c10d::Backend> wrap_backend_for_debug_mode(c10::intrusive_ptr<c10d::Backend> backend,
                                                              c10::intrusive_ptr<c10d::Store> store,
                                                              std::chrono::milliseconds timeout) {
  return c10::make_intrusive<DebugModeBackend>(std::move(backend), std::move(store), timeout);
}

std::string name_processes(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "process " : "processes ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return text;
}

} // namespace accelerate::detail
