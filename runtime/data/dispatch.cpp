// dispatch_batches: the main process reads every process's batches and sends each its own, point to point
// over the process group's CPU backend (Gloo), so a process whose batches ran out is never waited for.
//
// One message per batch, on one tag, in order between the main process and each other process:
//   header  int64[2]  {kind, length}
//   kBatch: int64[length] layout {count, then per tensor: dtype (-1: undefined) and, when defined, dim and
//           sizes}, then the data of each defined, non-empty tensor, contiguous, in order
//   kError: uint8[length] the main process's message
//   kSize:  no body; length is the main process's dataset size (-1: none)
#include "data/dispatch.h"

#include <accelerate/accelerator.h>

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace accelerate::detail {
namespace {

constexpr int kTag = 0x444953; // "DIS"
enum Kind : int64_t { kBatch = 1, kError = 2, kSize = 3 };

class ProcessGroupDispatcher final : public BatchDispatcher {
public:
  ProcessGroupDispatcher(c10::intrusive_ptr<c10d::ProcessGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  std::optional<size_t> dataset_size(std::optional<size_t> own) override {
    if (rank_ == 0) {
      Sends sends;
      for (int r = 1; r < group_->getSize(); ++r) {
        sends.start(*group_, header(kSize, own ? static_cast<int64_t>(*own) : -1), r);
      }
      sends.wait();
      return own;
    }
    const auto [kind, length] = receive_header();
    expect(kind, kSize);
    return length >= 0 ? std::optional<size_t>(static_cast<size_t>(length)) : std::nullopt;
  }

  void send(const std::vector<std::optional<std::vector<at::Tensor>>>& batches) override {
    // Every message is made before any is sent: a batch that cannot travel reaches every waiting process as
    // an error instead of leaving some of them waiting for a batch that never comes.
    struct Message {
      int process;
      std::vector<int64_t> layout;
      std::vector<at::Tensor> payload;
    };
    std::vector<Message> messages;
    for (size_t r = 1; r < batches.size(); ++r) {
      if (batches[r]) {
        messages.push_back({static_cast<int>(r), {static_cast<int64_t>(batches[r]->size())}, {}});
      }
    }
    try {
      for (auto& message : messages) {
        for (const auto& tensor : *batches[static_cast<size_t>(message.process)]) {
          describe(tensor, message.layout, message.payload);
        }
      }
    } catch (const std::exception& error) {
      std::vector<int> waiting;
      for (const auto& message : messages) {
        waiting.push_back(message.process);
      }
      send_error(waiting, error.what());
      throw;
    }
    Sends sends;
    for (auto& message : messages) {
      sends.start(*group_, header(kBatch, static_cast<int64_t>(message.layout.size())), message.process);
      sends.start(*group_, at::tensor(message.layout, at::kLong), message.process);
      for (auto& tensor : message.payload) {
        sends.start(*group_, std::move(tensor), message.process);
      }
    }
    sends.wait();
  }

  void send_error(const std::vector<int>& processes, const std::string& message) override {
    Sends sends;
    for (int process : processes) {
      auto bytes = at::empty({static_cast<int64_t>(message.size())}, at::kByte);
      std::copy(message.begin(), message.end(), bytes.data_ptr<uint8_t>());
      sends.start(*group_, header(kError, bytes.numel()), process);
      if (bytes.numel() > 0) {
        sends.start(*group_, std::move(bytes), process);
      }
    }
    sends.wait();
  }

  std::vector<at::Tensor> receive(bool pin) override {
    const auto [kind, length] = receive_header();
    if (kind == kError) {
      auto bytes = at::empty({length}, at::kByte);
      if (length > 0) {
        receive_into(bytes);
      }
      const auto* data = bytes.data_ptr<uint8_t>();
      throw std::runtime_error("accelerate::DataLoader (dispatch_batches): the main process could not read "
                               "this process's batch: " +
                               std::string(data, data + length));
    }
    expect(kind, kBatch);
    auto layout_tensor = at::empty({length}, at::kLong);
    receive_into(layout_tensor);
    const auto* layout = layout_tensor.data_ptr<int64_t>();
    int64_t at = 0;
    const auto next = [&] {
      if (at >= length) {
        throw std::logic_error("accelerate::DataLoader (dispatch_batches): a batch's layout from the main "
                               "process ended early; the processes run different versions of the program");
      }
      return layout[at++];
    };
    const int64_t count = next();
    std::vector<at::Tensor> tensors;
    tensors.reserve(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t dtype = next();
      if (dtype < 0) {
        tensors.emplace_back();
        continue;
      }
      std::vector<int64_t> sizes(static_cast<size_t>(next()));
      for (auto& size : sizes) {
        size = next();
      }
      auto tensor =
          at::empty(sizes, at::TensorOptions(static_cast<c10::ScalarType>(dtype)).pinned_memory(pin));
      if (tensor.numel() > 0) {
        receive_into(tensor);
      }
      tensors.push_back(std::move(tensor));
    }
    return tensors;
  }

private:
  /// Sends started together and waited for together, their tensors kept alive until then.
  struct Sends {
    void start(c10d::ProcessGroup& group, at::Tensor tensor, int process) {
      tensors.push_back({std::move(tensor)});
      works.push_back(group.send(tensors.back(), process, kTag));
    }
    void wait() {
      for (auto& work : works) {
        work->wait();
      }
    }
    std::deque<std::vector<at::Tensor>> tensors; // stable addresses: c10d keeps references to the vectors
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
  };

  /// Adds `tensor` to a batch's layout, and its data (contiguous, on the CPU) to the payload when non-empty.
  static void describe(const at::Tensor& tensor, std::vector<int64_t>& layout,
                       std::vector<at::Tensor>& payload) {
    if (!tensor.defined()) {
      layout.push_back(-1);
      return;
    }
    if (tensor.layout() != c10::kStrided) {
      throw std::invalid_argument(
          "accelerate::DataLoader (dispatch_batches): a batch holds a " + c10::str(tensor.layout()) +
          " tensor; only dense (strided) tensors are sent to the other processes: make get_batch return "
          "dense tensors (e.g. `.to_dense()`), or leave dispatch_batches off");
    }
    layout.push_back(static_cast<int64_t>(tensor.scalar_type()));
    layout.push_back(tensor.dim());
    layout.insert(layout.end(), tensor.sizes().begin(), tensor.sizes().end());
    if (tensor.numel() > 0) {
      payload.push_back(tensor.to(c10::kCPU).contiguous());
    }
  }

  static at::Tensor header(Kind kind, int64_t length) {
    return at::tensor({int64_t{kind}, length}, at::kLong);
  }

  void receive_into(at::Tensor& tensor) {
    std::vector<at::Tensor> tensors{tensor};
    group_->recv(tensors, 0, kTag)->wait();
  }

  std::pair<int64_t, int64_t> receive_header() {
    auto tensor = at::empty({2}, at::kLong);
    receive_into(tensor);
    return {tensor[0].item<int64_t>(), tensor[1].item<int64_t>()};
  }

  static void expect(int64_t kind, Kind expected) {
    if (kind != expected) {
      throw std::logic_error(
          "accelerate::DataLoader (dispatch_batches): expected message " + std::to_string(int64_t{expected}) +
          " from the main process, got " + std::to_string(kind) +
          "; every process must build and iterate its dispatching loaders in the same order");
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int rank_;
};

} // namespace

std::shared_ptr<BatchDispatcher> make_batch_dispatcher(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                       int rank) {
  return std::make_shared<ProcessGroupDispatcher>(std::move(group), rank);
}

torch::Tensor DispatchFields<torch::Tensor>::rebuild(const std::vector<torch::Tensor>& in, size_t& next) {
  if (next >= in.size()) {
    throw std::logic_error(
        "accelerate::DataLoader (dispatch_batches): the main process sent fewer tensors (" +
        std::to_string(in.size()) +
        ") than this process's batch holds; every process must build the loader over the "
        "same dataset type");
  }
  return in[next++];
}

torch::Tensor dispatch_length(size_t length) {
  return at::scalar_tensor(static_cast<int64_t>(length), at::kLong);
}

size_t dispatched_length(const std::vector<torch::Tensor>& in, size_t& next) {
  const torch::Tensor length = DispatchFields<torch::Tensor>::rebuild(in, next);
  if (!length.defined() || length.dim() != 0 || length.scalar_type() != at::kLong) {
    throw std::logic_error(
        "accelerate::DataLoader (dispatch_batches): expected a vector's length from the main "
        "process; every process must build the loader over the same dataset type");
  }
  return static_cast<size_t>(length.item<int64_t>());
}

void check_dispatched_all(const std::vector<torch::Tensor>& in, size_t next) {
  if (next != in.size()) {
    throw std::logic_error("accelerate::DataLoader (dispatch_batches): the main process sent " +
                           std::to_string(in.size()) + " tensors, this process's batch holds " +
                           std::to_string(next) +
                           "; every process must build the loader over the same dataset type");
  }
}

void throw_undispatchable_batch(const std::string& batch_type) {
  throw std::invalid_argument(
      "accelerate::prepare_data_loader: dispatch_batches(true) sends each process its batch from the main "
      "process as tensors, but this loader's batches are `" +
      batch_type +
      "`, which hold values other than tensors (numbers, strings, maps or a type of your own); return "
      "tensors "
      "from get_batch (an Example<> stacked with transforms::Stack<>, a std::tuple, std::pair, std::array or "
      "std::vector of tensors), or leave dispatch_batches off so that every process reads its own batches");
}

} // namespace accelerate::detail
