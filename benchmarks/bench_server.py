"""A graph run by worker processes (2 by default) over HTTP against one central scheduler.

Starts ``conveyor scheduler`` on a free loopback port — with the ``sqlite`` state store (in a
temporary directory), the ``postgres`` one (a throwaway PostgreSQL server of its own; needs the
conveyor-postgres plugin and PostgreSQL's server binaries), or both one after the other in the
same run — then ``--workers`` ``conveyor run`` workers (``--workers-per-process`` slots each,
``--executor``) on the same N-task fan-in (a root needing N - 1
no-op leaves whose completion is a marker file), and prints one JSON line per store: total wall
time, HTTP requests per task (counted by the server), the server's peak RSS, and the CPU time
(user + system, and of it the system's) per task of the server and of all the worker processes
together (from their start: Python's, the walk and registration, the tasks, the release),
and the machine's CPU time left idle during the run with how busy its CPUs were each second
(``/proc/stat``: which phases of a run leave a core unused).
Before the clock it compiles the conveyor the workers import (benchmarks/precompile.py), as an
installed one is: the workers' start is timed, the compiling of a checkout is not. The wall
time ends when the last worker has exited (waited for, not polled).

``--durability`` says what an acknowledged change survives, the same for both stores:
``crash`` (the default: a killed process, not a power cut — SQLite's default
``synchronous = "normal"``, PostgreSQL with ``fsync`` off) or ``power`` (SQLite
``synchronous = "full"``, PostgreSQL with ``fsync`` on, as in production). Examples::

    python benchmarks/bench_server.py --n 10000
    python benchmarks/bench_server.py --n 10000 --store both
    python benchmarks/bench_server.py --n 10000 --observability   # metrics and traces on

``--failover-trials K`` (postgres only) measures fail-over instead: two schedulers share the
store; K times, the leader is killed (``kill -9``) while a client keeps asking the other for
work, and the time from the kill to the first task the new leader hands out is recorded (the
killed one is started again as a standby for the next trial). It prints p50 and max, with
``[server] leader_lease`` (``--lease``) to compare with::

    python benchmarks/bench_server.py --failover-trials 10
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from precompile import compile_measured

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


def scratch_dir(prefix: str) -> Path:
    """A new temporary directory for one run. The run removes it when it ends; if it fails
    before it can, the directory goes when the benchmark's process exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def stop(*processes: subprocess.Popen[bytes]) -> None:
    """Stop ``processes`` that still run: SIGTERM, then SIGKILL for one that is not gone
    30 s later."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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


def scheduler(
    conveyor: list[str], work: Path, env: dict[str, str], port: int, config: Path | None
) -> subprocess.Popen[bytes]:
    """A ``conveyor scheduler`` on ``port``: with ``config`` (a server.toml), else SQLite."""
    where = ["--config", str(config)] if config else ["--state-path", str(work / "state.db")]
    return subprocess.Popen(
        [*conveyor, "scheduler", "--port", str(port), *where],
        env=env,
        cwd=work,
        stderr=subprocess.DEVNULL,
    )


def role(url: str) -> str:
    """The server's role (``/health``), "" if it does not answer."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as answer:
            return str(json.load(answer).get("role", ""))
    except OSError:
        return ""


def wait_role(url: str, wanted: str, timeout: float = 60) -> None:
    """Poll /health until the server at ``url`` has the role ``wanted``."""
    deadline = time.monotonic() + timeout
    while role(url) != wanted:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not become {wanted}")
        time.sleep(0.05)


def postgres_config(work: Path, dsn: str, lease: float, name: str = "server.toml") -> Path:
    """A server.toml for the ``postgres`` store at ``dsn``."""
    path = work / name
    path.write_text(
        f'[server]\nstate_store = "postgres"\nleader_lease = {lease}\n'
        f'[state_stores.postgres]\ndsn = "{dsn}"\n'
    )
    return path


