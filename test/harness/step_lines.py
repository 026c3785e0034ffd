"""What the plain-vs-distributed comparisons share: running one program with a hard timeout, and reading the
`step <n> <name> <value> [<name> <value> ...]` lines it prints (optionally prefixed `[rankN]: ` by accel launch).
"""
import os
import re
import shlex
import signal
import subprocess
import sys

NUMBER = r"[-+0-9.eE]+|nan|inf"
LINE = re.compile(rf"^(?:\[rank(\d+)\]: )?step (\d+)((?: [A-Za-z_]+ (?:{NUMBER}))+)\s*$")


def run(command, timeout, cwd, tool):
    """Runs `command` in `cwd` with one CPU thread; its output, or exits naming `tool` on a failure or timeout
    (the process group is terminated, then killed)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                               start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        sys.exit(f"{tool}: FAILED: {shlex.join(command)} did not finish in {timeout} s\n{output}")
    if process.returncode != 0:
        sys.exit(f"{tool}: FAILED: {shlex.join(command)} exited {process.returncode}\n{output}")
    return output


def values_by_rank(output):
    """{rank: {(step, name): value}} from the `step` lines of a run's output."""
    result = {}
    for line in output.splitlines():
        match = LINE.match(line.strip())
        if not match:
            continue
        rank = int(match.group(1) or 0)
        fields = match.group(3).split()
        for name, value in zip(fields[::2], fields[1::2]):
            result.setdefault(rank, {})[(int(match.group(2)), name)] = float(value)
    return result
