// ACCELERATE_DEBUG_MODE: the collective-checking Backend wrapper, the replica checksum, and caller locations.
#include "debug_mode.h"

#include "durable_file.h"
#include "forwarding_backend.h"
#include "optimizer_state.h"
#include "parallel.h"
#include "state.h"
#include "store_rendezvous.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace accelerate::detail {
namespace {

/// What this thread's collectives are for (CollectivePurpose), or null.
thread_local const std::string* current_purpose = nullptr;

// ---- Where the call came from ----------------------------------------------------------------------------

/// Libraries whose frames are not the caller's code: libtorch, this runtime, Gloo/NCCL/CUDA, libc, libstdc++.
bool is_library_frame(const std::string& path) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  static const char* const prefixes[] = {"libtorch", "libc10",     "libaccelerate_runtime",
                                         "libgloo",  "libstdc++",  "libc.so",
                                         "libc-",    "libgcc_s",   "ld-linux",
                                         "libgomp",  "libpthread", "libshm",
                                         "libnccl",  "libcuda",    "libcudart",
                                         "libm.so",  "libdl.so",   "libprotobuf",
                                         "libkineto"};
  return std::any_of(std::begin(prefixes), std::end(prefixes),
                     [&](const char* prefix) { return name.rfind(prefix, 0) == 0; });
}

std::string executable_path() {
  char buffer[4096];
  const ssize_t length = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  return length > 0 ? std::string(buffer, static_cast<size_t>(length)) : std::string();
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return quoted + "'";
}

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

std::string join_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) {
    text += (text.empty() ? "" : ", ") + std::to_string(rank);
  }
  return text;
}

std::string processes(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "process " : "processes ") + join_ranks(ranks);
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
    const std::string mine = fingerprint + "\n" + caller_location();
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
            return "accelerate debug mode: " + processes(absent.missing) + " did not reach collective #" +
                   std::to_string(sequence) + " within " + std::to_string(timeout_.count()) + " ms, while " +
                   processes(absent.present) + " called " + fingerprint + " from " +
                   describe_code_location(mine.substr(mine.find('\n') + 1)) + ". " +
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
      lines += "\n  " + processes(ranks) + ": " + print + ", called from " +
               describe_code_location(locations[static_cast<size_t>(ranks.front())]);
    }
    std::sort(deviants.begin(), deviants.end());
    throw std::runtime_error(
        "accelerate debug mode: processes disagree on collective #" + std::to_string(sequence) +
        ", so nothing was sent:" + lines + "\n" + processes(deviants) + " differ" +
        (deviants.size() == 1 ? "s" : "") + " from " + processes(groups.at(reference)) +
        ". Every process must issue the same collectives, in the same order, with the same "
        "dtypes and shapes: look for a rank-dependent branch or shape at the calls named");
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  uint64_t sequence_ = 0;
};

// ---- The replica checksum --------------------------------------------------------------------------------

struct Checksums {
  std::vector<std::string> labels;
  std::vector<int64_t> hashes;
  void add(const std::string& label, const torch::Tensor& tensor) {
    if (!tensor.defined()) {
      return;
    }
    const auto bytes = tensor.detach().to(torch::kCPU).contiguous();
    labels.push_back(label);
    hashes.push_back(static_cast<int64_t>(
        content_hash(std::string_view(static_cast<const char*>(bytes.data_ptr()),
                                      static_cast<size_t>(bytes.numel()) * bytes.element_size()))));
  }
  void add(const std::string& label, int64_t value) { add(label, torch::tensor(value)); }
};

template <typename ParamState>
bool add_adam_like(const torch::optim::OptimizerParamState& state, const std::string& label, Checksums& out) {
  auto* adam = dynamic_cast<const ParamState*>(&state);
  if (adam == nullptr) {
    return false;
  }
  out.add(label + " step", adam->step());
  out.add(label + " exp_avg", adam->exp_avg());
  out.add(label + " exp_avg_sq", adam->exp_avg_sq());
  out.add(label + " max_exp_avg_sq", adam->max_exp_avg_sq());
  return true;
}

/// The state tensors of one parameter's optimizer state, for the optimizers libtorch ships.
void add_optimizer_state(const torch::optim::OptimizerParamState& state, const std::string& label,
                         Checksums& out) {
  if (add_adam_like<torch::optim::AdamParamState>(state, label, out) ||
      add_adam_like<torch::optim::AdamWParamState>(state, label, out)) {
    return;
  }
  if (auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    out.add(label + " momentum_buffer", sgd->momentum_buffer());
  } else if (auto* adagrad = dynamic_cast<const torch::optim::AdagradParamState*>(&state)) {
    out.add(label + " step", adagrad->step());
    out.add(label + " sum", adagrad->sum());
  } else if (auto* rmsprop = dynamic_cast<const torch::optim::RMSpropParamState*>(&state)) {
    out.add(label + " step", rmsprop->step());
    out.add(label + " square_avg", rmsprop->square_avg());
    out.add(label + " momentum_buffer", rmsprop->momentum_buffer());
    out.add(label + " grad_avg", rmsprop->grad_avg());
  }
  // Other optimizers' state is not compared: their parameters, which it drives, are.
}

