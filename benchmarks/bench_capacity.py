"""The central scheduler's capacity, measured with a synthetic client (no task code, no worker).

Starts ``conveyor scheduler`` (SQLite state in a temporary directory, no plugin), registers N
independent tasks through ``POST /api/v1/add_tasks`` in batches, then runs C client threads,
each an assistant with its own keep-alive connection, looping ``get_work`` → ``task_done``
until nothing is left. Every ``task_done`` answered is a completion the server has committed
(acknowledged = stored), so completions per second is the server's durable throughput; the
client does nothing else, so what is measured is the server alone (HTTP, decoding, the policy,
the commit). Prints one JSON line: registration time, completions per second, and the p50 and
p99 latency of each call, and the server's CPU time (user + system) per completion, which a
busy machine disturbs less than the rate. With ``--batch K`` each client asks for up to K tasks per
``get_work`` and reports them done with its next one, as a worker with K slots does. Examples::

    python benchmarks/bench_capacity.py --n 20000 --clients 4
    python benchmarks/bench_capacity.py --n 20000 --clients 4 --batch 8
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import psutil
from bench_server import free_port, scratch_dir, stop, wait_healthy

BATCH = 500

PROFILED = """
import cProfile, pstats, runpy, signal, sys, threading
out = sys.argv.pop(1)
sys.argv[0] = "conveyor"
# uvicorn raises the SIGTERM again once it has shut down, with the handler found at its start:
# this one ends the process by SystemExit, so that the profile is written
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
profiles = [cProfile.Profile()]

def in_thread(*_):  # every thread started later gets a profiler of its own
    profile = cProfile.Profile()
    profiles.append(profile)
    profile.enable()

threading.setprofile(in_thread)
profiles[0].enable()
try:
    runpy.run_module("conveyor", run_name="__main__")
except SystemExit:
    pass
finally:
    profiles[0].disable()
    pstats.Stats(*profiles).dump_stats(out)
"""
"""The server under cProfile (``--profile-server``), its threads too: argv[1] is where the
stats of all of them go."""


class Client:
    """One keep-alive connection to the server on loopback ``port``."""

    def __init__(self, port: int, timeout: float = 60) -> None:
        """Connect to ``port`` (``timeout``: per call)."""
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def call(self, method: str, route: str, body: bytes | None = None) -> Any:
        """The decoded answer of one call; RuntimeError for a status other than 200."""
        headers = {"Host": "127.0.0.1"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        self.connection.request(method, route, body, headers)
        answer = self.connection.getresponse()
        text = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{method} {route}: {answer.status} {text[:300]!r}")
        return json.loads(text)

    def post(self, route: str, body: dict[str, Any]) -> Any:
        """``POST /api/v1/<route>`` with ``body`` as JSON."""
        data = json.dumps(body, separators=(",", ":")).encode()
        return self.call("POST", f"/api/v1/{route}", data)

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()


def take_and_report(
    client: Client, worker: str, assistant: bool, limit: int | None = None
) -> tuple[list[float], list[float]]:
    """Ask ``get_work`` and report each task done (one task per request, as an older worker
    does) until nothing is left or ``limit`` asks were made; each call's time, in seconds."""
    asks: list[float] = []
    reports: list[float] = []
    while limit is None or len(asks) < limit:
        started = time.perf_counter()
        work = client.post("get_work", {"worker_id": worker, "assistant": assistant})["work"]
        asks.append(time.perf_counter() - started)
        if work is None:
            break
        started = time.perf_counter()
        body = {"worker_id": worker, "task_id": work["task_id"], "attempt": work["attempt"]}
        client.post("task_done", body)
        reports.append(time.perf_counter() - started)
    return asks, reports


def drive(port: int, worker: str, times: dict[str, list[float]], done: list[int]) -> None:
    """Take work as an assistant and report it done until the server has none left."""
    asks, reports = take_and_report(Client(port), worker, True)
    times.setdefault("get_work", []).extend(asks)
    times.setdefault("task_done", []).extend(reports)
    done.append(len(reports))


