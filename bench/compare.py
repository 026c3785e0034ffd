"""Side by side with Hugging Face Accelerate: the reference workloads in four forms, from the same weights and data.

  (a) plain   bench/train_ref.cpp compiled as it is (bench_train_plain)
  (b) accel   the same source through accel-rewrite and the runtime (bench_train_accel; `accel launch` for N > 1)
  (c) hf      bench/train_ref.py --form accelerate: Python + Hugging Face Accelerate (torchrun with gloo for N > 1)
  (d) torch   bench/train_ref.py --form torch: plain Python torch

Commands:
  compare.py run [--workloads W,..] [--procs 1,2] [--precisions fp32,..] [--reps R] [--steps N] [--warmup W]
                 [--bin-dir DIR] [--markdown FILE] [--json FILE] [--plot FILE]
      runs the forms and process counts of a workload alternated in one loop (the order rotates every
      repetition), R repetitions, and prints the medians:
      step time, samples/s (tokens/s for gpt), and each form's speed relative to (c). 1 process runs with
      --threads-1proc intra-op threads (default 1), each of N > 1 processes with one. (a) and (d) are single-
      device loops: they run at 1 process in fp32 only.
  compare.py loss-check --workload W [--steps 100] [--procs N] [--dtype float32|float64] [--tolerance T]
                        [--bin-dir DIR] [--plot FILE]
      (b) against (c) on N processes (rank 0's losses) in fp32 or fp64: every step's loss within --tolerance
      relative (default 1e-4). Exit 1 when not.
  compare.py ab --baseline-bin-dir OLD [--bin-dir NEW] [--workloads W,..] [--procs N] [--strategies ddp,fsdp]
                [--reps R] [--steps N] [--warmup W]
      form (b) of two builds side by side (a change against the commit before it): for each workload and
      strategy (ACCELERATE_PARALLEL_STRATEGY), the two builds' runs alternated R times on N processes; prints
      each build's median step time and NEW / OLD.
  compare.py inputs DIR [--workloads W,..]
      writes DIR/W.weights (the initial parameters, seed 0) and DIR/W.data (the samples) for each workload.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import train_ref  # noqa: E402  (the Python forms; also reads and writes the tensor files)
sys.path.insert(0, os.path.join(REPO, "test", "harness"))
from numerics import report_spread  # noqa: E402  (the line scripts/numerics-matrix.sh reads)

FORMS = ["a", "b", "c", "d"]
FORM_NAMES = {"a": "(a) plain C++", "b": "(b) accel C++", "c": "(c) HF Accelerate", "d": "(d) plain torch"}
SAMPLES = {"mlp-mnist": 2048, "gpt-small": 256, "gpt-86m": 128}


def write_inputs(directory, workloads):
    import torch

    os.makedirs(directory, exist_ok=True)
    for workload in workloads:
        torch.manual_seed(0)
        model = train_ref.make_model(workload)
        train_ref.write_tensors(os.path.join(directory, f"{workload}.weights"),
                                {name: p.detach() for name, p in model.named_parameters()})
        generator = torch.Generator().manual_seed(42)
        if workload == "mlp-mnist":
            images = torch.randn(SAMPLES[workload], 784, generator=generator)
            teacher = torch.randn(784, 10, generator=generator)
            data = {"images": images, "labels": (images @ teacher).argmax(1)}
        else:
            # Repeating random patterns (period 2-16): learnable by attention, so the loss curve moves.
            vocab, _, _, _, context, _ = train_ref.CONFIGS[workload]
            rows = []
            for _ in range(SAMPLES[workload]):
                period = int(torch.randint(2, 17, (1,), generator=generator))
                pattern = torch.randint(vocab, (period,), generator=generator)
                rows.append(pattern.repeat(context // period + 2)[: context + 1])
            data = {"tokens": torch.stack(rows)}
        train_ref.write_tensors(os.path.join(directory, f"{workload}.data"), data)


def find_bin(bin_dir, name):
    path = os.path.join(bin_dir, name)
    if not os.access(path, os.X_OK):
        sys.exit(f"compare.py: {path} not found; build it (ninja -C BUILD {name}) and pass --bin-dir BUILD/bin")
    return path


def command(form, workload, procs, inputs, steps, warmup, bin_dir, python, dtype="float32"):
    args = [workload, inputs, str(steps), str(warmup)] + ([dtype] if dtype != "float32" else [])
    script = os.path.join(HERE, "train_ref.py")
    if form == "a":
        return [find_bin(bin_dir, "bench_train_plain")] + args
    if form == "b":
        program = [find_bin(bin_dir, "bench_train_accel")] + args
        if procs == 1:
            return program
        return [find_bin(bin_dir, "accel"), "launch", "-q", "--cpu", "--num_processes", str(procs),
                "--main_process_port", "0", "--"] + program
    if form == "c":
        program = [script, "--form", "accelerate"] + args
        if procs == 1:
            return [python] + program
        return [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs)] + program
    return [python, script, "--form", "torch"] + args


def run_one(form, workload, procs, precision, threads, inputs, steps, warmup, bin_dir, python, dtype="float32",
            extra_env=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), ACCELERATE_MIXED_PRECISION=precision_flag(precision),
               PYTHONWARNINGS="ignore", **(extra_env or {}))
    cmd = command(form, workload, procs, inputs, steps, warmup, bin_dir, python, dtype)
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    out = result.stdout
    step = re.search(r"^(?:\[rank0\]: )?step_ms (\S+) cpu_ms (\S+) batch (\d+)", out, re.M)
    losses = re.search(r"^(?:\[rank0\]: )?losses (.*)$", out, re.M)
    if result.returncode != 0 or not step or not losses:
        sys.exit(f"compare.py: {' '.join(cmd)} failed (exit {result.returncode}):\n{out[-2000:]}{result.stderr[-3000:]}")
    if len(re.findall(r"step_ms ", out)) != 1:
        sys.exit(f"compare.py: {' '.join(cmd)} printed {len(re.findall(r'step_ms ', out))} results, expected one "
                 f"(from the main process): did its {procs} processes form one process group?\n{out[-2000:]}")
    return float(step.group(1)), float(step.group(2)), int(step.group(3)), [float(v) for v in losses.group(1).split()]


def precision_flag(precision):
    return "no" if precision == "fp32" else precision


def units(workload, batch):
    """Samples per step and its unit: tokens for gpt, samples for the MLP."""
    if workload == "mlp-mnist":
        return batch, "samples/s"
    return batch * train_ref.CONFIGS[workload][4], "tokens/s"


def cmd_run(args):
    workloads, procs_list, precisions = args.workloads.split(","), [int(p) for p in args.procs.split(",")], \
        args.precisions.split(",")
    def threads(procs):
        return args.threads_1proc if procs == 1 else 1

    inputs = tempfile.mkdtemp(prefix="accel-bench-")
    try:
        write_inputs(inputs, workloads)
        results = []
        started = time.time()
        for workload in workloads:
            for precision in precisions:
                # Every process count and form of a workload runs in one alternated loop, so that the scaling
                # from 1 to N processes compares runs taken minutes apart, not whole phases apart.
                runs = [(procs, f) for procs in procs_list for f in FORMS
                        if (f in "bc" or (procs == 1 and precision == "fp32")) and f in args.forms]
                if not runs:
                    print(f"{workload} {precision}: no form of --forms {args.forms} runs at --procs {args.procs} "
                          f"((a) and (d) run at 1 process in fp32 only)", flush=True)
                    continue
                times, cpu = {run: [] for run in runs}, {run: [] for run in runs}
                batch = None
                for rep in range(args.reps):
                    order = runs[rep % len(runs):] + runs[: rep % len(runs)]
                    for procs, form in order:
                        ms, cpu_ms, batch, _ = run_one(form, workload, procs, precision, threads(procs), inputs,
                                                       args.steps, args.warmup, args.bin_dir, args.python)
                        times[(procs, form)].append(ms)
                        cpu[(procs, form)].append(cpu_ms)
                per_step, unit = units(workload, batch)
                for procs in procs_list:
                    forms = [f for p, f in runs if p == procs]
                    if not forms:
                        continue
                    row = {"workload": workload, "procs": procs, "precision": precision,
                           "threads": threads(procs), "unit": unit,
                           "global_batch": per_step * procs, "times": {f: times[(procs, f)] for f in forms},
                           "median_ms": {f: statistics.median(times[(procs, f)]) for f in forms},
                           "cpu_ms": {f: cpu[(procs, f)] for f in forms},
                           "median_cpu_ms": {f: statistics.median(cpu[(procs, f)]) for f in forms}}
                    row["throughput"] = {f: per_step * procs * 1000 / ms for f, ms in row["median_ms"].items()}
                    results.append(row)
                    print_row(row, flush=True)
                save(results, args)  # each workload's figures as soon as they are measured
        print("\n" + markdown(results, args))
        print(f"({time.time() - started:.0f} s)")
        if args.plot:
            plot_throughput(results, args.plot)
    finally:
        shutil.rmtree(inputs, ignore_errors=True)


def cmd_ab(args):
    builds = {"old": args.baseline_bin_dir, "new": args.bin_dir}
    inputs = tempfile.mkdtemp(prefix="accel-bench-")
    try:
        workloads = args.workloads.split(",")
        write_inputs(inputs, workloads)
        lines = [f"{args.reps} alternated repetitions x {args.steps} steps (+{args.warmup} warm-up), {args.procs} "
                 f"processes, 1 thread each, fp32; medians of rank 0's step time.", "",
                 f"| workload | strategy | old ({args.baseline_bin_dir}) | new ({args.bin_dir}) | new / old |",
                 "|---|---|---|---|---|"]
        started = time.time()
        for workload in workloads:
            for strategy in args.strategies.split(","):
                times = {build: [] for build in builds}
                for rep in range(args.reps):
                    for build in (["old", "new"] if rep % 2 == 0 else ["new", "old"]):
                        ms, _, _, _ = run_one("b", workload, args.procs, "fp32", 1, inputs, args.steps, args.warmup,
                                              builds[build], args.python,
                                              extra_env={"ACCELERATE_PARALLEL_STRATEGY": strategy})
                        times[build].append(ms)
                old, new = statistics.median(times["old"]), statistics.median(times["new"])
                print(f"{workload} {strategy}: old {old:.3f} ms {times['old']}, new {new:.3f} ms {times['new']}, "
                      f"new/old {new / old:.3f}", flush=True)
                lines.append(f"| {workload} | {strategy} | {old:.3f} ms | {new:.3f} ms | {new / old:.3f} |")
        print("\n" + "\n".join(lines))
        print(f"({time.time() - started:.0f} s)")
    finally:
        shutil.rmtree(inputs, ignore_errors=True)
    return 0


def save(results, args):
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(results, args) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "settings": vars(args)}, f, indent=1)


def print_row(row, flush=False):
    parts = [f"{row['workload']} {row['procs']}p {row['precision']}:"]
    for f, ms in row["median_ms"].items():
        parts.append(f"{f}={ms:.3f}ms (cpu {row['median_cpu_ms'][f]:.3f})")
    print(" ".join(parts), flush=flush)


def markdown(results, args):
    lines = [f"{args.reps} alternated repetitions x {args.steps} steps (+{args.warmup} warm-up), medians. "
             f"1 process: {args.threads_1proc} intra-op thread(s); N processes: 1 thread each (OMP_NUM_THREADS).", "",
             "Step time: wall clock (rank 0); CPU: the process's CPU time per step, all threads (rank 0).", "",
             "| workload | procs | precision | form | step time | throughput | vs (c) | CPU per step | CPU vs (c) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in results:
        c, c_cpu = row["median_ms"].get("c"), row["median_cpu_ms"].get("c")
        for f, ms in row["median_ms"].items():
            ratio = f"{c / ms:.2f}x" if c else "—"
            if f == "b" and c:
                ratio = f"**{ratio}**"
            cpu = row["median_cpu_ms"][f]
            lines.append(f"| `{row['workload']}` | {row['procs']} | {row['precision']} | {FORM_NAMES[f]} | "
                         f"{ms:.2f} ms | {row['throughput'][f]:,.0f} {row['unit']} | {ratio} | {cpu:.2f} ms | "
                         f"{f'{c_cpu / cpu:.2f}x' if c_cpu else '—'} |")
    scaling = []
    for row in results:
        if row["procs"] == 1:
            continue
        one = next((r for r in results if r["workload"] == row["workload"] and r["procs"] == 1
                    and r["precision"] == row["precision"]), None)
        if one is None:
            continue
        for f in "bc":
            if f in row["throughput"] and f in one["throughput"]:
                # Repetition i ran both process counts within one pass of the loop: the ratio of each such pair.
                pairs = [row["procs"] * t1 / tn for t1, tn in zip(one["times"][f], row["times"][f])]
                scaling.append(f"| `{row['workload']}` | {FORM_NAMES[f]} | {row['procs']} x 1 thread vs 1 x "
                               f"{one['threads']} | {row['throughput'][f] / one['throughput'][f]:.2f}x | "
                               f"{statistics.median(pairs):.2f}x ({min(pairs):.2f}-{max(pairs):.2f}) |")
    if scaling:
        lines += ["", "Scaling: the ratio of the medians, and the median (range) of the ratios of the runs of one "
                  "repetition.", "",
                  "| workload | form | processes | throughput ratio | per repetition |", "|---|---|---|---|---|"] + scaling
    return "\n".join(lines)


def plot_throughput(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r["workload"] for r in results))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4), squeeze=False)
    colors = {"a": "#9e9e9e", "b": "#1f77b4", "c": "#ff7f0e", "d": "#d9b38c"}
    for ax, workload in zip(axes[0], workloads):
        rows = [r for r in results if r["workload"] == workload]
        groups = [f"{r['procs']} proc{'s' if r['procs'] > 1 else ''}\n{r['precision']}" for r in rows]
        width = 0.2
        for i, form in enumerate(FORMS):
            xs = [g + (i - 1.5) * width for g, r in enumerate(rows) if form in r["throughput"]]
            ys = [r["throughput"][form] for r in rows if form in r["throughput"]]
            if xs:
                ax.bar(xs, ys, width, label=FORM_NAMES[form], color=colors[form])
        ax.set_xticks(range(len(rows)), groups)
        ax.set_title(workload)
        ax.set_ylabel(rows[0]["unit"])
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Training throughput, medians of alternated runs (higher is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"wrote {path}")


def cmd_loss_check(args):
    inputs = tempfile.mkdtemp(prefix="accel-losscheck-")
    try:
        curves = {}
        for workload in args.workload.split(","):
            write_inputs(inputs, [workload])
            _, _, _, ours = run_one("b", workload, args.procs, "fp32", 1, inputs, args.steps, 0, args.bin_dir,
                                    args.python, args.dtype)
            _, _, _, theirs = run_one("c", workload, args.procs, "fp32", 1, inputs, args.steps, 0,
                                      args.bin_dir, args.python, args.dtype)
            if len(ours) != args.steps or len(theirs) != args.steps:
                print(f"FAIL {workload}: {len(ours)} and {len(theirs)} losses, expected {args.steps}")
                return 1
            worst = max(abs(b - c) / abs(c) for b, c in zip(ours, theirs))
            at = max(range(args.steps), key=lambda i: abs(ours[i] - theirs[i]) / abs(theirs[i]))
            verdict = "ok" if worst <= args.tolerance else "FAIL"
            report_spread(f"{workload} {args.procs} process(es) {args.dtype}, (b) against (c)", worst, args.tolerance)
            print(f"{verdict} {workload}, {args.procs} process(es), {args.dtype}: {args.steps} steps, "
                  f"(b) {ours[0]:.6f} -> {ours[-1]:.6f}, "
                  f"(c) {theirs[0]:.6f} -> {theirs[-1]:.6f}, largest relative difference {worst:.2e} at step "
                  f"{at + 1} (limit {args.tolerance:g})")
            curves[workload] = (ours, theirs)
            if verdict != "ok":
                return 1
        if args.plot:
            plot_losses(curves, args.plot)
        return 0
    finally:
        shutil.rmtree(inputs, ignore_errors=True)


def plot_losses(curves, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(curves), figsize=(5.5 * len(curves), 5.5), squeeze=False, sharex=True)
    for i, (workload, (ours, theirs)) in enumerate(curves.items()):
        steps = range(1, len(ours) + 1)
        axes[0][i].plot(steps, theirs, color="#ff7f0e", linewidth=3, label="(c) HF Accelerate")
        axes[0][i].plot(steps, ours, color="#1f77b4", linewidth=1.2, label="(b) accel C++")
        axes[0][i].set_title(f"{workload}: loss, fp32, same weights and data")
        axes[0][i].legend(fontsize=8)
        axes[1][i].semilogy(steps, [max(abs(b - c) / abs(c), 1e-12) for b, c in zip(ours, theirs)], color="#444")
        axes[1][i].axhline(1e-4, color="red", linestyle="--", linewidth=1, label="limit 1e-4")
        axes[1][i].set_ylabel("|b - c| / |c|")
        axes[1][i].set_xlabel("step")
        axes[1][i].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    default_bin = os.path.join(REPO, "build-bench", "bin")
    run = sub.add_parser("run")
    run.add_argument("--workloads", default="mlp-mnist,gpt-small")
    run.add_argument("--procs", default="1,2")
    run.add_argument("--precisions", default="fp32")
    run.add_argument("--forms", default="abcd")
    run.add_argument("--reps", type=int, default=5)
    run.add_argument("--steps", type=int, default=30)
    run.add_argument("--warmup", type=int, default=5)
    run.add_argument("--threads-1proc", type=int, default=1)
    run.add_argument("--markdown")
    run.add_argument("--json")
    run.add_argument("--plot")
    check = sub.add_parser("loss-check")
    check.add_argument("--workload", default="mlp-mnist")
    check.add_argument("--steps", type=int, default=100)
    check.add_argument("--procs", type=int, default=1,
                       help="processes of each form (rank 0's losses are compared: its own batches)")
    check.add_argument("--tolerance", type=float, default=1e-4)
    check.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                       help="the parameters' and samples' dtype in both forms")
    check.add_argument("--plot")
    ab = sub.add_parser("ab")
    ab.add_argument("--baseline-bin-dir", required=True)
    ab.add_argument("--workloads", default="mlp-mnist,gpt-small")
    ab.add_argument("--procs", type=int, default=2)
    ab.add_argument("--strategies", default="ddp,fsdp")
    ab.add_argument("--reps", type=int, default=5)
    ab.add_argument("--steps", type=int, default=30)
    ab.add_argument("--warmup", type=int, default=5)
    inputs = sub.add_parser("inputs")
    inputs.add_argument("dir")
    inputs.add_argument("--workloads", default="mlp-mnist,gpt-small")
    for p in (run, check, ab):
        p.add_argument("--bin-dir", default=default_bin)
        p.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    if args.command == "inputs":
        write_inputs(args.dir, args.workloads.split(","))
        return 0
    if args.command == "loss-check":
        return cmd_loss_check(args)
    if args.command == "ab":
        return cmd_ab(args)
    cmd_run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
