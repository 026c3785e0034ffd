// The "fsdp" strategy: fully sharded training (FSDP, ZeRO-3) on c10d. Parameters, gradients and optimizer
// state are all held in 1/N shares; a unit's whole parameters exist only while it computes.
//
// Units. The modules whose type calls `accelerate::fsdp::unit` in its forward (include/accelerate/fsdp.h) are
// the candidates; at prepare, fsdp_auto_wrap_policy chooses the units among them (WrapPolicy below: NO_WRAP
// every candidate, TRANSFORMER_BASED_WRAP the listed classes, SIZE_BASED_WRAP by parameter count); a
// candidate not chosen runs as a plain call. The root is a unit when its type calls unit(), and otherwise
// holds the parameters outside every unit as a *resident* unit, whose whole parameters stay gathered. A unit
// owns the trainable parameters of its submodules that are not units themselves; a parameter shared by
// modules of two units (tied weights) belongs to their nearest common unit. Frozen parameters stay whole on
// every process.
//
// Layout. A unit's parameters of one dtype are moved into one flat buffer `full` (each parameter becomes a
// view of it; runtime/sharding.h's aligned plan), padded to world x share elements. Process r keeps
// elements [r * share, (r + 1) * share) in `shard`, which its optimizer steps (ParallelEngine::share); the
// storage of `full` is released while the unit is sharded, so the parameters keep their identity and shape
// but hold no data, and the tensors autograd saved in forward see the data again when it is gathered back
// into the same storage before the unit's backward.
//
// A step. unit(): all-gather the unit's shards into `full`, run the body, hook its outputs, release `full`
// (FULL_SHARD; SHARD_GRAD_OP keeps it until the unit's backward). Backward: the first output hook of a
// released unit gathers it again; each parameter's incoming gradient is taken before AccumulateGrad (a pre
// hook of its node; AccumulateGrad gets none, so makes no copy of its own) and held; once every parameter of
// the unit has its gradient the unit is released first, and then the held gradients are staged into one
// full-size gradient buffer of the unit, which takes the memory the release gave back: so a unit's backward
// holds two unit-sized buffers at most (its parameters and its gradients), not three. The units' buffers are
// reduce-scattered, in one order on every process (reverse order of the units, the resident unit last), into
// each process's share gradients. Inside an accumulation window (or `no_sync`) the staged gradients are
// summed across micro-steps (a gradient arriving for a unit already staged in the window is added straight
// into its buffer) and reduce-scattered at the window's end: the full gradients are kept meanwhile (the
// memory cost), and the arithmetic is DDP's.
//
// Hybrid sharding (HYBRID_SHARD, HYBRID_SHARD_ZERO2: FULL_SHARD's and SHARD_GRAD_OP's gathers). The shares
// split each unit among the processes of one machine (runtime/process_group.h's MachineGroups: shared memory
// within it), and every machine holds the same shares: gathers stay within the machine, and after each
// reduce-scatter the share's gradient is averaged with the same share on the other machines (one all-reduce
// over the network per unit). The gradient norm is taken over one machine's shares; in a sharded checkpoint
// the first machine's processes write the shares, once.
//
// Prefetch. Each training forward records the order in which units first run. With fsdp_forward_prefetch, a
// unit's gather starts the all-gather of the unit that ran after it in the previous forward; with
// fsdp_backward_prefetch BACKWARD_PRE (BACKWARD_POST), the start (end) of a unit's backward starts the
// all-gather of the unit that ran before it. A started all-gather is waited for where the unit is gathered,
// and settled (waited for, then released) where it is resharded, at the end of every backward and before
// every optimizer step, so none is in flight while shards change. Only where the transport overlaps: c10d's
// Gloo works on its own threads and NCCL on its own stream, but the shared-memory transport gathers with
// copies made by the calling thread, where starting early would only hold memory sooner.
#include <accelerate/fsdp.h>
#include <accelerate/logging.h>

#include "checkpoint/component.h"
#include "debug_mode.h"
#include "optimizer_state.h"
#include "parallel.h"
#include "process_group.h"
#include "sharding.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <typeindex>
#include <unordered_map>
#include <unordered_set>

#include <ATen/autocast_mode.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Type.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

namespace accelerate::fsdp::detail {
namespace {

struct UnitTypes {
  std::mutex mutex;
  std::set<std::type_index> types;
};

UnitTypes& unit_types() {
  static UnitTypes instance;
  return instance;
}

std::atomic<UnitHost*> host{nullptr};

} // namespace

bool register_unit_type(const std::type_info& type) {
  auto& types = unit_types();
  std::lock_guard<std::mutex> lock(types.mutex);
  types.types.insert(std::type_index(type));
  return true;
}

bool is_unit_type(const std::type_info& type) {
  auto& types = unit_types();
  std::lock_guard<std::mutex> lock(types.mutex);
  return types.types.count(std::type_index(type)) != 0;
}

namespace {

/// True while a checkpointed unit's body runs again in backward: the units it calls do not count as a forward
/// (their order, which prefetch follows, is the forward's).
thread_local bool recomputing = false;

} // namespace

/// The state a body ran under in forward that its second run in backward must see again: the random number
/// generators of the devices its tensors are on (dropout draws the same mask) and autocast.
struct ForwardState {
  std::vector<std::pair<at::Generator, torch::Tensor>> generators;
  std::vector<std::tuple<c10::DeviceType, bool, at::ScalarType>> autocast;

  static ForwardState capture(const std::vector<torch::Tensor>& tensors) {
    ForwardState state;
    std::vector<c10::Device> devices{c10::Device(c10::kCPU)};
    for (const auto& tensor : tensors) {
      if (tensor.defined() && std::find(devices.begin(), devices.end(), tensor.device()) == devices.end()) {
        devices.push_back(tensor.device());
      }
    }
    for (const auto& device : devices) {
      if (device.is_cpu() || device.is_cuda()) {
        auto generator = at::globalContext().defaultGenerator(device);
        std::lock_guard<std::mutex> lock(generator.mutex());
        state.generators.emplace_back(generator, generator.get_state());
      }
      if (state.autocast.end() ==
          std::find_if(state.autocast.begin(), state.autocast.end(),
                       [&](const auto& a) { return std::get<0>(a) == device.type(); })) {
        state.autocast.emplace_back(device.type(), at::autocast::is_autocast_enabled(device.type()),
                                    at::autocast::get_autocast_dtype(device.type()));
      }
    }
    return state;
  }

  /// Makes this state current; returns the one it replaced.
  ForwardState restore() const {
    ForwardState previous;
    for (const auto& [generator, saved] : generators) {
      auto current = generator;
      std::lock_guard<std::mutex> lock(current.mutex());
      previous.generators.emplace_back(current, current.get_state());
      current.set_state(saved);
    }
    for (const auto& [type, enabled, dtype] : autocast) {
      previous.autocast.emplace_back(type, at::autocast::is_autocast_enabled(type),
                                     at::autocast::get_autocast_dtype(type));
      at::autocast::set_autocast_enabled(type, enabled);
      at::autocast::set_autocast_dtype(type, dtype);
    }
    return previous;
  }
};

std::shared_ptr<ForwardState> capture_forward_state(const std::vector<torch::Tensor>& inputs) {
  return std::make_shared<ForwardState>(ForwardState::capture(inputs));
}

namespace {

/// The backward of a checkpointed body: runs it again with autograd on detached inputs and differentiates
/// what it computes (a backward inside the backward, as PyTorch's reentrant checkpoint does). Its next edges
/// are the inputs that require a gradient, then the module's trainable parameters (its units' included), and
/// it hands on the gradients of both: so the engine sums the gradients of a unit that ran twice before it
/// accumulates them once, as it does without checkpointing, and the loss reaches every parameter, where the
/// runtime looks for the parameters a backward trains. A placeholder leaf stands in when there are no
/// edges.
class CheckpointBackward final : public torch::autograd::Node {
public:
  /// An input as the unit keeps it (itself, or offloaded, a copy in CPU memory) and where it came from.
  struct Kept {
    torch::Tensor tensor;
    c10::Device device = c10::Device(c10::kCPU);
    bool requires_grad = false;
  };

  CheckpointBackward(const std::vector<torch::Tensor>& inputs, bool offload,
                     std::vector<torch::Tensor> parameters, bool placeholder, Recompute recompute,
                     ForwardState state)
      : parameters_(std::move(parameters)), placeholder_(placeholder), recompute_(std::move(recompute)),
        state_(std::move(state)) {
    kept_.reserve(inputs.size());
    for (const auto& input : inputs) {
      if (!input.defined()) { // an undefined tensor among the inputs: passed on as it is
        kept_.push_back(Kept{});
        continue;
      }
      Kept kept{input.detach(), input.device(), input.requires_grad()};
      if (offload) {
        // Pinned and not waited for from a GPU: the copy runs on the current stream, before anything later
        // on it can reuse the input's memory, and the copy back in backward is ordered after it.
        kept.tensor =
            torch::empty(
                input.sizes(),
                input.options().device(torch::kCPU).requires_grad(false).pinned_memory(input.is_cuda()))
                .copy_(input.detach(), /*non_blocking=*/true);
      }
      kept_.push_back(std::move(kept));
    }
  }

