// The registry of gradient communication hooks (comm_hook.h): one table line per hook.
#include "parallel/comm_hook.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace accelerate::detail {
namespace {

/// Divide by the number of processes, then sum: what the Reducer does without a hook.
class AllReduceHook final : public CommHook {
public:
  c10::intrusive_ptr<c10::ivalue::Future> run(c10d::GradBucket& bucket, CommHookChannel& channel) override {
    auto& buffer = bucket.getBufferRef();
    buffer.div_(channel.world_size());
    return channel.allreduce(buffer);
  }
};

/// The runtime's hooks, by `comm_hook` name; "no" has no factory (the Reducer's own all-reduce).
const std::map<std::string, CommHookFactory>& registry() {
  static const std::map<std::string, CommHookFactory> hooks = {
      {"no", nullptr},
      {"fp16", make_fp16_compress_hook},
      {"bf16", make_bf16_compress_hook},
  };
  return hooks;
}

} // namespace

c10::intrusive_ptr<c10::ivalue::Future> CommHookChannel::allreduce(const at::Tensor& tensor) {
  bytes_sent_ += static_cast<std::uint64_t>(tensor.numel()) * tensor.element_size();
  std::vector<at::Tensor> tensors{tensor};
  return group_->allreduce(tensors)->getFuture();
}

std::unique_ptr<CommHook> make_allreduce_comm_hook() {
  return std::make_unique<AllReduceHook>();
}

std::vector<std::string> comm_hook_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) {
    names.push_back(name);
  }
  return names;
}

std::unique_ptr<CommHook> make_comm_hook(const std::string& name) {
  const auto& hooks = registry();
  auto found = hooks.find(name);
  if (found == hooks.end()) {
    std::string known;
    for (const auto& registered : comm_hook_names()) {
      known += (known.empty() ? "" : ", ") + ("\"" + registered + "\"");
    }
    throw std::invalid_argument("accelerate: comm_hook='" + name +
                                "' is no gradient communication hook; use " + known +
                                " (docs/runtime.md, \"Gradient communication hooks\")");
  }
  return found->second ? found->second() : nullptr;
}

} // namespace accelerate::detail
