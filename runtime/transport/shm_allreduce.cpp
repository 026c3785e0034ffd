// Same-machine all-reduce, reduce-scatter and all-gather through one shared-memory segment (see
// shm_allreduce.h).
//
// Segment layout: a header (magic, nonce, world size, slot size, the futex word), one RankState per process
// (the barrier generation it reached, what it is running, its pid), then two sets of `world` slots. A chunk
// of the tensor goes through one set: every process copies its chunk, but for its own share r, into its slot;
// barrier; process r reduces share r (its own tensor's, then the other slots' in rank order) in its tensor
// and publishes it in its slot; barrier; every process copies share k of slot k, for every other k, back into
// its tensor. Consecutive chunks alternate between the sets, so the barrier that opens chunk
// i + 1 also guarantees that every process has finished reading chunk i's set before chunk i + 2 rewrites it.
//
// `average` runs the same schedule over several tensors seen as one flat array (data-parallel gradients),
// with the division by the world size folded into the reduction.
//
// `reduce_scatter_average` and `all_gather` (sharded strategies) need one barrier per chunk. Reduce-scatter:
// chunk c holds, for every owner k, piece c of k's range of the input (m = slot / world elements of it, at
// k * m in the slot); every process copies the pieces the others own into its slot; barrier; process r
// averages piece c of its range from its own input and the other slots into its output. All-gather: every
// process copies chunk c of its input (one slot's worth) into its slot; barrier; every process copies every
// other slot's chunk into its output.
//
// Why alternating sets make reuse safe across consecutive collectives of any kind: in every schedule a
// process reads a chunk's set only between that chunk's first barrier and its own arrival at the next chunk's
// first barrier, and writes a set only before a chunk's first barrier or between its barriers. So a process
// writing set s for chunk i + 2 has passed the first barrier of chunk i + 1, which every process reached only
// after it had finished reading chunk i, the last user of set s. All processes count chunks alike because
// they issue the same collectives on tensors of the same size (checked at each collective's first chunk).
#include "transport/shm_allreduce.h"

#include "transport/abandon.h"
#include "transport/environment.h"
#include "transport/recording_backend.h"
#include "watch/heartbeat.h"

#include "transport/forwarding_backend.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

namespace accelerate::detail {
namespace {

constexpr uint64_t kMagic = 0x6163632d73686d31ULL; // "acc-shm1"
constexpr size_t kPage = 4096;
/// All slots together (2 sets x world): 16 MiB, at least 256 KiB per slot. Larger tensors go in chunks.
constexpr size_t kSegmentDataBytes = size_t{16} << 20;
constexpr size_t kMinSlotBytes = size_t{256} << 10;
/// What Announcement::op holds during `average`, `reduce_scatter_average` and `all_gather` (c10d's ReduceOp
/// values are all >= 0).
constexpr int32_t kAverageOp = -1;
constexpr int32_t kReduceScatterAverageOp = -2;
constexpr int32_t kAllGatherOp = -3;
/// Elements per block of the averaging loop (its accumulator lives on the stack).
constexpr int64_t kAverageBlock = 512;
/// Elements below which the averaging loop stays on one thread (ATen's own grain for elementwise loops).
constexpr int64_t kAverageGrain = at::internal::GRAIN_SIZE;

std::string collective_name(int32_t op) {
  switch (op) {
  case kAverageOp:
    return "gradient average";
  case kReduceScatterAverageOp:
    return "reduce-scatter average";
  case kAllGatherOp:
    return "all-gather";
  default:
    return reduce_op_name(static_cast<c10d::ReduceOp::RedOpType>(op));
  }
}

/// Whether `op` is a kind of all-reduce (every process ends with the whole result).
bool is_all_reduce(int32_t op) {
  return op != kReduceScatterAverageOp && op != kAllGatherOp;
}

/// "an all-reduce (sum)", "a gradient average", "an all-gather" (for messages).
std::string describe_collective(int32_t op) {
  switch (op) {
  case kAverageOp:
    return "a gradient average";
  case kReduceScatterAverageOp:
    return "a reduce-scatter average";
  case kAllGatherOp:
    return "an all-gather";
  default:
    return "an all-reduce (" + collective_name(op) + ")";
  }
}

/// A dense contiguous CPU tensor: what the shared-memory collectives copy as raw memory.
bool dense_contiguous_cpu(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().is_cpu() && tensor.layout() == c10::kStrided &&
         tensor.is_contiguous();
}

/// Whether `part` is exactly process `rank`'s range of `whole` (whole.numel() == world * part.numel()).
bool is_rank_range(const at::Tensor& part, const at::Tensor& whole, int rank) {
  return static_cast<const char*>(part.const_data_ptr()) ==
         static_cast<const char*>(whole.const_data_ptr()) + rank * part.numel() * part.element_size();
}

/// The tensors of one `average` call seen as one flat array: element i of the concatenation lives in the
/// tensor whose range holds i.
class FlatView {
public:
  explicit FlatView(const std::vector<at::Tensor>& tensors) {
    starts_.push_back(0);
    for (const auto& tensor : tensors) {
      data_.push_back(static_cast<char*>(tensor.data_ptr()));
      starts_.push_back(starts_.back() + tensor.numel());
    }
  }
  int64_t numel() const { return starts_.back(); }

