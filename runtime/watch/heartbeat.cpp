// Heartbeats of the processes of a job and the watcher that names a silent one (see heartbeat.h).
#include "watch/heartbeat.h"

#include "common/durable_file.h"
#include "watch/stacks.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace accelerate::watch {
namespace {

/// A beat file's bytes: mapped shared by the process that beats, so the collective it entered last is in the
/// file the moment it enters it (a watcher reading a stopped process sees where it stopped), and the count
/// moves with each heartbeat.
struct Record {
  char magic[8];
  std::int32_t rank;
  std::int32_t pid;
  char host[64];
  std::uint64_t count;
  std::uint64_t collective;
  std::uint64_t bytes;
  char op[32];
  std::int32_t stack_signal; // from here on: version 2 (ACCBEAT2)
  std::uint32_t stacks;
};
constexpr char kMagic[8] = {'A', 'C', 'C', 'B', 'E', 'A', 'T', '2'};
/// Version 1's magic: its records end before stack_signal (read as "no stack report").
constexpr char kMagicVersion1[8] = {'A', 'C', 'C', 'B', 'E', 'A', 'T', '1'};
constexpr std::size_t kVersion1Size = offsetof(Record, stack_signal);

struct Collectives {
  std::mutex mutex;
  std::uint64_t count = 0;
  std::string op = "-";
  std::uint64_t bytes = 0;
  Record* mapped = nullptr; ///< this process's beat file, once the heartbeat started
};

Collectives& collectives_entered() {
  static auto* entered = new Collectives(); // never destroyed: the heartbeat thread reads it to the end
  return *entered;
}

void copy_text(char* destination, std::size_t size, const std::string& text) {
  std::memset(destination, 0, size);
  std::memcpy(destination, text.data(), std::min(size - 1, text.size()));
}

/// Writes the collective fields of `entered` into its mapped record (caller holds the mutex).
void publish(Collectives& entered) {
  if (entered.mapped == nullptr) {
    return;
  }
  copy_text(entered.mapped->op, sizeof(entered.mapped->op), entered.op);
  __atomic_store_n(&entered.mapped->bytes, entered.bytes, __ATOMIC_RELAXED);
  __atomic_store_n(&entered.mapped->collective, entered.count, __ATOMIC_RELEASE);
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) {
    return "unknown";
  }
  return name;
}

/// Creates `path` whole (a temporary file renamed over it, so a watcher never reads half a record) and maps
/// it; null when that fails.
Record* create_record(const std::string& path, int rank, int stack_signal) {
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return nullptr;
  }
  Record record{};
  std::memcpy(record.magic, kMagic, sizeof(kMagic));
  record.rank = rank;
  record.pid = static_cast<std::int32_t>(::getpid());
  record.stack_signal = stack_signal;
  copy_text(record.host, sizeof(record.host), host_name());
  copy_text(record.op, sizeof(record.op), "-");
  void* mapped = MAP_FAILED;
  if (::write(fd, &record, sizeof(record)) == static_cast<ssize_t>(sizeof(record))) {
    mapped = ::mmap(nullptr, sizeof(Record), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (mapped == MAP_FAILED || ::rename(temporary.c_str(), path.c_str()) != 0) {
    ::unlink(temporary.c_str());
    return nullptr;
  }
  return static_cast<Record*>(mapped);
}

} // namespace

std::string beat_path(const std::string& dir, int rank) {
  return dir + "/rank" + std::to_string(rank) + ".beat";
}

std::optional<Beat> read_beat(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return std::nullopt;
  }
  Record record{};
  const ssize_t got = ::pread(fd, &record, sizeof(record), 0);
  ::close(fd);
  const bool version2 =
      got == static_cast<ssize_t>(sizeof(record)) && std::memcmp(record.magic, kMagic, sizeof(kMagic)) == 0;
  const bool version1 = got >= static_cast<ssize_t>(kVersion1Size) &&
                        std::memcmp(record.magic, kMagicVersion1, sizeof(kMagicVersion1)) == 0;
  if (!version2 && !version1) {
    return std::nullopt;
  }
  if (!version2) {
    record.stack_signal = 0;
    record.stacks = 0;
  }
  record.host[sizeof(record.host) - 1] = '\0';
  record.op[sizeof(record.op) - 1] = '\0';
  Beat beat;
  beat.rank = record.rank;
  beat.pid = record.pid;
  beat.host = record.host;
  beat.count = record.count;
  beat.collective = record.collective;
  beat.op = record.op;
  beat.bytes = record.bytes;
  beat.stack_signal = record.stack_signal;
  beat.stacks = record.stacks;
  return beat;
}

