// A unit's whole parameters: the all-gather of its shards and their release (Sharded), the all-gathers that
// prefetch starts ahead in the order of the last training forward, and the gather before a unit's backward.
#include "parallel/fsdp/internal.h"

#include <algorithm>
#include <string>

namespace accelerate::detail::fsdp_internal {

void Sharded::gather_shares(Group& group) {
  auto share = share_on_device(group);
  all_gather_into(process_group, group.full, share);
  if (offload) {
    give_back(pool, share);
  }
}

void Sharded::prefetch(int64_t u) {
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

int64_t Sharded::neighbour(size_t u, int64_t step) const {
  if (u >= position.size() || position[u] < 0) {
    return -1;
  }
  const int64_t at = position[u] + step;
  return at >= 0 && at < static_cast<int64_t>(forward_order.size()) ? static_cast<int64_t>(forward_order[at])
                                                                    : -1;
}

void Sharded::prefetch_previous(size_t u) {
  const int64_t previous = neighbour(u, -1);
  if (previous >= 0 && !units[static_cast<size_t>(previous)].complete) {
    prefetch(previous);
  }
}

void Sharded::record(size_t u) {
  if (std::find(recording.begin(), recording.end(), u) == recording.end()) {
    recording.push_back(u);
  }
}

void Sharded::adopt_recorded_order() {
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

void Sharded::settle() {
  for (auto& unit : units) {
    if (unit.prefetched) {
      reshard(unit);
    }
  }
}

std::optional<CollectivePurpose> Sharded::say(const Unit& unit, const char* what) const {
  if (!debug) {
    return std::nullopt;
  }
  return std::optional<CollectivePurpose>(std::in_place, std::string(what) + " of fsdp unit '" +
                                                             (unit.name.empty() ? "(root)" : unit.name) +
                                                             "'");
}

void Sharded::gather(Unit& unit) {
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

void Sharded::reshard(Unit& unit) {
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

void Sharded::refresh(Unit& unit) {
  torch::NoGradGuard no_grad;
  const auto purpose = say(unit, "all-gather after the optimizer step");
  for (auto& group : unit.groups) {
    gather_shares(group);
  }
}

void Sharded::write_back(Unit& unit) {
  torch::NoGradGuard no_grad;
  for (auto& group : unit.groups) {
    group.shard.copy_(group.full.narrow(0, rank * group.share, group.share));
  }
}

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

} // namespace accelerate::detail::fsdp_internal
