#!/usr/bin/env python3
"""The cost of the mlflow tracker on a training step, with its server answering and with it stopped.

    bench/mlflow_overhead.py --bench build/bin/bench_tracking_overhead [--runs 9] [--steps 300]
                             [--mlflow-python $(scripts/bootstrap.sh --print-mlflow-venv)/bin/python]

Starts `mlflow server` (sqlite, loopback) from the MLflow venv, then runs bench_tracking_overhead --log-with
mlflow twice: (1) with the server answering, (2) with the server SIGSTOPped before the program starts (every
request the tracker makes waits for its timeout; the values go to the spool). Each run of the benchmark
alternates training without logging and training with `accelerator.log` after every step, from the same weights
and batches, and prints both medians and their ratio (docs/benchmarks.md, "MLflow tracker overhead").
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from mlflow_server import MlflowServer  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True)
    parser.add_argument("--runs", default="9")
    parser.add_argument("--steps", default="300")
    parser.add_argument("--mlflow-python")
    args = parser.parse_args()
    python = args.mlflow_python or os.path.join(subprocess.run(
        [os.path.join(ROOT, "scripts", "bootstrap.sh"), "--print-mlflow-venv"], capture_output=True, text=True,
        check=True).stdout.strip(), "bin", "python")
    work = tempfile.mkdtemp(prefix="accelerate-bench-mlflow-")
    server = MlflowServer(python, work)
    uri = server.uri
    try:
        env = dict(os.environ, MLFLOW_TRACKING_URI=uri, MLFLOW_EXPERIMENT_NAME="bench", OMP_NUM_THREADS="1")
        for title, stopped in (("server answering", False), ("server stopped (SIGSTOP)", True)):
            if stopped:
                server.signal(signal.SIGSTOP)
            print(f"== mlflow tracker, {title}", flush=True)
            done = subprocess.run([args.bench, "--runs", args.runs, "--steps", args.steps, "--log-with", "mlflow",
                                   "--project-dir", os.path.join(work, "runs", "stopped" if stopped else "live")],
                                  env=env, capture_output=True, text=True)
            print(done.stdout, end="")
            warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
            print(f"  warnings: {len(warnings)}" + "".join(f"\n    {w}" for w in warnings), flush=True)
            if done.returncode != 0:
                sys.exit(f"{args.bench} exited {done.returncode}:\n{done.stderr}")
            if stopped:
                server.signal(signal.SIGCONT)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
