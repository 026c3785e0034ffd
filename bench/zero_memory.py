#!/usr/bin/env python3
"""Memory and step time per process under DDP, ZeRO-1, ZeRO-2 and FSDP, side by side in one run.

Runs bench_zero_memory under `accel launch --cpu --num_processes P` once per strategy and repetition, the order
of the strategies rotating from one repetition to the next, and prints one Markdown table: each figure per
strategy (memory: the largest over the processes, median over the repetitions; times: rank 0's median step,
median over the repetitions) and its ratio to DDP, with the goals. With an FSDP strategy among them it also
prints the FSDP memory bound and, for each strategy, whether its training peak is within it.

    python3 bench/zero_memory.py --bin-dir build/bin --procs 2 --reps 5 --steps 5 --warmup 2
    python3 bench/zero_memory.py --strategies ddp,full_shard,shard_grad_op --procs 4 ...
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

NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "full_shard": "FULL_SHARD",
         "shard_grad_op": "SHARD_GRAD_OP", "full_shard_prefetch": "FULL_SHARD+prefetch",
         "shard_grad_op_prefetch": "SHARD_GRAD_OP+prefetch", "full_shard_checkpointing": "FULL_SHARD+checkpointing"}
FSDP = ("full_shard", "shard_grad_op", "full_shard_prefetch", "shard_grad_op_prefetch", "full_shard_checkpointing")
# The goals, by figure: (strategy, text) for the strategies a run has.
GOALS = {
    "optimizer_state_bytes": [("zero1", "ZeRO <= 0.55x"), ("zero2", "ZeRO <= 0.55x")],
    "grad_peak_bytes": [("zero2", "ZeRO-2 <= 0.6x")],
    "forward_live_bytes": [("full_shard_checkpointing", "checkpointing <= 0.5x FULL_SHARD's")],
    "step_median_s": [("zero1", "ZeRO-1 <= 1.1x"), ("full_shard", "FULL_SHARD <= 1.3x"),
                      ("shard_grad_op", "SHARD_GRAD_OP <= 1.15x"), ("full_shard_prefetch", "FULL_SHARD <= 1.3x"),
                      ("shard_grad_op_prefetch", "SHARD_GRAD_OP <= 1.15x")],
}


def run(args, strategy: str) -> dict:
    command = [os.path.join(args.bin_dir, "accel"), "launch", "--cpu", "--num_processes", str(args.procs),
               "--main_process_port", "0", os.path.join(args.bin_dir, "bench_zero_memory"),
               "--strategy", strategy, "--width", str(args.width), "--layers", str(args.layers),
               "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--block", args.block]
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
    parser.add_argument("--strategies", default="ddp,zero1,zero2",
                        help="comma-separated, ddp first (the reference of the ratios): ddp, zero1, zero2, "
                             "full_shard, shard_grad_op (no prefetch), full_shard_prefetch, "
                             "shard_grad_op_prefetch (fsdp_forward_prefetch and BACKWARD_PRE), "
                             "full_shard_checkpointing (FULL_SHARD with fsdp_activation_checkpointing)")
    parser.add_argument("--bucket-cap-mb", type=float, default=0,
                        help="bucket_cap_mb (ZeRO-2's gradient buckets, DDP's Reducer); 0: the runtime's default")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--width", type=int, default=2900)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--block", default="linear", choices=("linear", "mlp"),
                        help="each layer a Linear(W, W) and tanh, or a residual block x + fc2(gelu(fc1(x))) through 4W")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    parser.add_argument("--verbose", action="store_true", help="print each run's own per-rank table")
    args = parser.parse_args()

    started, load_start = time.time(), os.getloadavg()
    STRATEGIES = tuple(args.strategies.split(","))
    if STRATEGIES[0] != "ddp" or any(s not in NAMES for s in STRATEGIES) or len(set(STRATEGIES)) < len(STRATEGIES):
        sys.exit(f"zero_memory.py: --strategies is ddp then some of {', '.join(list(NAMES)[1:])}, "
                 f"not {args.strategies}")
    OTHERS = STRATEGIES[1:]
    runs = {strategy: [] for strategy in STRATEGIES}
    for rep in range(args.reps):
        shift = rep % len(STRATEGIES)
        order = STRATEGIES[shift:] + STRATEGIES[:shift]
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
    layer = "Linear" if args.block == "linear" else "residual MLP block"
    print(f"{args.procs} processes x 1 intra-op thread, {args.layers} x {layer}({args.width}, {args.width}), "
          f"bucket_cap_mb {args.bucket_cap_mb or 25} "
          f"({first['parameters'] / 1e6:.1f} M parameters), batch {args.batch} rows per process, AdamW; "
          f"{args.reps} repetitions (strategies alternated) x ({args.warmup} warm-up + {args.steps} timed steps); "
          f"{elapsed:.0f} s, load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end; "
          f"ACCELERATE_SHM_ALLREDUCE={os.environ.get('ACCELERATE_SHM_ALLREDUCE', 'auto')}.\n")
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
        ("setup peak (build + prepare, over the baseline)", "setup_peak_bytes", mb, ""),
        ("training peak (the steps, over the baseline)", "train_peak_bytes", mb, ""),
        ("held between steps (over the baseline)", "held_between_steps_bytes", mb, ""),
        ("what forward leaves live", "forward_live_bytes", mb, ""),
        ("resident set at the baseline (VmRSS)", "rss_baseline_bytes", mb, ""),
        ("peak resident set of setup (VmHWM)", "vmhwm_setup_bytes", mb, ""),
        ("peak resident set of the steps (VmHWM reset after setup)", "vmhwm_train_bytes", mb, ""),
    ]
    header = ["figure", *(NAMES[s] for s in STRATEGIES), *(f"{NAMES[s]} / DDP" for s in OTHERS), "goal"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))

    def ratio(a, b):
        return f"{a / b:.2f}x" if b else "—"

    def goal(field):
        return ", ".join(dict.fromkeys(text for s, text in GOALS.get(field, []) if s in STRATEGIES))

    def row(name, values, fmt, field=""):
        print(f"| {name} | " + " | ".join(fmt(v) for v in values) + " | " +
              " | ".join(ratio(v, values[0]) for v in values[1:]) + f" | {goal(field)} |")

    for name, field, fmt, _ in rows:
        row(name, [worst(s, field) for s in STRATEGIES], fmt, field)
    for name, field in (("step time (median)", "step_median_s"), ("- backward", "backward_median_s"),
                        ("- optimizer step", "optimizer_step_median_s")):
        row(name, [step(s, field=field) for s in STRATEGIES], lambda v: f"{v * 1e3:.1f} ms", field)
    row("minor page faults per step", [step(s, field="minor_faults_per_step") for s in STRATEGIES],
        lambda v: f"{v:,.0f}")
    row("kernel (system) CPU time per step", [step(s, field="system_cpu_per_step_s") for s in STRATEGIES],
        lambda v: f"{v * 1e3:.1f} ms")
    per_rep = {s: [step(s, rep) / step("ddp", rep) for rep in range(args.reps)] for s in OTHERS}
    print("\nStep time over DDP's in each repetition: " + "; ".join(
        f"{NAMES[s]} " + ", ".join(f"{r:.2f}x" for r in per_rep[s]) for s in per_rep))
    print("VmHWM over the processes and repetitions: " + "; ".join(
        f"{NAMES[s]} {min(r['vmhwm_bytes'] for x in runs[s] for r in x['ranks']) / 1e6:,.1f}-"
        f"{max(r['vmhwm_bytes'] for x in runs[s] for r in x['ranks']) / 1e6:,.1f} MB" for s in STRATEGIES))
    print("Optimizer state per process, each process (1st step's increase): " + "; ".join(
        f"{NAMES[s]} " + ", ".join(mb(rank["optimizer_state_bytes"]) for rank in runs[s][0]["ranks"])
        for s in STRATEGIES))
    print("Loss (rank 0, first step -> last step, 1st repetition): " + "; ".join(
        f"{NAMES[s]} {runs[s][0]['first_loss']:.6f} -> {runs[s][0]['last_loss']:.6f}" for s in STRATEGIES))
    if "full_shard" in STRATEGIES and "full_shard_checkpointing" in STRATEGIES:
        stored, kept = worst("full_shard", "forward_live_bytes"), worst("full_shard_checkpointing", "forward_live_bytes")
        print(f"\nActivation checkpointing: forward leaves {mb(kept)} live with it, {mb(stored)} without "
              f"({kept / stored:.2f}x; goal <= 0.5x: {'met' if kept <= 0.5 * stored else 'not met'}); training peak "
              f"{mb(worst('full_shard_checkpointing', 'train_peak_bytes'))} with it, "
              f"{mb(worst('full_shard', 'train_peak_bytes'))} without; step "
              f"{step('full_shard_checkpointing') / step('full_shard'):.2f}x FULL_SHARD's.")
    if any(s in FSDP for s in STRATEGIES):
        # The FSDP goal: a process's parameters, gradients and AdamW state (fp32: 4 + 4 + 8 bytes a parameter)
        # within 1/N of their replicated total plus the largest unit's whole parameters, plus 10%.
        parameters = first["parameters"]
        replicated = 16 * parameters
        unit = first["largest_unit_bytes"]
        bound = 1.1 * (replicated / args.procs + unit)
        activations = worst("ddp", "forward_live_bytes")
        print(f"\nFSDP bound: 1.1 x (replicated {mb(replicated)} (16 bytes x {parameters / 1e6:.2f} M parameters) "
              f"/ {args.procs} + largest unit {mb(unit)}) = {mb(bound)}. Activations (what DDP's forward leaves "
              f"live): {mb(activations)}.")
        for s in STRATEGIES:
            peak = worst(s, "train_peak_bytes")
            setup = worst(s, "setup_peak_bytes")
            resident = statistics.median(max(r["vmhwm_train_bytes"] - r["rss_baseline_bytes"] for r in x["ranks"])
                                         for x in runs[s])
            print(f"- {NAMES[s]}: training peak {mb(peak)} = {peak / bound:.2f} of the bound "
                  f"({'met' if peak <= bound else 'not met'}; without the activations {mb(peak - activations)}), "
                  f"resident increase over the baseline during the steps {mb(resident)}; "
                  f"setup peak {mb(setup)} = {setup / bound:.2f} of the bound")
    return 0


if __name__ == "__main__":
    sys.exit(main())
