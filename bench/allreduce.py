#!/usr/bin/env python3
"""All-reduce time by size: the same-machine shared-memory path against Gloo, side by side in one run.

Runs bench_allreduce under `accel launch --cpu` with ACCELERATE_SHM_ALLREDUCE=1 and =0, alternating, for several
repetitions, and prints the medians and the ratio (Gloo time / shared-memory time) as a Markdown table.

    python3 bench/allreduce.py --bin-dir build/bin --procs 2 --reps 5
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def run(bin_dir: str, procs: int, setting: str, iterations: int) -> dict:
    env = dict(os.environ, ACCELERATE_SHM_ALLREDUCE=setting, OMP_NUM_THREADS="1")
    command = [os.path.join(bin_dir, "accel"), "launch", "--cpu", "--num_processes", str(procs),
               "--main_process_port", "0", os.path.join(bin_dir, "bench_allreduce"),
               "--iterations", str(iterations)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"allreduce.py: {' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return {int(size): float(us) for size, us in
            re.findall(r"allreduce bytes=(\d+) median_us=([0-9.]+)", result.stdout)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", default="build/bin")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()
    times = {"1": {}, "0": {}}
    for rep in range(args.reps):
        for setting in (("1", "0") if rep % 2 == 0 else ("0", "1")):
            for size, us in run(args.bin_dir, args.procs, setting, args.iterations).items():
                times[setting].setdefault(size, []).append(us)
    print(f"{args.procs} processes, 1 thread each; {args.reps} alternated repetitions x {args.iterations} "
          "all-reduces (sum, float32, Accelerator::reduce), medians of the per-run medians.\n")
    print("| size | shared memory | Gloo | Gloo / shared memory |")
    print("|---|---|---|---|")
    for size in sorted(times["1"]):
        shm, gloo = statistics.median(times["1"][size]), statistics.median(times["0"][size])
        label = f"{size / 1024:.0f} KiB" if size < 1 << 20 else f"{size / (1 << 20):.1f} MiB"
        print(f"| {label} | {shm:,.0f} us | {gloo:,.0f} us | **{gloo / shm:.1f}x** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
