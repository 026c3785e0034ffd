"""A real `mlflow server` for the MLflow tracker's test and benchmark: sqlite store, loopback, a free port.

    from mlflow_server import MlflowServer
    with MlflowServer(python, work) as server:   # python: the MLflow venv's (scripts/bootstrap.sh --print-mlflow-venv)
        ... server.uri ... server.signal(signal.SIGSTOP) ...

The server runs in a process group of its own (so SIGSTOP/SIGCONT reach its workers), logs to
<work>/server.log, and is ready when /health answers; RuntimeError with the log's tail when it does not.
"""
import os
import signal
import socket
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    def __init__(self, python, work, timeout=180):
        self.work = work
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(work, "server.log")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [python, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{work}/mlflow.db",
                 "--default-artifact-root", f"{work}/artifacts", "--host", "127.0.0.1", "--port", str(self.port),
                 "--workers", "1"],
                stdout=log, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)
        started = time.time()
        while time.time() < started + timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited {self.process.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        self.start_seconds = time.time() - started
                        return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer on {self.uri}/health within {timeout} s:\n{self.tail()}")

    def tail(self):
        with open(self.log_path) as text:
            return text.read()[-3000:]

    def signal(self, number):
        os.killpg(self.process.pid, number)

    def stop(self):
        try:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            self.process.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                self.signal(signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
