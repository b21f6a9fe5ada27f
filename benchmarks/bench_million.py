"""A million known tasks in the central scheduler: registration, memory, hand-out latency, reload.

Starts ``conveyor scheduler`` (SQLite state in a temporary directory, no plugin) on a free
loopback port and, from one synthetic worker (raw ``POST /api/v1/add_tasks``, no task code),
registers a wrapper task over N leaves in batches: each request carries ``--batch`` leaves
(``PENDING``, runnable) and the wrapper again with those leaves as its dependencies (the
scheduler merges a known task's dependencies, so the wrapper ends up ``PENDING`` on all N, as
one registration naming them all would leave it, which no request could carry). It prints:

* the registration's total time and the time of each tenth of the batches (flat when the
  total is O(n)), and the server's RSS after it (and its peak while registering);
* ``get_work`` latency at that size over ``--calls`` hand-outs, each followed by its
  ``task_done`` (client-side round trips on one keep-alive connection: p50, p99, max);
* the reload: the server is stopped (SIGTERM) and started again on the same state file; the
  time until ``/health`` answers (the state is loaded before the server listens) and the
  scheduler answers a ``statuses`` of sample tasks as they were left, its RSS after the
  reload and its peak during it, and the state file's size.

Examples::

    python benchmarks/bench_million.py --n 100000
    python benchmarks/bench_million.py                  # N = 1,000,000
    python benchmarks/bench_million.py --n 100000 --json
    python benchmarks/bench_million.py --n 100000 --profile-server /tmp/prof   # cProfile dumps

With ``--profile-server DIR`` both server processes run under ``cProfile`` (every thread: the
event loop's and the pool's) and their stats go to ``DIR/first.prof`` and ``DIR/reload.prof``
(the times measured then include the profiler's cost, about 2-3x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from bench_capacity import PROFILED, Client, quantile_ms, take_and_report
from bench_server import free_port

WORKER = "bench-million"
WRAPPER = "Wrapper_million_0123456789"
MODULE = "bench_million_tasks"


def leaf_id(i: int) -> str:
    """The id of leaf ``i``, shaped like a conveyor task id (family, parameter, hash)."""
    return f"Leaf_{i}_{i * 2654435761 % 16**10:010x}"


def leaf_spec(i: int) -> dict[str, Any]:
    """The registration of leaf ``i``: pending, runnable, no dependencies."""
    return {"task_id": leaf_id(i), "family": "Leaf", "module": MODULE, "params": {"i": str(i)}}


def wrapper_spec(first: int, last: int) -> dict[str, Any]:
    """The wrapper's registration naming leaves ``first`` to ``last - 1`` as dependencies."""
    return {
        "task_id": WRAPPER,
        "family": "Wrapper",
        "module": MODULE,
        "params": {"n": "million"},
        "deps": [leaf_id(i) for i in range(first, last)],
    }


class Sampler:
    """The peak RSS of a process, sampled every ``interval`` seconds in a thread."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        """Start sampling process ``pid``."""
        self.process = psutil.Process(pid)
        self.peak = 0
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return
            self._stop.wait(self.interval)

    def stop(self) -> int:
        """Stop sampling; the peak RSS in bytes."""
        self._stop.set()
        self._thread.join()
        return self.peak


def start_server(port: int, work: Path, profile: Path | None) -> subprocess.Popen[bytes]:
    """``conveyor scheduler`` on ``port`` with its SQLite state in ``work`` (under cProfile,
    writing to ``profile``, if given)."""
    python = [sys.executable, "-m", "conveyor"]
    if profile is not None:
        python = [sys.executable, "-c", PROFILED, str(profile)]
    with open(work / "server.log", "ab") as log:  # (the child has its own copy)
        return subprocess.Popen(
            [*python, "scheduler", "--port", str(port), "--state-path", str(work / "state.db")],
            env={**os.environ, "CONVEYOR_DISABLE_PLUGIN_AUTOLOAD": "1"},
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def wait_health(port: int, server: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    """Poll ``/health`` every 10 ms until it answers; its answer. RuntimeError if the server
    exits or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the scheduler exited with {server.returncode}")
        try:
            client = Client(port, timeout=5)
            try:
                answer: dict[str, Any] = client.call("GET", "/health")
                return answer
            finally:
                client.close()
        except OSError:
            time.sleep(0.01)
    raise RuntimeError(f"the scheduler did not answer /health within {timeout} s")