  std::string name() const override { return "accelerate::fsdp::CheckpointBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& gradients) override {
    std::vector<torch::Tensor> detached;
    detached.reserve(kept_.size());
    for (const auto& kept : kept_) {
      if (!kept.tensor.defined()) {
        detached.push_back(kept.tensor);
        continue;
      }
      // Back on its device (a copy when offloaded; the tensor itself otherwise), detached for the second run.
      detached.push_back(
          kept.tensor.to(kept.device, /*non_blocking=*/true).detach().requires_grad_(kept.requires_grad));
    }
    std::vector<torch::Tensor> outputs;
    {
      const ForwardState previous = state_.restore();
      struct Restore {
        const ForwardState& previous;
        bool was_recomputing;
        ~Restore() {
          previous.restore();
          recomputing = was_recomputing;
        }
      } restore{previous, recomputing};
      recomputing = true;
      torch::AutoGradMode grad(true);
      outputs = recompute_(detached);
    }
    std::vector<torch::Tensor> roots, seeds;
    for (size_t i = 0; i < outputs.size() && i < gradients.size(); ++i) {
      if (outputs[i].defined() && outputs[i].requires_grad() && gradients[i].defined()) {
        roots.push_back(outputs[i]);
        seeds.push_back(gradients[i]);
      }
    }
    torch::autograd::variable_list wanted;
    for (size_t i = 0; i < kept_.size(); ++i) {
      if (kept_[i].requires_grad) {
        wanted.push_back(detached[i]);
      }
    }
    wanted.insert(wanted.end(), parameters_.begin(), parameters_.end());
    torch::autograd::variable_list result(wanted.size());
    if (!roots.empty() && !wanted.empty()) {
      result = torch::autograd::grad(roots, wanted, seeds, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
    }
    if (placeholder_) {
      result.emplace_back();
    }
    kept_.clear(); // what the unit kept is freed with its backward
    parameters_.clear();
    recompute_ = nullptr;
    return result;
  }

private:
  std::vector<Kept> kept_;
  std::vector<torch::Tensor> parameters_;
  bool placeholder_;
  Recompute recompute_;
  ForwardState state_;
};

} // namespace

std::vector<torch::Tensor> checkpoint(const std::shared_ptr<ForwardState>& state, torch::nn::Module& module,
                                      const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& outputs, Recompute recompute) {
  torch::autograd::variable_list edges;
  for (const auto& input : inputs) {
    if (input.defined() && input.requires_grad()) {
      edges.push_back(input);
    }
  }
  std::vector<torch::Tensor> parameters;
  for (const auto& parameter : module.parameters()) {
    if (parameter.requires_grad()) {
      parameters.push_back(parameter);
      edges.push_back(parameter);
    }
  }
  const bool placeholder = edges.empty();
  if (placeholder) {
    edges.push_back(torch::empty({0}, torch::TensorOptions().requires_grad(true)));
  }
  const auto* host = active_host();
  auto node = std::shared_ptr<CheckpointBackward>(
      new CheckpointBackward(inputs, host != nullptr && host->offloads_inputs(), std::move(parameters),
                             placeholder, std::move(recompute), *state),
      torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(edges));
  std::vector<torch::Tensor> attached;
  attached.reserve(outputs.size());
  for (const auto& output : outputs) {
    if (!output.defined() || !(output.is_floating_point() || output.is_complex())) {
      attached.push_back(output); // no gradient flows through it
      continue;
    }
    auto out = output.detach();
    torch::autograd::create_gradient_edge(out, node);
    attached.push_back(std::move(out));
  }
  return attached;
}

UnitHost* active_host() {
  return host.load(std::memory_order_acquire);
}

} // namespace accelerate::fsdp::detail

namespace accelerate::detail {
namespace {

std::string type_name(const std::type_info& type) {
  return c10::demangle(type.name());
}

/// CPU memory released by units, kept for the next gather or staging buffer of the same size. A large block
/// given back to glibc is unmapped, and the next one is a fresh mapping whose every page faults on first
/// touch: per step that was four times the parameters in page faults (docs/benchmarks.md). As many blocks of
/// a size are kept as are in flight at once: under FULL_SHARD one (a unit's gathered parameters, whose memory
/// its staging buffer takes over once they are released), so memory between steps grows by one unit; under
/// SHARD_GRAD_OP every unit (forward gathers them all and keeps them until backward), so between steps it
/// holds the memory its next forward takes again, and its training peak does not change; one more with
/// prefetch (the next unit's gather starts while one is gathered). CUDA memory goes back to its caching
/// allocator, which already reuses blocks.
class SparePool {
public:
  /// How many blocks of each size to keep (1 unless set).
  void keep(size_t blocks) { keep_ = blocks; }
  /// A block of `bytes` for `device`: a kept one, or a fresh one from `allocator`.
  at::DataPtr take(size_t bytes, const c10::Device& device, c10::Allocator* allocator) {
    if (device.is_cpu()) {
      for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
        if (it->first == bytes) {
          auto block = std::move(it->second);
          blocks_.erase(it);
          return block;
        }
      }
    }
    return allocator->allocate(bytes);
  }
  /// Keeps `block` (of `bytes`) if there is room, else frees it.
  void give(at::DataPtr block, size_t bytes) {
    if (!block || block.device().type() != c10::DeviceType::CPU) {
      return;
    }
    const auto same =
        std::count_if(blocks_.begin(), blocks_.end(), [&](const auto& kept) { return kept.first == bytes; });
    if (static_cast<size_t>(same) < keep_) {
      blocks_.emplace_back(bytes, std::move(block));
    }
  }

private:
  std::vector<std::pair<size_t, at::DataPtr>> blocks_;
  size_t keep_ = 1;
};

/// Gives `tensor`'s storage `bytes` bytes (contents undefined) unless it has them.
void allocate_storage(const torch::Tensor& tensor, size_t bytes, SparePool& pool) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->nbytes() >= bytes) {
    return;
  }
  storage->set_data_ptr_noswap(pool.take(bytes, tensor.device(), storage->allocator()));
  storage->set_nbytes(bytes);
}

/// Releases `tensor`'s storage into `pool`: every view of it keeps its shape and holds no data.
void release_storage(const torch::Tensor& tensor, SparePool& pool) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  const size_t bytes = storage->nbytes();
  if (bytes == 0) {
    return;
  }
  pool.give(storage->set_data_ptr(at::DataPtr(nullptr, tensor.device())), bytes);
  storage->set_nbytes(0);
}

/// A 1-D tensor of `numel` elements of `options`, on memory from `pool` (contents undefined; a fresh block
/// comes from `allocator`).
torch::Tensor empty_from(SparePool& pool, int64_t numel, const torch::TensorOptions& options,
                         c10::Allocator* allocator) {
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, pool.take(bytes, options.device(), allocator),
                       allocator, /*resizable=*/true);
  return torch::empty({0}, options).set_(storage, 0, {numel}, {1});
}

/// A 1-D tensor like `like`, of its numel, on memory from `pool` (contents undefined).
torch::Tensor empty_from(SparePool& pool, const torch::Tensor& like) {
  return empty_from(pool, like.numel(), like.options(), like.storage().unsafeGetStorageImpl()->allocator());
}

/// A zero-filled 1-D tensor like `like`, of its numel, on memory from `pool`.
torch::Tensor zeros_from(SparePool& pool, const torch::Tensor& like) {
  return empty_from(pool, like).zero_();
}

/// Gives the memory of `tensor` (made by zeros_from) back to `pool`.
void give_back(SparePool& pool, torch::Tensor& tensor) {
  if (!tensor.defined()) {
    return;
  }
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  if (tensor.use_count() == 1 && tensor.storage().use_count() == 1) {
    const size_t bytes = storage->nbytes();
    pool.give(storage->set_data_ptr(at::DataPtr(nullptr, tensor.device())), bytes);
    storage->set_nbytes(0);
  }
  tensor.reset();
}

struct Sharded;

/// A unit's parameters of one dtype and device.
struct Group {
  torch::Tensor full;        // world * share elements; its storage is released while the unit is sharded
  torch::Tensor shard;       // this process's share elements: what its optimizer steps
  torch::Tensor placeholder; // what the parameters are while the unit is sharded: no elements
  size_t full_bytes = 0;
  int64_t share = 0;
  std::vector<size_t> members;
  // The unit's gradients, full size, from their arrival until the end of the window's reduce-scatter.
  torch::Tensor staging;
  // This process's slice of the averaged gradient, kept between steps (the shares' gradients are views).
  torch::Tensor share_gradient;
  // A started all-gather into `full` (prefetch), until it is waited for.
  c10::intrusive_ptr<c10d::Work> pending;
  // With offload, the copy of `shard` on the device that a started all-gather reads, until it is waited for.
  torch::Tensor pending_share;
};

struct Member {
  torch::Tensor parameter;
  std::vector<int64_t> sizes; // its shape while gathered
  size_t unit = 0;
  size_t group = 0;
  FlatPlan::Member place;
  torch::Tensor values;   // the share: a 1-D view of `shard`
  torch::Tensor gradient; // the share's gradient, a view of `share_gradient`
  torch::Tensor held;     // its whole gradient as backward produced it, until its unit's backward is done
  // Its AccumulateGrad node, made while the parameter had its whole shape (autograd records a leaf's shape
  // when the node is made and checks every gradient against it) and kept here: autograd holds it weakly.
  std::shared_ptr<torch::autograd::Node> accumulator;
  bool arrived = false; // its gradient came in the armed backward
  bool staged = false;  // `staging` holds gradients of it from this window
};

struct Unit {
  Sharded* owner = nullptr;
  size_t index = 0;
  torch::nn::Module* module = nullptr;
  std::string name;      // its path in the model ("" for the root)
  bool resident = false; // the root's parameters outside every unit: always gathered
  std::vector<Group> groups;
  size_t trainable = 0;
  bool gathered = false;
  bool prefetched = false; // its all-gather was started ahead and not waited for yet
  int depth = 0;           // bodies of this unit running now
  size_t waiting = 0;      // parameters whose gradient has not come in the armed backward
  bool complete = false;
};

