// The store rendezvous (store_rendezvous.h).
#include "transport/store_rendezvous.h"

namespace accelerate::detail {

namespace {

std::string as_text(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

} // namespace

RendezvousOutcome meet_through_store(c10d::Store& store, const RendezvousKeys& keys, int rank, int world,
                                     const std::string& value, std::chrono::milliseconds timeout,
                                     const std::function<std::string(const Absentees&)>& explain,
                                     const std::function<std::string(const std::string& reason)>& late) {
  RendezvousOutcome outcome;
  std::vector<std::string> names;
  for (int other = 0; other < world; ++other) {
    names.push_back(keys.prefix + std::to_string(other));
  }
  store.set(names[static_cast<size_t>(rank)], std::vector<uint8_t>(value.begin(), value.end()));
  if (store.check({keys.abort_key})) {
    outcome.failure = late(as_text(store.get(keys.abort_key)));
    return outcome;
  }
  try {
    store.wait(names, timeout);
  } catch (const c10::Error&) {
    Absentees absentees;
    for (int other = 0; other < world; ++other) {
      (store.check({names[static_cast<size_t>(other)]}) ? absentees.present : absentees.missing)
          .push_back(other);
    }
    if (absentees.missing.empty()) {
      throw;
    }
    outcome.failure = explain(absentees);
    store.set(keys.abort_key, std::vector<uint8_t>(outcome.failure.begin(), outcome.failure.end()));
    return outcome;
  }
  for (const auto& name : names) {
    outcome.values.push_back(as_text(store.get(name)));
  }
  return outcome;
}

} // namespace accelerate::detail
