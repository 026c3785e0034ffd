// A c10d Backend that passes every call to an inner backend: the base of the runtime's backend wrappers
// (debug-mode checking, the shared-memory all-reduce), which override only what they change
// (runtime-internal).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace accelerate::detail {

/// The reduce operation as Python names it (for messages).
inline const char* reduce_op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
  case c10d::ReduceOp::SUM:
    return "sum";
  case c10d::ReduceOp::AVG:
    return "avg";
  case c10d::ReduceOp::PRODUCT:
    return "product";
  case c10d::ReduceOp::MIN:
    return "min";
  case c10d::ReduceOp::MAX:
    return "max";
  case c10d::ReduceOp::BAND:
    return "band";
  case c10d::ReduceOp::BOR:
    return "bor";
  case c10d::ReduceOp::BXOR:
    return "bxor";
  case c10d::ReduceOp::PREMUL_SUM:
    return "premul_sum";
  default:
    return "unknown";
  }
}

class ForwardingBackend : public c10d::Backend {
public:
  explicit ForwardingBackend(c10::intrusive_ptr<c10d::Backend> inner)
      : Backend(inner->getRank(), inner->getSize()), inner_(std::move(inner)) {}

  const std::string getBackendName() const override { return inner_->getBackendName(); }
  c10::intrusive_ptr<Options> getBackendOptions() override { return inner_->getBackendOptions(); }
  bool supportsSplitting() const override { return inner_->supportsSplitting(); }
  bool supportsCoalescing() const override { return inner_->supportsCoalescing(); }
  bool supportsTimeEstimation() const override { return inner_->supportsTimeEstimation(); }
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  void startCoalescing() override { inner_->startCoalescing(); }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override { return inner_->endCoalescing(); }
  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }
  void setGroupUid(const std::string& uid) override {
    Backend::setGroupUid(uid);
    inner_->setGroupUid(uid);
  }
  void eagerConnectSingleDevice(at::Device device) override { inner_->eagerConnectSingleDevice(device); }
  c10d::ErrorType getError() override { return inner_->getError(); }
  void abort() override { inner_->abort(); }
  void shutdown() override { inner_->shutdown(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    return inner_->broadcast(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    return inner_->allreduce(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override {
    return inner_->allreduce_sparse(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    return inner_->allreduce_coalesced(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    return inner_->reduce(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    return inner_->allgather(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return inner_->_allgather_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    return inner_->allgather_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work>
  allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::AllgatherOptions& opts) override {
    return inner_->allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    return inner_->gather(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    return inner_->scatter(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    return inner_->reduce_scatter(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    return inner_->_reduce_scatter_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work>
  reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::ReduceScatterOptions& opts) override {
    return inner_->reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    return inner_->alltoall_base(output, input, output_splits, input_splits, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    return inner_->alltoall(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return inner_->barrier(opts);
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    inner_->monitoredBarrier(opts, wait_all_ranks);
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int destination, int tag) override {
    return inner_->send(tensors, destination, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int source, int tag) override {
    return inner_->recv(tensors, source, tag);
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    return inner_->recvAnysource(tensors, tag);
  }

protected:
  c10::intrusive_ptr<c10d::Backend> inner_;
};

} // namespace accelerate::detail