/// One prepared model's units.
struct Sharded {
  std::vector<Unit> units;
  std::vector<Member> members;
  std::vector<size_t> order; // of the reduce-scatters: reverse unit order, the resident unit last
  c10::intrusive_ptr<c10d::ProcessGroup> process_group; // the processes the shares split the units among
  // Hybrid sharding: the processes on other machines that hold the same shares (null: none), with which the
  // shares' gradients are averaged after each reduce-scatter.
  c10::intrusive_ptr<c10d::ProcessGroup> replicas;
  int rank = 0;
  int world = 1;
  bool reshard_after_forward = true;
  std::weak_ptr<Sharded> self;
  SparePool pool;
  // Prefetch (see the file comment): what is asked, whether the transport overlaps, the units in the order of
  // their first call in the last training forward (`position`: a unit's place in it, or -1), the order being
  // recorded, and how many all-gathers were started ahead.
  bool forward_prefetch = false;
  std::string backward_prefetch = "NO_PREFETCH";
  bool debug = false; // debug mode: each collective says which unit it is for
  // fsdp_offload_params on a GPU: `shard` and `share_gradient` live in CPU memory (pinned), where the
  // optimizer steps them; a gather copies the share to the device first (`share_on_device`), and the
  // reduce-scatter's result is copied back (FsdpModel::reduce).
  bool offload = false;
  bool asynchronous = false;
  std::vector<size_t> forward_order;
  std::vector<int64_t> position;
  std::vector<size_t> recording;
  int64_t prefetches = 0;

  /// A group's share on the device its unit computes on, for an all-gather to read: `shard` itself, or with
  /// offload a copy of it on memory from the pool, made on the device's current stream without waiting
  /// (from pinned memory), so the all-gather that reads it is ordered after it.
  torch::Tensor share_on_device(const Group& group) {
    if (!offload) {
      return group.shard;
    }
    return share_sized(group).copy_(group.shard, /*non_blocking=*/true);
  }

  /// A buffer of one share's elements of `group` on its unit's device, on memory from the pool (contents
  /// undefined).
  torch::Tensor share_sized(const Group& group) {
    return empty_from(pool, group.share, group.full.options(),
                      group.full.storage().unsafeGetStorageImpl()->allocator());
  }

  /// All-gathers every process's share of `group` into its `full` (which has its memory).
  void gather_shares(Group& group) {
    auto share = share_on_device(group);
    all_gather_into(process_group, group.full, share);
    if (offload) {
      give_back(pool, share);
    }
  }

  /// Waits until the copies to and from CPU memory issued so far are done, before the CPU writes what they
  /// read or reads what they write (an optimizer step, a checkpoint): with offload on a GPU, the copies of
  /// the shares to the device are not waited for where they are made.
  void settle_host_copies() const {
    if (!offload) {
      return;
    }
    for (const auto& unit : units) {
      if (!unit.groups.empty()) {
        const auto device = unit.groups.front().full.device();
        if (!device.is_cpu()) {
          c10::impl::VirtualGuardImpl guard(device.type());
          guard.getStream(device).synchronize();
        }
        return;
      }
    }
  }

  /// Starts the all-gather of unit `u` ahead of its use, where the transport overlaps it.
  void prefetch(int64_t u) {
    if (!asynchronous || u < 0 || static_cast<size_t>(u) >= units.size()) {
      return;
    }
    auto& unit = units[static_cast<size_t>(u)];
    if (unit.gathered || unit.prefetched || unit.resident) {
      return;
    }
    torch::NoGradGuard no_grad;
    const auto purpose = say(unit, "all-gather (prefetch)");
    for (auto& group : unit.groups) {
      allocate_storage(group.full, group.full_bytes, pool);
      group.pending_share = share_on_device(group);
      group.pending = start_all_gather_into(process_group, group.full, group.pending_share);
    }
    unit.prefetched = true;
    ++prefetches;
  }

  /// The unit that ran `step` places after unit `u` in the last training forward (-1 for none).
  int64_t neighbour(size_t u, int64_t step) const {
    if (u >= position.size() || position[u] < 0) {
      return -1;
    }
    const int64_t at = position[u] + step;
    return at >= 0 && at < static_cast<int64_t>(forward_order.size())
               ? static_cast<int64_t>(forward_order[at])
               : -1;
  }

  /// Backward prefetch: starts the all-gather of the unit that ran before unit `u` (its backward comes next),
  /// unless that unit's backward already ran.
  void prefetch_previous(size_t u) {
    const int64_t previous = neighbour(u, -1);
    if (previous >= 0 && !units[static_cast<size_t>(previous)].complete) {
      prefetch(previous);
    }
  }

  /// Notes unit `u`'s first call in a training forward.
  void record(size_t u) {
    if (std::find(recording.begin(), recording.end(), u) == recording.end()) {
      recording.push_back(u);
    }
  }

  /// Ends a training forward's recording: its order is what the next forward and this backward prefetch by.
  void adopt_recorded_order() {
    if (recording.empty()) {
      return;
    }
    forward_order = std::move(recording);
    recording.clear();
    position.assign(units.size(), -1);
    for (size_t i = 0; i < forward_order.size(); ++i) {
      position[forward_order[i]] = static_cast<int64_t>(i);
    }
  }

  /// Waits for every started all-gather and releases what it gathered (the end of a backward, an optimizer
  /// step: nothing may be in flight while the shards change).
  void settle() {
    for (auto& unit : units) {
      if (unit.prefetched) {
        reshard(unit);
      }
    }
  }

  /// In debug mode, names unit `unit` and `what` in the fingerprints of the collectives issued meanwhile.
  std::optional<CollectivePurpose> say(const Unit& unit, const char* what) const {
    if (!debug) {
      return std::nullopt;
    }
    return std::optional<CollectivePurpose>(std::in_place, std::string(what) + " of fsdp unit '" +
                                                               (unit.name.empty() ? "(root)" : unit.name) +
                                                               "'");
  }

  void gather(Unit& unit) {
    if (unit.gathered) {
      return;
    }
    torch::NoGradGuard no_grad;
    const auto purpose = say(unit, "all-gather");
    for (auto& group : unit.groups) {
      if (unit.prefetched) {
        group.pending->wait();
        group.pending.reset();
        give_back(pool, group.pending_share);
      } else {
        allocate_storage(group.full, group.full_bytes, pool);
        gather_shares(group);
      }
      for (size_t m : group.members) {
        auto& member = members[m];
        member.parameter.set_data(
            group.full.narrow(0, member.place.offset, member.place.numel).view(member.sizes));
      }
    }
    unit.prefetched = false;
    unit.gathered = true;
  }

  /// Releases a unit's whole parameters: its parameters hold no elements (shape [0], as FSDP's sharded
  /// parameters), so code that touches one outside the unit's forward fails on its shape instead of reading
  /// released memory; the tensors autograd saved in forward keep the storage, whose data comes back with
  /// the next gather.
  void reshard(Unit& unit) {
    if (unit.resident || !(unit.gathered || unit.prefetched)) {
      return;
    }
    for (auto& group : unit.groups) {
      if (group.pending) {
        group.pending->wait(); // the collective writes into `full` until then
        group.pending.reset();
        give_back(pool, group.pending_share);
      }
      release_storage(group.full, pool);
      for (size_t m : group.members) {
        members[m].parameter.set_data(group.placeholder);
      }
    }
    unit.gathered = false;
    unit.prefetched = false;
  }

  /// Re-gathers a gathered unit after its shards changed (an optimizer step).
  void refresh(Unit& unit) {
    torch::NoGradGuard no_grad;
    const auto purpose = say(unit, "all-gather after the optimizer step");
    for (auto& group : unit.groups) {
      gather_shares(group);
    }
  }

  /// Copies this process's slice of the gathered parameters into its shards (after they were changed whole).
  void write_back(Unit& unit) {
    torch::NoGradGuard no_grad;
    for (auto& group : unit.groups) {
      group.shard.copy_(group.full.narrow(0, rank * group.share, group.share));
    }
  }
};

/// The pre-backward side of a unit: the first of its outputs whose gradient is computed gathers it again.
/// With BACKWARD_PRE, it also starts the all-gather of the unit whose backward comes next.
void before_unit_backward(const std::weak_ptr<Sharded>& weak, size_t index) {
  if (auto sharded = weak.lock()) {
    auto& unit = sharded->units[index];
    const bool first = !unit.gathered;
    sharded->gather(unit);
    if (first && sharded->backward_prefetch == "BACKWARD_PRE") {
      sharded->prefetch_previous(index);
    }
  }
}

