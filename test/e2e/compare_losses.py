#!/usr/bin/env python3
"""End-to-end check of one example: the plain single-device build against the rewritten build on N ranks.

Both print lines `step <n> <name> <value> [<name> <value> ...]` (`step 11 loss 2.3`, or a GAN's
`step 11 d_loss_real 0.6 d_loss_fake 0.7 g_loss 0.8`). The plain run uses the global batch (--plain-args), each
rank of the distributed run its share of it (--distributed-args). At every printed step, every value of the
distributed run — the single value the main process prints when the program reduces it itself (what the
rewriter makes of a printed loss), or the mean of the values the ranks print (mean-reduced losses over equal
per-rank batches) — must equal the plain run's within --rtol, and the value named by --must-fall must be lower at
the last printed step than at the first. Each run works in a fresh temporary directory (examples save files).

With --progress-total N (an example built with PROGRESS_BAR), the distributed run's output, a pipe, must also hold
the progress bar's plain lines (`train:  12% 5/41 [...]`): from rank 0 only, without carriage returns or terminal
escapes, at most one per tenth of the total and one at the end, the last at N/N.
"""
import argparse
import os
import re
import shlex
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from numerics import report_spread  # noqa: E402
from step_lines import run as run_with_timeout, values_by_rank  # noqa: E402


def run(command, timeout, cwd):
    return run_with_timeout(command, timeout, cwd, "compare_losses")


def progress_failures(output, total):
    """What is wrong with the progress bar's lines in a piped run's output (empty when nothing is)."""
    failures = []
    if "\r" in output or "\033" in output:
        failures.append("the piped output holds carriage returns or terminal escapes (a bar drawn in place)")
    bar = re.compile(r"^(?:\[rank(\d+)\]: )?train: +\d+% (\d+)/(\d+) \[")
    lines = [match for match in map(bar.match, output.splitlines()) if match]
    ranks = sorted({int(match.group(1) or 0) for match in lines})
    if ranks != [0]:
        failures.append(f"progress lines came from ranks {ranks}, expected rank 0 only")
    elif not 2 <= len(lines) <= 11:
        failures.append(f"{len(lines)} progress lines, expected one per tenth of the total (at most 11)")
    elif (int(lines[-1].group(2)), int(lines[-1].group(3))) != (total, total):
        failures.append(f"the last progress line reads {lines[-1].group(2)}/{lines[-1].group(3)}, expected "
                        f"{total}/{total}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plain", required=True, help="the example built without rewriting")
    parser.add_argument("--distributed", required=True, help="the example built by accelerate_target()")
    parser.add_argument("--accel", required=True, help="the accel launcher")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--must-fall", default="loss", help="the printed value that must fall over the run")
    parser.add_argument("--plain-args", default="", help="arguments of the plain run")
    parser.add_argument("--distributed-args", default="", help="arguments of each rank")
    parser.add_argument("--progress-total", type=int, help="the total of the progress bar the example shows")
    options = parser.parse_args()
    # The runs work in temporary directories: resolve the programs first.
    for name in ("plain", "distributed", "accel"):
        setattr(options, name, os.path.abspath(getattr(options, name)))

    with tempfile.TemporaryDirectory() as plain_dir, tempfile.TemporaryDirectory() as distributed_dir:
        plain_output = run([options.plain, *shlex.split(options.plain_args)], options.timeout, plain_dir)
        distributed_output = run([options.accel, "launch", "--num_processes", str(options.nproc),
                                  "--main_process_port", "0", options.distributed,
                                  *shlex.split(options.distributed_args)], options.timeout, distributed_dir)
    plain = values_by_rank(plain_output).get(0, {})
    steps = sorted({step for step, _ in plain})
    if len(steps) < 2:
        sys.exit(f"compare_losses: FAILED: the plain run printed fewer than two steps\n{plain_output}")
    distributed = values_by_rank(distributed_output)
    print(distributed_output, end="")

    failures = []
    printing = sorted(distributed)
    if not printing:
        failures.append("the distributed run printed no step line")
    for rank in printing:
        if sorted(distributed[rank]) != sorted(plain):
            failures.append(f"rank {rank} printed {sorted(distributed[rank])}, the plain run {sorted(plain)}")
    worst = 0.0  # the largest relative difference seen: the measured spread behind --rtol
    if not failures:
        for key, expected in sorted(plain.items()):
            mean = sum(distributed[rank][key] for rank in printing) / len(printing)
            relative = abs(mean - expected) / max(abs(expected), 1e-12)
            worst = max(worst, relative)
            if not relative <= options.rtol:
                failures.append(f"step {key[0]} {key[1]}: distributed {mean!r} (ranks {printing}) "
                                f"vs plain {expected!r}")
        report_spread(f"{options.nproc} ranks against the plain run", worst, options.rtol)
    first, last = (steps[0], options.must_fall), (steps[-1], options.must_fall)
    if first not in plain or last not in plain:
        failures.append(f"the plain run did not print '{options.must_fall}' at steps {steps[0]} and {steps[-1]}")
    elif not plain[last] < plain[first]:
        failures.append(f"{options.must_fall} did not fall: step {first[0]} {plain[first]} -> "
                        f"step {last[0]} {plain[last]}")
    if options.progress_total:
        failures += progress_failures(distributed_output, options.progress_total)
    if failures:
        print("compare_losses: FAILED:\n  " + "\n  ".join(failures))
        return 1
    names = sorted({name for _, name in plain})
    print(f"compare_losses: {options.nproc} ranks (printing: {printing}) match the plain run at every printed step "
          f"({', '.join(names)}; largest relative difference {worst:.2e}, rtol {options.rtol:g}); {options.must_fall} {plain[first]:.6g} -> {plain[last]:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
