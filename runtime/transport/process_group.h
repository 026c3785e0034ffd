// Forms the job's c10d process group: TCPStore rendezvous, then Gloo (and same-machine shared memory) for CPU
// tensors.
#pragma once

#include "transport/environment.h"

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace accelerate::detail {

/// Connects to (rank 0: hosts) the TCPStore at MASTER_ADDR:MASTER_PORT and builds a process group: Gloo for
/// CPU tensors (all-reduces through shared memory when the job runs on one machine, WORLD_SIZE equal to
/// LOCAL_WORLD_SIZE, and every process can map the segment: shm_allreduce.h),
/// and NCCL for CUDA tensors when `device` is a GPU. Throws `std::runtime_error` naming the variable to fix
/// when the address or port is unusable. With `debug_mode` (ACCELERATE_DEBUG_MODE), every collective is first
/// checked across processes (runtime/transport/collective_checks.h).
c10::intrusive_ptr<c10d::ProcessGroup> create_process_group(const LaunchEnvironment& env,
                                                            const c10::Device& device,
                                                            std::chrono::milliseconds timeout,
                                                            bool debug_mode = false);

/// The job's store (the one its process groups form over, connected once per process and kept to its end),
/// under keys starting with `prefix`: for agreements that must outlive a group (find_executable_batch_size
/// agrees there on each attempt's outcome, and abandons a group through it).
c10::intrusive_ptr<c10d::Store> job_store(const LaunchEnvironment& env, std::chrono::milliseconds timeout,
                                          const std::string& prefix);

/// A group of this process alone (an in-memory store; Gloo, and NCCL on a GPU), for a strategy that runs its
/// collectives on one process too (fsdp with fsdp_offload_params keeps a single share per unit in CPU
/// memory).
c10::intrusive_ptr<c10d::ProcessGroup> create_group_of_one(const c10::Device& device,
                                                           std::chrono::milliseconds timeout);

/// The job's processes seen machine by machine, for hybrid sharding (shard within a machine, replicate across
/// machines). A machine is what the launcher says it is: ranks come machine after machine (`rank = machine *
/// LOCAL_WORLD_SIZE + LOCAL_RANK`, torchrun's and `accel launch`'s layout), so two "machines" on one host
/// stay two machines.
struct MachineGroups {
  /// This machine's processes, by local rank (Gloo, all-reduces through shared memory; NCCL on a GPU).
  c10::intrusive_ptr<c10d::ProcessGroup> machine;
  /// The process of each machine with this process's local rank, by machine (Gloo over the network, never
  /// shared memory; NCCL on a GPU).
  c10::intrusive_ptr<c10d::ProcessGroup> replicas;
  int machine_index = 0;
  int machines = 1;
};

/// Forms `MachineGroups` over the job's group `world` (a collective: every process calls it once). Throws
/// `std::invalid_argument` saying why when the job runs on one machine (`what` names the setting that asked,
/// e.g. "fsdp_sharding_strategy HYBRID_SHARD") or when its ranks are not laid out machine by machine.
MachineGroups create_machine_groups(const c10::intrusive_ptr<c10d::ProcessGroup>& world,
                                    const LaunchEnvironment& env, const c10::Device& device,
                                    std::chrono::milliseconds timeout, bool debug_mode,
                                    const std::string& what);

/// Whether `group` has a backend for tensors on devices of `type` (Gloo for the CPU, NCCL for CUDA).
bool has_backend_for(const c10d::ProcessGroup& group, c10::DeviceType type);

/// Where the small bookkeeping tensors of a collective live (flags, counts, a generator state): the CPU when
/// `group` has a CPU backend (Gloo), else `device`.
c10::Device bookkeeping_device(const c10d::ProcessGroup& group, const c10::Device& device);

/// Makes the processes of `group` draw the same random numbers from then on: each process's default CPU
/// generator takes process 0's state (a broadcast of its bytes). Processes that seeded alike are unchanged;
/// an unseeded program (each process's CPU generator starts from a seed of its own) then draws, on every
/// process, what process 0 alone would have drawn. CUDA generators need nothing: libtorch starts them all
/// from one fixed seed. A collective: every process calls it once, when the group forms.
void agree_on_random_state(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const c10::Device& device);

/// Replaces `tensor` (contiguous, on one device) by its average over the processes of `group`, through c10d
/// (a sum, then a division by the group's size on every process).
void all_reduce_average(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const at::Tensor& tensor);

/// Copies process `source`'s values of `tensors` into every process's `tensors`, in place: one coalesced
/// message per dtype and device (c10d's `broadcast_coalesced`, as PyTorch's DDP broadcasts a model), so a
/// model whose tensors mix dtypes (fp32 and bf16 parameters, an int64 buffer) arrives bit-identical. Every
/// process passes its tensors in the same order, with the same shapes and dtypes. The one place the runtime
/// broadcasts model state. Each message holds up to `bucket_bytes` (a larger tensor goes alone), two are in
/// flight: 250 MiB, PyTorch DDP's, unless a strategy that must not hold much more than the model asks for
/// less.
constexpr size_t kModelBroadcastBucketBytes = size_t{250} << 20;
void broadcast_model_state(const c10::intrusive_ptr<c10d::ProcessGroup>& process_group,
                           const std::vector<at::Tensor>& tensors, int source,
                           size_t bucket_bytes = kModelBroadcastBucketBytes);

/// Reduce-scatter with averaging, the gradient step of sharded strategies: process r's `output` (S elements)
/// becomes the average over the processes of elements [r * S, (r + 1) * S) of their `input` (world * S
/// elements). Contiguous tensors of one floating dtype on one device, the same S on every process; `output`
/// may be this process's own range of `input`. CPU tensors go through shared memory when the group's CPU
/// backend uses it (bit-identical to the shared-memory gradient average of the whole `input`); otherwise
/// c10d's reduce-scatter sums (Gloo, NCCL) and each process divides its share by the world size.
void reduce_scatter_average(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const at::Tensor& output,
                            const at::Tensor& input);

/// All-gather, the parameter step of sharded strategies: `output` (world * S elements) becomes the
/// concatenation, in rank order, of every process's `input` (S elements). Contiguous tensors of one dtype on
/// one device, the same S on every process; `input` may be this process's own range of `output` (in place).
/// CPU tensors go through shared memory when the group's CPU backend uses it, else c10d's all-gather.
void all_gather_into(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const at::Tensor& output,
                     const at::Tensor& input);

/// `all_gather_into`, started: returns the c10d work to wait on before `output` is read (c10d's all-gather
/// runs on Gloo's threads or NCCL's stream meanwhile), or null when the gather is already done (shared
/// memory: a copy made by the calling thread). `output` must not be touched until the wait; the work keeps
/// what it reads alive.
c10::intrusive_ptr<c10d::Work> start_all_gather_into(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                     const at::Tensor& output, const at::Tensor& input);

/// Whether `start_all_gather_into` of tensors like `tensor` returns before the data has moved, so that work
/// issued after it overlaps it: false for CPU tensors on the shared-memory transport.
bool gathers_asynchronously(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const at::Tensor& tensor);

/// A Gloo backend bound to the local address that reaches `master_addr` (or to `GLOO_SOCKET_IFNAME`).
/// Lives in its own translation unit: see runtime/transport/gloo_shim/README.md.
c10::intrusive_ptr<c10d::Backend> create_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                      int world_size, const std::string& master_addr,
                                                      std::chrono::milliseconds timeout);

} // namespace accelerate::detail
