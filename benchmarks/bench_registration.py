"""What registering and releasing a graph costs the central scheduler, with no task code.

Starts ``conveyor scheduler`` (SQLite state in a temporary directory, no plugin); then W
synthetic workers, one after the other, register the same N-task fan-in (a root needing N - 1
leaves) through ``POST /api/v1/add_tasks`` in requests of 500 tasks, as ``conveyor run``'s
workers do before they ask for work; then each releases every task it registered
(``POST /api/v1/release``), as a worker does when its run ends. In a graph of more than 20,000
tasks, the root's dependencies and a release go 20,000 ids a request, as the http transport
shares out what does not fit in one. Prints one JSON line: for each step, the wall time and
the server's CPU time (user + system) in seconds, and the server's CPU per task of each kind.
The first worker's registration creates the rows; the others' only add themselves to them.
Example::

    python benchmarks/bench_registration.py --n 20000 --workers 4
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil
from bench_server import free_port, scratch_dir, stop, wait_healthy

BATCH = 500  # tasks per add_tasks request (the http transport's own)
# ids a request, of the root's dependencies and of a release: the default graph's fit in one
# request each; a larger graph's are shared out among several, as the http transport does, to
# stay under the server's max_request_bytes (the scheduler merges a task's dependencies)
IDS = 20000


def measure(server: psutil.Process, step: Callable[[], None]) -> tuple[float, float]:
    """``step()``'s wall time and the server's CPU time meanwhile, in seconds."""
    before = sum(server.cpu_times()[:2])
    started = time.perf_counter()
    step()
    return time.perf_counter() - started, sum(server.cpu_times()[:2]) - before


def main() -> None:
    """Run the benchmark and print its JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="tasks in the graph")
    parser.add_argument("--workers", type=int, default=4, help="workers registering it")
    args = parser.parse_args()
    # (a SIGTERM ends the run through its clean-up: no server nor scratch directory is left)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = scratch_dir("conveyor-bench-registration-")
    port = free_port()
    env = {**os.environ, "CONVEYOR_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-m", "conveyor", "scheduler", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--state-path", str(work / "state.db")], env=env, stderr=subprocess.DEVNULL
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        server = psutil.Process(process.pid)
        connection = http.client.HTTPConnection("127.0.0.1", port)

        def post(route: str, body: dict[str, Any]) -> None:
            headers = {"Content-Type": "application/json"}
            connection.request("POST", f"/api/v1/{route}", json.dumps(body), headers)
            answer = connection.getresponse()
            text = answer.read()
            if answer.status != 200:
                raise RuntimeError(f"{route} answered {answer.status}: {text[:300]!r}")

        leaves = [
            {"task_id": f"Leaf_{i}", "family": "Leaf", "module": "m", "params": {"i": str(i)}}
            for i in range(args.n - 1)
        ]
        deps = [leaf["task_id"] for leaf in leaves]
        root = {
            "task_id": "Root",
            "family": "Root",
            "module": "m",
            "params": {"n": str(args.n)},
            "deps": deps[:IDS],
        }
        more = [{**root, "deps": deps[i : i + IDS]} for i in range(IDS, len(deps), IDS)]
        specs = [root, *leaves]  # (the root first, as a depth-first walk registers them)
        ids = [spec["task_id"] for spec in specs]

        def register(worker_id: str) -> None:
            for i in range(0, len(specs), BATCH):
                post("add_tasks", {"worker_id": worker_id, "tasks": specs[i : i + BATCH]})
                for part in more if i == 0 else ():  # (the rest of the root's dependencies)
                    post("add_tasks", {"worker_id": worker_id, "tasks": [part]})

        def release(worker_id: str) -> None:
            for i in range(0, len(ids), IDS):
                post("release", {"worker_id": worker_id, "task_ids": ids[i : i + IDS]})

        steps: dict[str, tuple[float, float]] = {}
        for w in range(1, args.workers + 1):
            steps[f"register_{w}"] = measure(server, lambda w=w: register(f"w{w}"))
        for w in range(1, args.workers + 1):
            steps[f"release_{w}"] = measure(server, lambda w=w: release(f"w{w}"))
    finally:
        stop(process)
        shutil.rmtree(work, ignore_errors=True)
    later = [cpu for name, (_, cpu) in steps.items() if name.startswith("register_")][1:]
    releases = [cpu for name, (_, cpu) in steps.items() if name.startswith("release_")]
    print(
        json.dumps(
            {
                "n": args.n,
                "workers": args.workers,
                "steps": {
                    k: {"wall_s": round(w, 3), "cpu_s": round(c, 3)} for k, (w, c) in steps.items()
                },
                "first_registration_cpu_us_per_task": round(
                    steps["register_1"][1] / args.n * 1e6, 1
                ),
                "later_registration_cpu_us_per_task": round(
                    sum(later) / max(1, len(later)) / args.n * 1e6, 1
                ),
                "release_cpu_us_per_task": round(sum(releases) / len(releases) / args.n * 1e6, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
