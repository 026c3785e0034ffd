// The Accelerator's collectives with Hugging Face Accelerate's semantics: gather, reduce, pad, broadcast,
// barriers and main-process-first guards, splitting work between processes, and the trigger.
#include <accelerate/accelerator.h>

#include "accelerator/state.h"
#include "transport/process_group.h"

#include <algorithm>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace accelerate {
namespace {

using detail::bookkeeping_device;
using detail::has_backend_for;

/// `tensor`, detached (collectives are not differentiable) and contiguous, on a device the group can run
/// collectives on: its own, else the CPU.
torch::Tensor staged(const c10d::ProcessGroup& group, const torch::Tensor& tensor) {
  if (has_backend_for(group, tensor.device().type())) {
    return tensor.detach().contiguous();
  }
  return tensor.detach().to(torch::kCPU).contiguous();
}

/// One row that describes a tensor for the shape check: [defined, ndim, dtype, sizes..., 0 ...].
constexpr int64_t kMaxDescribedDims = 64;
constexpr int64_t kDescriptionLength = 3 + kMaxDescribedDims;

struct Layout {
  bool defined = false;
  std::vector<int64_t> sizes;
  c10::ScalarType dtype = c10::ScalarType::Undefined;

  bool operator==(const Layout& other) const {
    return defined == other.defined && sizes == other.sizes && dtype == other.dtype;
  }
  std::string str() const {
    if (!defined) {
      return "undefined tensor";
    }
    std::ostringstream text;
    text << "[";
    for (size_t i = 0; i < sizes.size(); ++i) {
      text << (i ? ", " : "") << sizes[i];
    }
    text << "] " << c10::toString(dtype);
    return text.str();
  }
};

torch::Tensor describe(const torch::Tensor& tensor, const torch::Device& device) {
  auto row = torch::zeros({kDescriptionLength}, torch::kInt64);
  auto values = row.accessor<int64_t, 1>();
  if (tensor.defined()) {
    values[0] = 1;
    values[1] = tensor.dim();
    values[2] = static_cast<int64_t>(tensor.scalar_type());
    for (int64_t d = 0; d < std::min<int64_t>(tensor.dim(), kMaxDescribedDims); ++d) {
      values[3 + d] = tensor.size(d);
    }
  }
  return row.to(device);
}

/// Every process's layout of `tensor`, in process order: one small all-gather.
std::vector<Layout> all_layouts(c10d::ProcessGroup& group, const torch::Tensor& tensor,
                                const torch::Device& device) {
  const auto where = bookkeeping_device(group, device);
  std::vector<torch::Tensor> inputs{describe(tensor, where)};
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int rank = 0; rank < group.getSize(); ++rank) {
    outputs[0].push_back(torch::empty_like(inputs[0]));
  }
  group.allgather(outputs, inputs)->wait();
  std::vector<Layout> layouts;
  for (const auto& row : outputs[0]) {
    auto cpu = row.to(torch::kCPU);
    auto values = cpu.accessor<int64_t, 1>();
    Layout layout;
    layout.defined = values[0] != 0;
    if (layout.defined) {
      const int64_t ndim = values[1];
      layout.dtype = static_cast<c10::ScalarType>(values[2]);
      for (int64_t d = 0; d < std::min(ndim, kMaxDescribedDims); ++d) {
        layout.sizes.push_back(values[3 + d]);
      }
    }
    layouts.push_back(std::move(layout));
  }
  return layouts;
}

std::string describe_all(const std::vector<Layout>& layouts) {
  constexpr size_t kShown = 8;
  std::ostringstream text;
  for (size_t rank = 0; rank < layouts.size() && rank < kShown; ++rank) {
    text << (rank ? ", " : "") << "process " << rank << ": " << layouts[rank].str();
  }
  if (layouts.size() > kShown) {
    text << ", …";
  }
  return text.str();
}

/// Throws the same error on every process when the processes' tensors differ in shape or dtype (or one is
/// undefined), instead of a collective that hangs or mixes up bytes.
void require_same_layout(const char* operation, c10d::ProcessGroup& group, const torch::Tensor& tensor,
                         const torch::Device& device, const char* fix) {
  const auto layouts = all_layouts(group, tensor, device);
  const bool same =
      std::all_of(layouts.begin(), layouts.end(), [&](const Layout& l) { return l == layouts[0]; });
  if (same && layouts[0].defined) {
    return;
  }
  throw std::invalid_argument(std::string("accelerate::Accelerator::") + operation +
                              ": the tensors differ across processes (" + describe_all(layouts) + "); " +
                              operation +
                              " needs a defined tensor of the same shape and dtype on every process. " + fix);
}

