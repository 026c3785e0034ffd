#!/usr/bin/env python3
"""End-to-end check of one example: the plain single-device build against the rewritten build on N ranks.

Both print `step <n> loss <value>` lines. The plain run uses the global batch (--plain-args), each rank of the
distributed run its share of it (--distributed-args). At every printed step the distributed loss — the mean of
the losses the ranks print (mean-reduced losses over equal per-rank batches), or the single value the main
process prints when the program reduces it itself — must equal the plain run's within --rtol, and the loss
must fall.
"""
import argparse
import os
import re
import signal
import subprocess
import sys

LINE = re.compile(r"^(?:\[rank(\d+)\]: )?step (\d+) loss ([-+0-9.eE]+|nan|inf)$")


def run(command, timeout):
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            output, _ = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        sys.exit(f"compare_losses: FAILED: {' '.join(command)} did not finish in {timeout} s\n{output}")
    if process.returncode != 0:
        sys.exit(f"compare_losses: FAILED: {' '.join(command)} exited {process.returncode}\n{output}")
    return output


def losses_by_rank(output):
    result = {}
    for line in output.splitlines():
        match = LINE.match(line.strip())
        if match:
            rank = int(match.group(1) or 0)
            result.setdefault(rank, {})[int(match.group(2))] = float(match.group(3))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plain", required=True, help="the example built without rewriting")
    parser.add_argument("--distributed", required=True, help="the example built by accelerate_target()")
    parser.add_argument("--accel", required=True, help="the accel launcher")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--plain-args", default="", help="arguments of the plain run (space-separated)")
    parser.add_argument("--distributed-args", default="", help="arguments of each rank (space-separated)")
    options = parser.parse_args()

    plain_output = run([options.plain, *options.plain_args.split()], options.timeout)
    plain = losses_by_rank(plain_output).get(0, {})
    if len(plain) < 2:
        sys.exit(f"compare_losses: FAILED: the plain run printed fewer than two losses\n{plain_output}")
    distributed_output = run([options.accel, "launch", "--num_processes", str(options.nproc),
                              "--main_process_port", "0", options.distributed, *options.distributed_args.split()],
                             options.timeout)
    distributed = losses_by_rank(distributed_output)
    print(distributed_output, end="")

    failures = []
    printing = sorted(distributed)
    if not printing:
        failures.append("the distributed run printed no loss")
    for rank in printing:
        if sorted(distributed[rank]) != sorted(plain):
            failures.append(f"rank {rank} printed steps {sorted(distributed[rank])}, the plain run {sorted(plain)}")
    if not failures:
        for step, expected in plain.items():
            mean = sum(distributed[rank][step] for rank in printing) / len(printing)
            if abs(mean - expected) > options.rtol * abs(expected):
                failures.append(f"step {step}: distributed loss {mean!r} (ranks {printing}) vs plain {expected!r}")
    first, last = min(plain), max(plain)
    if not plain[last] < plain[first]:
        failures.append(f"the loss did not fall: step {first} {plain[first]} -> step {last} {plain[last]}")
    if failures:
        print("compare_losses: FAILED:\n  " + "\n  ".join(failures))
        return 1
    print(f"compare_losses: {options.nproc} ranks (printing: {printing}) match the plain run at every printed step "
          f"(rtol {options.rtol:g}); loss {plain[first]:.6g} -> {plain[last]:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