Checksums local_checksums(AcceleratorState& state) {
  Checksums sums;
  std::unordered_map<const void*, std::string> names;
  const auto expected = state.engine->replica_expectation();
  for (size_t m = 0; m < state.models.size(); ++m) {
    const std::string prefix = state.models.size() == 1 ? "" : "model " + std::to_string(m) + " ";
    auto& model = state.models[m]->model();
    for (const auto& item : model.named_parameters(true)) {
      names[item.value().unsafeGetTensorImpl()] = prefix + item.key();
      if (expected.parameters) {
        sums.add(prefix + item.key(), item.value());
      }
    }
    // Buffers are not compared: between synchronised backwards they follow each process's own batches
    // (BatchNorm's running statistics), and every synchronised backward replaces them with the main process's
    // (as DDP's broadcast_buffers does at each forward), so a difference here is expected and never lasts.
  }
  for (size_t o = 0; o < state.optimizers.size(); ++o) {
    auto& optimizer = *state.optimizers[o]->optimizer;
    size_t index = 0;
    // Learning rates first: a scheduler or a set_lr that ran on one process shows here before it moves any
    // parameter, and names its group.
    for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
      sums.add("optimizer " + std::to_string(o) + " param group " + std::to_string(g) + " learning rate",
               torch::tensor(optimizer.param_groups()[g].options().get_lr(), torch::kFloat64));
    }
    if (!expected.optimizer_state) {
      // Each process holds a share of the optimizer state (the strategy says so): nothing to compare.
      continue;
    }
    for (auto& group : optimizer.param_groups()) {
      for (auto& param : group.params()) {
        const auto found = optimizer.state().find(param.unsafeGetTensorImpl());
        if (found != optimizer.state().end() && found->second) {
          const auto name = names.find(param.unsafeGetTensorImpl());
          const std::string what = name != names.end() ? name->second : "parameter " + std::to_string(index);
          add_optimizer_state(*found->second, "optimizer " + std::to_string(o) + " state of " + what, sums);
        }
        ++index;
      }
    }
  }
  return sums;
}

std::vector<at::Tensor> all_gather(c10d::ProcessGroup& group, const at::Tensor& mine) {
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int rank = 0; rank < group.getSize(); ++rank) {
    outputs[0].push_back(torch::empty_like(mine));
  }
  std::vector<at::Tensor> inputs{mine};
  group.allgather(outputs, inputs)->wait();
  return outputs[0];
}

int64_t checksum_interval() {
  const char* text = std::getenv("ACCELERATE_DEBUG_CHECKSUM_EVERY");
  if (text == nullptr || *text == '\0') {
    return 100;
  }
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value < 0) {
    throw std::invalid_argument(std::string("accelerate: ACCELERATE_DEBUG_CHECKSUM_EVERY must be a number of "
                                            "optimizer steps >= 0 (0 turns the check off); got '") +
                                text + "'");
  }
  return value;
}

} // namespace

CollectivePurpose::CollectivePurpose(std::string purpose)
    : purpose_(std::move(purpose)), previous_(current_purpose) {
  current_purpose = &purpose_;
}

CollectivePurpose::~CollectivePurpose() {
  current_purpose = previous_;
}

std::string caller_location() {
  void* frames[64];
  const int count = ::backtrace(frames, 64);
  for (int i = 1; i < count; ++i) {
    Dl_info info{};
    if (::dladdr(frames[i], &info) == 0 || info.dli_fname == nullptr || is_library_frame(info.dli_fname)) {
      continue;
    }
    std::string path = info.dli_fname;
    if (path.empty() || ::access(path.c_str(), R_OK) != 0) {
      path = executable_path();
    }
    // A return address points after the call: step back one byte to land in the calling line.
    const auto offset =
        reinterpret_cast<uintptr_t>(frames[i]) - 1 - reinterpret_cast<uintptr_t>(info.dli_fbase);
    std::ostringstream out;
    out << path << "+0x" << std::hex << offset;
    return out.str();
  }
  return "an unknown location";
}

std::string describe_code_location(const std::string& location) {
  const auto plus = location.rfind("+0x");
  if (plus == std::string::npos) {
    return location;
  }
  const std::string path = location.substr(0, plus);
  const std::string command =
      "addr2line -C -f -e " + shell_quote(path) + " " + location.substr(plus + 1) + " 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return location;
  }
  char line[4096];
  std::string function, file;
  if (std::fgets(line, sizeof(line), pipe) != nullptr) {
    function = line;
  }
  if (std::fgets(line, sizeof(line), pipe) != nullptr) {
    file = line;
  }
  ::pclose(pipe);
  auto trim = [](std::string& text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
      text.pop_back();
    }
  };
  trim(function);
  trim(file);
  if (const auto discriminator = file.find(" (discriminator"); discriminator != std::string::npos) {
    file.erase(discriminator);
  }
  const bool known_function = !function.empty() && function != "??";
  const bool known_file = !file.empty() && file.rfind("??", 0) != 0;
  const bool known_line = known_file && file.back() != '?' && file.compare(file.size() - 2, 2, ":0") != 0;
  if (known_line) {
    return file + (known_function ? " (" + function + ")" : "");
  }
  if (known_file && known_function) { // symbols name the source file, but without debug info no line
    return function + " in " + file.substr(0, file.rfind(':'));
  }
  if (known_function) {
    return function + " (" + location + ")";
  }
  return location;
}

