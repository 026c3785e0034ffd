#include "transport/abandon.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

namespace accelerate::detail {
namespace {

/// One collective issued under the watch and not yet known complete. `claimed` is taken by whichever
/// completes `outer` first: the inner future's callback or the abandonment.
struct Pending {
  c10::intrusive_ptr<c10d::Work> inner;
  c10::intrusive_ptr<c10d::Backend> backend;
  c10::intrusive_ptr<c10::ivalue::Future> outer; // null for a work returned unwrapped (a CUDA one)
  std::shared_ptr<std::atomic<bool>> claimed;
};

std::atomic<bool> watch_live{false}; // an AbandonWatch exists
std::atomic<bool> watching{false};   // between its begin() and end()
std::atomic<bool> abandoned{false};
std::mutex registry_mutex;
std::string abandoned_text;   // under registry_mutex
std::vector<Pending> pending; // under registry_mutex
/// The backends of collectives that were in flight when their group was abandoned: not destroyed while such
/// a collective waits (the destructor would join a thread that waits for a peer that never comes).
std::vector<Pending>* kept_for_good = new std::vector<Pending>();

/// Marks the group abandoned with `text` (the first text wins) and fails every collective in flight.
void mark_abandoned(const std::string& text) {
  std::vector<Pending> failing;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    if (!abandoned.load()) {
      abandoned_text = text;
      abandoned.store(true);
    }
    message = abandoned_text;
    // Those still in flight are failed here and kept for good; those that completed stay listed until the
    // attempt ends (released on its thread).
    for (auto& entry : pending) {
      if (!entry.claimed->exchange(true)) {
        failing.push_back(entry);
        kept_for_good->push_back(entry);
      }
    }
  }
  for (auto& entry : failing) {
    if (entry.outer) {
      entry.outer->setError(std::make_exception_ptr(GroupAbandoned(message)));
    } else {
      // A device collective (NCCL): its communicator is aborted, which fails its work.
      entry.backend->abort();
    }
  }
}

class AbandonableWork final : public c10d::Work {
public:
  AbandonableWork(c10::intrusive_ptr<c10d::Work> inner, c10::intrusive_ptr<c10::ivalue::Future> outer)
      : c10d::Work(-1, inner->retrieveOpType()), inner_(std::move(inner)), outer_(std::move(outer)) {}

  bool isCompleted() override { return outer_->completed(); }
  bool isSuccess() const override { return outer_->completed() && !outer_->hasError(); }
  std::exception_ptr exception() const override {
    return outer_->completed() && outer_->hasError() ? outer_->exception_ptr() : nullptr;
  }
  int sourceRank() const override { return inner_->sourceRank(); }
  std::vector<at::Tensor> result() override { return inner_->result(); }
  void abort() override { inner_->abort(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return outer_; }

  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout == kNoTimeout) {
      outer_->wait();
    } else {
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!outer_->completed()) {
        if (std::chrono::steady_clock::now() > deadline) {
          throw std::runtime_error("accelerate: a collective did not complete within " +
                                   std::to_string(timeout.count()) + " ms");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (outer_->hasError()) {
      std::rethrow_exception(outer_->exception_ptr());
    }
    return inner_->wait(timeout);
  }

private:
  c10::intrusive_ptr<c10d::Work> inner_;
  c10::intrusive_ptr<c10::ivalue::Future> outer_;
};

/// Forgets the abandoned state and the collectives listed (a new attempt begins, or one ended). What is let
/// go is destroyed on the calling thread, after the lock.
void reset_registry() {
  std::vector<Pending> released;
  std::lock_guard<std::mutex> lock(registry_mutex);
  // Collectives still listed completed (or were never waited for) under a group nobody abandoned.
  released.swap(pending);
  // An abandoned collective completes once its peers' groups are gone (their sockets close) or at its
  // timeout; its backend is idle then, and can go.
  const auto done = std::stable_partition(kept_for_good->begin(), kept_for_good->end(),
                                          [](const Pending& entry) { return !entry.inner->isCompleted(); });
  std::move(done, kept_for_good->end(), std::back_inserter(released));
  kept_for_good->erase(done, kept_for_good->end());
  abandoned.store(false);
  abandoned_text.clear();
}

} // namespace

AbandonWatch::AbandonWatch(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
  if (watch_live.exchange(true)) {
    throw std::logic_error("accelerate: find_executable_batch_size inside find_executable_batch_size");
  }
  if (store_) {
    try {
      thread_ = std::thread([this] { poll(); });
    } catch (...) {
      watch_live.store(false);
      throw;
    }
  }
}

AbandonWatch::~AbandonWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
  end();
  watch_live.store(false);
}

