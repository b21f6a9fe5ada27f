"""A graph run by 2 worker processes over HTTP against one central scheduler.

Starts ``conveyor scheduler`` (SQLite state in a temporary directory) on a free loopback port,
then two ``conveyor run`` workers on the same N-task fan-in (a root needing N - 1 no-op leaves
whose completion is a marker file), and prints one JSON line: total wall time, HTTP requests
per task (counted by the server), and the server's peak RSS. Example::

    python benchmarks/bench_server.py --n 10000
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

import psutil

TASKS = textwrap.dedent(
    """
    import os
    import conveyor

    DIR = os.environ["BENCH_DIR"]

    class Leaf(conveyor.Task):
        i = conveyor.IntParameter()

        def complete(self):
            return os.path.exists(os.path.join(DIR, f"leaf-{self.i}"))

        def run(self):
            open(os.path.join(DIR, f"leaf-{self.i}"), "w").close()

    class Root(conveyor.Task):
        n = conveyor.IntParameter()

        def requires(self):
            return [Leaf(i=i) for i in range(self.n - 1)]

        def complete(self):
            return os.path.exists(os.path.join(DIR, "root"))

        def run(self):
            open(os.path.join(DIR, "root"), "w").close()
    """
)


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, timeout: float = 30) -> None:
    """Poll /health until it answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the scheduler did not start")


def main() -> None:
    """Run the benchmark and print its JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--workers-per-process", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="conveyor-bench-server-"))
    (work / "bench_server_tasks.py").write_text(TASKS)
    env = {
        **os.environ,
        "BENCH_DIR": str(work),
        "PYTHONPATH": str(work),
        "CONVEYOR_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    conveyor = [sys.executable, "-m", "conveyor"]
    server = subprocess.Popen(
        [*conveyor, "scheduler", "--port", str(port), "--state-path", str(work / "state.db")],
        env=env,
        cwd=work,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(url)
        proc = psutil.Process(server.pid)
        started = time.perf_counter()
        run = [
            *conveyor,
            "run",
            "bench_server_tasks.Root",
            "--n",
            str(args.n),
            "--scheduler-url",
            url,
            "--log-level",
            "warning",
            "--workers",
            str(args.workers_per_process),
            "--executor",
            "inline" if args.workers_per_process == 1 else "fork",
        ]
        workers = [
            subprocess.Popen(run, env=env, cwd=work, stdout=subprocess.DEVNULL) for _ in range(2)
        ]
        peak = 0
        while any(w.poll() is None for w in workers):
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.2)
        wall = time.perf_counter() - started
        codes = [w.returncode for w in workers]
        with urllib.request.urlopen(url + "/health") as answer:
            requests = json.load(answer)["api_requests"]
        with urllib.request.urlopen(url + "/api/v1/tasks") as answer:
            tasks = json.load(answer)["tasks"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    done = sum(1 for t in tasks if t["status"] == "DONE")
    print(
        json.dumps(
            {
                "n": args.n,
                "workers": 2,
                "exit_codes": codes,
                "done": done,
                "wall_s": round(wall, 2),
                "per_task_ms": round(wall / args.n * 1000, 3),
                "requests_per_task": round((requests - 1) / args.n, 2),
                "server_peak_rss_mib": round(peak / 2**20, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