  /// Calls fn(pointer, flat index, count) for each contiguous piece of flat elements [first, last).
  template <typename Fn> void for_each_piece(int64_t first, int64_t last, int64_t element, Fn&& fn) const {
    if (first >= last) {
      return;
    }
    auto index =
        static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin() - 1);
    for (int64_t at = first; at < last; ++index) {
      const int64_t end = std::min(last, starts_[index + 1]);
      if (end > at) {
        fn(data_[index] + (at - starts_[index]) * element, at, end - at);
      }
      at = std::max(at, end);
    }
  }

private:
  std::vector<char*> data_;
  std::vector<int64_t> starts_;
};

/// out = (sum of inputs[k], in rank order) / inputs.size(), accumulated in the dtype's math type, written to
/// `own` and, unless it is null, to `published`. `own` may be one of the inputs. Blocks go to ATen's intra-op
/// threads, as the all-reduce's `add_out` does.
template <typename scalar_t>
void average_into(const std::vector<const scalar_t*>& inputs, scalar_t* own, scalar_t* published,
                  int64_t count) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto world = static_cast<acc_t>(inputs.size());
  at::parallel_for(0, count, kAverageGrain, [&](int64_t first_element, int64_t end_element) {
    acc_t sum[kAverageBlock];
    for (int64_t block = first_element; block < end_element; block += kAverageBlock) {
      const int64_t n = std::min(kAverageBlock, end_element - block);
      const scalar_t* first = inputs[0] + block;
      for (int64_t i = 0; i < n; ++i) {
        sum[i] = static_cast<acc_t>(first[i]);
      }
      for (size_t k = 1; k < inputs.size(); ++k) {
        const scalar_t* next = inputs[k] + block;
        for (int64_t i = 0; i < n; ++i) {
          sum[i] += static_cast<acc_t>(next[i]);
        }
      }
      scalar_t* const out = own + block;
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<scalar_t>(sum[i] / world);
      }
      if (published != nullptr) {
        std::memcpy(published + block, out, static_cast<size_t>(n) * sizeof(scalar_t));
      }
    }
  });
}

struct alignas(64) SegmentHeader {
  uint64_t magic;
  uint64_t nonce;
  int64_t world;
  int64_t slot_bytes;
  alignas(64) std::atomic<uint32_t> epoch; // bumped at every arrival; the word waiters sleep on
  std::atomic<uint32_t> sleepers;
};

/// What a process runs: checked against the others at each collective's first chunk.
struct Announcement {
  std::atomic<int64_t> numel;
  std::atomic<int32_t> dtype;
  std::atomic<int32_t> op;
};

struct alignas(64) RankState {
  std::atomic<uint64_t> arrived; // the last barrier generation this process reached
  // Indexed by the parity of the process's collectives. After a one-barrier chunk a process may return and
  // announce its next collective while another is still checking this one; it cannot announce the one after
  // before passing the next collective's first barrier, which the checking process reaches only later.
  Announcement announced[2];
  std::atomic<int32_t> pid;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the barrier needs lock-free atomics in shared memory");

size_t round_up(size_t value, size_t to) {
  return (value + to - 1) / to * to;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

long futex(std::atomic<uint32_t>* word, int operation, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), operation, value, timeout, nullptr, 0);
}

/// Whether process `pid` has exited: gone, or a zombie its parent has not yet reaped.
bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) {
    return errno == ESRCH;
  }
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  std::FILE* file = std::fopen(path, "r");
  if (file == nullptr) {
    return false;
  }
  char text[512] = {};
  const size_t length = std::fread(text, 1, sizeof(text) - 1, file);
  std::fclose(file);
  const char* close = std::strrchr(text, ')'); // the command name may itself contain ") "
  return close != nullptr && close + 2 < text + length && (close[2] == 'Z' || close[2] == 'X');
}

/// memcpy that accepts an empty range with null pointers (an empty tensor has no data pointer).
void copy_bytes(char* destination, const char* source, int64_t bytes) {
  if (bytes > 0) {
    std::memcpy(destination, source, static_cast<size_t>(bytes));
  }
}

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

