#!/usr/bin/env python3
"""Side-by-side timing of accel-rewrite against `clang-19 -fsyntax-only` on the same files with the same flags.

accel-rewrite parses each file, runs the passes and, when something changed, parses the rewritten text again
(against the runtime's headers) before writing it: about two parses. Runs alternate (rewrite, syntax-only,
rewrite, ...) so load changes hit both alike; medians of wall and CPU (user + sys of the child) seconds.

    rewrite_vs_syntax_only.py --accel-rewrite build/bin/accel-rewrite --reps 3 -- FILE... -- FLAGS...
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
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="-- FILE... -- FLAGS...")
    options = parser.parse_args()
    rest = options.rest[1:] if options.rest[:1] == ["--"] else options.rest
    if "--" not in rest:
        parser.error("give the files, then -- and the compile flags")
    files, flags = rest[: rest.index("--")], rest[rest.index("--") + 1 :]

    print("| file | accel-rewrite wall (s) | -fsyntax-only wall (s) | wall ratio | accel-rewrite CPU (s) "
          "| -fsyntax-only CPU (s) | CPU ratio |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for path in files:
            rewrite = [options.accel_rewrite, path, "-o", os.path.join(scratch, "out.cpp"), "--", *flags]
            syntax = [options.clang, "-fsyntax-only", *flags, path]
            samples = {"rewrite": [], "syntax": []}
            for _ in range(options.reps):
                samples["rewrite"].append(timed(rewrite))
                samples["syntax"].append(timed(syntax))
            rw = [statistics.median(s[i] for s in samples["rewrite"]) for i in (0, 1)]
            sx = [statistics.median(s[i] for s in samples["syntax"]) for i in (0, 1)]
            print(f"| {os.path.basename(path)} | {rw[0]:.1f} | {sx[0]:.1f} | {rw[0] / sx[0]:.2f}x "
                  f"| {rw[1]:.1f} | {sx[1]:.1f} | {rw[1] / sx[1]:.2f}x |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
