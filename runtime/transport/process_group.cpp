// Rendezvous through c10d's TCPStore and the process group that carries every collective of the runtime.
#include "transport/process_group.h"

#include "transport/collective_checks.h"
#include "transport/device.h"
#include "transport/recording_backend.h"
#include "transport/shm_allreduce.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>

#include <netinet/in.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MemoryOverlap.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/exception.h>

namespace accelerate::detail {
namespace {

/// Under torchrun's elastic agent (TORCHELASTIC_USE_AGENT_STORE=True) the agent hosts the store at
/// MASTER_PORT, and it keeps it across restarts: each attempt's keys go under a prefix of their own
/// (`/worker/attempt_<TORCHELASTIC_RESTART_COUNT>`, as PyTorch's env:// rendezvous did), or a restarted
/// process would read the addresses the failed attempt published and connect to processes that are gone.
/// Empty when no agent hosts the store.
std::string agent_store_prefix() {
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent == nullptr || std::string(agent) != "True") {
    return "";
  }
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return std::string("/worker/attempt_") + (attempt != nullptr && *attempt != '\0' ? attempt : "0");
}

/// The listening socket `accel launch` bound for rank 0's store and holds for the job's life
/// (`ACCELERATE_STORE_LISTEN_FD`): bound before any rank started, so no other job can take the port between
/// the launcher's choice and rank 0's start. Taken when it is a listening TCP socket on MASTER_PORT, once per
/// process; otherwise the store binds the port itself.
std::optional<int> launcher_listen_fd(const LaunchEnvironment& env) {
  static bool taken = false;
  const char* text = std::getenv("ACCELERATE_STORE_LISTEN_FD");
  if (taken || text == nullptr || *text == '\0') {
    return std::nullopt;
  }
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  if (*end != '\0' || fd < 0 || fd > 1 << 20) {
    return std::nullopt;
  }
  int listening = 0;
  socklen_t length = sizeof(listening);
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0 ||
      listening == 0 ||
      ::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    return std::nullopt;
  }
  const int port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                               : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (port != env.master_port) {
    return std::nullopt;
  }
  taken = true;
  return static_cast<int>(fd);
}

c10::intrusive_ptr<c10d::Store> connect_store(const LaunchEnvironment& env,
                                              std::chrono::milliseconds timeout) {
  const std::string prefix = agent_store_prefix();
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0 && prefix.empty(); // the agent's store is there already
  options.numWorkers = env.world_size;
  // Not the store's own count of connections: a process of another job reaching this port would count as
  // one of ours. Who belongs to the job is settled by join_run and check_world_size, by run id and rank.
  options.waitWorkers = false;
  options.timeout = timeout;
  if (options.isServer) {
    options.masterListenFd = launcher_listen_fd(env);
  }
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    if (prefix.empty()) {
      return store;
    }
    return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  } catch (const c10::DistNetworkError& error) {
    std::string what = error.what_without_backtrace();
    if (env.rank == 0 && what.find("ddress already in use") != std::string::npos) {
      throw std::runtime_error(
          "accelerate: rank 0 cannot listen on MASTER_PORT " + std::to_string(env.master_port) +
          " at MASTER_ADDR " + env.master_addr +
          ": the port is already in use (another job's rendezvous?); pick a free port (accel launch "
          "--main_process_port 0, or leave the port out and accel launch finds one)");
    }
    if (env.rank == 0) {
      throw std::runtime_error("accelerate: rank 0 could not open the rendezvous at " + where +
                               " (MASTER_ADDR:MASTER_PORT). Cause: " + what.substr(0, what.find('\n')));
    }
    throw std::runtime_error(
        "accelerate: rank " + std::to_string(env.rank) + " could not reach the rendezvous at " + where +
        " (MASTER_ADDR:MASTER_PORT) within " + std::to_string(timeout.count()) +
        " ms; check that MASTER_ADDR is the main process's address and that rank 0 started. "
        "Cause: " +
        what.substr(0, what.find('\n')));
  }
}

std::string describe_run(const std::string& run_id) {
  return run_id.empty() ? std::string("no run id") : "run id '" + run_id + "'";
}