def cpu_stat() -> tuple[int, int] | None:
    """The idle (with iowait) and total CPU time of the machine so far, in clock ticks
    (``/proc/stat``; guest time is inside user time already); None where there is none."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(f) for f in stat.readline().split()[1:9]]
        return fields[3] + fields[4], sum(fields)
    except (OSError, ValueError, IndexError):
        return None


class Sampler:
    """The peak RSS of ``proc`` and how busy the machine's CPUs were, sampled every 0.2 s by a
    thread of its own from :meth:`start` to :meth:`stop` (so the caller can wait for the
    workers themselves and time their end exactly), to show which phases of a run leave cores
    idle. :meth:`start` and :meth:`stop` read the CPU times themselves, at the clock's start
    and end."""

    def __init__(self, proc: psutil.Process) -> None:
        self.peak = 0
        self._proc = proc
        self._stat: list[tuple[float, int, int]] = []  # (when, idle, total)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _read(self) -> None:
        found = cpu_stat()
        if found is not None:
            self._stat.append((time.perf_counter(), *found))

    def start(self) -> None:
        """Read the CPU times now and start sampling."""
        self._read()
        self._thread.start()

    def _sample(self) -> None:
        while True:
            try:
                self.peak = max(self.peak, self._proc.memory_info().rss)
            except psutil.Error:  # (the server is gone: the run reports it)
                return
            if self._done.wait(0.2):
                return
            self._read()

    def stop(self) -> None:
        """Stop sampling and read the CPU times now."""
        self._done.set()
        self._thread.join()
        self._read()

    def idle_core_s(self) -> float | None:
        """The CPU time the machine left idle from :meth:`start` to :meth:`stop`, in
        core-seconds (None: no ``/proc/stat``)."""
        if len(self._stat) < 2:
            return None
        hertz = os.sysconf("SC_CLK_TCK")
        return round((self._stat[-1][1] - self._stat[0][1]) / hertz, 2)

    def busy_timeline(self) -> list[int]:
        """How busy the machine's CPUs were in each whole second from :meth:`start`, in per
        cent (each second between the samples nearest its ends)."""
        if not self._stat:
            return []
        began = self._stat[0][0]
        marks = [self._stat[0]]
        for sample in self._stat[1:]:
            if sample[0] - began >= len(marks):  # (the first sample of the next second)
                marks.append(sample)
        return [
            round(100 * (1 - (b[1] - a[1]) / (b[2] - a[2]))) if b[2] > a[2] else 0
            for a, b in itertools.pairwise(marks)
        ]


def run_graph(
    n: int,
    workers_per_process: int,
    store: str,
    cluster: Any,
    durability: str = "crash",
    sink: Any = None,
    processes: int = 2,
    executor: str = "",
) -> dict[str, Any]:
    """One run of the fan-in against a fresh server with ``store``; its JSON figures. With a
    ``sink`` (benchmarks/observability.py), the observability plugins are on, server and
    workers alike, and their spans go there."""
    work = scratch_dir("conveyor-bench-server-")
    (work / "bench_server_tasks.py").write_text(TASKS)
    env = {
        **os.environ,
        "BENCH_DIR": str(work),
        # (the tasks' module first, then the caller's path: PYTHONPATH=<a tree>/src measures it)
        "PYTHONPATH": os.pathsep.join(p for p in (str(work), os.environ.get("PYTHONPATH")) if p),
        "CONVEYOR_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    worker_envs = [env] * processes
    exports_before = sink.exports if sink is not None else 0
    if sink is not None:
        from observability import observability_env

        del env["CONVEYOR_DISABLE_PLUGIN_AUTOLOAD"]
        worker_envs = [
            {**env, **observability_env(work, sink, f"worker{i}")} for i in range(1, processes + 1)
        ]
        env.update(observability_env(work, sink, "server"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    conveyor = [sys.executable, "-m", "conveyor"]
    config = None
    if store == "postgres":
        database = f"bench_{os.getpid()}_{int(time.time() * 1000)}"
        config = postgres_config(work, cluster.create_database(database), 10.0)
    elif durability == "power":
        config = work / "server.toml"
        config.write_text(
            f'[server]\nstate_path = "{work / "state.db"}"\n'
            '[state_stores.sqlite]\nsynchronous = "full"\n'
        )
    compile_measured(env, work, [str(work / "bench_server_tasks.py")])
    server = scheduler(conveyor, work, env, port, config)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        wait_healthy(url)
        wait_role(url, "leader")
        proc = psutil.Process(server.pid)
        cpu_before = proc.cpu_times()
        reaped_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        sampler = Sampler(proc)
        sampler.start()
        started = time.perf_counter()
        run = [
            *conveyor,
            "run",
            "bench_server_tasks.Root",
            "--n",
            str(n),
            "--scheduler-url",
            url,
            "--log-level",
            "warning",
            "--workers",
            str(workers_per_process),
            "--executor",
            executor or ("inline" if workers_per_process == 1 else "fork"),
        ]
        for worker_env in worker_envs:
            workers.append(
                subprocess.Popen(run, env=worker_env, cwd=work, stdout=subprocess.DEVNULL)
            )
        codes = [w.wait() for w in workers]
        wall = time.perf_counter() - started
        sampler.stop()
        cpu_after = proc.cpu_times()
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)  # (the workers: reaped by wait)
        with urllib.request.urlopen(url + "/health") as answer:
            requests = json.load(answer)["api_requests"]
        scraped = 0
        if sink is not None:  # (the server's /metrics, to show the plugin was on)
            with urllib.request.urlopen(url + "/metrics") as answer:
                scraped = len(answer.read())
        with urllib.request.urlopen(url + "/api/v1/tasks") as answer:
            tasks = json.load(answer)["tasks"]
    finally:
        stop(*workers, server)  # (the workers first: any still running, after a failure)
        shutil.rmtree(work, ignore_errors=True)
    done = sum(1 for t in tasks if t["status"] == "DONE")

    def per_task(seconds: float) -> float:
        return round(seconds / n * 1e6, 1)

    return {
        "store": store,
        "durability": durability,
        "n": n,
        "workers": processes,
        "slots": workers_per_process,
        "executor": executor or ("inline" if workers_per_process == 1 else "fork"),
        "exit_codes": codes,
        "done": done,
        "wall_s": round(wall, 2),
        "per_task_ms": round(wall / n * 1000, 3),
        "requests_per_task": round((requests - 1) / n, 2),
        "server_peak_rss_mib": round(sampler.peak / 2**20, 1),
        "server_cpu_us_per_task": per_task(
            cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system
        ),
        "server_system_us_per_task": per_task(cpu_after.system - cpu_before.system),
        # (the worker processes' own, from their start: Python's, the walk, every task)
        "workers_cpu_us_per_task": per_task(
            reaped.ru_utime + reaped.ru_stime - reaped_before.ru_utime - reaped_before.ru_stime
        ),
        "workers_system_us_per_task": per_task(reaped.ru_stime - reaped_before.ru_stime),
        # (the machine's CPU time left unused during the run, and how busy it was each second)
        "idle_core_s": sampler.idle_core_s(),
        "busy_pct_each_s": sampler.busy_timeline(),
        **({"observability": True, "metrics_bytes": scraped} if sink is not None else {}),
        **({"span_exports": sink.exports - exports_before} if sink is not None else {}),
    }


def post(url: str, route: str, body: dict[str, Any]) -> tuple[int, Any]:
    """POST ``body`` to ``/api/v1/<route>``: the status and the JSON answer (0 if refused)."""
    request = urllib.request.Request(
        f"{url}/api/v1/{route}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return 0, None


def failover(trials: int, lease: float, cluster: Any) -> dict[str, Any]:
    """Kill the leader ``trials`` times; seconds from each kill to the new leader's first
    hand-out."""
    work = scratch_dir("conveyor-bench-failover-")
    env = {**os.environ, "CONVEYOR_DISABLE_PLUGIN_AUTOLOAD": "1"}
    conveyor = [sys.executable, "-m", "conveyor"]
    config = postgres_config(work, cluster.create_database(f"failover_{os.getpid()}"), lease)
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    servers: list[subprocess.Popen[bytes]] = []
    leader, times = 0, []
    try:
        servers.append(scheduler(conveyor, work, env, ports[0], config))
        wait_role(urls[0], "leader")
        servers.append(scheduler(conveyor, work, env, ports[1], config))
        wait_role(urls[1], "standby")
        for trial in range(trials):
            specs = [{"task_id": f"t{trial}-{i}", "family": "T"} for i in range(100)]
            status, _ = post(urls[leader], "add_tasks", {"worker_id": "bench", "tasks": specs})
            assert status == 200, f"add_tasks answered {status}"
            other = 1 - leader
            servers[leader].kill()
            killed = time.perf_counter()
            servers[leader].wait()
            while True:
                status, answer = post(urls[other], "get_work", {"worker_id": "bench"})
                if status == 200 and answer.get("work"):
                    break
                time.sleep(0.01)
            times.append(time.perf_counter() - killed)
            servers[leader] = scheduler(conveyor, work, env, ports[leader], config)
            wait_role(urls[leader], "standby")
            leader = other
    finally:
        for server in servers:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)
    times.sort()
    return {
        "failover_trials": trials,
        "leader_lease_s": lease,
        "p50_s": round(statistics.median(times), 2),
        "max_s": round(times[-1], 2),
        "each_s": [round(t, 2) for t in times],
    }


def main() -> None:
    """Run the benchmark and print its JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--workers-per-process", type=int, default=1, help="slots per worker")
    parser.add_argument(
        "--executor", default="", help="the workers' executor (default: inline, fork for slots)"
    )
    parser.add_argument("--store", choices=("sqlite", "postgres", "both"), default="sqlite")
    parser.add_argument("--failover-trials", type=int, default=0)
    parser.add_argument("--lease", type=float, default=10.0, help="leader_lease, fail-over")
    parser.add_argument(
        "--durability",
        choices=("crash", "power"),
        default="crash",
        help="what a commit survives: 'power' (PostgreSQL fsync on, SQLite synchronous full) or"
        " 'crash' (a killed process, not a power cut: PostgreSQL fsync off, SQLite's default"
        " synchronous normal)",
    )
    parser.add_argument(
        "--observability",
        action="store_true",
        help="with the Prometheus and OpenTelemetry plugins on, in the server and the workers "
        "(see benchmarks/observability.py)",
    )
    args = parser.parse_args()
    # (a SIGTERM ends the run through its finally blocks: no server nor database is left behind)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stores = ["sqlite", "postgres"] if args.store == "both" else [args.store]
    cluster = None
    if "postgres" in stores or args.failover_trials:
        from conveyor_postgres.testing import ThrowawayCluster

        fsync = "on" if args.durability == "power" else "off"
        cluster = ThrowawayCluster({"fsync": fsync, "full_page_writes": fsync})
        cluster.start()
    try:
        if args.failover_trials:
            print(json.dumps(failover(args.failover_trials, args.lease, cluster)))
            return
        sink = None
        if args.observability:
            from observability import SpanSink

            sink = SpanSink()
        for store in stores:
            figures = run_graph(
                args.n,
                args.workers_per_process,
                store,
                cluster,
                args.durability,
                sink,
                args.workers,
                args.executor,
            )
            print(json.dumps(figures))
    finally:
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
