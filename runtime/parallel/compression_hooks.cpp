// Gradient compression hooks, `comm_hook` "fp16" and "bf16" (as PyTorch's fp16_compress_hook and
// bf16_compress_hook, which Accelerate's DDPCommunicationHookType names): each bucket cast to the half-width
// dtype and divided by the number of processes, all-reduced in that dtype (half the bytes of float32), and
// copied back into the bucket.
#include "parallel/comm_hook.h"

namespace accelerate::detail {
namespace {

class CompressionHook final : public CommHook {
public:
  explicit CompressionHook(at::ScalarType dtype) : dtype_(dtype) {}

  c10::intrusive_ptr<c10::ivalue::Future> run(c10d::GradBucket& bucket, CommHookChannel& channel) override {
    at::Tensor buffer = bucket.getBufferRef();
    // A bucket already of this dtype is compressed in place (to() returns it), as in PyTorch.
    at::Tensor compressed = buffer.to(dtype_).div_(channel.world_size());
    auto reduced = channel.allreduce(compressed);
    return reduced->then(
        [buffer](c10::ivalue::Future& done) {
          buffer.copy_(done.value().toTensorVector().front());
          return c10::IValue(buffer);
        },
        c10::TensorType::get());
  }

private:
  at::ScalarType dtype_;
};

} // namespace

std::unique_ptr<CommHook> make_fp16_compress_hook() {
  return std::make_unique<CompressionHook>(at::kHalf);
}
std::unique_ptr<CommHook> make_bf16_compress_hook() {
  return std::make_unique<CompressionHook>(at::kBFloat16);
}

} // namespace accelerate::detail