/// Rank 0 publishes the job's run id on its store; every other process reads it before it writes anything,
/// and leaves the store untouched when it is not its own: a process that reached another job's rendezvous
/// (the same MASTER_ADDR:MASTER_PORT) is refused with both ids, and that job goes on as if it had not come.
/// Returns the job's keys: the store under `accelerate/run/<id>/`.
c10::intrusive_ptr<c10d::Store> join_run(const c10::intrusive_ptr<c10d::Store>& store,
                                         const LaunchEnvironment& env, std::chrono::milliseconds timeout) {
  const std::string key = "accelerate/run_id";
  if (env.rank == 0) {
    store->set(key, std::vector<uint8_t>(env.run_id.begin(), env.run_id.end()));
  } else {
    std::vector<uint8_t> value;
    try {
      value = store->get(key);
    } catch (const c10::DistError& error) {
      const std::string what = error.what_without_backtrace();
      throw std::runtime_error(
          "accelerate: rank " + std::to_string(env.rank) + " reached " + env.master_addr + ":" +
          std::to_string(env.master_port) + " but no rank 0 published a run there within " +
          std::to_string(timeout.count()) +
          " ms; check that rank 0 started with the same MASTER_ADDR and MASTER_PORT. Cause: " +
          what.substr(0, what.find('\n')));
    }
    const std::string theirs(value.begin(), value.end());
    if (theirs != env.run_id) {
      throw std::runtime_error(
          "accelerate: rank " + std::to_string(env.rank) + " (" + describe_run(env.run_id) +
          ") reached the rendezvous of another job at " + env.master_addr + ":" +
          std::to_string(env.master_port) + " (" + describe_run(theirs) +
          ") and left it untouched: give each job its own MASTER_PORT (accel launch finds a free one when "
          "--main_process_port is not given), or start every process of a job with the same run id "
          "(ACCELERATE_RUN_ID, accel launch --rdzv_id)");
    }
  }
  return c10::make_intrusive<c10d::PrefixStore>(
      "accelerate/run/" + (env.run_id.empty() ? std::string("unnamed") : env.run_id), store);
}

/// Whether the shared-memory collectives take `tensor`: decided from what every process has alike (the
/// device, the group's CPU backend), as the data-parallel gradient average decides
/// (runtime/parallel/ddp.cpp). In debug mode the CPU backend is the checking wrapper, so these collectives go
/// through c10d, checked.
bool in_shared_memory(c10d::ProcessGroup& group, const at::Tensor& tensor) {
  return tensor.device().is_cpu() && uses_shared_memory_allreduce(group.getBackend(c10::DeviceType::CPU));
}

/// Whether c10d may be handed `part` and `whole` as they are. NCCL documents the in-place layout of its
/// reduce-scatter and all-gather (`part` is exactly this process's range of `whole`); Gloo documents no
/// aliasing at all, so on CPU any overlap, and on a GPU any other overlap, goes through a copy.
bool c10d_takes_aliasing(const at::Tensor& part, const at::Tensor& whole, int rank) {
  if (at::get_overlap_status(part, whole) == at::MemOverlapStatus::No) {
    return true;
  }
  return part.is_cuda() &&
         static_cast<const char*>(part.const_data_ptr()) ==
             static_cast<const char*>(whole.const_data_ptr()) + rank * part.numel() * part.element_size();
}