/// A prepared model under "fsdp": the gradients' side of a step (see the file comment).
class FsdpModel final : public PreparedModel {
public:
  FsdpModel(torch::nn::Module& model, std::shared_ptr<Sharded> sharded,
            std::shared_ptr<const std::set<c10::TensorImpl*>> stepped, const ParallelContext& context)
      : PreparedModel(model, context.process_group, context.tracker), sharded_(std::move(sharded)),
        stepped_(std::move(stepped)) {
    for (size_t i = 0; i < sharded_->members.size(); ++i) {
      auto accumulator = sharded_->members[i].accumulator;
      auto taker = std::make_unique<TakeGradient>(
          [this, i](const torch::autograd::variable_list& gradients) { return take_gradient(i, gradients); });
      const auto* pre = taker.get();
      accumulator->add_pre_hook(std::move(taker));
      const auto key = accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            auto& gradient = sharded_->members[i].parameter.mutable_grad();
            if (gradient.defined() && gradient_arrived(i, gradient)) {
              gradient.reset();
            }
            return outputs;
          }));
      hooks_.push_back({std::move(accumulator), pre, key});
    }
  }

  ~FsdpModel() override {
    for (auto& hook : hooks_) {
      auto& pre_hooks = hook.accumulator->pre_hooks();
      pre_hooks.erase(std::remove_if(pre_hooks.begin(), pre_hooks.end(),
                                     [&](const auto& pre) { return pre.get() == hook.pre; }),
                      pre_hooks.end());
      hook.accumulator->del_post_hook(hook.post);
    }
  }

  const std::shared_ptr<Sharded>& sharded() const { return sharded_; }

  std::string synchronisation() const override { return "reduce_scatter"; }
  bool synchronises_every_backward() const override { return true; }

  void arm(const torch::Tensor&) override {
    if (!checked_) {
      refuse_parameters_no_optimizer_steps(*this, "FSDP", *stepped_);
      checked_ = true;
    }
    broadcast_buffers();
    sharded_->adopt_recorded_order();
    for (auto& unit : sharded_->units) {
      unit.waiting = unit.trainable;
      unit.complete = unit.trainable == 0;
    }
    for (auto& member : sharded_->members) {
      member.arrived = false;
    }
    next_ = 0;
    reduce_ = synchronising;
    armed_ = true;
  }

  void finish_backward() override {
    if (!armed_) {
      return;
    }
    armed_ = false;
    // Units whose backward did not run (or not for every parameter): a parameter whose gradient did not
    // come takes part with zeros, as under DDP.
    for (auto& unit : sharded_->units) {
      unit.complete = true;
      sharded_->reshard(unit); // prefetched units included
      stage_held(unit);
    }
    if (reduce_) {
      while (next_ < sharded_->order.size()) {
        reduce(sharded_->order[next_++]);
      }
    }
  }

  void disarm() override {
    armed_ = false;
    for (auto& unit : sharded_->units) {
      for (auto& group : unit.groups) {
        give_back(sharded_->pool, group.staging);
      }
      sharded_->reshard(unit);
    }
    for (auto& member : sharded_->members) {
      member.staged = false;
      member.held.reset();
    }
  }

  void shadow_armed_backward() override {
    throw std::logic_error("accelerate: parallel_strategy 'fsdp' does not take part in Join (uneven inputs): "
                           "every process computes its share at every step; keep even_batches(true)");
  }

  size_t bucket_count() const override { return sharded_->units.size(); }
  void observe_bucket_launches(std::function<void(size_t)> observer) override {
    observer_ = std::move(observer);
  }

private:
  /// A pre hook of a parameter's AccumulateGrad node.
  struct TakeGradient final : torch::autograd::FunctionPreHook {
    explicit TakeGradient(
        std::function<torch::autograd::variable_list(const torch::autograd::variable_list&)> take)
        : take_(std::move(take)) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& gradients) override {
      return take_(gradients);
    }
    std::function<torch::autograd::variable_list(const torch::autograd::variable_list&)> take_;
  };
  struct Hooks {
    std::shared_ptr<torch::autograd::Node> accumulator;
    const torch::autograd::FunctionPreHook* pre = nullptr;
    uintptr_t post = 0;
  };

  /// Before AccumulateGrad: the incoming gradient of parameter `index` is taken as it is and AccumulateGrad
  /// gets none, so it neither clones it into `.grad()`'s layout (a transposed Linear weight gradient would
  /// be: one more unit-sized buffer, written once more) nor keeps it. Where `.grad()` already holds a
  /// gradient (made outside accelerator.backward), or the gradient is not a dense tensor, AccumulateGrad
  /// runs as usual and its post hook takes `.grad()` instead.
  torch::autograd::variable_list take_gradient(size_t index,
                                               const torch::autograd::variable_list& gradients) {
    const auto& member = sharded_->members[index];
    if (gradients.size() != 1 || !gradients[0].defined() || gradients[0].layout() != torch::kStrided ||
        member.parameter.grad().defined() || !gradient_arrived(index, gradients[0])) {
      return gradients;
    }
    return {torch::Tensor()};
  }

  /// Takes `gradient`, the whole gradient of parameter `index` from the armed backward (false: not armed,
  /// or the parameter's gradient came already: the caller leaves it where it is, and the optimizer step
  /// refuses a gradient made outside accelerator.backward).
  bool gradient_arrived(size_t index, const torch::Tensor& gradient) {
    auto& member = sharded_->members[index];
    if (!armed_ || member.arrived) {
      return false;
    }
    torch::NoGradGuard no_grad;
    auto& unit = sharded_->units[member.unit];
    auto& group = unit.groups[member.group];
    if (group.staging.defined()) {
      stage(member, group, gradient); // the window staged this unit already
    } else {
      member.held = gradient; // staged once the unit is released, into the memory it gives back
    }
    member.arrived = true;
    if (--unit.waiting == 0) {
      unit.complete = true;
      sharded_->reshard(unit);
      stage_held(unit);
      if (sharded_->backward_prefetch == "BACKWARD_POST") {
        sharded_->prefetch_previous(member.unit);
      }
      while (reduce_ && next_ < sharded_->order.size() && sharded_->units[sharded_->order[next_]].complete) {
        reduce(sharded_->order[next_++]);
      }
    }
    return true;
  }

  /// Adds (copies, the first time in the window) `gradient` into `member`'s place in `group`'s staging
  /// buffer.
  static void stage(Member& member, Group& group, const torch::Tensor& gradient) {
    // In the parameter's shape: the gradient may be strided differently (a Linear weight's comes transposed),
    // and reshaping it flat would copy it first.
    auto slot = group.staging.narrow(0, member.place.offset, member.place.numel).view(gradient.sizes());
    if (member.staged) {
      slot.add_(gradient);
    } else {
      slot.copy_(gradient);
      member.staged = true;
    }
  }

  /// Stages the gradients held for `unit` (after its release, so a new staging buffer takes the memory of
  /// the gathered parameters). A new buffer is written once: the held gradients are copied into it and only
  /// the rest (parameters without one, alignment gaps, padding) is zero-filled.
  void stage_held(Unit& unit) {
    torch::NoGradGuard no_grad;
    for (auto& group : unit.groups) {
      const bool any = std::any_of(group.members.begin(), group.members.end(),
                                   [&](size_t m) { return sharded_->members[m].held.defined(); });
      if (!any) {
        continue;
      }
      if (!group.staging.defined()) {
        group.staging = empty_from(sharded_->pool, group.full);
        int64_t written = 0; // the buffer is filled up to here; members lie in increasing offsets
        for (size_t m : group.members) {
          const auto& place = sharded_->members[m].place;
          if (sharded_->members[m].held.defined()) {
            group.staging.narrow(0, written, place.offset - written).zero_();
            written = place.offset + place.numel;
          }
        }
        group.staging.narrow(0, written, group.staging.numel() - written).zero_();
      }
      for (size_t m : group.members) {
        auto& member = sharded_->members[m];
        if (member.held.defined()) {
          stage(member, group, member.held);
          member.held.reset();
        }
      }
    }
  }

  /// Reduce-scatters unit `u`'s staged gradients (zeros for parameters whose gradient did not come) and adds
  /// its slice to the shares' gradients.
  void reduce(size_t u) {
    torch::NoGradGuard no_grad;
    auto& unit = sharded_->units[u];
    if (observer_) {
      observer_(u);
    }
    const auto purpose = sharded_->say(unit, "reduce-scatter");
    for (auto& group : unit.groups) {
      if (!group.staging.defined()) {
        group.staging = zeros_from(sharded_->pool, group.full);
      }
      if (!group.share_gradient.defined()) {
        group.share_gradient = torch::empty({group.share}, group.shard.options());
      }
      const bool fresh = std::all_of(group.members.begin(), group.members.end(), [&](size_t m) {
        const auto& member = sharded_->members[m];
        return member.place.share_length == 0 || !member.gradient.defined();
      });
      // With offload the collectives write a buffer on the device, copied into CPU memory afterwards.
      auto averaged = sharded_->offload ? sharded_->share_sized(group)
                      : fresh           ? group.share_gradient
                                        : torch::empty({group.share}, group.full.options());
      reduce_scatter_average(sharded_->process_group, averaged, group.staging);
      give_back(sharded_->pool, group.staging);
      if (sharded_->replicas) {
        const auto across = sharded_->say(unit, "all-reduce across machines");
        all_reduce_average(sharded_->replicas, averaged);
      }
      if (sharded_->offload) {
        // Waits for the copy: the optimizer reads it on the CPU next.
        auto on_device = averaged;
        averaged = fresh ? group.share_gradient.copy_(on_device) : on_device.to(group.shard.device());
        give_back(sharded_->pool, on_device);
      }
      for (size_t m : group.members) {
        auto& member = sharded_->members[m];
        member.staged = false;
        if (member.place.share_length == 0) {
          continue;
        }
        auto part = averaged.narrow(0, member.place.slice_offset, member.place.share_length);
        if (fresh) {
          member.gradient = part;
        } else if (member.gradient.defined()) {
          member.gradient.add_(part);
        } else {
          member.gradient =
              group.share_gradient.narrow(0, member.place.slice_offset, member.place.share_length);
          member.gradient.copy_(part);
        }
      }
    }
  }

  std::shared_ptr<Sharded> sharded_;
  std::shared_ptr<const std::set<c10::TensorImpl*>> stepped_;
  std::vector<Hooks> hooks_;
  std::function<void(size_t)> observer_;
  size_t next_ = 0;
  bool armed_ = false;
  bool reduce_ = false;
  bool checked_ = false;
};

// ---- Which modules are units

/// A module of the model being sharded, in pre-order (the root first).
struct ModuleEntry {
  torch::nn::Module* module;
  std::string name; // its path in the model ("" for the root)
  int parent;       // its index in the list; -1 for the root
  bool candidate;   // its type calls unit() in its forward
};

/// The class name of `module`'s dynamic type, qualified, template arguments left out.
std::string class_name(const torch::nn::Module& module) {
  const std::string demangled = c10::demangle(typeid(module).name());
  std::string name;
  int depth = 0;
  for (char c : demangled) {
    if (c == '<') {
      ++depth;
    } else if (c == '>') {
      --depth;
    } else if (depth == 0) {
      name += c;
    }
  }
  return name;
}