c10::intrusive_ptr<c10d::Backend> wrap_backend_for_debug_mode(c10::intrusive_ptr<c10d::Backend> backend,
                                                              c10::intrusive_ptr<c10d::Store> store,
                                                              std::chrono::milliseconds timeout) {
  return c10::make_intrusive<DebugModeBackend>(std::move(backend), std::move(store), timeout);
}

void check_replicas_agree(AcceleratorState& state, const std::string& when) {
  if (!state.process_group) {
    return;
  }
  auto& group = *state.process_group;
  const auto sums = local_checksums(state);
  const auto counts = all_gather(group, torch::tensor({static_cast<int64_t>(sums.hashes.size())}));
  for (int rank = 0; rank < group.getSize(); ++rank) {
    const auto count = counts[static_cast<size_t>(rank)].item<int64_t>();
    if (count != static_cast<int64_t>(sums.hashes.size())) {
      throw std::runtime_error(
          "accelerate debug mode: " + when + ", process " + std::to_string(rank) + " holds " +
          std::to_string(count) + " parameter and optimizer-state tensors and process " +
          std::to_string(group.getRank()) + " holds " + std::to_string(sums.hashes.size()) +
          ": the processes prepared different models or optimizers");
    }
  }
  const auto gathered = all_gather(group, torch::tensor(sums.hashes, torch::kInt64));
  const size_t world = gathered.size();
  std::vector<std::vector<std::string>> differing(
      world); // per rank: the tensors that differ from the reference
  for (size_t i = 0; i < sums.hashes.size(); ++i) {
    std::map<int64_t, size_t> votes;
    for (const auto& hashes : gathered) {
      ++votes[hashes[static_cast<int64_t>(i)].item<int64_t>()];
    }
    int64_t reference = gathered[0][static_cast<int64_t>(i)].item<int64_t>();
    for (const auto& [hash, count] : votes) {
      if (2 * count > world) {
        reference = hash; // a strict majority; otherwise process 0's copy is the reference
      }
    }
    for (size_t rank = 0; rank < world; ++rank) {
      if (gathered[rank][static_cast<int64_t>(i)].item<int64_t>() != reference) {
        differing[rank].push_back(sums.labels[i]);
      }
    }
  }
  const auto first =
      std::find_if(differing.begin(), differing.end(), [](const auto& list) { return !list.empty(); });
  if (first == differing.end()) {
    return;
  }
  const auto rank = static_cast<int>(first - differing.begin());
  std::string tensors;
  for (size_t i = 0; i < first->size() && i < 5; ++i) {
    tensors += (i == 0 ? "" : ", ") + (*first)[i];
  }
  if (first->size() > 5) {
    tensors += " and " + std::to_string(first->size() - 5) + " more";
  }
  std::vector<int> others;
  for (size_t r = static_cast<size_t>(rank) + 1; r < world; ++r) {
    if (!differing[r].empty()) {
      others.push_back(static_cast<int>(r));
    }
  }
  throw std::runtime_error(
      "accelerate debug mode: the processes' replicas diverged (checked " + when + "): process " +
      std::to_string(rank) + " is the first that differs from the others, in " + tensors +
      (others.empty() ? "" : "; " + processes(others) + " differ too") +
      ". Under data parallelism every process holds identical parameters and optimizer state; something "
      "changed process " +
      std::to_string(rank) +
      "'s copy outside accelerator.backward and optimizer.step (a rank-dependent update, a non-deterministic "
      "op, or a gradient computed with a plain loss.backward())");
}

void debug_mode_before_backward(AcceleratorState& state) {
  if (!state.process_group || !state.config.even_batches) {
    return; // with uneven batches a joined process does not call backward: a checksum would not match up
  }
  const auto& gradients = *state.gradient_state;
  if (gradients.backwards_since_step != 0 || state.debug_checked_step == gradients.optimizer_steps) {
    return;
  }
  const int64_t every = checksum_interval();
  if (every == 0 || gradients.optimizer_steps % every != 0) {
    return;
  }
  state.debug_checked_step = gradients.optimizer_steps;
  check_replicas_agree(state, "before the backward of optimizer step " +
                                  std::to_string(gradients.optimizer_steps + 1) +
                                  " (ACCELERATE_DEBUG_CHECKSUM_EVERY=" + std::to_string(every) + ")");
}

} // namespace accelerate::detail
