#!/usr/bin/env python3
"""Latency of accel-lsp's code actions, side by side with `clang-19 -fsyntax-only` on the same files with the
same flags, timed from the request to the response as an editor sees it.

For each file, in a temporary directory: a copy of the file and a compile_commands.json whose command is
FLAGS (relative -I/-isystem/-include paths made absolute). Each repetition times `clang-19 -fsyntax-only FLAGS
COPY`, then starts a fresh accel-lsp (stderr to a log) and times, over stdin/stdout (test/lsp/lsp_client.py):

  open        textDocument/didOpen and the first textDocument/codeAction (on the epoch loop's line), sent
              together, until the response: the parse (building the preamble, the PCH of the includes), the
              passes and the lint checks, then the rewrite's compile check (one more parse, with the
              runtime's headers). The diagnostics' arrival on the way is timed too.
  second      a second textDocument/codeAction on the unchanged buffer (the analysis and the check are kept).
  after edit  textDocument/didChange (a comment line appended at the end) and a textDocument/codeAction,
              sent together: a parse that reuses the preamble, then the compile check of the new rewrite.

Wall seconds are from sending to the response; CPU seconds are the server's (utime + stime of the process,
all threads, from /proc) over the same span, and the child's user + sys for -fsyntax-only. Runs alternate
(-fsyntax-only, server, -fsyntax-only, ...) so that load changes hit both alike; medians over --reps. The
goals (docs/benchmarks.md): first action <= 2.5x -fsyntax-only, second <= 0.3x (wall).

    lsp_latency.py --accel-lsp build/bin/accel-lsp --reps 3 -- FILE... -- FLAGS...

e.g. FLAGS = -std=c++17 -I test/fixtures -isystem TORCH/include -isystem TORCH/include/torch/csrc/api/include
"""
import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "test", "lsp"))
from lsp_client import Client  # noqa: E402
from rewrite_vs_syntax_only import timed  # noqa: E402

DISTRIBUTE = "Distribute this training loop with accelerate"
GOAL_FIRST, GOAL_SECOND = 2.5, 0.3
PATH_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter", "-include")
JOINED_PATH_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter")  # -Idir, -isystemdir, ...


def absolute_flags(flags):
    """FLAGS with the paths of -I, -isystem, ... absolute: the database's directory is not the caller's."""
    out, expect_path = [], False
    for flag in flags:
        if expect_path:
            out.append(os.path.abspath(flag))
            expect_path = False
        elif flag in PATH_FLAGS:
            out.append(flag)
            expect_path = True
        else:
            joined = next((p for p in JOINED_PATH_FLAGS if flag.startswith(p) and len(flag) > len(p)), None)
            out.append(joined + os.path.abspath(flag[len(joined):]) if joined else flag)
    return out


def server_cpu(pid):
    """utime + stime of the process, all its threads, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def loop_line(text):
    """The epoch loop's line (0-based), where a user would ask for the action; else the first `for`."""
    lines = text.split("\n")
    for pattern in (r"^\s*for\s*\(.*epoch", r"^\s*for\s*\("):
        for number, line in enumerate(lines):
            if re.search(pattern, line):
                return number
    return 0


def distribute_state(response):
    """'offered', or why not (the disabled action's reason, or the error)."""
    if "error" in response:
        return "error: " + response["error"].get("message", "?")
    for action in response.get("result") or []:
        if action.get("title") == DISTRIBUTE:
            if "edit" in action:
                return "offered"
            return "disabled: " + action.get("disabled", {}).get("reason", "?")
    return "not among the actions"


