// A c10d Backend that notes each collective a process enters (its op and input bytes) for the process's
// heartbeat (runtime/watch/heartbeat.h), then passes the call on: what a watcher compares across processes
// when one of them stops answering. The work it returns can be abandoned while an AbandonWatch lives
// (transport/abandon.h) (runtime-internal).
#pragma once

#include "transport/abandon.h"
#include "transport/forwarding_backend.h"
#include "watch/heartbeat.h"

namespace accelerate::detail {

class RecordingBackend final : public ForwardingBackend {
public:
  using ForwardingBackend::ForwardingBackend;

  /// The backend this one records for.
  const c10::intrusive_ptr<c10d::Backend>& inner() const { return inner_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    note("broadcast", tensors);
    return abandonable(inner_->broadcast(tensors, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    note("allreduce", tensors);
    return abandonable(inner_->allreduce(tensors, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override {
    note("allreduce_sparse", tensors);
    return abandonable(inner_->allreduce_sparse(tensors, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    note("allreduce_coalesced", tensors);
    return abandonable(inner_->allreduce_coalesced(tensors, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    note("reduce", tensors);
    return abandonable(inner_->reduce(tensors, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    note("allgather", inputs);
    return abandonable(inner_->allgather(outputs, inputs, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    note("allgather", input);
    return abandonable(inner_->_allgather_base(output, input, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    note("allgather_coalesced", inputs);
    return abandonable(inner_->allgather_coalesced(outputs, inputs, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work>
  allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::AllgatherOptions& opts) override {
    note("allgather_coalesced", inputs);
    return abandonable(inner_->allgather_into_tensor_coalesced(outputs, inputs, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    note("gather", inputs);
    return abandonable(inner_->gather(outputs, inputs, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    note("scatter", outputs);
    return abandonable(inner_->scatter(outputs, inputs, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    note("reduce_scatter", outputs);
    return abandonable(inner_->reduce_scatter(outputs, inputs, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    note("reduce_scatter", input);
    return abandonable(inner_->_reduce_scatter_base(output, input, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work>
  reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::ReduceScatterOptions& opts) override {
    note("reduce_scatter_coalesced", inputs);
    return abandonable(inner_->reduce_scatter_tensor_coalesced(outputs, inputs, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    note("alltoall", input);
    return abandonable(inner_->alltoall_base(output, input, output_splits, input_splits, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    note("alltoall", inputs);
    return abandonable(inner_->alltoall(outputs, inputs, opts), inner_);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    watch::note_collective("barrier", 0);
    return abandonable(inner_->barrier(opts), inner_);
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    watch::note_collective("barrier", 0);
    inner_->monitoredBarrier(opts, wait_all_ranks);
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int destination, int tag) override {
    note("send", tensors);
    return abandonable(inner_->send(tensors, destination, tag), inner_);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int source, int tag) override {
    note("recv", tensors);
    return abandonable(inner_->recv(tensors, source, tag), inner_);
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    note("recv", tensors);
    return abandonable(inner_->recvAnysource(tensors, tag), inner_);
  }

private:
  static void note(const char* op, const at::Tensor& tensor) {
    watch::note_collective(op, tensor.defined() ? tensor.nbytes() : 0);
  }
  static void note(const char* op, const std::vector<at::Tensor>& tensors) {
    std::uint64_t bytes = 0;
    for (const auto& tensor : tensors) {
      bytes += tensor.defined() ? tensor.nbytes() : 0;
    }
    watch::note_collective(op, bytes);
  }
};

/// The backend `backend` records for, or `backend` itself when it is no RecordingBackend.
inline c10::intrusive_ptr<c10d::Backend> unrecorded(const c10::intrusive_ptr<c10d::Backend>& backend) {
  if (auto* recording = dynamic_cast<const RecordingBackend*>(backend.get())) {
    return recording->inner();
  }
  return backend;
}

} // namespace accelerate::detail
