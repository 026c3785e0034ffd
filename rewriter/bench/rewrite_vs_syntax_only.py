#!/usr/bin/env python3
"""Side-by-side timing of accel-rewrite against `clang-19 -fsyntax-only` on the same files with the same flags,
and with --tidy-module, of `clang-tidy-19 --load=MODULE -checks=-*,accelerate-*` (the accelerate-distribute-loop
check) too.

accel-rewrite parses each file, runs the passes and, when something changed, parses the rewritten text again
(against the runtime's headers) before writing it: about two parses. The clang-tidy check does the same inside
clang-tidy's parse (its fix is offered only when the rewrite compiles). Runs alternate (rewrite, syntax-only,
clang-tidy, rewrite, ...) so load changes hit all alike; medians of wall and CPU (user + sys of the child)
seconds.

    rewrite_vs_syntax_only.py --accel-rewrite build/bin/accel-rewrite [--tidy-module build/lib/accelerate-tidy.so]
        --reps 3 -- FILE... -- FLAGS...
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def timed(command):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"rewrite_vs_syntax_only: {' '.join(command)} failed:\n{result.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accel-rewrite", required=True)
    parser.add_argument("--clang", default=shutil.which("clang-19") or "clang-19")
    parser.add_argument("--clang-tidy", default=shutil.which("clang-tidy-19") or "clang-tidy-19")
    parser.add_argument("--tidy-module", help="also time clang-tidy with this module's checks")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="-- FILE... -- FLAGS...")
    options = parser.parse_args()
    rest = options.rest[1:] if options.rest[:1] == ["--"] else options.rest
    if "--" not in rest:
        parser.error("give the files, then -- and the compile flags")
    files, flags = rest[: rest.index("--")], rest[rest.index("--") + 1 :]

    tools = ["accel-rewrite", "-fsyntax-only"] + (["clang-tidy + module"] if options.tidy_module else [])
    print("| file | " + " | ".join(f"{t} wall (s)" for t in tools) + " | "
          + " | ".join(f"{t} / -fsyntax-only (wall)" for t in tools if t != "-fsyntax-only") + " | "
          + " | ".join(f"{t} CPU (s)" for t in tools) + " | "
          + " | ".join(f"{t} / -fsyntax-only (CPU)" for t in tools if t != "-fsyntax-only") + " |")
    print("|---" * (1 + 2 * len(tools) + 2 * (len(tools) - 1)) + "|")
    with tempfile.TemporaryDirectory() as scratch:
        for path in files:
            commands = {
                "accel-rewrite": [options.accel_rewrite, path, "-o", os.path.join(scratch, "out.cpp"), "--", *flags],
                "-fsyntax-only": [options.clang, "-fsyntax-only", *flags, path],
            }
            if options.tidy_module:
                commands["clang-tidy + module"] = [options.clang_tidy, f"--load={options.tidy_module}",
                                                   "-checks=-*,accelerate-*", "--quiet", path, "--", *flags]
            samples = {tool: [] for tool in tools}
            for _ in range(options.reps):
                for tool in tools:
                    samples[tool].append(timed(commands[tool]))
            median = {tool: [statistics.median(s[i] for s in samples[tool]) for i in (0, 1)] for tool in tools}
            base = median["-fsyntax-only"]
            others = [t for t in tools if t != "-fsyntax-only"]
            cells = [f"{median[t][0]:.1f}" for t in tools] + [f"{median[t][0] / base[0]:.2f}x" for t in others]
            cells += [f"{median[t][1]:.1f}" for t in tools] + [f"{median[t][1] / base[1]:.2f}x" for t in others]
            print(f"| {os.path.basename(path)} | " + " | ".join(cells) + " |", flush=True)

if __name__ == "__main__":
    sys.exit(main())