def session(accel_lsp, scratch, copy, text, line, log_path, timeout):
    """One server from start to exit: {step: (wall, cpu)}, the action's state at each step, the peak RSS."""
    client = Client([accel_lsp], cwd=scratch, stderr_path=log_path)
    try:
        client.initialize(scratch)
        pid = client.process.pid
        times, states = {}, {}

        def step(name, send_first, wait_diagnostics=None):
            start, cpu = time.perf_counter(), server_cpu(pid)
            send_first()
            request = client.request_async(
                "textDocument/codeAction",
                {"textDocument": {"uri": uri},
                 "range": {"start": {"line": line, "character": 0}, "end": {"line": line, "character": 0}},
                 "context": {"diagnostics": []}})
            if wait_diagnostics is not None:
                # Published before the action's response (one worker, in order): both arrival times hold.
                client.wait_diagnostics(uri, version=wait_diagnostics, timeout=timeout)
                times[name + " diagnostics"] = (time.perf_counter() - start, server_cpu(pid) - cpu)
            response = client.wait_response(request, timeout)
            times[name] = (time.perf_counter() - start, server_cpu(pid) - cpu)
            states[name] = distribute_state(response)

        uri = None

        def open_it():
            nonlocal uri
            uri = client.open(copy, text, version=1)

        step("open", open_it, wait_diagnostics=1)
        step("second", lambda: None)
        edited = text + ("" if text.endswith("\n") else "\n") + "// lsp_latency: an edit\n"
        step("after edit", lambda: client.change(copy, edited, 2), wait_diagnostics=2)
        rss = peak_rss_mib(pid)
        client.shutdown()
        return times, states, rss
    finally:
        client.kill()
        if client.stderr_file is not None and hasattr(client.stderr_file, "close"):
            client.stderr_file.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accel-lsp", required=True)
    parser.add_argument("--clang", default=shutil.which("clang-19") or "clang-19")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900, help="seconds a response may take")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="-- FILE... -- FLAGS...")
    options = parser.parse_args()
    rest = options.rest[1:] if options.rest[:1] == ["--"] else options.rest
    if "--" not in rest:
        parser.error("give the files, then -- and the compile flags")
    files, flags = rest[: rest.index("--")], absolute_flags(rest[rest.index("--") + 1 :])
    accel_lsp = os.path.abspath(options.accel_lsp)

    print(f"load average at the start: {' '.join(f'{l:.2f}' for l in os.getloadavg())}", flush=True)
    steps = ["open diagnostics", "open", "second", "after edit diagnostics", "after edit"]
    rows, notes = [], []
    for path in files:
        with tempfile.TemporaryDirectory(prefix="lsp-latency-") as scratch:
            copy = os.path.join(scratch, os.path.basename(path))
            shutil.copyfile(path, copy)
            with open(copy, encoding="utf-8") as f:
                text = f.read()
            compiler = shutil.which("clang++-19") or "c++"
            with open(os.path.join(scratch, "compile_commands.json"), "w") as f:
                json.dump([{"directory": scratch, "file": copy, "arguments": [compiler, *flags, "-c", copy]}], f)
            line = loop_line(text)
            syntax, samples, states, rss = [], {s: [] for s in steps}, set(), []
            for rep in range(options.reps):
                syntax.append(timed([options.clang, "-fsyntax-only", *flags, copy]))
                log_path = os.path.join(scratch, f"accel-lsp.{rep}.log")
                times, state, peak = session(accel_lsp, scratch, copy, text, line, log_path, options.timeout)
                for s in steps:
                    samples[s].append(times[s])
                states.update(f"{k}: {v}" for k, v in state.items())
                rss.append(peak)
                with open(log_path, encoding="utf-8", errors="replace") as f:
                    logged = [l.strip().replace(scratch, "TMP") for l in f if l.strip()]
                notes.append(f"{os.path.basename(path)} rep {rep + 1}: " + " | ".join(logged))
            median = {s: [statistics.median(x[i] for x in samples[s]) for i in (0, 1)] for s in steps}
            base = [statistics.median(x[i] for x in syntax) for i in (0, 1)]
            rows.append((path, base, median, sorted(states), max(rss)))
            print(f"done: {path} (load average {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)

    print(f"load average at the end: {' '.join(f'{l:.2f}' for l in os.getloadavg())}\n")
    for unit, index in (("wall", 0), ("CPU", 1)):
        print(f"{unit} seconds, medians of {options.reps}:\n")
        print("| file | -fsyntax-only | diagnostics after open | first action | second action | after edit: diagnostics"
              " | after edit: action |" + (" goals (first <= 2.5x, second <= 0.3x) |" if index == 0 else ""))
        print("|---" * (7 + (index == 0)) + "|")
        for path, base, median, _, _ in rows:
            cells = [f"{base[index]:.2f}"]
            for s in ("open diagnostics", "open", "second", "after edit diagnostics", "after edit"):
                cells.append(f"{median[s][index]:.2f} ({median[s][index] / base[index]:.2f}x)"
                             if base[index] > 0 else f"{median[s][index]:.2f}")
            if index == 0:
                first, second = median["open"][0] / base[0], median["second"][0] / base[0]
                cells.append(f"first {'met' if first <= GOAL_FIRST else 'MISSED'}, "
                             f"second {'met' if second <= GOAL_SECOND else 'MISSED'}")
            print(f"| {path} | " + " | ".join(cells) + " |")
        print()
    print("The action 'Distribute this training loop with accelerate', per file and step:")
    for path, _, _, states, rss in rows:
        print(f"- {path}: " + "; ".join(states) + f"; the server's peak RSS {rss:.0f} MiB")
    print("\nThe server's log (stderr), per file and repetition:")
    for note in notes:
        print("- " + note)


if __name__ == "__main__":
    sys.exit(main())