/// The mapped segment. Rank 0 creates it; the others open it by name; rank 0 removes the name once everyone
/// has answered, so nothing is left in /dev/shm whatever happens to the processes afterwards.
class Segment {
public:
  explicit Segment(int world) : world_(world) {
    const size_t slots = 2 * static_cast<size_t>(world);
    slot_bytes_ = std::max(kMinSlotBytes, round_up(kSegmentDataBytes / slots, kPage));
    header_bytes_ = round_up(sizeof(SegmentHeader), kPage);
    ranks_bytes_ = round_up(sizeof(RankState) * static_cast<size_t>(world), kPage);
    bytes_ = header_bytes_ + ranks_bytes_ + slots * slot_bytes_;
  }
  ~Segment() {
    if (base_ != nullptr) {
      munmap(base_, bytes_);
    }
  }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  /// Rank 0: creates and fills a new segment; returns its name. Throws `std::runtime_error` with the reason.
  std::string create(uint64_t nonce, const std::string& run_id) {
    std::random_device random;
    const std::string name = "/accelerate-allreduce-" + run_file_name(run_id) + "-" +
                             std::to_string(getpid()) + "-" + std::to_string(random());
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      throw std::runtime_error(errno_text("shm_open(" + name + ")"));
    }
    // posix_fallocate, not just ftruncate: a full /dev/shm must fail here, not with SIGBUS at the first copy.
    const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
    if (rc != 0) {
      close(fd);
      shm_unlink(name.c_str());
      errno = rc;
      throw std::runtime_error(errno_text("reserving " + std::to_string(bytes_ >> 20) + " MiB in /dev/shm"));
    }
    map(fd, name);
    auto* head = header();
    head->nonce = nonce;
    head->world = world_;
    head->slot_bytes = static_cast<int64_t>(slot_bytes_);
    head->epoch.store(0);
    head->sleepers.store(0);
    for (int rank = 0; rank < world_; ++rank) {
      rank_state(rank).arrived.store(0);
    }
    std::atomic_thread_fence(std::memory_order_release);
    head->magic = kMagic;
    name_ = name;
    return name;
  }

  /// Ranks > 0: maps rank 0's segment and checks that it is the one rank 0 announced.
  void open(const std::string& name, uint64_t nonce) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      throw std::runtime_error(errno_text("shm_open(" + name + ") (is rank 0 on another machine?)"));
    }
    struct stat info{};
    if (fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) != bytes_) {
      close(fd);
      throw std::runtime_error("segment " + name + " has an unexpected size");
    }
    map(fd, name);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (header()->magic != kMagic || header()->nonce != nonce || header()->world != world_) {
      throw std::runtime_error("segment " + name +
                               " is not the one rank 0 created (another machine's name?)");
    }
  }

  void unlink() {
    if (!name_.empty()) {
      shm_unlink(name_.c_str());
      name_.clear();
    }
  }

  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base_); }
  RankState& rank_state(int rank) const {
    return reinterpret_cast<RankState*>(static_cast<char*>(base_) + header_bytes_)[rank];
  }
  char* slot(int set, int rank) const {
    return static_cast<char*>(base_) + header_bytes_ + ranks_bytes_ +
           (static_cast<size_t>(set) * static_cast<size_t>(world_) + static_cast<size_t>(rank)) * slot_bytes_;
  }
  size_t slot_bytes() const { return slot_bytes_; }

private:
  void map(int fd, const std::string& name) {
    void* base = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int error = errno;
    close(fd);
    if (base == MAP_FAILED) {
      errno = error;
      throw std::runtime_error(errno_text("mmap(" + name + ")"));
    }
    base_ = base;
  }

  int world_;
  size_t slot_bytes_ = 0;
  size_t header_bytes_ = 0;
  size_t ranks_bytes_ = 0;
  size_t bytes_ = 0;
  void* base_ = nullptr;
  std::string name_;
};

