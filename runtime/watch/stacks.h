// Stacks of a job's processes: where the code that called into the runtime is (one frame, for messages), and
// a process's whole main-thread stack printed on request (SIGUSR2), which a watcher asks of the live
// processes of a job that hangs. The standard library and POSIX only (no torch): `accel` and the runtime
// share it.
#pragma once

#include <csignal>
#include <string>

namespace accelerate::watch {

/// The signal that asks a process of the runtime for its main thread's stack: `kill -USR2 <pid>`.
constexpr int kStackSignal = SIGUSR2;

/// Where the code that called into the runtime is: the innermost stack frame outside libtorch, this runtime
/// and the C and C++ libraries, as `binary+0xoffset` (cheap; see `describe_code_location`).
std::string caller_location();

/// `location` (from `caller_location`) as `file:line (function)` when the binary has debug information and
/// `addr2line` is installed, `function (binary+0xoffset)` with symbols only, else as it is.
std::string describe_code_location(const std::string& location);

/// Makes this process print its main thread's stack to standard error each time it receives kStackSignal,
/// with a first line naming `who` ("process 1 (pid 4242)") and the sender. The frames are taken in the
/// signal handler; a thread of its own names them (symbols, `addr2line` for the program's own frames) and
/// writes them, so the interrupted thread only pauses for the capture and goes on where it was. Installed
/// once per process; not when the program has its own handler for the signal. Returns whether it is
/// installed.
bool install_stack_report(const std::string& who);

/// How many stacks this process has printed so far (the heartbeat publishes it, so that a watcher that
/// asked knows when the stack is out).
unsigned stacks_printed();

} // namespace accelerate::watch