/// Every process must agree on the world size: a mismatch would otherwise hang in the rendezvous until the
/// timeout. Each rank publishes its WORLD_SIZE; rank 0 checks everyone's (waiting for each to arrive), the
/// others check rank 0's.
void check_world_size(c10d::Store& store, const LaunchEnvironment& env, std::chrono::milliseconds timeout) {
  auto key = [](int rank) { return "accelerate/world_size/" + std::to_string(rank); };
  const std::string mine = std::to_string(env.world_size);
  store.set(key(env.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  const int first = env.rank == 0 ? 1 : 0;
  const int last = env.rank == 0 ? env.world_size - 1 : 0;
  for (int rank = first; rank <= last; ++rank) {
    std::vector<uint8_t> value;
    try {
      value = store.get(key(rank));
    } catch (const c10::DistError& error) {
      std::string missing;
      int count = 0;
      for (int other = rank; other <= last; ++other) {
        if (!store.check({key(other)})) {
          missing += (count++ == 0 ? "" : ", ") + std::to_string(other);
        }
      }
      const std::string what = error.what_without_backtrace();
      throw std::runtime_error(
          "accelerate: rank " + std::to_string(env.rank) + " waited " + std::to_string(timeout.count()) +
          " ms at " + env.master_addr + ":" + std::to_string(env.master_port) +
          " (MASTER_ADDR:MASTER_PORT) for " + (env.rank == 0 ? "rank(s) " + missing : std::string("rank 0")) +
          " of the job (" + describe_run(env.run_id) +
          ") to connect; check that they all started, with the same MASTER_ADDR, MASTER_PORT, WORLD_SIZE and "
          "run id. Cause: " +
          what.substr(0, what.find('\n')));
    }
    std::string theirs(value.begin(), value.end());
    if (theirs != mine) {
      throw std::runtime_error("accelerate: rank " + std::to_string(env.rank) +
                               " was started with WORLD_SIZE=" + mine + " but rank " + std::to_string(rank) +
                               " with WORLD_SIZE=" + theirs +
                               "; start every process of the job with the same world size");
    }
  }
}

} // namespace

namespace {

/// A process group of `size` processes over `store` (keys of its own): Gloo for CPU tensors, wrapped with the
/// shared-memory collectives unless `apart` says why not (shm_allreduce.h), NCCL for CUDA tensors when
/// `device` is a GPU; every backend checked across processes in debug mode.
c10::intrusive_ptr<c10d::ProcessGroup> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                  int size, const std::string& master_addr,
                                                  const c10::Device& device,
                                                  std::chrono::milliseconds timeout, bool debug_mode,
                                                  const std::string& apart, const std::string& run_id) {
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  auto checked = [&](c10::intrusive_ptr<c10d::Backend> backend) {
    return debug_mode ? wrap_backend_for_debug_mode(
                            std::move(backend),
                            c10::make_intrusive<c10d::PrefixStore>("accelerate/debug", store), timeout)
                      : backend;
  };
  auto recorded = [](c10::intrusive_ptr<c10d::Backend> backend) -> c10::intrusive_ptr<c10d::Backend> {
    return c10::make_intrusive<RecordingBackend>(std::move(backend));
  };
  auto gloo = recorded(checked(wrap_backend_with_shared_memory(
      create_gloo_backend(store, rank, size, master_addr, timeout), store, timeout, apart, run_id)));
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  if (device.is_cuda()) {
    group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL,
                      recorded(checked(create_nccl_backend(store, rank, size, timeout))));
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
  }
  return group;
}

/// Why the processes of the job must not share memory: it spans machines by the launcher's account (even
/// when they are one host, as two "machines" on loopback addresses are); empty on one machine.
std::string machines_apart(const LaunchEnvironment& env) {
  if (env.local_world_size >= env.world_size) {
    return "";
  }
  return "the job spans machines (WORLD_SIZE " + std::to_string(env.world_size) + ", LOCAL_WORLD_SIZE " +
         std::to_string(env.local_world_size) + "), and shared memory is for the processes of one machine";
}

} // namespace

namespace {

/// The job's store, connected once per process and kept to its end; each process group formed over it gets
/// keys of its own (`accelerate/group_<n>/`, n counting the groups this process formed). A program that
/// makes Accelerators one after another forms a group for each: with a fresh store each time, a process
/// quicker to its next group could reach the store a slower one has not shut down yet, read that one's
/// previous addresses and connect to a group that is closing ("Connection reset by peer"). Every process
/// forms its groups in the same order, so the n-th groups meet under the same keys.
struct JobStore {
  std::string job; // what the store was connected for
  c10::intrusive_ptr<c10d::Store> store;
  int groups = 0;
};
std::mutex job_store_mutex;
JobStore* kept_job_store = new JobStore(); // never destroyed: the store's server outlives every group

/// The kept store, connected for this job (the caller holds job_store_mutex).
JobStore& connected_job_store(const LaunchEnvironment& env, std::chrono::milliseconds timeout) {
  const std::string job = env.master_addr + ":" + std::to_string(env.master_port) + "/" +
                          std::to_string(env.rank) + "/" + std::to_string(env.world_size) + "/" +
                          agent_store_prefix() + "/" + env.run_id;
  if (!kept_job_store->store || kept_job_store->job != job) {
    kept_job_store->store = join_run(connect_store(env, timeout), env, timeout);
    kept_job_store->job = job;
    kept_job_store->groups = 0;
  }
  kept_job_store->store->setTimeout(timeout);
  return *kept_job_store;
}

c10::intrusive_ptr<c10d::Store> store_for_next_group(const LaunchEnvironment& env,
                                                     std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(job_store_mutex);
  auto& kept = connected_job_store(env, timeout);
  return c10::make_intrusive<c10d::PrefixStore>("accelerate/group_" + std::to_string(kept.groups++),
                                                kept.store);
}

} // namespace