class SharedMemoryAllreduceBackend final : public ForwardingBackend {
public:
  SharedMemoryAllreduceBackend(c10::intrusive_ptr<c10d::Backend> inner, std::unique_ptr<Segment> segment,
                               std::chrono::milliseconds timeout, bool check_pids)
      : ForwardingBackend(std::move(inner)), segment_(std::move(segment)), timeout_(timeout),
        check_pids_(check_pids) {}

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    if (!handles(tensors, opts)) {
      return inner_->allreduce(tensors, opts);
    }
    check_usable();
    at::Tensor& tensor = tensors[0];
    at::Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    latch_failure([&] { run(work, opts.reduceOp.op_); });
    if (!work.is_same(tensor)) {
      tensor.copy_(work);
    }
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(tensors));
    return c10d::Work::create_from_future(future);
  }

  /// See `average_in_shared_memory`.
  void average(const std::vector<at::Tensor>& tensors) {
    check_usable();
    const auto dtype = tensors.empty() ? at::kFloat : tensors.front().scalar_type();
    for (const auto& tensor : tensors) {
      TORCH_CHECK(
          dense_contiguous_cpu(tensor) && tensor.scalar_type() == dtype && at::isFloatingType(dtype),
          "accelerate: average_in_shared_memory takes dense contiguous CPU tensors of one floating dtype");
    }
    latch_failure([&] { run_average(FlatView(tensors), dtype); });
  }

  /// See `reduce_scatter_average_in_shared_memory`.
  void reduce_scatter_average(const at::Tensor& output, const at::Tensor& input) {
    check_usable();
    const auto dtype = input.scalar_type();
    TORCH_CHECK(
        dense_contiguous_cpu(input) && dense_contiguous_cpu(output) && output.scalar_type() == dtype &&
            at::isFloatingType(dtype),
        "accelerate: reduce_scatter_average_in_shared_memory takes dense contiguous CPU tensors of one "
        "floating dtype");
    TORCH_CHECK(input.numel() == size_ * output.numel(),
                "accelerate: reduce_scatter_average_in_shared_memory: the input has ", input.numel(),
                " elements, not ", size_, " (the world size) times the output's ", output.numel());
    TORCH_CHECK(
        at::get_overlap_status(output, input) == at::MemOverlapStatus::No ||
            is_rank_range(output, input, rank_),
        "accelerate: reduce_scatter_average_in_shared_memory: the output overlaps the input other than "
        "as this process's own range of it");
    latch_failure([&] {
      run_reduce_scatter_average(static_cast<char*>(output.data_ptr()),
                                 static_cast<const char*>(input.const_data_ptr()), output.numel(), dtype);
    });
  }

  /// See `all_gather_in_shared_memory`.
  void all_gather(const at::Tensor& output, const at::Tensor& input) {
    check_usable();
    TORCH_CHECK(dense_contiguous_cpu(input) && dense_contiguous_cpu(output) &&
                    output.scalar_type() == input.scalar_type(),
                "accelerate: all_gather_in_shared_memory takes dense contiguous CPU tensors of one dtype");
    TORCH_CHECK(output.numel() == size_ * input.numel(),
                "accelerate: all_gather_in_shared_memory: the output has ", output.numel(), " elements, not ",
                size_, " (the world size) times the input's ", input.numel());
    TORCH_CHECK(at::get_overlap_status(input, output) == at::MemOverlapStatus::No ||
                    is_rank_range(input, output, rank_),
                "accelerate: all_gather_in_shared_memory: the input overlaps the output other than as this "
                "process's own range of it");
    latch_failure([&] {
      run_all_gather(static_cast<char*>(output.data_ptr()), static_cast<const char*>(input.const_data_ptr()),
                     input.numel(), input.scalar_type());
    });
  }