void note_collective(const char* op, std::uint64_t bytes) {
  Collectives& entered = collectives_entered();
  std::lock_guard<std::mutex> lock(entered.mutex);
  ++entered.count;
  entered.op = op;
  entered.bytes = bytes;
  publish(entered);
}

void start_heartbeat(const std::string& dir, int rank, std::chrono::milliseconds interval) {
  static std::once_flag started;
  std::call_once(started, [&] {
    detail::make_directories(dir); // throws FileError naming the folder that cannot be made
    const bool stacks =
        install_stack_report("process " + std::to_string(rank) + " (pid " + std::to_string(::getpid()) + ")");
    Record* record = create_record(beat_path(dir, rank), rank, stacks ? kStackSignal : 0);
    if (record == nullptr) {
      throw std::runtime_error("accelerate: cannot write the heartbeat file " + beat_path(dir, rank) + ": " +
                               std::strerror(errno));
    }
    {
      Collectives& entered = collectives_entered();
      std::lock_guard<std::mutex> lock(entered.mutex);
      entered.mapped = record;
      publish(entered);
    }
    // A process that ends normally takes its beat (and the folders, once empty) with it.
    static std::string* folder = new std::string(dir);
    static std::string* path = new std::string(beat_path(dir, rank));
    std::atexit([] {
      ::unlink(path->c_str());
      ::rmdir(folder->c_str());
      ::rmdir(folder->substr(0, folder->rfind('/')).c_str());
    });
    // Detached and never joined: it beats until the process ends, whatever the program does after training
    // (a process that stops beating while alive is taken for a hung one). The mapping is never unmapped.
    std::thread([record, interval] {
      while (true) {
        std::this_thread::sleep_for(interval);
        __atomic_store_n(&record->stacks, stacks_printed(), __ATOMIC_RELAXED);
        __atomic_add_fetch(&record->count, 1, __ATOMIC_RELEASE);
      }
    }).detach();
  });
}

std::string process_state(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) {
    return "gone";
  }
  const auto close = text.rfind(')');
  const char state = close != std::string::npos && close + 2 < text.size() ? text[close + 2] : '?';
  std::string words;
  switch (state) {
  case 'R':
    words = "running";
    break;
  case 'S':
    words = "sleeping";
    break;
  case 'D':
    words = "in uninterruptible I/O";
    break;
  case 'T':
    words = "stopped";
    break;
  case 't':
    words = "stopped by a debugger";
    break;
  case 'Z':
    words = "exited (a zombie)";
    break;
  default:
    words = "in state";
  }
  std::string channel;
  std::ifstream wchan("/proc/" + std::to_string(pid) + "/wchan");
  std::getline(wchan, channel);
  return words + " (" + std::string(1, state) +
         (channel.empty() || channel == "0" ? "" : ", wait channel " + channel) + ")";
}

bool process_alive(int pid) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) {
    return false;
  }
  const std::string state = process_state(pid);
  return state != "gone" && state.rfind("exited", 0) != 0;
}

