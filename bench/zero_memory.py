#!/usr/bin/env python3
"""Memory and step time per process under DDP, ZeRO-1 and ZeRO-2, side by side in one run.

Runs bench_zero_memory under `accel launch --cpu --num_processes P` once per strategy and repetition, the order
of the strategies rotating from one repetition to the next, and prints one Markdown table: each figure per
strategy (memory: the largest over the processes, median over the repetitions; times: rank 0's median step,
median over the repetitions) and its ratio to DDP, with the goals.

    python3 bench/zero_memory.py --bin-dir build/bin --procs 2 --reps 5 --steps 5 --warmup 2
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

STRATEGIES = ("ddp", "zero1", "zero2")
NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2"}


def run(args, strategy: str) -> dict:
    command = [os.path.join(args.bin_dir, "accel"), "launch", "--cpu", "--num_processes", str(args.procs),
               "--main_process_port", "0", os.path.join(args.bin_dir, "bench_zero_memory"),
               "--strategy", strategy, "--width", str(args.width), "--layers", str(args.layers),
               "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if args.bucket_cap_mb:
        command += ["--bucket-cap-mb", str(args.bucket_cap_mb)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                               errors="replace", start_new_session=True)
    try:
        output, _ = process.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the launcher and its ranks: one process group
        output, _ = process.communicate()
        sys.exit(f"zero_memory.py: {' '.join(command)} ran past {args.timeout} s:\n{output}")
    found = re.search(r"ZERO_MEMORY_RESULT (\{.*\})", output)
    if process.returncode != 0 or not found:
        sys.exit(f"zero_memory.py: {' '.join(command)} exited {process.returncode}"
                 f"{'' if found else ' without a result'}:\n{output}")
    result = json.loads(found.group(1))
    if result["strategy"] != strategy or len(result["ranks"]) != args.procs:
        sys.exit(f"zero_memory.py: {strategy}: a result for {result['strategy']} with {len(result['ranks'])} "
                 f"processes:\n{output}")
    if args.verbose:
        print(output.rstrip())
    return result


def mb(value: float) -> str:
    return f"{value / 1e6:,.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", default="build/bin", help="where accel and bench_zero_memory are")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--bucket-cap-mb", type=float, default=0,
                        help="bucket_cap_mb (ZeRO-2's gradient buckets, DDP's Reducer); 0: the runtime's default")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--width", type=int, default=2900)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    parser.add_argument("--verbose", action="store_true", help="print each run's own per-rank table")
    args = parser.parse_args()

    started, load_start = time.time(), os.getloadavg()
    runs = {strategy: [] for strategy in STRATEGIES}
    for rep in range(args.reps):
        order = STRATEGIES[rep % 3:] + STRATEGIES[:rep % 3]
        for strategy in order:
            runs[strategy].append(run(args, strategy))
    elapsed, load_end = time.time() - started, os.getloadavg()

    def worst(strategy, field):
        """The largest figure over the processes, median over the repetitions."""
        return statistics.median(max(rank[field] for rank in result["ranks"]) for result in runs[strategy])

    def step(strategy, rep=None, field="step_median_s"):
        """Rank 0's median, median over the repetitions (or of repetition `rep`)."""
        results = runs[strategy] if rep is None else [runs[strategy][rep]]
        return statistics.median(result["ranks"][0][field] for result in results)

    first = runs["ddp"][0]["ranks"][0]
    print(f"{args.procs} processes x 1 intra-op thread, {args.layers} x Linear({args.width}, {args.width}), "
          f"bucket_cap_mb {args.bucket_cap_mb or 25} "
          f"({first['parameters'] / 1e6:.1f} M parameters), batch {args.batch} rows per process, AdamW; "
          f"{args.reps} repetitions (strategies alternated) x ({args.warmup} warm-up + {args.steps} timed steps); "
          f"{elapsed:.0f} s, load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end.\n")
    print("Memory: the largest over the processes, median over the repetitions. Times and counts: rank 0's "
          "median step, median over the repetitions.\n")
    rows = [
        ("optimizer state per process (1st step's increase)", "optimizer_state_bytes", mb, "ZeRO <= 0.55x"),
        ("optimizer state per process (state tensors' nbytes)", "optimizer_state_nbytes", mb, ""),
        ("gradient peak (backward + step, over live before)", "grad_peak_bytes", mb, "ZeRO-2 <= 0.6x"),
        ("- its peak during backward", "grad_peak_backward_bytes", mb, ""),
        ("- its peak during the optimizer step", "grad_peak_step_bytes", mb, ""),
        ("gradient bytes backward leaves live", "grad_held_after_backward", mb, ""),
        ("whole `.grad` left after backward", "grad_after_backward", mb, ""),
        ("peak live tensor bytes", "peak_live_bytes", mb, ""),
        ("peak resident set (VmHWM)", "vmhwm_bytes", mb, ""),
    ]
    header = ["figure", *(NAMES[s] for s in STRATEGIES), "ZeRO-1 / DDP", "ZeRO-2 / DDP", "goal"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))

    def ratio(a, b):
        return f"{a / b:.2f}x" if b else "—"

    for name, field, fmt, goal in rows:
        values = [worst(s, field) for s in STRATEGIES]
        print(f"| {name} | " + " | ".join(fmt(v) for v in values) +
              f" | {ratio(values[1], values[0])} | {ratio(values[2], values[0])} | {goal} |")
    for name, field, goal in (("step time (median)", "step_median_s", "ZeRO-1 <= 1.1x"),
                              ("- backward", "backward_median_s", ""),
                              ("- optimizer step", "optimizer_step_median_s", "")):
        times = [step(s, field=field) for s in STRATEGIES]
        print(f"| {name} | " + " | ".join(f"{v * 1e3:.1f} ms" for v in times) +
              f" | {ratio(times[1], times[0])} | {ratio(times[2], times[0])} | {goal} |")
    faults = [step(s, field="minor_faults_per_step") for s in STRATEGIES]
    print("| minor page faults per step | " + " | ".join(f"{v:,.0f}" for v in faults) +
          f" | {ratio(faults[1], faults[0])} | {ratio(faults[2], faults[0])} | |")
    system = [step(s, field="system_cpu_per_step_s") for s in STRATEGIES]
    print("| kernel (system) CPU time per step | " + " | ".join(f"{v * 1e3:.1f} ms" for v in system) +
          f" | {ratio(system[1], system[0])} | {ratio(system[2], system[0])} | |")
    per_rep = {s: [step(s, rep) / step("ddp", rep) for rep in range(args.reps)] for s in ("zero1", "zero2")}
    print("\nStep time over DDP's in each repetition: " + "; ".join(
        f"{NAMES[s]} " + ", ".join(f"{r:.2f}x" for r in per_rep[s]) for s in per_rep))
    print("VmHWM over the processes and repetitions: " + "; ".join(
        f"{NAMES[s]} {min(r['vmhwm_bytes'] for x in runs[s] for r in x['ranks']) / 1e6:,.1f}-"
        f"{max(r['vmhwm_bytes'] for x in runs[s] for r in x['ranks']) / 1e6:,.1f} MB" for s in STRATEGIES))
    print("Optimizer state per process, each process (1st step's increase): " + "; ".join(
        f"{NAMES[s]} " + ", ".join(mb(rank["optimizer_state_bytes"]) for rank in runs[s][0]["ranks"])
        for s in STRATEGIES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