private:
  void check_usable() const {
    if (!failure_.empty()) {
      throw std::runtime_error(
          "accelerate: the shared-memory collectives are unusable after an earlier failure (" + failure_ +
          ")");
    }
  }

  /// Runs `collective`; a failure leaves the segment in an unknown state (other processes may be anywhere in
  /// their schedule), so it is remembered and every later collective refuses to start.
  template <typename Collective> void latch_failure(Collective&& collective) {
    try {
      collective();
    } catch (const std::exception& error) {
      failure_ = error.what();
      throw;
    }
  }

  /// Decided from what every process passes alike (the operation, dtype, device, layout), never from data or
  /// strides, so that all processes take the same path.
  static bool handles(const std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
    if (tensors.size() != 1) {
      return false;
    }
    const auto& tensor = tensors[0];
    const auto op = opts.reduceOp.op_;
    const auto dtype = tensor.scalar_type();
    return tensor.defined() && tensor.device().is_cpu() && tensor.layout() == c10::kStrided &&
           (op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::MIN || op == c10d::ReduceOp::MAX) &&
           (at::isFloatingType(dtype) || at::isIntegralType(dtype, /*includeBool=*/false));
  }

  /// All-reduce (sum, min, max) of one tensor: each share reduced from this process's tensor and the other
  /// slots, in rank order but with this process's own values first.
  void run(at::Tensor& tensor, c10d::ReduceOp::RedOpType op) {
    const auto options = at::TensorOptions().dtype(tensor.scalar_type());
    run_schedule(FlatView({tensor}), tensor.scalar_type(), op,
                 [&](char* data, char* own_slot, int64_t position, int64_t count, int set) {
                   at::Tensor result = at::from_blob(data, {count}, options);
                   for (int other = 0; other < size_; ++other) {
                     if (other == rank_) {
                       continue;
                     }
                     at::Tensor theirs =
                         at::from_blob(segment_->slot(set, other) + position, {count}, options);
                     if (op == c10d::ReduceOp::SUM) {
                       at::add_out(result, result, theirs);
                     } else if (op == c10d::ReduceOp::MIN) {
                       at::minimum_out(result, result, theirs);
                     } else {
                       at::maximum_out(result, result, theirs);
                     }
                   }
                   copy_bytes(own_slot + position, data, count * result.element_size());
                 });
  }

  /// The average of several tensors: the sum in rank order (in the dtype's math type), divided by the world
  /// size in the same pass. Two passes over the gradients fewer than a bucket copy, `run` and a copy back.
  void run_average(const FlatView& flat, c10::ScalarType dtype) {
    run_schedule(
        flat, dtype, kAverageOp, [&](char* data, char* own_slot, int64_t position, int64_t count, int set) {
          AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "average_in_shared_memory", [&] {
            std::vector<const scalar_t*> inputs;
            for (int rank = 0; rank < size_; ++rank) {
              inputs.push_back(reinterpret_cast<const scalar_t*>(
                  rank == rank_ ? data : segment_->slot(set, rank) + position));
            }
            average_into<scalar_t>(inputs, reinterpret_cast<scalar_t*>(data),
                                   reinterpret_cast<scalar_t*>(own_slot + position), count);
          });
        });
  }

  /// The schedule of every collective here, over the flat elements in chunks of one slot: this process copies
  /// every element but its own share into its slot; barrier; it reduces its own share, calling
  /// reduce_share(tensor data, its own slot, byte position in the slots, count, slot set) for each piece of
  /// it, which leaves the result in the tensor and publishes it in the slot; barrier; it copies every other
  /// process's share from that process's slot into its tensors.
  template <typename ReduceShare>
  void run_schedule(const FlatView& flat, c10::ScalarType dtype, int32_t op, ReduceShare&& reduce_share) {
    const int world = size_;
    const int64_t numel = flat.numel();
    const auto element = static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t slot_elements = static_cast<int64_t>(segment_->slot_bytes()) / element;
    announce(numel, dtype, op);

    const int64_t chunks = std::max<int64_t>(1, (numel + slot_elements - 1) / slot_elements);
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const int64_t offset = chunk * slot_elements;
      const int64_t count = std::min(slot_elements, numel - offset);
      const int set = next_set();
      const int64_t share = (count + world - 1) / world;
      auto bounds = [&](int rank) {
        const int64_t begin = std::min(count, rank * share);
        return std::make_pair(begin, std::min(count, begin + share));
      };
      const auto [begin, end] = bounds(rank_);
      char* const own_slot = segment_->slot(set, rank_);
      auto to_slot = [&](char* data, int64_t at, int64_t n) {
        copy_bytes(own_slot + (at - offset) * element, data, n * element);
      };
      flat.for_each_piece(offset, offset + begin, element, to_slot);
      flat.for_each_piece(offset + end, offset + count, element, to_slot);
      arrive_and_wait();
      if (chunk == 0) {
        check_same_collective(numel, dtype, op);
      }
      flat.for_each_piece(offset + begin, offset + end, element, [&](char* data, int64_t at, int64_t n) {
        reduce_share(data, own_slot, (at - offset) * element, n, set);
      });
      arrive_and_wait();
      for (int owner = 0; owner < world; ++owner) {
        if (owner == rank_) {
          continue;
        }
        const auto [first, last] = bounds(owner);
        const char* const their_slot = segment_->slot(set, owner);
        flat.for_each_piece(offset + first, offset + last, element, [&](char* data, int64_t at, int64_t n) {
          copy_bytes(data, their_slot + (at - offset) * element, n * element);
        });
      }
    }
  }

  /// Reduce-scatter with averaging: process r's `share` output elements are the average of elements
  /// [r * share, (r + 1) * share) of every process's input. Chunk c covers piece c (`piece` elements) of
  /// every owner's range, so every process averages in every chunk. `output` may be this process's range of
  /// `input`: it reads each element of that range once, in the same block of `average_into` that writes it.
  void run_reduce_scatter_average(char* output, const char* input, int64_t share, c10::ScalarType dtype) {
    const int world = size_;
    const auto element = static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t piece = static_cast<int64_t>(segment_->slot_bytes()) / element / world;
    TORCH_INTERNAL_ASSERT(piece > 0, "a slot holds fewer elements than there are processes");
    announce(world * share, dtype, kReduceScatterAverageOp);
    const int64_t chunks = std::max<int64_t>(1, (share + piece - 1) / piece);
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const int64_t offset = chunk * piece;
      const int64_t count = std::min(piece, share - offset);
      const int set = next_set();
      char* const own_slot = segment_->slot(set, rank_);
      for (int owner = 0; owner < world; ++owner) {
        if (owner != rank_) {
          copy_bytes(own_slot + owner * piece * element, input + (owner * share + offset) * element,
                     count * element);
        }
      }
      arrive_and_wait();
      if (chunk == 0) {
        check_same_collective(world * share, dtype, kReduceScatterAverageOp);
      }
      AT_DISPATCH_FLOATING_TYPES_AND2(
          at::kHalf, at::kBFloat16, dtype, "reduce_scatter_average_in_shared_memory", [&] {
            std::vector<const scalar_t*> inputs;
            for (int rank = 0; rank < world; ++rank) {
              inputs.push_back(reinterpret_cast<const scalar_t*>(
                  rank == rank_ ? input + (rank_ * share + offset) * element
                                : segment_->slot(set, rank) + rank_ * piece * element));
            }
            average_into<scalar_t>(inputs, reinterpret_cast<scalar_t*>(output + offset * element), nullptr,
                                   count);
          });
    }
  }

  /// All-gather: every process's `share` input elements land at [k * share, (k + 1) * share) of every output,
  /// one slot's worth per chunk. `input` may be this process's range of `output` (then it is not copied).
  void run_all_gather(char* output, const char* input, int64_t share, c10::ScalarType dtype) {
    const int world = size_;
    const auto element = static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t piece = static_cast<int64_t>(segment_->slot_bytes()) / element;
    announce(world * share, dtype, kAllGatherOp);
    const int64_t chunks = std::max<int64_t>(1, (share + piece - 1) / piece);
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const int64_t offset = chunk * piece;
      const int64_t count = std::min(piece, share - offset);
      const int set = next_set();
      copy_bytes(segment_->slot(set, rank_), input + offset * element, count * element);
      arrive_and_wait();
      if (chunk == 0) {
        check_same_collective(world * share, dtype, kAllGatherOp);
      }
      for (int owner = 0; owner < world; ++owner) {
        char* const destination = output + (owner * share + offset) * element;
        const char* const source = owner == rank_ ? input + offset * element : segment_->slot(set, owner);
        if (destination != source) {
          copy_bytes(destination, source, count * element);
        }
      }
    }
  }

  /// Publishes what this process is about to run, for `check_same_collective` and for messages.
  void announce(int64_t numel, c10::ScalarType dtype, int32_t op) {
    Announcement& mine = segment_->rank_state(rank_).announced[++collectives_ & 1];
    mine.numel.store(numel, std::memory_order_relaxed);
    mine.dtype.store(static_cast<int32_t>(dtype), std::memory_order_relaxed);
    mine.op.store(op, std::memory_order_relaxed);
    running_ = op;
  }

  /// The slot set of the next chunk: they alternate over every chunk of every collective.
  int next_set() { return static_cast<int>(sets_used_++ & 1); }

  void check_same_collective(int64_t numel, c10::ScalarType dtype, int32_t op) {
    for (int other = 0; other < size_; ++other) {
      const Announcement& theirs = segment_->rank_state(other).announced[collectives_ & 1];
      const auto their_numel = theirs.numel.load(std::memory_order_relaxed);
      const auto their_dtype = static_cast<c10::ScalarType>(theirs.dtype.load(std::memory_order_relaxed));
      const auto their_op = theirs.op.load(std::memory_order_relaxed);
      if ((their_numel != numel || their_dtype != dtype || their_op != op) &&
          !(is_all_reduce(op) && is_all_reduce(their_op))) {
        std::ostringstream message;
        message
            << "accelerate: collective mismatch: process " << rank_ << " runs " << describe_collective(op)
            << " over " << numel << " elements of " << dtype << " but process " << other << " runs "
            << describe_collective(their_op) << " over " << their_numel << " elements of " << their_dtype
            << "; every process must issue the same collectives on tensors of the same size and dtype, in "
               "the same order";
        throw std::runtime_error(message.str());
      }
      if (their_numel != numel || their_dtype != dtype || their_op != op) {
        std::ostringstream message;
        message << "accelerate: all-reduce mismatch: process " << rank_ << " reduces " << numel
                << " elements of " << dtype << " (" << collective_name(op) << ") but process " << other
                << " reduces " << their_numel << " elements of " << their_dtype << " ("
                << collective_name(their_op)
                << "); every process must all-reduce tensors of the same size and dtype, in the same order";
        throw std::runtime_error(message.str());
      }
    }
  }

  /// "an all-reduce" (every kind), "a reduce-scatter" or "an all-gather": what a waiting process is in.
  std::string describe_running() const {
    return running_ == kReduceScatterAverageOp ? "a reduce-scatter"
           : running_ == kAllGatherOp          ? "an all-gather"
                                               : "an all-reduce";
  }

  /// The barrier: publish the next generation, wake sleepers, wait until every process has reached it.
  /// Spins briefly (a partner on another core arrives within microseconds), then sleeps on the futex word,
  /// checking every 100 ms that the missing processes still exist.
  void arrive_and_wait() {
    const uint64_t generation = ++generation_;
    SegmentHeader* head = segment_->header();
    segment_->rank_state(rank_).arrived.store(generation, std::memory_order_seq_cst);
    head->epoch.fetch_add(1, std::memory_order_seq_cst);
    if (head->sleepers.load(std::memory_order_seq_cst) > 0) {
      futex(&head->epoch, FUTEX_WAKE, INT_MAX, nullptr);
    }

    const auto start = std::chrono::steady_clock::now();
    auto next_check = start + std::chrono::milliseconds(100);
    for (uint64_t spins = 0;; ++spins) {
      const uint32_t epoch = head->epoch.load(std::memory_order_seq_cst);
      int missing = -1;
      for (int other = 0; other < size_ && missing < 0; ++other) {
        if (segment_->rank_state(other).arrived.load(std::memory_order_acquire) < generation) {
          missing = other;
        }
      }
      if (missing < 0) {
        return;
      }
      if (group_abandoned()) {
        throw_group_abandoned(); // a process gave the group up (transport/abandon.h): it never arrives
      }
      if (spins < 2000) {
        if (spins % 64 == 63) {
          sched_yield();
        } else {
          cpu_relax();
        }
        continue;
      }
      head->sleepers.fetch_add(1, std::memory_order_seq_cst);
      const timespec nap{0, 20 * 1000 * 1000};
      futex(&head->epoch, FUTEX_WAIT, epoch, &nap);
      head->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      const auto now = std::chrono::steady_clock::now();
      if (now < next_check) {
        continue;
      }
      next_check = now + std::chrono::milliseconds(100);
      const pid_t pid = segment_->rank_state(missing).pid.load(std::memory_order_relaxed);
      if (check_pids_ && pid > 0 && process_gone(pid)) {
        throw std::runtime_error("accelerate: process " + std::to_string(missing) + " (pid " +
                                 std::to_string(pid) + ") exited while process " + std::to_string(rank_) +
                                 " waited for it in " + describe_running() +
                                 "; see that process's output for why it stopped");
      }
      if (now - start > timeout_) {
        throw std::runtime_error(
            "accelerate: process " + std::to_string(rank_) + " waited " + std::to_string(timeout_.count()) +
            " ms for process " + std::to_string(missing) + " in " + describe_running() +
            "; it is stuck or skipped the collective (every process must issue the same "
            "collectives in the same order; ACCELERATE_DEBUG_MODE=1 names the call that differs)");
      }
    }
  }

  std::unique_ptr<Segment> segment_;
  std::chrono::milliseconds timeout_;
  bool check_pids_;
  uint64_t generation_ = 0;
  uint64_t sets_used_ = 0;
  uint64_t collectives_ = 0;
  int32_t running_ = c10d::ReduceOp::SUM; // the collective in progress (for messages)
  std::string failure_;
};