c10::intrusive_ptr<c10d::ProcessGroup> create_process_group(const LaunchEnvironment& env,
                                                            const c10::Device& device,
                                                            std::chrono::milliseconds timeout,
                                                            bool debug_mode) {
  auto store = store_for_next_group(env, timeout);
  check_world_size(*store, env, timeout);
  return make_group(store, env.rank, env.world_size, env.master_addr, device, timeout, debug_mode,
                    machines_apart(env), env.run_id);
}

c10::intrusive_ptr<c10d::Store> job_store(const LaunchEnvironment& env, std::chrono::milliseconds timeout,
                                          const std::string& prefix) {
  std::lock_guard<std::mutex> lock(job_store_mutex);
  return c10::make_intrusive<c10d::PrefixStore>(prefix, connected_job_store(env, timeout).store);
}

c10::intrusive_ptr<c10d::ProcessGroup> create_group_of_one(const c10::Device& device,
                                                           std::chrono::milliseconds timeout) {
  return make_group(c10::make_intrusive<c10d::HashStore>(), 0, 1, "127.0.0.1", device, timeout,
                    /*debug_mode=*/false, "a group of one process has nothing to share", /*run_id=*/"");
}

MachineGroups create_machine_groups(const c10::intrusive_ptr<c10d::ProcessGroup>& world,
                                    const LaunchEnvironment& env, const c10::Device& device,
                                    std::chrono::milliseconds timeout, bool debug_mode,
                                    const std::string& what) {
  const int per_machine = env.local_world_size;
  if (per_machine >= env.world_size) {
    throw std::invalid_argument(
        "accelerate: " + what +
        " shards within each machine and replicates across machines, but this job runs on one machine (" +
        std::to_string(env.world_size) + " process(es), LOCAL_WORLD_SIZE " + std::to_string(per_machine) +
        "), where it would be FULL_SHARD with nothing to replicate: use FULL_SHARD (SHARD_GRAD_OP for "
        "HYBRID_SHARD_ZERO2) on one machine, or launch on several (accel launch --num_machines N)");
  }
  // Every process must see the same machine layout; each checks its own place, and the smallest and largest
  // LOCAL_WORLD_SIZE are compared across the job.
  const bool in_place = env.rank % per_machine == env.local_rank && env.world_size % per_machine == 0;
  const std::vector<int64_t> mine = {per_machine, -per_machine, in_place ? 0 : 1};
  auto layout = at::tensor(c10::ArrayRef<int64_t>(mine), at::TensorOptions(at::kLong));
  std::vector<at::Tensor> reduced{layout};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  world->allreduce(reduced, options)->wait();
  if (layout[0].item<int64_t>() != -layout[1].item<int64_t>() || layout[2].item<int64_t>() != 0) {
    throw std::invalid_argument(
        "accelerate: " + what +
        " needs the ranks laid out machine by machine (rank = machine x LOCAL_WORLD_SIZE + LOCAL_RANK, the "
        "same LOCAL_WORLD_SIZE on every machine), as torchrun and accel launch start them; this job's "
        "launcher gave process " +
        std::to_string(env.rank) + " LOCAL_RANK " + std::to_string(env.local_rank) + " of LOCAL_WORLD_SIZE " +
        std::to_string(per_machine) + " in a world of " + std::to_string(env.world_size) +
        ", and the machines differ or do not divide it. Start the same number of processes on every machine");
  }
  MachineGroups groups;
  groups.machines = env.world_size / per_machine;
  groups.machine_index = env.rank / per_machine;
  auto store = world->getStore();
  const std::string machine_prefix = "accelerate/machine/" + std::to_string(groups.machine_index) + "/";
  groups.machine = make_group(c10::make_intrusive<c10d::PrefixStore>(machine_prefix, store), env.local_rank,
                              per_machine, env.master_addr, device, timeout, debug_mode, "", env.run_id);
  const std::string replica_prefix = "accelerate/replicas/" + std::to_string(env.local_rank) + "/";
  groups.replicas =
      make_group(c10::make_intrusive<c10d::PrefixStore>(replica_prefix, store), groups.machine_index,
                 groups.machines, env.master_addr, device, timeout, debug_mode,
                 "the processes of this group are on different machines", env.run_id);
  return groups;
}

