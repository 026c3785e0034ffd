// The worker threads of a prepared data loader: batches read ahead, in order, through a bounded window.
#include <accelerate/accelerator.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <ATen/Parallel.h>

namespace accelerate::detail {

struct WorkerPool::Shared {
  struct Outcome {
    std::shared_ptr<void> batch;
    std::exception_ptr error;
  };

  Shared(size_t capacity, size_t first, size_t end, Read read)
      : read(std::move(read)), capacity(capacity), end(end), next_claim(first), next_take(first) {}

  /// One worker: claims the next batch while it lies within the window, reads it, files the outcome.
  void work(size_t worker) {
    // A new thread's OpenMP team size is the library's default, not at::set_num_threads's: take the latter,
    // as ATen's own inter-op threads do, so ops inside get() do not oversubscribe the cores.
    at::init_num_threads();
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      room.wait(lock,
                [&] { return stopping || failed || next_claim >= end || next_claim < next_take + capacity; });
      if (stopping || failed || next_claim >= end) {
        return;
      }
      const size_t batch = next_claim++;
      lock.unlock();
      Outcome outcome;
      try {
        outcome.batch = read(worker, batch);
      } catch (...) {
        outcome.error = std::current_exception();
      }
      lock.lock();
      if (outcome.error) {
        failed = true; // no batch after this one is read: the loop stops at it
        room.notify_all();
      }
      done.emplace(batch, std::move(outcome));
      ready.notify_all();
    }
  }

  const Read read;
  const size_t capacity;
  const size_t end;
  std::mutex mutex;
  std::condition_variable room;  // a worker may claim a batch, or must stop
  std::condition_variable ready; // a batch was read
  size_t next_claim;
  size_t next_take;
  bool stopping = false;
  bool failed = false;
  std::map<size_t, Outcome> done;
  std::vector<std::thread> threads;
};

WorkerPool::WorkerPool(size_t workers, size_t capacity, size_t first, size_t end, Read read)
    : shared_(std::make_shared<Shared>(capacity, first, end, std::move(read))) {
  try {
    for (size_t worker = 0; worker < workers; ++worker) {
      shared_->threads.emplace_back([shared = shared_.get(), worker] { shared->work(worker); });
    }
  } catch (...) {
    stop();
    throw;
  }
}

WorkerPool::~WorkerPool() {
  stop();
}

void WorkerPool::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stopping = true;
  }
  shared_->room.notify_all();
  for (auto& thread : shared_->threads) {
    if (thread.joinable()) {
      thread.join();
    }
  }
  shared_->threads.clear();
}

std::shared_ptr<void> WorkerPool::take(size_t batch) {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  if (batch != shared_->next_take) {
    throw std::logic_error("accelerate::DataLoader: batch " + std::to_string(batch) +
                           " was asked of the worker threads, which hand out batch " +
                           std::to_string(shared_->next_take) + " next");
  }
  shared_->ready.wait(lock, [&] { return shared_->done.count(batch) > 0; });
  auto found = shared_->done.find(batch);
  if (found->second.error) {
    std::rethrow_exception(found->second.error); // kept: asking again rethrows it again
  }
  std::shared_ptr<void> result = std::move(found->second.batch);
  shared_->done.erase(found);
  shared_->next_take = batch + 1;
  shared_->room.notify_all();
  return result;
}

} // namespace accelerate::detail