std::string get_string(c10d::Store& store, const std::string& key) {
  const auto value = store.get(key);
  return std::string(value.begin(), value.end());
}

void set_string(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

} // namespace

c10::intrusive_ptr<c10d::Backend> wrap_backend_with_shared_memory(
    c10::intrusive_ptr<c10d::Backend> inner, const c10::intrusive_ptr<c10d::Store>& store,
    std::chrono::milliseconds timeout, const std::string& apart, const std::string& run_id) {
  const int rank = inner->getRank();
  const int world = inner->getSize();
  if (world < 2) {
    return inner;
  }
  std::string setting = "auto";
  if (const char* value = std::getenv("ACCELERATE_SHM_ALLREDUCE"); value != nullptr && *value != '\0') {
    setting = value;
  }
  bool wanted = true;
  bool required = false;
  if (setting == "0" || setting == "false" || setting == "no" || setting == "off") {
    wanted = false;
  } else if (setting == "1" || setting == "true" || setting == "yes" || setting == "on") {
    required = true;
  } else if (setting != "auto") {
    throw std::invalid_argument("accelerate: ACCELERATE_SHM_ALLREDUCE must be auto, 1 or 0 (got '" + setting +
                                "')");
  }
  if (!apart.empty()) {
    if (required) {
      throw std::runtime_error("accelerate: ACCELERATE_SHM_ALLREDUCE=1 but " + apart +
                               "; unset it to all-reduce through Gloo instead");
    }
    return inner;
  }

  // Rank 0 creates the segment and announces "<name> <nonce>" (or why not); each process then answers "ok"
  // or why it cannot use it, and every process reads every answer, so that all decide alike.
  auto segment = std::make_unique<Segment>(world);
  const std::string prefix = "accelerate/shm_allreduce/";
  std::string answer = "ok";
  if (rank == 0) {
    std::string announcement = "-";
    if (wanted) {
      try {
        const uint64_t nonce = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
        announcement = segment->create(nonce, run_id) + " " + std::to_string(nonce);
      } catch (const std::exception& error) {
        answer = error.what();
      }
    } else {
      answer = "turned off by ACCELERATE_SHM_ALLREDUCE on process 0";
    }
    set_string(*store, prefix + "segment", announcement);
  } else {
    const std::string announcement = get_string(*store, prefix + "segment");
    if (!wanted) {
      answer = "turned off by ACCELERATE_SHM_ALLREDUCE on process " + std::to_string(rank);
    } else if (announcement != "-") {
      try {
        const auto space = announcement.find(' ');
        segment->open(announcement.substr(0, space), std::stoull(announcement.substr(space + 1)));
      } catch (const std::exception& error) {
        answer = error.what();
      }
    } else {
      answer = "process 0 has no segment";
    }
  }
  if (answer == "ok") {
    segment->rank_state(rank).pid.store(static_cast<int32_t>(getpid()));
  }
  set_string(*store, prefix + "answer/" + std::to_string(rank), answer);
  std::string refusal;
  for (int other = 0; other < world; ++other) {
    const std::string theirs = get_string(*store, prefix + "answer/" + std::to_string(other));
    if (theirs != "ok" && refusal.empty()) {
      refusal = "process " + std::to_string(other) + ": " + theirs;
    }
  }
  if (rank == 0) {
    segment->unlink();
  }
  if (!refusal.empty()) {
    if (required) {
      throw std::runtime_error(
          "accelerate: ACCELERATE_SHM_ALLREDUCE=1 but the processes cannot share memory (" + refusal +
          "); unset it to all-reduce through Gloo instead");
    }
    return inner;
  }
  // Liveness checks by pid only work when every process sees the others' pids (one pid namespace).
  bool check_pids = true;
  for (int other = 0; other < world; ++other) {
    const pid_t pid = segment->rank_state(other).pid.load();
    check_pids = check_pids && pid > 0 && kill(pid, 0) == 0;
  }
  return c10::make_intrusive<SharedMemoryAllreduceBackend>(std::move(inner), std::move(segment), timeout,
                                                           check_pids);
}

