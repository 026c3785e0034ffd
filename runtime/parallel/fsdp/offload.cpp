// fsdp_offload_params: the shares in CPU memory, copied to the device for each all-gather; whether the
// offloads move anything; and the group of this process alone over which a single process shards its units.
#include "parallel/fsdp/internal.h"

#include <cstdlib>
#include <string>

#include <c10/core/impl/VirtualGuardImpl.h>

namespace accelerate::detail::fsdp_internal {

torch::Tensor Sharded::share_on_device(const Group& group) {
  if (!offload) {
    return group.shard;
  }
  return share_sized(group).copy_(group.shard, /*non_blocking=*/true);
}

torch::Tensor Sharded::share_sized(const Group& group) {
  return empty_from(pool, group.share, group.full.options(),
                    group.full.storage().unsafeGetStorageImpl()->allocator());
}

void Sharded::settle_host_copies() const {
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

bool takes_offload_path(const ParallelContext& context) {
  const char* hook = std::getenv("ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU");
  return context.device.is_cuda() || (hook != nullptr && std::string(hook) == "1");
}

ParallelContext with_group_of_one(ParallelContext context) {
  const bool offloading = context.config.fsdp_offload_params && takes_offload_path(context);
  if (!context.process_group && (offloading || context.config.fsdp_activation_checkpointing) &&
      context.config.fsdp_sharding_strategy != "NO_SHARD") {
    context.process_group = create_group_of_one(context.device, context.config.timeout);
  }
  return context;
}

} // namespace accelerate::detail::fsdp_internal
