// Stacks of a job's processes: the caller's location for messages, and the main thread's stack printed on
// request (see stacks.h).
#include "watch/stacks.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace accelerate::watch {
namespace {

/// Libraries whose frames are not the caller's code: libtorch, this runtime, Gloo/NCCL/CUDA, libc, libstdc++.
bool is_library_frame(const std::string& path) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  static const char* const prefixes[] = {"libtorch", "libc10",     "libaccelerate_runtime",
                                         "libgloo",  "libstdc++",  "libc.so",
                                         "libc-",    "libgcc_s",   "ld-linux",
                                         "libgomp",  "libpthread", "libshm",
                                         "libnccl",  "libcuda",    "libcudart",
                                         "libm.so",  "libdl.so",   "libprotobuf",
                                         "libkineto"};
  return std::any_of(std::begin(prefixes), std::end(prefixes),
                     [&](const char* prefix) { return name.rfind(prefix, 0) == 0; });
}

std::string executable_path() {
  char buffer[4096];
  const ssize_t length = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  return length > 0 ? std::string(buffer, static_cast<size_t>(length)) : std::string();
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return quoted + "'";
}

std::string hex(uintptr_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

/// A frame's binary (a path addr2line can read) and its offset in it. `return_address`: the frame's address
/// is where a call returns to; step back one byte to land in the calling line.
struct FramePlace {
  std::string binary;
  uintptr_t offset = 0;
  std::string symbol; ///< the dynamic symbol dladdr knows, demangled; empty when none
};

std::string demangled(const char* name) {
  int status = 0;
  char* text = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string result = status == 0 && text != nullptr ? text : name;
  std::free(text);
  return result;
}

std::optional<FramePlace> place_of(void* frame, bool return_address) {
  Dl_info info{};
  if (::dladdr(frame, &info) == 0 || info.dli_fname == nullptr) {
    return std::nullopt;
  }
  FramePlace place;
  place.binary = info.dli_fname;
  if (place.binary.empty() || ::access(place.binary.c_str(), R_OK) != 0) {
    place.binary = executable_path();
  }
  place.offset = reinterpret_cast<uintptr_t>(frame) - (return_address ? 1 : 0) -
                 reinterpret_cast<uintptr_t>(info.dli_fbase);
  if (info.dli_sname != nullptr) {
    place.symbol = demangled(info.dli_sname);
  }
  return place;
}

/// What addr2line says of an offset: the function and `file:line`, each empty when it does not know.
struct SourcePlace {
  std::string function;
  std::string file_line;
};

/// addr2line over several offsets of one binary (one process for all): a SourcePlace per offset, in order.
std::vector<SourcePlace> addr2line(const std::string& binary, const std::vector<uintptr_t>& offsets) {
  std::vector<SourcePlace> places(offsets.size());
  std::string command = "addr2line -C -f -e " + shell_quote(binary);
  for (uintptr_t offset : offsets) {
    command += " " + hex(offset);
  }
  command += " 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return places;
  }
  auto read_line = [&](std::string& text) {
    char line[4096];
    if (std::fgets(line, sizeof(line), pipe) == nullptr) {
      return false;
    }
    text = line;
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
      text.pop_back();
    }
    return true;
  };
  for (SourcePlace& place : places) {
    std::string function, file;
    if (!read_line(function) || !read_line(file)) {
      break;
    }
    if (const auto discriminator = file.find(" (discriminator"); discriminator != std::string::npos) {
      file.erase(discriminator);
    }
    place.function = function != "??" ? function : "";
    const bool known_file = !file.empty() && file.rfind("??", 0) != 0;
    const bool known_line = known_file && file.back() != '?' && file.compare(file.size() - 2, 2, ":0") != 0;
    // Symbols without debug information name the source file but no line: keep only what is known.
    place.file_line = known_line ? file : known_file ? file.substr(0, file.rfind(':')) : "";
  }
  ::pclose(pipe);
  return places;
}

std::string base_name(const std::string& path) {
  return path.substr(path.find_last_of('/') + 1);
}

// ---- The stack on request --------------------------------------------------------------------------------

constexpr int kMaxFrames = 64;

struct Capture {
  void* frames[kMaxFrames];
  int count = 0;
  pid_t sender = 0;
};

Capture capture;                    // written by the handler on the main thread, read by the reporter
std::atomic<bool> capturing{false}; // a capture is taken and not yet printed
std::atomic<unsigned> printed{0};   // stacks printed so far
int wake_fds[2] = {-1, -1};         // the handler writes a byte; the reporter thread reads it
std::string* report_who = nullptr;  // "process 1 (pid 4242)"

void on_stack_signal(int, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const pid_t process = ::getpid();
  if (static_cast<pid_t>(::syscall(SYS_gettid)) != process) {
    // Another thread took it: the stack worth printing is the main thread's (the training loop).
    ::syscall(SYS_tgkill, process, process, kStackSignal);
  } else if (!capturing.exchange(true)) {
    capture.count = ::backtrace(capture.frames, kMaxFrames); // primed at install: no loading here
    capture.sender = info != nullptr ? info->si_pid : 0;
    const char byte = 's';
    [[maybe_unused]] const ssize_t written = ::write(wake_fds[1], &byte, 1);
  }
  errno = saved_errno;
}