def drive_batched(
    port: int, worker: str, times: dict[str, list[float]], done: list[int], batch: int
) -> None:
    """Take up to ``batch`` tasks per ``get_work`` and report them done with the next one
    (the reports a worker carries: acknowledged means committed, hand-outs and all)."""
    client = Client(port)
    asks: list[float] = []
    count = 0
    held: list[dict[str, Any]] = []
    while True:
        started = time.perf_counter()
        body = {"worker_id": worker, "assistant": True, "max_tasks": batch, "done": held}
        answer = client.post("get_work", body)
        asks.append(time.perf_counter() - started)
        count += len(held)
        handed = ([answer["work"]] if answer["work"] else []) + answer["more"]
        if not handed:
            break
        held = [
            {"worker_id": worker, "task_id": w["task_id"], "attempt": w["attempt"]} for w in handed
        ]
    times.setdefault("get_work", []).extend(asks)
    done.append(count)


def quantile_ms(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` in milliseconds."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


def run(n: int, clients: int, batch: int = 0, profile: str = "") -> dict[str, Any]:
    """One measurement against a fresh server (under cProfile, its stats written to
    ``profile``, if given); its figures."""
    work = scratch_dir("conveyor-bench-capacity-")
    port = free_port()
    env = {**os.environ, "CONVEYOR_DISABLE_PLUGIN_AUTOLOAD": "1"}
    # (the server runs in the scratch directory, which goes when the run ends: not its profile)
    python = ["-c", PROFILED, os.path.abspath(profile)] if profile else ["-m", "conveyor"]
    server = subprocess.Popen(
        [
            sys.executable,
            *python,
            "scheduler",
            "--port",
            str(port),
            "--state-path",
            str(work / "state.db"),
        ],
        env=env,
        cwd=work,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        registrar = Client(port)
        started = time.perf_counter()
        for first in range(0, n, BATCH):
            tasks = [
                {"task_id": f"Synthetic_{i}", "family": "Synthetic", "params": {"i": str(i)}}
                for i in range(first, min(n, first + BATCH))
            ]
            registrar.post("add_tasks", {"worker_id": "registrar", "tasks": tasks})
        registered = time.perf_counter() - started
        times: dict[str, list[float]] = {}
        done: list[int] = []
        finished: list[float] = []

        def timed(target: Any, *args: Any) -> None:
            try:
                target(*args)
            finally:
                finished.append(time.perf_counter())

        threads = [
            threading.Thread(target=timed, args=(drive, port, f"client-{k}", times, done))
            if not batch
            else threading.Thread(
                target=timed, args=(drive_batched, port, f"client-{k}", times, done, batch)
            )
            for k in range(clients)
        ]
        peak = 0
        proc = psutil.Process(server.pid)
        cpu_before = sum(proc.cpu_times()[:2])
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.2)
        wall = max(finished) - started  # (when the last client ended, not the poll's step)
        cpu = sum(proc.cpu_times()[:2]) - cpu_before
    finally:
        stop(server)
        shutil.rmtree(work, ignore_errors=True)
    completed = sum(done)
    return {
        "n": n,
        "clients": clients,
        "completed": completed,
        "register_s": round(registered, 2),
        "wall_s": round(wall, 2),
        "completions_per_s": round(completed / wall, 1) if wall else 0.0,
        "get_work_ms": {
            "p50": quantile_ms(times["get_work"], 0.5),
            "p99": quantile_ms(times["get_work"], 0.99),
        },
        **(
            {
                "task_done_ms": {
                    "p50": quantile_ms(times["task_done"], 0.5),
                    "p99": quantile_ms(times["task_done"], 0.99),
                    "mean": round(statistics.fmean(times["task_done"]) * 1000, 3),
                }
            }
            if not batch
            else {"batch": batch, "requests_per_task": round(len(times["get_work"]) / n, 3)}
        ),
        "server_peak_rss_mib": round(peak / 2**20, 1),
        "server_cpu_us_per_task": round(cpu / max(1, completed) * 1e6, 1),
    }


def main() -> None:
    """Parse arguments, measure, print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--batch",
        type=int,
        default=0,
        help="hand-outs per get_work, reported done with the next one (0: get_work, task_done)",
    )
    parser.add_argument(
        "--profile-server",
        default="",
        metavar="FILE",
        help="run the server under cProfile (all its threads) and write the stats to FILE",
    )
    args = parser.parse_args()
    # (a SIGTERM ends the run through its clean-up: no server nor scratch directory is left)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(json.dumps(run(args.n, args.clients, args.batch, args.profile_server)), flush=True)


if __name__ == "__main__":
    main()