/// The last `::` component of a qualified class name.
std::string unqualified(const std::string& name) {
  const auto colons = name.rfind("::");
  return colons == std::string::npos ? name : name.substr(colons + 2);
}

/// Whether `listed` (a name of fsdp_transformer_layer_cls_to_wrap) names class `qualified`: an unqualified
/// name is the class's last component, or that without "Impl" (TORCH_MODULE's holder `Block` names
/// `BlockImpl`); a qualified one is the class's name or its last components, with or without "Impl".
bool names_class(const std::string& listed, const std::string& qualified) {
  auto ends_with = [](const std::string& text, const std::string& end) {
    return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
  };
  for (const std::string& name : {listed, listed + "Impl"}) {
    if (name.find("::") == std::string::npos ? unqualified(qualified) == name
                                             : qualified == name || ends_with(qualified, "::" + name)) {
      return true;
    }
  }
  return false;
}

/// fsdp_auto_wrap_policy and its settings: the one place that decides which candidates are units.
struct WrapPolicy {
  std::string policy = "NO_WRAP"; // NO_WRAP, TRANSFORMER_BASED_WRAP or SIZE_BASED_WRAP
  std::vector<std::string> classes;
  int64_t min_num_params = 100000000;

  static WrapPolicy of(const ResolvedConfig& config) {
    WrapPolicy wrap;
    wrap.policy = config.fsdp_auto_wrap_policy;
    wrap.min_num_params = config.fsdp_min_num_params;
    std::stringstream list(config.fsdp_transformer_layer_cls_to_wrap);
    for (std::string item; std::getline(list, item, ',');) {
      const auto first = item.find_first_not_of(" \t");
      if (first != std::string::npos) {
        wrap.classes.push_back(item.substr(first, item.find_last_not_of(" \t") - first + 1));
      }
    }
    return wrap;
  }

  /// For each module of `modules`, whether it is a unit (the root's entry: whether it is one rather than the
  /// resident unit). `warn`: say what TRANSFORMER_BASED_WRAP could not make a unit of its own.
  std::vector<bool> choose(const std::vector<ModuleEntry>& modules, bool warn) const {
    std::vector<bool> unit(modules.size(), false);
    unit[0] = modules[0].candidate;
    if (policy == "TRANSFORMER_BASED_WRAP") {
      choose_by_class(modules, unit, warn);
    } else if (policy == "SIZE_BASED_WRAP") {
      choose_by_size(modules, unit);
    } else {
      for (size_t i = 1; i < modules.size(); ++i) {
        unit[i] = modules[i].candidate;
      }
    }
    return unit;
  }

private:
  void choose_by_class(const std::vector<ModuleEntry>& modules, std::vector<bool>& unit, bool warn) const {
    std::vector<bool> found(classes.size(), false);
    std::vector<std::string> fallbacks;
    size_t fallen = 0; // listed modules that are not candidates
    for (size_t i = 0; i < modules.size(); ++i) {
      const std::string qualified = class_name(*modules[i].module);
      bool listed = false;
      for (size_t c = 0; c < classes.size(); ++c) {
        if (names_class(classes[c], qualified)) {
          found[c] = true;
          listed = true;
        }
      }
      if (!listed) {
        continue;
      }
      // A class whose forward does not call unit() (libtorch's own, say) cannot be a unit: its nearest
      // enclosing candidate is, or the root.
      int chosen = static_cast<int>(i);
      while (chosen > 0 && !modules[chosen].candidate) {
        chosen = modules[chosen].parent;
      }
      unit[chosen] = modules[chosen].candidate;
      if (chosen != static_cast<int>(i) && ++fallen <= 10) {
        const auto& into = modules[chosen];
        fallbacks.push_back("'" + modules[i].name + "' (" + qualified + ") is sharded with " +
                            (into.candidate
                                 ? "the enclosing unit '" +
                                       (into.name.empty() ? std::string("(root)") : into.name) + "' (" +
                                       class_name(*into.module) + ")"
                                 : std::string("the root's resident parameters (always gathered)")));
      }
    }
    if (fallen > 10) {
      fallbacks.push_back("... and " + std::to_string(fallen - 10) + " more");
    }
    std::vector<std::string> missing;
    for (size_t c = 0; c < classes.size(); ++c) {
      if (!found[c]) {
        missing.push_back(classes[c]);
      }
    }
    if (!missing.empty()) {
      std::vector<std::string> present;
      for (const auto& entry : modules) {
        const std::string name = unqualified(class_name(*entry.module));
        if (std::find(present.begin(), present.end(), name) == present.end()) {
          present.push_back(name);
        }
      }
      throw std::invalid_argument("accelerate: fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP: "
                                  "fsdp_transformer_layer_cls_to_wrap lists " +
                                  join(missing) + ", but no module of the model is of " +
                                  (missing.size() == 1 ? "that class" : "those classes") +
                                  " (as Accelerate's \"Could not find the transformer layer class\"). The "
                                  "model's module classes are " +
                                  join(present) +
                                  ": list classes from these (`Block` also names a TORCH_MODULE's "
                                  "`BlockImpl`; `ns::Block` a qualified "
                                  "one), or use SIZE_BASED_WRAP or NO_WRAP");
    }
    if (warn && !fallbacks.empty()) {
      std::string lines;
      for (const auto& line : fallbacks) {
        lines += "\n  " + line;
      }
      TORCH_WARN(
          "accelerate: fsdp_transformer_layer_cls_to_wrap lists classes whose forward does not call "
          "accelerate::fsdp::unit, so their modules cannot be units of their own:",
          lines,
          "\nTo make them units, list a class of yours that holds them and calls unit() in its forward.");
    }
  }

  /// PyTorch's size_based_auto_wrap_policy, bottom-up: a candidate whose subtree holds at least
  /// min_num_params trainable parameter elements outside the units below it is a unit, and its elements
  /// count no further up. A parameter held by several modules (tied) counts once, where first met.
  void choose_by_size(const std::vector<ModuleEntry>& modules, std::vector<bool>& unit) const {
    std::vector<int64_t> count(modules.size(), 0);
    std::unordered_set<c10::TensorImpl*> seen;
    for (size_t i = 0; i < modules.size(); ++i) {
      for (const auto& parameter : modules[i].module->parameters(/*recurse=*/false)) {
        if (parameter.requires_grad() && seen.insert(parameter.unsafeGetTensorImpl()).second) {
          count[i] += parameter.numel();
        }
      }
    }
    for (size_t i = modules.size(); i-- > 1;) { // pre-order reversed: children before their parent
      if (modules[i].candidate && count[i] >= min_num_params) {
        unit[i] = true;
      } else {
        count[modules[i].parent] += count[i];
      }
    }
  }

  static std::string join(const std::vector<std::string>& names) {
    std::string text;
    for (const auto& name : names) {
      text += (text.empty() ? "" : ", ") + name;
    }
    return text;
  }
};