def stop_server(server: subprocess.Popen[bytes], timeout: float = 120) -> float:
    """SIGTERM, then wait for the exit; the seconds it took (killed after ``timeout``)."""
    started = time.perf_counter()
    server.terminate()
    try:
        server.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    return time.perf_counter() - started


def mib(value: float) -> float:
    """Bytes in MiB, rounded to 0.1."""
    return round(value / 2**20, 1)


def register(client: Client, n: int, batch: int, limit: int) -> dict[str, Any]:
    """Register the wrapper over ``n`` leaves, ``batch`` leaves per request; the timings."""
    times: list[float] = []
    largest = 0
    started = time.perf_counter()
    for first in range(0, n, batch):
        last = min(n, first + batch)
        specs = [leaf_spec(i) for i in range(first, last)]
        specs.append(wrapper_spec(first, last))
        body = {"worker_id": WORKER, "tasks": specs}
        data = json.dumps(body, separators=(",", ":")).encode()
        if len(data) > limit:
            raise SystemExit(
                f"bench_million: a request of {batch} leaves is {len(data)} bytes, more than the "
                f"server's max_request_bytes ({limit}); use a smaller --batch"
            )
        largest = max(largest, len(data))
        sent = time.perf_counter()
        client.call("POST", "/api/v1/add_tasks", data)
        times.append(time.perf_counter() - sent)
    total = time.perf_counter() - started
    tenths = []
    step = max(1, len(times) // 10)
    for k in range(0, len(times), step):
        part = times[k : k + step]
        tenths.append(round(sum(part) / len(part) * 1000, 1))
    return {
        "register_s": round(total, 2),
        "requests": len(times),
        "largest_request_kib": round(largest / 1024, 1),
        "per_task_us": round(total / n * 1e6, 1),
        "request_ms_by_tenth": tenths,
        "request_ms_first_last": [round(times[0] * 1000, 1), round(times[-1] * 1000, 1)],
    }


def hand_out(client: Client, calls: int) -> dict[str, Any]:
    """``calls`` hand-outs, each reported done; the latencies."""
    asks, reports = take_and_report(client, WORKER, False, calls)
    return {
        "calls": len(asks),
        "get_work_ms": {
            "p50": quantile_ms(asks, 0.5),
            "p99": quantile_ms(asks, 0.99),
            "max": quantile_ms(asks, 1.0),
        },
        "task_done_ms": {
            "p50": quantile_ms(reports, 0.5),
            "p99": quantile_ms(reports, 0.99),
            "max": quantile_ms(reports, 1.0),
        },
    }


def run(n: int, batch: int, calls: int, profile: Path | None, keep: bool) -> dict[str, Any]:
    """One measurement against a fresh server; its figures."""
    work = Path(tempfile.mkdtemp(prefix="conveyor-bench-million-"))
    port = free_port()
    figures: dict[str, Any] = {"n": n, "batch": batch, "python": sys.version.split()[0]}
    first = profile / "first.prof" if profile else None
    server = start_server(port, work, first)
    try:
        started = time.perf_counter()
        health = wait_health(port, server, 120)
        figures["empty_start_s"] = round(time.perf_counter() - started, 2)
        process = psutil.Process(server.pid)
        figures["empty_rss_mib"] = mib(process.memory_info().rss)
        client = Client(port)
        sampler = Sampler(server.pid)
        figures.update(register(client, n, batch, int(health["max_request_bytes"])))
        figures["register_peak_rss_mib"] = mib(sampler.stop())
        figures["rss_after_register_mib"] = mib(process.memory_info().rss)
        cpu = process.cpu_times()
        figures["server_cpu_s_after_register"] = round(cpu.user + cpu.system, 1)
        figures.update(hand_out(client, calls))
        figures["rss_after_hand_out_mib"] = mib(process.memory_info().rss)
        done = [leaf_id(i) for i in range(min(calls, n))]
        client.close()
        figures["stop_s"] = round(stop_server(server), 2)
        db = work / "state.db"
        figures["state_mib"] = mib(db.stat().st_size)
        wal = work / "state.db-wal"
        figures["wal_mib"] = mib(wal.stat().st_size) if wal.exists() else 0.0

        started = time.perf_counter()
        server = start_server(port, work, profile / "reload.prof" if profile else None)
        sampler = Sampler(server.pid, interval=0.05)
        wait_health(port, server, 600)
        health_s = time.perf_counter() - started
        client = Client(port)
        sample = [WRAPPER, leaf_id(0), leaf_id(n - 1), done[-1] if done else leaf_id(0)]
        statuses = client.post("statuses", {"task_ids": sample})["statuses"]
        figures["reload_s"] = round(time.perf_counter() - started, 2)
        figures["reload_health_s"] = round(health_s, 2)
        figures["reload_peak_rss_mib"] = mib(sampler.stop())
        figures["rss_after_reload_mib"] = mib(psutil.Process(server.pid).memory_info().rss)
        expected = {WRAPPER: "PENDING", leaf_id(n - 1): "PENDING"}
        if done:
            expected[done[-1]] = "DONE"
        wrong = {t: statuses.get(t) for t, s in expected.items() if statuses.get(t) != s}
        if wrong:
            raise RuntimeError(f"after the reload, unexpected statuses: {wrong}")
        after = hand_out(client, min(calls, 1000))
        figures["after_reload_get_work_ms"] = after["get_work_ms"]
        client.close()
    finally:
        if server.poll() is None:
            stop_server(server)
        if keep:
            figures["work_dir"] = str(work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return figures


TABLE: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("tasks known (leaves + wrapper)", lambda f: f"{f['n'] + 1:,}"),
    ("registration, total", lambda f: f"{f['register_s']} s ({f['requests']} requests)"),
    ("registration, per task", lambda f: f"{f['per_task_us']} µs"),
    ("request time by tenth (ms)", lambda f: " ".join(map(str, f["request_ms_by_tenth"]))),
    ("server RSS: empty / after registration", lambda f: _pair(f, "empty", "after_register")),
    ("server RSS peak while registering", lambda f: f"{f['register_peak_rss_mib']} MiB"),
    ("get_work p50 / p99 / max", lambda f: _ms(f["get_work_ms"])),
    ("task_done p50 / p99 / max", lambda f: _ms(f["task_done_ms"])),
    ("state file (+ WAL)", lambda f: f"{f['state_mib']} MiB (+ {f['wal_mib']} MiB)"),
    ("stop (SIGTERM to exit)", lambda f: f"{f['stop_s']} s"),
    ("reload: /health answers", lambda f: f"{f['reload_health_s']} s"),
    ("reload: statuses answered", lambda f: f"{f['reload_s']} s"),
    ("server RSS after reload / peak in it", lambda f: _pair(f, "after_reload", None)),
    ("get_work after reload p50 / p99 / max", lambda f: _ms(f["after_reload_get_work_ms"])),
)


def _pair(f: dict[str, Any], a: str, b: str | None) -> str:
    if b is None:
        return f"{f[f'rss_{a}_mib']} / {f['reload_peak_rss_mib']} MiB"
    return f"{f[f'{a}_rss_mib']} / {f[f'rss_{b}_mib']} MiB"


def _ms(q: dict[str, float]) -> str:
    return f"{q['p50']} / {q['p99']} / {q['max']} ms"


def main() -> None:
    """Parse arguments, measure, print a table (or ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="leaves (default 1,000,000)")
    parser.add_argument("--batch", type=int, default=5000, help="leaves per add_tasks request")
    parser.add_argument("--calls", type=int, default=5000, help="get_work + task_done pairs")
    parser.add_argument("--json", action="store_true", help="one JSON line instead of a table")
    parser.add_argument("--keep", action="store_true", help="keep the state directory")
    parser.add_argument(
        "--profile-server", type=Path, default=None, metavar="DIR", help="cProfile the servers"
    )
    args = parser.parse_args()
    if args.n < 1 or args.batch < 1 or args.calls < 0:
        parser.error("--n and --batch must be at least 1, --calls at least 0")
    if args.profile_server is not None:
        args.profile_server.mkdir(parents=True, exist_ok=True)
    figures = run(args.n, args.batch, args.calls, args.profile_server, args.keep)
    if args.json:
        print(json.dumps(figures), flush=True)
        return
    width = max(len(label) for label, _ in TABLE)
    for label, show in TABLE:
        print(f"{label:<{width}}  {show(figures)}")


if __name__ == "__main__":
    main()