namespace {

/// The shared-memory backend under `backend` (through the heartbeat's recording, never through debug mode's
/// checking), or null.
SharedMemoryAllreduceBackend* shared_memory_backend(const c10::intrusive_ptr<c10d::Backend>& backend) {
  return dynamic_cast<SharedMemoryAllreduceBackend*>(unrecorded(backend).get());
}

/// The byte count the heartbeat notes for `tensors`.
std::uint64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  std::uint64_t bytes = 0;
  for (const auto& tensor : tensors) {
    bytes += tensor.nbytes();
  }
  return bytes;
}

} // namespace

bool uses_shared_memory_allreduce(const c10::intrusive_ptr<c10d::Backend>& backend) {
  return shared_memory_backend(backend) != nullptr;
}

void average_in_shared_memory(const c10::intrusive_ptr<c10d::Backend>& backend,
                              const std::vector<at::Tensor>& tensors) {
  auto* shared = shared_memory_backend(backend);
  TORCH_CHECK(shared != nullptr, "accelerate: average_in_shared_memory needs the shared-memory backend");
  watch::note_collective("allreduce", bytes_of(tensors));
  shared->average(tensors);
}

void reduce_scatter_average_in_shared_memory(const c10::intrusive_ptr<c10d::Backend>& backend,
                                             const at::Tensor& output, const at::Tensor& input) {
  auto* shared = shared_memory_backend(backend);
  TORCH_CHECK(shared != nullptr,
              "accelerate: reduce_scatter_average_in_shared_memory needs the shared-memory backend");
  watch::note_collective("reduce_scatter", input.nbytes());
  shared->reduce_scatter_average(output, input);
}

void all_gather_in_shared_memory(const c10::intrusive_ptr<c10d::Backend>& backend, const at::Tensor& output,
                                 const at::Tensor& input) {
  auto* shared = shared_memory_backend(backend);
  TORCH_CHECK(shared != nullptr, "accelerate: all_gather_in_shared_memory needs the shared-memory backend");
  watch::note_collective("allgather", input.nbytes());
  shared->all_gather(output, input);
}

} // namespace accelerate::detail