/// The units of `model` and the owner of each trainable parameter (see the file comment).
std::shared_ptr<Sharded> shard_model(torch::nn::Module& model,
                                     const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                     bool reshard_after_forward, bool offload, const WrapPolicy& policy,
                                     bool warn) {
  std::vector<ModuleEntry> entries{{&model, "", -1, fsdp::detail::is_unit_type(typeid(model))}};
  {
    std::map<std::string, int> index_of{{"", 0}};
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
      const std::string& name = item.key();
      const auto dot = name.find_last_of('.');
      const auto parent = index_of.find(dot == std::string::npos ? "" : name.substr(0, dot));
      index_of[name] = static_cast<int>(entries.size());
      entries.push_back({item.value().get(), name, parent == index_of.end() ? 0 : parent->second,
                         fsdp::detail::is_unit_type(typeid(*item.value()))});
    }
  }
  const std::vector<bool> chosen = policy.choose(entries, warn);
  struct Candidate {
    torch::nn::Module* module;
    int parent; // the unit above it; -1 for the root
    int depth;
    std::string name;
  };
  // Candidate 0 is the root: a unit when its type calls unit(), else the resident unit.
  std::vector<Candidate> candidates{{&model, -1, 0, ""}};
  const bool root_is_unit = chosen[0];
  std::vector<int> owner_of(entries.size(), 0);
  std::vector<std::pair<torch::nn::Module*, int>> modules{{&model, 0}};
  for (size_t i = 1; i < entries.size(); ++i) {
    const int parent_owner = owner_of[entries[i].parent];
    int owner = parent_owner;
    if (chosen[i]) {
      owner = static_cast<int>(candidates.size());
      candidates.push_back(
          {entries[i].module, parent_owner, candidates[parent_owner].depth + 1, entries[i].name});
    }
    owner_of[i] = owner;
    modules.emplace_back(entries[i].module, owner);
  }
  auto common = [&](int a, int b) {
    while (a != b) {
      if (candidates[a].depth >= candidates[b].depth) {
        a = candidates[a].parent;
      } else {
        b = candidates[b].parent;
      }
    }
    return a;
  };
  // Each trainable parameter, once, with its owning candidate (tied: the nearest common one).
  std::vector<torch::Tensor> parameters;
  std::vector<int> owners;
  std::unordered_map<c10::TensorImpl*, size_t> seen;
  for (size_t m = 0; m < modules.size(); ++m) {
    const auto& [module, owner] = modules[m];
    for (const auto& item : module->named_parameters(/*recurse=*/false)) {
      const auto& parameter = item.value();
      if (!parameter.requires_grad()) {
        continue;
      }
      auto* impl = parameter.unsafeGetTensorImpl();
      if (auto found = seen.find(impl); found != seen.end()) {
        owners[found->second] = common(owners[found->second], owner);
        continue;
      }
      seen.emplace(impl, parameters.size());
      parameters.push_back(parameter);
      owners.push_back(owner);
    }
  }
  auto sharded = std::make_shared<Sharded>();
  sharded->self = sharded;
  sharded->process_group = group;
  sharded->rank = group->getRank();
  sharded->world = group->getSize();
  sharded->reshard_after_forward = reshard_after_forward;
  sharded->offload = offload;
  std::vector<int> unit_of_candidate(candidates.size(), -1);
  torch::NoGradGuard no_grad;
  for (size_t c = 0; c < candidates.size(); ++c) {
    // This candidate's parameters, grouped by device and dtype in order of first appearance.
    std::vector<std::pair<std::string, std::vector<size_t>>> groups;
    for (size_t p = 0; p < parameters.size(); ++p) {
      if (owners[p] != static_cast<int>(c)) {
        continue;
      }
      const auto& tensor = parameters[p];
      const std::string key = tensor.device().str() + "/" + std::string(c10::toString(tensor.scalar_type()));
      auto found = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
      if (found == groups.end()) {
        groups.emplace_back(key, std::vector<size_t>{});
        found = std::prev(groups.end());
      }
      found->second.push_back(p);
    }
    if (groups.empty()) {
      continue;
    }
    unit_of_candidate[c] = static_cast<int>(sharded->units.size());
    Unit unit;
    unit.owner = sharded.get();
    unit.index = sharded->units.size();
    unit.module = candidates[c].module;
    unit.name = candidates[c].name;
    unit.resident = c == 0 && !root_is_unit;
    for (const auto& [key, indices] : groups) {
      std::vector<torch::Tensor> tensors;
      for (size_t p : indices) {
        tensors.push_back(parameters[p]);
      }
      const FlatPlan plan = plan_flat(tensors, sharded->rank, sharded->world);
      Group flat;
      flat.share = plan.share;
      const auto options = tensors.front().options().requires_grad(false);
      flat.full = empty_from(sharded->pool, plan.share * sharded->world, options,
                             tensors.front().storage().unsafeGetStorageImpl()->allocator())
                      .zero_();
      flat.full_bytes = static_cast<size_t>(flat.full.numel()) * flat.full.element_size();
      for (size_t i = 0; i < tensors.size(); ++i) {
        auto view = flat.full.narrow(0, plan.members[i].offset, plan.members[i].numel);
        view.copy_(tensors[i].detach().reshape(-1));
        tensors[i].set_data(view.view(tensors[i].sizes()));
      }
      const auto mine = flat.full.narrow(0, sharded->rank * plan.share, plan.share);
      flat.shard = offload
                       ? torch::empty({plan.share}, options.device(torch::kCPU).pinned_memory(mine.is_cuda()))
                             .copy_(mine)
                       : mine.clone();
      flat.placeholder = torch::empty({0}, flat.full.options());
      for (size_t i = 0; i < tensors.size(); ++i) {
        Member member;
        member.parameter = tensors[i];
        member.sizes = tensors[i].sizes().vec();
        member.unit = unit.index;
        member.group = unit.groups.size();
        member.place = plan.members[i];
        member.values = flat.shard.narrow(0, plan.members[i].slice_offset, plan.members[i].share_length);
        flat.members.push_back(sharded->members.size());
        sharded->members.push_back(std::move(member));
      }
      unit.trainable += tensors.size();
      unit.groups.push_back(std::move(flat));
    }
    unit.gathered = true;
    sharded->units.push_back(std::move(unit));
    // Released as soon as it is sharded (the resident unit stays gathered), its memory kept for the next
    // unit's buffer: so sharding holds one unit's whole buffer at a time beyond the part of the model not
    // sharded yet. Its parameters' gradient accumulators are made first, while they have their whole shape.
    auto& added = sharded->units.back();
    for (const auto& group : added.groups) {
      for (size_t m : group.members) {
        auto& member = sharded->members[m];
        member.accumulator = torch::autograd::impl::grad_accumulator(member.parameter);
      }
    }
    sharded->reshard(added);
  }
  for (size_t u = sharded->units.size(); u-- > 0;) {
    if (!sharded->units[u].resident) {
      sharded->order.push_back(u);
    }
  }
  for (size_t u = 0; u < sharded->units.size(); ++u) {
    if (sharded->units[u].resident) {
      sharded->order.push_back(u);
    }
  }
  return sharded;
}

/// Whether the offloads move anything: on a GPU; on the CPU, where they are no-ops, only under the test hook
/// ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1 (docs/development.md), with CPU memory standing in for the device's.
bool takes_offload_path(const ParallelContext& context) {
  const char* hook = std::getenv("ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU");
  return context.device.is_cuda() || (hook != nullptr && std::string(hook) == "1");
}

/// The engine's context: the job's; or, with one process and fsdp_offload_params where it moves something or
/// fsdp_activation_checkpointing, the job's with a group of this process alone. As PyTorch FSDP on one GPU,
/// each unit is then sharded into one share (with offload kept in CPU memory with its gradient and the
/// optimizer step) and gathered for its forward and backward, and its units can recompute: a model larger
/// than the device's memory, or whose activations are, trains on one device.
ParallelContext with_group_of_one(ParallelContext context) {
  const bool offloading = context.config.fsdp_offload_params && takes_offload_path(context);
  if (!context.process_group && (offloading || context.config.fsdp_activation_checkpointing) &&
      context.config.fsdp_sharding_strategy != "NO_SHARD") {
    context.process_group = create_group_of_one(context.device, context.config.timeout);
  }
  return context;
}

class FsdpEngine final : public ShardedEngine, public fsdp::detail::UnitHost {
public:
  explicit FsdpEngine(const ParallelContext& context)
      : ShardedEngine(with_group_of_one(context)), replicated_(make_ddp_engine(context)),
        sharding_(context.config.fsdp_sharding_strategy), hybrid_(sharding_.rfind("HYBRID_SHARD", 0) == 0),
        activation_checkpointing_(context.config.fsdp_activation_checkpointing) {
    if (sharding_ != "FULL_SHARD" && sharding_ != "SHARD_GRAD_OP" && sharding_ != "NO_SHARD" &&
        sharding_ != "HYBRID_SHARD" && sharding_ != "HYBRID_SHARD_ZERO2") {
      throw std::invalid_argument(
          "accelerate: parallel_strategy 'fsdp' takes fsdp_sharding_strategy FULL_SHARD, "
          "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2, not '" +
          sharding_ + "'");
    }
    if (hybrid_ && context.machine_groups) {
      // Shards within each machine, replicas across machines (refused on one machine).
      machines_ = context.machine_groups("fsdp_sharding_strategy " + sharding_);
    }
    if (context.config.find_unused_parameters && sharding_ != "NO_SHARD") {
      throw std::invalid_argument(
          "accelerate: find_unused_parameters under parallel_strategy 'fsdp' is not available in this "
          "version "
          "of the runtime: a parameter no process reached takes part with a zero gradient. Leave "
          "find_unused_parameters off (or use parallel_strategy 'ddp' or 'zero')");
    }
    // On the CPU both offloads are no-ops, said once (see takes_offload_path).
    const bool offload_path = takes_offload_path(context);
    offload_params_ = context.config.fsdp_offload_params && offload_path;
    offload_inputs_ = context.config.fsdp_activation_checkpointing_offload && offload_path;
    for (const auto& [asked, name, what] :
         {std::tuple{context.config.fsdp_offload_params, "fsdp_offload_params",
                     "the shards and the optimizer step"},
          std::tuple{context.config.fsdp_activation_checkpointing_offload,
                     "fsdp_activation_checkpointing_offload", "the inputs checkpointed units keep"}}) {
      if (asked && !offload_path) {
        accelerate::get_logger("accelerate.fsdp")
            .info(name, ": the run is on the CPU, where ", what,
                  " already live; there is nothing to offload");
      }
    }
    if (offload_params_ && sharding_ == "NO_SHARD") {
      accelerate::get_logger("accelerate.fsdp")
          .warning(
              "fsdp_offload_params: NO_SHARD shards nothing, so the parameters and the optimizer step stay "
              "on ",
              context.device.str(),
              ": nothing is offloaded (offload applies to the shards of FULL_SHARD, SHARD_GRAD_OP and the "
              "hybrid strategies)");
      offload_params_ = false;
    }
    // The job's group, or the group of one that offload on one process works over.
    if (ParallelEngine::context().process_group && sharding_ != "NO_SHARD") {
      // From now on a unit's forward is this engine's (the previous one's again when this one goes).
      previous_host_ = fsdp::detail::host.exchange(this);
    }
  }

  ~FsdpEngine() override {
    fsdp::detail::UnitHost* self = this;
    fsdp::detail::host.compare_exchange_strong(self, previous_host_);
  }

  std::string name() const override { return "fsdp"; }