std::string seconds_text(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

Watcher::Watcher(std::string dir, std::vector<int> ranks, std::chrono::milliseconds timeout)
    : dir_(std::move(dir)), timeout_(timeout) {
  for (int rank : ranks) {
    seen_.push_back({rank, std::nullopt, std::chrono::steady_clock::now()});
  }
}

std::optional<int> Watcher::silent_rank() {
  const auto now = std::chrono::steady_clock::now();
  for (Seen& seen : seen_) {
    auto beat = read_beat(beat_path(dir_, seen.rank));
    if (!beat) {
      continue;
    }
    const bool moved = !seen.beat || seen.beat->count != beat->count || seen.beat->pid != beat->pid;
    seen.beat = beat; // the collective fields are current even while the count stands still
    if (moved) {
      seen.changed = now;
      continue;
    }
    if (now - seen.changed >= timeout_ && process_alive(beat->pid)) {
      return seen.rank;
    }
  }
  return std::nullopt;
}

std::optional<Beat> Watcher::last_beat(int rank) const {
  for (const Seen& seen : seen_) {
    if (seen.rank == rank) {
      return seen.beat;
    }
  }
  return std::nullopt;
}

bool Watcher::beating(int rank) const {
  for (const Seen& seen : seen_) {
    if (seen.rank == rank) {
      return seen.beat && std::chrono::steady_clock::now() - seen.changed < timeout_;
    }
  }
  return false;
}

namespace {

std::string collective_text(const Beat& beat) {
  if (beat.collective == 0) {
    return "no collective yet";
  }
  return "collective #" + std::to_string(beat.collective) + " " + beat.op + " of " +
         std::to_string(beat.bytes) + " bytes";
}

} // namespace

std::vector<int> Watcher::behind() const {
  std::uint64_t most = 0;
  for (const Seen& seen : seen_) {
    if (seen.beat) {
      most = std::max(most, seen.beat->collective);
    }
  }
  std::vector<int> ranks;
  for (const Seen& seen : seen_) {
    if (seen.beat && seen.beat->collective < most) {
      ranks.push_back(seen.rank);
    }
  }
  return ranks;
}

std::string Watcher::collectives() const {
  std::string text;
  for (const Seen& seen : seen_) {
    if (seen.beat) {
      text += (text.empty() ? "" : "; ") +
              ("rank " + std::to_string(seen.rank) + " entered " + collective_text(*seen.beat) + " last");
    }
  }
  std::string behind;
  for (int rank : this->behind()) {
    behind += (behind.empty() ? "" : ", ") + std::to_string(rank);
  }
  if (!behind.empty()) {
    text += " (behind the others: rank " + behind + ")";
  }
  return text;
}

StackRequest::StackRequest(const std::string& dir, const std::vector<int>& ranks) : dir_(dir) {
  for (int rank : ranks) {
    auto beat = read_beat(beat_path(dir, rank));
    if (!beat || beat->stack_signal == 0 || beat->host != host_name().substr(0, 63) ||
        !process_alive(beat->pid)) {
      continue;
    }
    if (::kill(beat->pid, beat->stack_signal) == 0) {
      asked_.push_back({rank, beat->pid, beat->stacks});
    }
  }
}

bool StackRequest::done() const {
  return std::all_of(asked_.begin(), asked_.end(), [&](const Asked& asked) {
    auto beat = read_beat(beat_path(dir_, asked.rank));
    return !beat || beat->pid != asked.pid || beat->stacks != asked.stacks_before ||
           !process_alive(asked.pid);
  });
}

std::string StackRequest::asked() const {
  std::string text;
  for (const Asked& asked : asked_) {
    text += (text.empty() ? "" : ", ") + std::to_string(asked.rank);
  }
  return text;
}

namespace {

/// The names in folder `path` (without "." and ".."); nullopt when it cannot be read.
std::optional<std::vector<std::string>> folder_entries(const std::string& path) {
  DIR* folder = ::opendir(path.c_str());
  if (folder == nullptr) {
    return std::nullopt;
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(folder)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") {
      names.push_back(name);
    }
  }
  ::closedir(folder);
  return names;
}

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

} // namespace

int sweep_stale_heartbeat_folders(const std::string& tmp, std::chrono::seconds quiet) {
  const std::string prefix = "accelerate-" + std::to_string(::getuid()) + "-";
  auto names = folder_entries(tmp);
  if (!names) {
    return 0;
  }
  int removed = 0;
  const auto now = std::chrono::system_clock::now();
  for (const std::string& name : *names) {
    if (name.rfind(prefix, 0) != 0) {
      continue;
    }
    const std::string base = tmp + "/" + name;
    const std::string beats = base + "/heartbeats";
    struct stat info{};
    if (::lstat(beats.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != ::getuid()) {
      continue;
    }
    const auto changed = std::chrono::system_clock::from_time_t(info.st_mtime);
    auto files = folder_entries(beats);
    auto above = folder_entries(base);
    if (!files || !above || above->size() != 1 || now - changed < quiet) {
      continue;
    }
    bool stale = true;
    for (const std::string& file : *files) {
      const bool beat_file =
          file.rfind("rank", 0) == 0 && (ends_with(file, ".beat") || ends_with(file, ".tmp"));
      auto beat = ends_with(file, ".beat") ? read_beat(beats + "/" + file) : std::nullopt;
      if (!beat_file || (beat && process_alive(beat->pid))) {
        stale = false;
        break;
      }
    }
    if (!stale) {
      continue;
    }
    for (const std::string& file : *files) {
      ::unlink((beats + "/" + file).c_str());
    }
    if (::rmdir(beats.c_str()) == 0 && ::rmdir(base.c_str()) == 0) {
      ++removed;
    }
  }
  return removed;
}

std::string Watcher::report(int rank) const {
  auto beat = last_beat(rank);
  if (!beat) {
    return "rank " + std::to_string(rank) + " gave no heartbeat";
  }
  std::string others;
  for (const Seen& seen : seen_) {
    if (seen.rank != rank && seen.beat) {
      others += (others.empty() ? "" : ", ") +
                ("rank " + std::to_string(seen.rank) + " at #" + std::to_string(seen.beat->collective));
    }
  }
  return "rank " + std::to_string(rank) + " (pid " + std::to_string(beat->pid) + " on " + beat->host +
         ") gave no heartbeat for " + seconds_text(timeout_) + ": it is " + process_state(beat->pid) +
         "; its last " + collective_text(*beat) + (others.empty() ? "" : " (the others: " + others + ")");
}

} // namespace accelerate::watch