void require_defined(const char* operation, const torch::Tensor& tensor) {
  if (!tensor.defined()) {
    throw std::invalid_argument(std::string("accelerate::Accelerator::") + operation +
                                ": the tensor is undefined; pass a tensor that holds data");
  }
}

} // namespace

torch::Tensor Accelerator::gather(const torch::Tensor& tensor) {
  auto& group = state_->process_group;
  if (!group) {
    require_defined("gather", tensor);
    return tensor.dim() == 0 ? tensor.reshape({1}) : tensor;
  }
  require_same_layout("gather", *group, tensor, state_->device,
                      "When only the first dimension differs (uneven last batches), call "
                      "pad_across_processes(tensor) first and drop the padding after gathering.");
  auto input = staged(*group, tensor.dim() == 0 ? tensor.reshape({1}) : tensor);
  std::vector<torch::Tensor> inputs{input};
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int rank = 0; rank < num_processes(); ++rank) {
    outputs[0].push_back(torch::empty_like(input));
  }
  group->allgather(outputs, inputs)->wait();
  return torch::cat(outputs[0], 0).to(tensor.device());
}

torch::Tensor Accelerator::gather_for_metrics(const torch::Tensor& tensor) {
  auto gathered = gather(tensor);
  const auto& gradient = *state_->gradient_state;
  if (gradient.end_of_dataloader && gradient.remainder >= 0 && gathered.size(0) > gradient.remainder) {
    // The final global batch was padded with wrapped samples; its real ones come first.
    return gathered.narrow(0, 0, gradient.remainder);
  }
  return gathered;
}

torch::Tensor Accelerator::reduce(const torch::Tensor& tensor, ReduceOp op) {
  require_defined("reduce", tensor);
  auto& group = state_->process_group;
  torch::Tensor result;
  if (!group) {
    result = tensor.clone();
  } else {
    if (state_->config.debug) {
      require_same_layout("reduce", *group, tensor, state_->device,
                          "Reduce tensors of one shape on every process.");
    }
    result = staged(*group, tensor).clone();
    std::vector<torch::Tensor> tensors{result};
    c10d::AllreduceOptions options;
    options.reduceOp = op == ReduceOp::MAX ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    group->allreduce(tensors, options)->wait();
    result = result.to(tensor.device());
  }
  if (op == ReduceOp::MEAN) {
    result = result / num_processes(); // Gloo has no AVG; integer tensors come back as floating point
  }
  return result;
}

torch::Tensor Accelerator::pad_across_processes(const torch::Tensor& tensor, int64_t dim, double pad_index,
                                                bool pad_first) {
  auto& group = state_->process_group;
  if (!group) {
    require_defined("pad_across_processes", tensor);
    return tensor;
  }
  const auto layouts = all_layouts(*group, tensor, state_->device);
  const bool same_rank = std::all_of(layouts.begin(), layouts.end(), [&](const Layout& l) {
    return l.defined && l.sizes.size() == layouts[0].sizes.size();
  });
  if (!same_rank) {
    throw std::invalid_argument(
        "accelerate::Accelerator::pad_across_processes: the tensors differ in their number "
        "of dimensions across processes (" +
        describe_all(layouts) +
        "); every process must pass a defined tensor with the same number of dimensions");
  }
  const auto ndim = static_cast<int64_t>(layouts[0].sizes.size());
  const int64_t axis = dim < 0 ? dim + ndim : dim;
  if (axis < 0 || axis >= ndim) {
    throw std::invalid_argument(
        "accelerate::Accelerator::pad_across_processes: dim = " + std::to_string(dim) +
        " is out of range for " + std::to_string(ndim) + "-d tensors; pass a dim in [" +
        std::to_string(-ndim) + ", " + std::to_string(ndim - 1) + "]");
  }
  int64_t longest = 0;
  for (const auto& layout : layouts) {
    longest = std::max(longest, layout.sizes[static_cast<size_t>(axis)]);
  }
  const int64_t size = tensor.size(axis);
  if (size == longest) {
    return tensor;
  }
  auto shape = tensor.sizes().vec();
  shape[static_cast<size_t>(axis)] = longest;
  auto padded = torch::full(shape, pad_index, tensor.options());
  padded.narrow(axis, pad_first ? longest - size : 0, size).copy_(tensor);
  return padded;
}