  std::shared_ptr<PreparedModel> prepare_model(torch::nn::Module& model) override {
    const auto& job = context();
    if (!job.process_group || trainable_parameters(model).empty() || sharding_ == "NO_SHARD") {
      return replicated_->prepare_model(model); // nothing to shard: replicated, as DDP
    }
    // In messages of 32 MiB, not DDP's 250 MiB: the model exists whole on every process until it is sharded,
    // and two messages in flight are all the broadcast adds to it (docs/benchmarks.md, setup peak).
    place_and_broadcast(model, size_t{32} << 20);
    // Every process must hold the same model (as under DDP); the message names the mismatch.
    c10d::verify_params_across_processes(job.process_group, trainable_parameters(model), std::nullopt);
    auto sharded =
        shard_model(model, shard_group(), sharding_ == "FULL_SHARD" || sharding_ == "HYBRID_SHARD",
                    offload_params_, WrapPolicy::of(job.config), /*warn=*/job.process_group->getRank() == 0);
    if (machines_) {
      sharded->replicas = machines_->replicas;
    }
    sharded->forward_prefetch = job.config.fsdp_forward_prefetch;
    sharded->backward_prefetch = job.config.fsdp_backward_prefetch;
    sharded->debug = job.config.debug;
    for (const auto& unit : sharded->units) {
      if (!unit.resident && !unit.groups.empty()) {
        sharded->asynchronous = gathers_asynchronously(shard_group(), unit.groups.front().shard);
        break;
      }
    }
    const bool prefetching =
        sharded->asynchronous && (sharded->forward_prefetch || sharded->backward_prefetch != "NO_PREFETCH");
    const size_t in_flight = sharded->reshard_after_forward ? 1 : sharded->units.size();
    sharded->pool.keep(in_flight + (prefetching ? 1 : 0));
    auto prepared = std::make_shared<FsdpModel>(model, sharded, stepped_, job);
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& unit : sharded->units) {
      if (!unit.resident) {
        units_[unit.module] = {sharded, unit.index};
      }
    }
    known_modules_.insert(&model);
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
      known_modules_.insert(item.value().get());
    }
    for (size_t i = 0; i < sharded->members.size(); ++i) {
      members_[sharded->members[i].parameter.unsafeGetTensorImpl()] = {sharded, i};
    }
    models_.emplace_back(&model, sharded);
    const auto logger = accelerate::get_logger("accelerate.fsdp");
    if (logger.enabled_for(LogLevel::debug)) {
      std::ostringstream units;
      size_t recomputed = 0;
      for (const auto& unit : sharded->units) {
        units << (unit.index ? ", " : "") << (unit.name.empty() ? "(the model)" : unit.name)
              << (unit.resident ? " (resident)" : "");
        recomputed += activation_checkpointing_ && !unit.resident && !unit.name.empty() ? 1 : 0;
      }
      const std::string sharding =
          machines_ ? "; " + sharding_ + ": each unit in " + std::to_string(machines_->machine->getSize()) +
                          " shares within each of " + std::to_string(machines_->machines) +
                          " machines, replicated across them"
                    : std::string();
      logger.debug("prepared a model as ", sharded->units.size(), " unit(s) (fsdp_auto_wrap_policy ",
                   job.config.fsdp_auto_wrap_policy, "): ", units.str(), sharding,
                   "; activation checkpointing: ",
                   activation_checkpointing_
                       ? std::to_string(recomputed) + " unit(s) recompute their forward in backward"
                       : std::string("off"));
    }
    return prepared;
  }

  // ---- UnitHost
  void* enter(torch::nn::Module& module, const std::type_info& type) override {
    std::shared_ptr<Sharded> sharded;
    size_t index = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto found = units_.find(&module); found != units_.end()) {
        sharded = found->second.first.lock();
        index = found->second.second;
      }
      if (!sharded) {
        if (known_modules_.count(&module) == 0) {
          // A module outside every prepared model trains nothing here when no gradient can reach a parameter
          // of it (a frozen teacher, a loss module, evaluation under NoGradGuard): a plain call, so that the
          // rewriter's unit call in every module class of a project leaves those alone. Otherwise it is a
          // model that prepare never saw, whose gradients would never be synchronised.
          if (!torch::GradMode::is_enabled()) {
            return nullptr;
          }
          const auto parameters = module.parameters();
          if (std::none_of(parameters.begin(), parameters.end(),
                           [](const torch::Tensor& p) { return p.requires_grad(); })) {
            return nullptr;
          }
          throw std::logic_error("accelerate::fsdp::unit: module '" + module.name() + "' (" +
                                 type_name(type) +
                                 ") runs as a unit, but it belongs to no model prepared under "
                                 "parallel_strategy 'fsdp': pass the "
                                 "model that holds it to accelerator.prepare(...) before its first forward");
        }
        // A class that inherits its forward, and the unit call in it, from a base class (`struct GptBlock :
        // BlockImpl {}`): prepare made units of the classes whose own forward calls unit(), so this module is
        // none, and its parameters train in the unit that holds it. Said once per class, in debug logging
        // (checked first: this runs at every call of such a module).
        static const auto logger = accelerate::get_logger("accelerate.fsdp");
        if (logger.enabled_for(LogLevel::debug) && !fsdp::detail::is_unit_type(type)) {
          static std::set<std::type_index> said; // under mutex_
          if (said.insert(std::type_index(type)).second) {
            logger.debug(
                "module '", module.name(), "' is of type ", type_name(type),
                ", whose forward (and unit() call) is its base class's: it is no unit (its parameters "
                "train in the unit that holds it); give ",
                type_name(type), " a forward of its own that calls unit() to make it one");
          }
        }
        return nullptr; // not a unit: a plain call
      }
    }
    auto& unit = sharded->units[index];
    if (unit.depth++ == 0) {
      try {
        sharded->gather(unit);
        if (torch::GradMode::is_enabled() && !fsdp::detail::recomputing) {
          sharded->record(index);
          if (sharded->forward_prefetch) {
            sharded->prefetch(sharded->neighbour(index, +1));
          }
        }
      } catch (...) {
        --unit.depth;
        throw;
      }
    }
    return &unit;
  }

  void leave(void* handle, const std::vector<torch::Tensor>& outputs) override {
    auto& unit = *static_cast<Unit*>(handle);
    auto& sharded = *unit.owner;
    --unit.depth;
    bool backward_coming = false;
    if (torch::GradMode::is_enabled()) {
      const std::weak_ptr<Sharded> weak = sharded.self;
      for (const auto& output : outputs) {
        if (output.defined() && output.requires_grad()) {
          const size_t index = unit.index;
          output.register_hook([weak, index](const torch::Tensor&) { before_unit_backward(weak, index); });
          backward_coming = true;
        }
      }
    }
    if (unit.depth == 0 && (!backward_coming || sharded.reshard_after_forward)) {
      sharded.reshard(unit);
    }
  }

  bool recomputes(void* handle) const override {
    const auto& unit = *static_cast<const Unit*>(handle);
    return activation_checkpointing_ && !unit.name.empty(); // every unit but the model itself
  }

  bool offloads_inputs() const override { return offload_inputs_; }

  void abandon(void* handle) noexcept override {
    auto& unit = *static_cast<Unit*>(handle);
    if (--unit.depth == 0) {
      unit.owner->reshard(unit);
    }
  }

  // ---- The optimizer's side
  void prepare_optimizer(OptimizerState& optimizer) override {
    for (const auto& group : optimizer.optimizer->param_groups()) {
      for (const auto& parameter : group.params()) {
        stepped_->insert(parameter.unsafeGetTensorImpl());
      }
    }
    refuse_optimizer_without_fused_step(optimizer, "parallel_strategy 'fsdp' (" + sharding_ + ")");
  }

  void before_optimizer_step(OptimizerState&) override {
    for (auto& [module, weak] : models_) {
      (void)module;
      if (auto sharded = weak.lock()) {
        sharded->settle();
        sharded->settle_host_copies(); // with offload the step writes the shards the gathers read
      }
    }
  }

  void after_optimizer_step(OptimizerState& optimizer) override {
    // The units that are gathered now (the resident ones, SHARD_GRAD_OP units whose backward did not run,
    // units inside unshard()) hold the values from before the step: gather them again, in one order.
    std::set<c10::TensorImpl*> stepped;
    for (const auto& group : optimizer.optimizer->param_groups()) {
      for (const auto& parameter : group.params()) {
        stepped.insert(parameter.unsafeGetTensorImpl());
      }
    }
    for (auto& [module, weak] : models_) {
      (void)module;
      auto sharded = weak.lock();
      if (!sharded) {
        continue;
      }
      for (auto& unit : sharded->units) {
        if (!unit.gathered) {
          continue;
        }
        const bool touched = std::any_of(unit.groups.begin(), unit.groups.end(), [&](const Group& group) {
          return std::any_of(group.members.begin(), group.members.end(), [&](size_t m) {
            return stepped.count(sharded->members[m].parameter.unsafeGetTensorImpl()) != 0;
          });
        });
        if (touched) {
          sharded->refresh(unit);
        }
      }
    }
  }

  std::vector<int64_t> whole_sizes(const torch::Tensor& parameter) override {
    auto [sharded, index] = find(parameter);
    return sharded ? sharded->members[index].sizes : parameter.sizes().vec();
  }

  bool shards_optimizer_state() const override {
    return context().process_group != nullptr && sharding_ != "NO_SHARD";
  }

  c10::intrusive_ptr<c10d::ProcessGroup> shard_group() const override {
    return machines_ ? machines_->machine : context().process_group;
  }

  bool writes_shares() const override { return !machines_ || machines_->machine_index == 0; }

  bool reads_checkpoints_of(const std::string& strategy) const override {
    return replicated_->reads_checkpoints_of(strategy);
  }

  ReplicaExpectation replica_expectation() const override {
    ReplicaExpectation expectation;
    const bool sharded = context().process_group != nullptr && sharding_ != "NO_SHARD";
    expectation.parameters = !sharded;
    expectation.optimizer_state = !sharded;
    return expectation;
  }

  std::string describe() const override {
    std::ostringstream out;
    const int world = context().process_group ? context().process_group->getSize() : 1;
    out << "fsdp: " << sharding_;
    if (!context().process_group) {
      out << ", one process: nothing to shard";
    } else if (sharding_ == "NO_SHARD") {
      out << ": replicated, as ddp";
    } else {
      size_t units = 0;
      for (const auto& [module, weak] : models_) {
        (void)module;
        if (auto sharded = weak.lock()) {
          units += sharded->units.size();
        }
      }
      if (machines_) {
        out << ", parameters, gradients and optimizer state in " << machines_->machine->getSize()
            << " shares within each of " << machines_->machines << " machines, replicated across them, "
            << units << " unit(s)";
      } else if (world == 1) {
        out << ", one process: each of " << units << " unit(s) one share (for "
            << (offload_params_ ? "fsdp_offload_params" : "activation checkpointing") << ")";
      } else {
        out << ", parameters, gradients and optimizer state in " << world << " shares, " << units
            << " unit(s)";
      }
      const auto& config = context().config;
      out << "; activation checkpointing " << (activation_checkpointing_ ? "on" : "off")
          << (config.fsdp_activation_checkpointing_offload ? offload_inputs_
                                                                 ? " (its inputs offloaded to CPU memory)"
                                                                 : " (offload: a no-op on the CPU)"
                                                           : "");
      if (config.fsdp_offload_params) {
        out << (offload_params_
                    ? "; offload params: on (shards, their gradients and the optimizer step in CPU "
                      "memory)"
                    : "; offload params: on (a no-op on the CPU)");
      }
      out << "; prefetch: forward " << (config.fsdp_forward_prefetch ? "on" : "off") << ", backward "
          << config.fsdp_backward_prefetch;
      bool asynchronous = false;
      int64_t prefetches = 0;
      for (const auto& [module, weak] : models_) {
        (void)module;
        if (auto sharded = weak.lock()) {
          asynchronous = asynchronous || sharded->asynchronous;
          prefetches += sharded->prefetches;
        }
      }
      if (!models_.empty() && !asynchronous) {
        out << " (skipped: the shared-memory transport gathers on the calling thread, nothing would overlap)";
      } else if (!models_.empty()) {
        out << ", " << prefetches << " all-gather(s) started ahead so far";
      }
    }
    return out.str();
  }

  std::function<void()> gather_full_parameters(torch::nn::Module& model) override {
    auto sharded = sharded_of(model);
    if (!sharded) {
      return {};
    }
    std::vector<size_t> gathered;
    for (auto& unit : sharded->units) {
      if (!unit.gathered) {
        sharded->gather(unit);
        gathered.push_back(unit.index);
      }
    }
    return [sharded, gathered]() {
      for (auto& unit : sharded->units) {
        sharded->write_back(unit);
      }
      for (size_t index : gathered) {
        sharded->reshard(sharded->units[index]);
      }
    };
  }

  std::map<std::string, torch::Tensor> whole_tensors(torch::nn::Module& module, bool keeps) override {
    auto tensors = module_tensors(module);
    auto sharded = sharded_of(module);
    if (!sharded) {
      return tensors; // replicated
    }
    std::unordered_map<const c10::TensorImpl*, std::vector<std::string>> names;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      names[item.value().unsafeGetTensorImpl()].push_back(item.key());
    }
    for (auto& unit : sharded->units) {
      const bool was_gathered = unit.gathered;
      sharded->gather(unit);
      for (const auto& group : unit.groups) {
        for (size_t m : group.members) {
          const auto& parameter = sharded->members[m].parameter;
          for (const auto& name : names[parameter.unsafeGetTensorImpl()]) {
            tensors[name] = keeps ? parameter.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true)
                                  : torch::Tensor();
          }
        }
      }
      if (!was_gathered) {
        sharded->reshard(unit);
      }
    }
    return tensors;
  }

  std::unique_ptr<CheckpointComponent>
  model_checkpoint(const std::vector<std::shared_ptr<PreparedModel>>& models) override;