void AbandonWatch::begin(const std::string& key) {
  reset_registry();
  std::lock_guard<std::mutex> lock(mutex_);
  key_ = key;
  watching.store(true);
}

void AbandonWatch::end() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    key_.clear();
    watching.store(false);
  }
  reset_registry();
}

void AbandonWatch::abandon(const std::string& why) {
  std::string key;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    key = key_;
  }
  if (store_ && !key.empty()) {
    try {
      store_->set(key, std::vector<uint8_t>(why.begin(), why.end()));
    } catch (const std::exception&) {
      // The store is gone (the job is ending): the others learn it from their own failures.
    }
  }
  mark_abandoned(why);
}

void AbandonWatch::poll() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stop_; })) {
    if (key_.empty() || abandoned.load()) {
      continue;
    }
    try {
      if (store_->check({key_})) {
        const auto text = store_->get(key_);
        mark_abandoned(std::string(text.begin(), text.end()));
      }
    } catch (const std::exception&) {
      // The store went away: the job is ending, and the collectives fail on their own.
      return;
    }
  }
}

bool group_abandoned() {
  return abandoned.load(std::memory_order_relaxed);
}

void throw_group_abandoned() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  throw GroupAbandoned(abandoned_text);
}

c10::intrusive_ptr<c10d::Work> abandonable(c10::intrusive_ptr<c10d::Work> work,
                                           const c10::intrusive_ptr<c10d::Backend>& backend) {
  if (!watching.load(std::memory_order_relaxed) || !work) {
    return work;
  }
  if (group_abandoned()) {
    // Issued after the abandonment: it never completes either.
    std::lock_guard<std::mutex> lock(registry_mutex);
    kept_for_good->push_back({work, backend, nullptr, std::make_shared<std::atomic<bool>>(true)});
    throw GroupAbandoned(abandoned_text);
  }
  if (work->isCompleted()) {
    return work;
  }
  c10::intrusive_ptr<c10::ivalue::Future> inner_future;
  try {
    inner_future = work->getFuture();
  } catch (const std::exception&) {
  }
  auto claimed = std::make_shared<std::atomic<bool>>(false);
  const bool wrapped = inner_future && inner_future->devices().empty();
  auto outer = wrapped ? c10::make_intrusive<c10::ivalue::Future>(inner_future->elementType()) : nullptr;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    // Prune what completed since (destroyed here, on the issuing thread).
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [](const Pending& entry) {
                                   return entry.claimed->load() ||
                                          (!entry.outer && entry.inner->isCompleted());
                                 }),
                  pending.end());
    pending.push_back({work, backend, outer, claimed});
  }
  if (!wrapped) {
    // No future, or a device one: returned as it is; the abandonment aborts its backend.
    return work;
  }
  inner_future->addCallback([outer, claimed](c10::ivalue::Future& done) {
    if (claimed->exchange(true)) {
      return;
    }
    if (done.hasError()) {
      outer->setError(done.exception_ptr());
    } else {
      outer->markCompleted(done.value());
    }
  });
  return c10::make_intrusive<AbandonableWork>(std::move(work), std::move(outer));
}

} // namespace accelerate::detail
