// Gradient communication hooks of the "ddp" strategy's Reducer path, as Accelerate's
// `DistributedDataParallelKwargs(comm_hook=...)`: the interface a hook implements, the channel it sends
// through, and the registry of hooks by name (option `comm_hook`; runtime-internal).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>

namespace accelerate::detail {

/// What a hook sends through: the job's process group, with the bytes it is handed counted (a test hook of
/// the prepared model, `PreparedModel::gradient_bytes_sent`).
class CommHookChannel {
public:
  explicit CommHookChannel(c10::intrusive_ptr<c10d::ProcessGroup> group) : group_(std::move(group)) {}

  int world_size() const { return group_->getSize(); }
  /// Starts the sum of `tensor` over every process, in place; the future's value is the list of that one
  /// tensor.
  c10::intrusive_ptr<c10::ivalue::Future> allreduce(const at::Tensor& tensor);
  /// The bytes handed to `allreduce` so far (this process's contribution, whatever the transport).
  std::uint64_t bytes_sent() const { return bytes_sent_; }

private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::uint64_t bytes_sent_ = 0;
};

/// One way to average a bucket of gradients over the processes. `run` starts the average of
/// `bucket.getBufferRef()` (a flat buffer of one dtype, the gradients of the bucket's parameters) and returns
/// the future of the averaged buffer: a tensor of the buffer's shape and dtype, or a list holding one (the
/// Reducer copies it into the gradients). A hook divides by the number of processes itself.
class CommHook {
public:
  virtual ~CommHook() = default;
  virtual c10::intrusive_ptr<c10::ivalue::Future> run(c10d::GradBucket& bucket, CommHookChannel& channel) = 0;
};

/// Makes a hook for one prepared model.
using CommHookFactory = std::function<std::unique_ptr<CommHook>()>;

/// The all-reduce the Reducer makes without a hook (divide by the number of processes, then sum): the hook
/// of `comm_hook` "no" when the model's buckets are observed (tests).
std::unique_ptr<CommHook> make_allreduce_comm_hook();

/// The runtime's compression hooks (parallel/compression_hooks.cpp).
std::unique_ptr<CommHook> make_fp16_compress_hook();
std::unique_ptr<CommHook> make_bf16_compress_hook();

/// The names of the registered hooks, sorted ("no" among them).
std::vector<std::string> comm_hook_names();

/// The hook registered as `name`; null for "no" (the Reducer's own all-reduce). Throws
/// std::invalid_argument naming the registered hooks when there is none by that name (the Accelerator asks
/// before it forms the process group).
std::unique_ptr<CommHook> make_comm_hook(const std::string& name);

} // namespace accelerate::detail