protected:
  std::optional<Held> held(const torch::Tensor& parameter) override {
    auto [sharded, index] = find(parameter);
    if (!sharded) {
      return std::nullopt;
    }
    auto& member = sharded->members[index];
    return Held{member.values, &member.gradient, member.place.share_begin, member.place.share_length,
                sharded};
  }

private:
  /// The units of prepared `model`, or null (not prepared here, released, or replicated).
  std::shared_ptr<Sharded> sharded_of(const torch::nn::Module& model) const {
    for (auto it = models_.rbegin(); it != models_.rend(); ++it) { // the latest prepare of it
      if (it->first == &model) {
        return it->second.lock();
      }
    }
    return nullptr;
  }

  std::pair<std::shared_ptr<Sharded>, size_t> find(const torch::Tensor& parameter) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = members_.find(parameter.unsafeGetTensorImpl());
    if (found == members_.end()) {
      return {nullptr, 0};
    }
    auto sharded = found->second.first.lock();
    if (!sharded) {
      members_.erase(found); // its model was released (free_memory)
      return {nullptr, 0};
    }
    return {std::move(sharded), found->second.second};
  }

  std::unique_ptr<ParallelEngine> replicated_;
  std::string sharding_;
  bool hybrid_ = false;
  std::shared_ptr<const MachineGroups> machines_; // hybrid sharding on several machines
  bool activation_checkpointing_ = false;
  bool offload_params_ = false; // fsdp_offload_params, where it moves something (a GPU run)
  bool offload_inputs_ = false; // fsdp_activation_checkpointing_offload, likewise
  fsdp::detail::UnitHost* previous_host_ = nullptr;
  std::shared_ptr<std::set<c10::TensorImpl*>> stepped_ = std::make_shared<std::set<c10::TensorImpl*>>();
  std::mutex mutex_;
  std::unordered_map<torch::nn::Module*, std::pair<std::weak_ptr<Sharded>, size_t>> units_;
  std::unordered_set<torch::nn::Module*> known_modules_;
  std::unordered_map<c10::TensorImpl*, std::pair<std::weak_ptr<Sharded>, size_t>> members_;
  std::vector<std::pair<torch::nn::Module*, std::weak_ptr<Sharded>>> models_;
};

/// The models' part of a checkpoint under "fsdp": the replicated component's files (whole models, written by
/// the main process), read with every unit gathered.
class FsdpModelCheckpoint final : public CheckpointComponent {
public:
  FsdpModelCheckpoint(FsdpEngine& engine, const std::vector<std::shared_ptr<PreparedModel>>& models)
      : engine_(engine), models_(models), inner_(replicated_model_checkpoint(models)) {}

  std::string name() const override { return inner_->name(); }

  void save(ComponentWriter& writer) override {
    if (engine_.context().config.fsdp_state_dict_type == "SHARDED_STATE_DICT") {
      // Each process writes its shards; nothing is gathered.
      save_model_pieces(writer, models_, [&](size_t i) {
        std::vector<ModelPiece> pieces;
        auto* model = dynamic_cast<FsdpModel*>(models_[i].get());
        if (model == nullptr || !engine_.writes_shares()) {
          // Replicated (NO_SHARD, nothing trainable): the main process writes it whole. Or another machine's
          // process holds the same shares (hybrid sharding) and writes them.
          return pieces;
        }
        const auto& sharded = *model->sharded();
        std::unordered_map<const c10::TensorImpl*, const Member*> members;
        for (const auto& member : sharded.members) {
          members.emplace(member.parameter.unsafeGetTensorImpl(), &member);
        }
        for (const auto& item : model->model().named_parameters(/*recurse=*/true)) {
          if (auto found = members.find(item.value().unsafeGetTensorImpl()); found != members.end()) {
            pieces.push_back({item.key(), found->second->values, found->second->place.share_begin});
          }
        }
        return pieces;
      });
      return;
    }
    // FULL_STATE_DICT: the main process writes whole models, each gathered one unit at a time.
    save_whole_models(writer, models_.size(),
                      [&](size_t i) { return engine_.whole_tensors(models_[i]->model(), writer.main()); });
  }

  void verify(const ComponentReader& reader) override {
    auto restore = gather_all(); // the parameters' shapes are checked against the files
    try {
      inner_->verify(reader);
    } catch (...) {
      restore();
      throw;
    }
    restore();
  }

  void apply(Rollback& rollback) override {
    // What to restore if a later component fails: each unit's shards, and the resident units' whole values.
    std::vector<std::pair<torch::Tensor, torch::Tensor>> previous;
    for (const auto& prepared : models_) {
      if (auto* model = dynamic_cast<FsdpModel*>(prepared.get())) {
        for (auto& unit : model->sharded()->units) {
          for (auto& group : unit.groups) {
            previous.emplace_back(group.shard, group.shard.clone());
            if (unit.resident) {
              previous.emplace_back(group.full, group.full.clone());
            }
          }
        }
      }
    }
    auto restore = gather_all();
    Rollback whole; // the replicated component's undo acts on gathered parameters: replaced by `previous`
    try {
      inner_->apply(whole);
    } catch (...) {
      restore();
      throw;
    }
    restore(); // writes the loaded values back into the shards
    rollback.add([previous]() mutable {
      torch::NoGradGuard no_grad;
      for (auto& [tensor, values] : previous) {
        tensor.copy_(values);
      }
    });
  }

private:
  std::function<void()> gather_all() {
    std::vector<std::function<void()>> restores;
    for (const auto& prepared : models_) {
      if (auto restore = engine_.gather_full_parameters(prepared->model())) {
        restores.push_back(std::move(restore));
      }
    }
    return [restores]() {
      for (auto it = restores.rbegin(); it != restores.rend(); ++it) {
        (*it)();
      }
    };
  }

  FsdpEngine& engine_;
  std::vector<std::shared_ptr<PreparedModel>> models_;
  std::unique_ptr<CheckpointComponent> inner_;
};

std::unique_ptr<CheckpointComponent>
FsdpEngine::model_checkpoint(const std::vector<std::shared_ptr<PreparedModel>>& models) {
  return std::make_unique<FsdpModelCheckpoint>(*this, models);
}

} // namespace

std::unique_ptr<ParallelEngine> make_fsdp_engine(const ParallelContext& context) {
  return std::make_unique<FsdpEngine>(context);
}

} // namespace accelerate::detail