std::string process_name(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

/// The captured stack in words: one line per frame below the handler and the signal's return trampoline.
std::string describe_capture(const Capture& taken) {
  struct Line {
    std::optional<FramePlace> place;
    std::string text;
  };
  std::vector<Line> lines;
  std::map<std::string, std::vector<size_t>> asked; // binary -> the lines whose offsets addr2line names
  // Frame 0 is the handler, frame 1 the kernel's return into it (libc's __restore_rt); frame 2 is where the
  // thread was interrupted (not a return address), the others are return addresses.
  for (int i = 2; i < taken.count; ++i) {
    Line line;
    line.place = place_of(taken.frames[i], /*return_address=*/i > 2);
    // The program's own frames, and any without a dynamic symbol (static functions), go to addr2line.
    if (line.place && (!is_library_frame(line.place->binary) || line.place->symbol.empty())) {
      asked[line.place->binary].push_back(lines.size());
    }
    lines.push_back(std::move(line));
  }
  for (const auto& [binary, indices] : asked) {
    std::vector<uintptr_t> offsets;
    for (size_t index : indices) {
      offsets.push_back(lines[index].place->offset);
    }
    const auto places = addr2line(binary, offsets);
    for (size_t k = 0; k < indices.size(); ++k) {
      const SourcePlace& source = places[k];
      Line& line = lines[indices[k]];
      const std::string function = !source.function.empty() ? source.function : line.place->symbol;
      if (!function.empty() || !source.file_line.empty()) {
        line.text = (function.empty() ? std::string("??") : function) +
                    (source.file_line.empty() ? "" : " at " + source.file_line);
      }
    }
  }
  std::string text;
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& line = lines[i];
    std::string frame = line.text;
    if (frame.empty()) {
      if (!line.place) {
        frame = "?? (" + hex(reinterpret_cast<uintptr_t>(taken.frames[i + 2])) + ")";
      } else {
        std::string symbol = line.place->symbol.empty() ? "??" : line.place->symbol;
        if (symbol.size() > 200) {
          symbol = symbol.substr(0, 197) + "...";
        }
        frame = symbol + " (" + base_name(line.place->binary) + "+" + hex(line.place->offset) + ")";
      }
    }
    text += "  #" + std::to_string(i) + " " + frame + "\n";
  }
  return text;
}

void report_stacks() {
  while (true) {
    char byte = 0;
    const ssize_t got = ::read(wake_fds[0], &byte, 1);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) {
        continue;
      }
      return;
    }
    const Capture taken = capture;
    std::string asker;
    if (taken.sender > 0) {
      const std::string name = process_name(taken.sender);
      asker = ", asked for by pid " + std::to_string(taken.sender) + (name.empty() ? "" : " (" + name + ")");
    }
    const std::string text = "accelerate: " + *report_who + ": its main thread's stack" + asker + ":\n" +
                             describe_capture(taken) + "accelerate: end of the stack of " + *report_who +
                             "\n";
    // One write where the stream allows it, so that the lines of two processes sharing a terminal do not mix.
    std::fflush(stderr);
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t wrote = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
      if (wrote < 0 && errno == EINTR) {
        continue;
      }
      if (wrote <= 0) {
        break;
      }
      done += static_cast<size_t>(wrote);
    }
    printed.fetch_add(1);
    capturing.store(false);
  }
}

} // namespace

std::string caller_location() {
  void* frames[kMaxFrames];
  const int count = ::backtrace(frames, kMaxFrames);
  for (int i = 1; i < count; ++i) {
    auto place = place_of(frames[i], /*return_address=*/true);
    if (!place || is_library_frame(place->binary)) {
      continue;
    }
    return place->binary + "+" + hex(place->offset);
  }
  return "an unknown location";
}

std::string describe_code_location(const std::string& location) {
  const auto plus = location.rfind("+0x");
  if (plus == std::string::npos) {
    return location;
  }
  const uintptr_t offset = std::strtoull(location.c_str() + plus + 1, nullptr, 16);
  const SourcePlace source = addr2line(location.substr(0, plus), {offset}).front();
  const bool known_line = source.file_line.find(':') != std::string::npos;
  if (known_line) {
    return source.file_line + (source.function.empty() ? "" : " (" + source.function + ")");
  }
  if (!source.file_line.empty() && !source.function.empty()) { // symbols name the file, without a line
    return source.function + " in " + source.file_line;
  }
  if (!source.function.empty()) {
    return source.function + " (" + location + ")";
  }
  return location;
}

bool install_stack_report(const std::string& who) {
  static std::mutex mutex;
  static bool installed = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (installed) {
    return true;
  }
  struct sigaction current{};
  if (::sigaction(kStackSignal, nullptr, &current) != 0) {
    return false;
  }
  const bool program_has_one =
      (current.sa_flags & SA_SIGINFO) != 0 ? current.sa_sigaction != nullptr : current.sa_handler != SIG_DFL;
  if (program_has_one || ::pipe2(wake_fds, O_CLOEXEC) != 0) {
    return false;
  }
  void* prime[4];
  ::backtrace(prime, 4); // loads the unwinder now: the handler must not load a library
  report_who = new std::string(who);
  std::thread(report_stacks).detach(); // never joined: it waits for requests until the process ends
  struct sigaction action{};
  action.sa_sigaction = &on_stack_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (::sigaction(kStackSignal, &action, nullptr) != 0) {
    return false;
  }
  installed = true;
  return true;
}

unsigned stacks_printed() {
  return printed.load();
}

} // namespace accelerate::watch