bool has_backend_for(const c10d::ProcessGroup& group, c10::DeviceType type) {
  const auto devices = group.getDeviceTypes();
  return std::any_of(devices.begin(), devices.end(),
                     [&](const c10::Device& backend) { return backend.type() == type; });
}

c10::Device bookkeeping_device(const c10d::ProcessGroup& group, const c10::Device& device) {
  return has_backend_for(group, c10::DeviceType::CPU) ? c10::Device(c10::kCPU) : device;
}

void agree_on_random_state(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const c10::Device& device) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  at::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  std::vector<at::Tensor> tensors{state.to(bookkeeping_device(*group, device)).contiguous()};
  c10d::BroadcastOptions options;
  options.rootRank = 0;
  group->broadcast(tensors, options)->wait();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(tensors.front().to(c10::kCPU));
}

void all_reduce_average(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const at::Tensor& tensor) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  group->allreduce(tensors, options)->wait();
  tensor.div_(group->getSize());
}

void broadcast_model_state(const c10::intrusive_ptr<c10d::ProcessGroup>& process_group,
                           const std::vector<at::Tensor>& tensors, int source, size_t bucket_bytes) {
  if (tensors.empty()) {
    return;
  }
  // PyTorch's DDP uses 250 MiB buckets for the same broadcast; the copies back are in place, into aliases of
  // the caller's tensors (parameters included) with a version counter of their own: the buffers are broadcast
  // between the forward pass and the backward, and BatchNorm's backward keeps its running statistics among
  // the saved tensors, so a shared counter (detach()) would make that backward fail ("modified by an inplace
  // operation"). Its gradient does not read them in training mode, and in evaluation mode they are not
  // updated, so every process already holds the main process's values there.
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> detached;
  detached.reserve(tensors.size());
  for (const auto& tensor : tensors) {
    detached.push_back(tensor.variable_data());
  }
  c10d::broadcast_coalesced(process_group, detached, bucket_bytes, source);
}

void reduce_scatter_average(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const at::Tensor& output,
                            const at::Tensor& input) {
  if (in_shared_memory(*group, input)) {
    reduce_scatter_average_in_shared_memory(group->getBackend(c10::DeviceType::CPU), output, input);
    return;
  }
  at::NoGradGuard no_grad;
  at::Tensor whole = input;
  at::Tensor part = c10d_takes_aliasing(output, input, group->getRank()) ? output : at::empty_like(output);
  c10d::ReduceScatterOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  group->_reduce_scatter_base(part, whole, options)->wait();
  part.div_(group->getSize());
  if (!part.is_same(output)) {
    output.copy_(part);
  }
}

void all_gather_into(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const at::Tensor& output,
                     const at::Tensor& input) {
  if (auto work = start_all_gather_into(group, output, input)) {
    work->wait();
  }
}

c10::intrusive_ptr<c10d::Work> start_all_gather_into(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                     const at::Tensor& output, const at::Tensor& input) {
  if (in_shared_memory(*group, input)) {
    all_gather_in_shared_memory(group->getBackend(c10::DeviceType::CPU), output, input);
    return {};
  }
  at::NoGradGuard no_grad;
  at::Tensor whole = output;
  at::Tensor part = c10d_takes_aliasing(input, output, group->getRank()) ? input : input.clone();
  return group->_allgather_base(whole, part);
}

bool gathers_asynchronously(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const at::Tensor& tensor) {
  return !in_shared_memory(*group, tensor);
}

} // namespace accelerate::detail