torch::Tensor Accelerator::broadcast(const torch::Tensor& tensor, int from_process) {
  if (from_process < 0 || from_process >= num_processes()) {
    throw std::invalid_argument(
        "accelerate::Accelerator::broadcast: from_process = " + std::to_string(from_process) +
        " is not a process of this job (0 to " + std::to_string(num_processes() - 1) + ")");
  }
  auto& group = state_->process_group;
  if (!group) {
    require_defined("broadcast", tensor);
    return tensor.clone();
  }
  require_same_layout("broadcast", *group, tensor, state_->device,
                      "Every process passes a tensor to receive into: allocate it with the sender's shape.");
  auto result = staged(*group, tensor).clone();
  std::vector<torch::Tensor> tensors{result};
  c10d::BroadcastOptions options;
  options.rootRank = from_process;
  group->broadcast(tensors, options)->wait();
  return result.to(tensor.device());
}

void Accelerator::wait_for_everyone() {
  auto& group = state_->process_group;
  if (!group) {
    return;
  }
  c10d::BarrierOptions options;
  if (has_backend_for(*group, c10::DeviceType::CPU)) {
    options.device = torch::Device(torch::kCPU); // a true host barrier
  }
  group->barrier(options)->wait();
}

// ---- Main process first ----------------------------------------------------------------------------------
Accelerator::MainProcessFirstGuard::MainProcessFirstGuard(Accelerator* accelerator, bool local)
    : accelerator_(accelerator), local_(local) {
  const bool first = local_ ? accelerator_->is_local_main_process() : accelerator_->is_main_process();
  if (!first) {
    accelerator_->wait_for_everyone(); // the main process reaches this barrier when its block is done
  }
}

Accelerator::MainProcessFirstGuard::MainProcessFirstGuard(MainProcessFirstGuard&& other) noexcept
    : accelerator_(std::exchange(other.accelerator_, nullptr)), local_(other.local_) {}

Accelerator::MainProcessFirstGuard::~MainProcessFirstGuard() noexcept(false) {
  if (accelerator_ == nullptr) {
    return;
  }
  // As in Accelerate: when the block throws, the main process does not release the others.
  if (std::uncaught_exceptions() > 0) {
    return;
  }
  const bool first = local_ ? accelerator_->is_local_main_process() : accelerator_->is_main_process();
  if (first) {
    accelerator_->wait_for_everyone();
  }
}

Accelerator::MainProcessFirstGuard Accelerator::main_process_first() {
  return MainProcessFirstGuard(this, false);
}

Accelerator::MainProcessFirstGuard Accelerator::local_main_process_first() {
  return MainProcessFirstGuard(this, true);
}

// ---- Splitting work --------------------------------------------------------------------------------------
std::pair<int64_t, int64_t> Accelerator::share_of(int64_t count) const {
  const int64_t processes = num_processes();
  const int64_t rank = process_index();
  const int64_t base = count / processes;
  const int64_t extra = count % processes;
  const int64_t begin = rank * base + std::min(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

torch::Tensor Accelerator::split_between_processes(const torch::Tensor& tensor, bool apply_padding) {
  if (!tensor.defined() || tensor.dim() == 0) {
    throw std::invalid_argument(
        "accelerate::Accelerator::split_between_processes: the tensor must have at least one dimension to "
        "split along (got " +
        std::string(tensor.defined() ? "a 0-d tensor" : "an undefined tensor") + ")");
  }
  const int64_t count = tensor.size(0);
  auto [begin, end] = share_of(count);
  auto share = tensor.slice(0, begin, end);
  const int64_t longest = (count + num_processes() - 1) / num_processes();
  if (apply_padding && count > 0 && share.size(0) < longest) {
    auto last = tensor.narrow(0, count - 1, 1);
    std::vector<int64_t> repeats(static_cast<size_t>(tensor.dim()), 1);
    repeats[0] = longest - share.size(0);
    share = torch::cat({share, last.repeat(repeats)}, 0);
  }
  return share;
}

// ---- Trigger ---------------------------------------------------------------------------------------------
void Accelerator::set_trigger() {
  state_->trigger = true;
}

bool Accelerator::check_trigger() {
  bool raised = state_->trigger;
  auto& group = state_->process_group;
  if (group) {
    auto flag =
        torch::full({1}, raised ? 1 : 0,
                    torch::TensorOptions(torch::kInt32).device(bookkeeping_device(*group, state_->device)));
    std::vector<torch::Tensor> tensors{flag};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    group->allreduce(tensors, options)->wait();
    raised = flag.to(torch::kCPU).item<int32_t>() > 0;
  }
  if (raised) {
    state_->trigger = false;
  }
  return raised;
}

} // namespace accelerate
