"""Do the web UI's reads slow down the worker routes of the central scheduler?

Starts a real ``conveyor scheduler`` (SQLite state in a temporary directory, loopback, a free
port), registers ``--tasks`` tasks through ``POST /api/v1/add_tasks`` in batches (100 families,
a few roots each fanning in thousands of upstream tasks over five layers, with parameters),
then runs ``--workers`` worker threads for ``--seconds`` seconds, each doing what a worker
does, over its own keep-alive connection: ``get_work`` → ``task_done`` for the task handed out,
``ping``, and every tenth round ``add_tasks`` of ten new tasks (which keeps work from running
out). Every call's latency is recorded, after a short warm-up.

This is done twice, each time on a fresh server with the same tasks: (a) with no UI client,
(b) with ``--ui-clients`` UI clients, each doing what the page does when its view refreshes:
``GET /ui/api/changes`` once a second, and on every change (workers change something all the
time) ``summary``, ``tasks?limit=50``, a filtered ``tasks?state=DONE&q=...``, one ``task``
detail, and every fifth refresh ``graph`` of a root (thousands of upstream nodes) and
``workers``. ``--ui-rate=max`` drops the one-second pacing: the clients read flat out (a stress
variant, far beyond what a handful of open pages do). The UI clients run in a process of their
own, so their work does not compete for the GIL of the process timing the worker calls.

``--graph-tasks N`` registers one more graph of ``N`` tasks under one root (``--graph-shape``:
``layers``, the layers of fan-in above; ``fan-in``, a root needing ``N - 1`` tasks directly),
times ``--graph-reads`` reads of its graph on the idle server before the workers start, and
has the UI clients read that graph instead. The graph route shows at most 10,000 nodes, so
``--graph-tasks 100001`` and ``--graph-tasks 10001`` show as many; what it costs should not
depend on which.

Prints the machine, the command line, and per run and route the number of calls, failed calls
and the p50, p90, p99 and max latency in milliseconds; the UI requests served with their p50
and p99; and the p99 ratio with UI / without. Examples::

    .venv-test/bin/python benchmarks/bench_ui.py
    .venv-test/bin/python benchmarks/bench_ui.py --ui-rate=max --seconds 30
    .venv-test/bin/python benchmarks/bench_ui.py --graph-tasks 100001 --graph-shape fan-in

On a small machine the scheduler, the worker threads and the UI clients share the cores, so
the numbers are rough; compare the two runs of one invocation rather than across machines.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import http.client
import json
import math
import multiprocessing
import os
import platform
import queue
import random
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conveyor.protocol import AddTasks, GetWork, Ping, TaskDone, TaskSpec, encode
from conveyor.testing.processes import SchedulerProcess, child_env, free_port

HOST = "127.0.0.1"
TIMEOUT = 60.0  # seconds for one HTTP call before it counts as failed
FAN_IN = 10  # each task of a layer needs about this many tasks of the layer below
GROUP = 2500  # tasks under each root
ADD_EVERY = 10  # a worker registers a small batch of new tasks every this many rounds
ADD_BATCH = 10  # ... of this many tasks (9 leaves and the task needing them)
IDLE_PAUSE = 0.02  # seconds a worker waits after get_work handed out nothing
FAILURE_PAUSE = 0.05  # seconds a client waits after a call that got no answer
GRAPH_EVERY = 5  # the UI reads graph and workers on every this many refreshes
FAN_IN_CHUNK = 5_000  # a fan-in root is registered again with each this many more deps
REGIONS = ("eu-west", "us-east", "ap-south", "sa-east")
FILTER_TEXT = "eu-west"  # the filtered list's q=
WORKER_ROUTES = ("get_work", "task_done", "ping", "add_tasks")
UI_ROUTES = ("changes", "summary", "tasks", "tasks?state&q", "task", "graph", "workers")
MARKER = "CONVEYOR_BENCH_UI"


# --- the tasks -----------------------------------------------------------------------------


@dataclass
class Plan:
    """The tasks to register, in dependency order (leaves first), and ids the UI looks at."""

    specs: list[TaskSpec]
    roots: list[str]
    details: list[str]  # ids whose detail page the UI clients open, in turn
    layers: int
    graph_root: str | None = None  # the root of the --graph-tasks graph

    def tasks(self) -> int:
        """How many tasks the specs register (a fan-in root comes several times)."""
        return len({spec.task_id for spec in self.specs})


def _task_id(family: str, params: dict[str, str]) -> str:
    """An id shaped like conveyor's own: ``Family_v1_v2_v3_<hash>``."""
    values = [params[k] for k in sorted(params)]
    digest = hashlib.sha256("|".join([family, *values]).encode()).hexdigest()[:10]
    return "_".join([family, *values, digest])


def _spec(
    family: str, module: str, number: int, rng: random.Random, deps: tuple[str, ...] = ()
) -> TaskSpec:
    params = {
        "date": f"2024-05-{rng.randrange(1, 29):02d}",
        "region": rng.choice(REGIONS),
        "shard": str(number),
    }
    return TaskSpec(
        task_id=_task_id(family, params),
        family=family,
        module=module,
        params=params,
        deps=deps,
        priority=rng.choice((0, 0, 0, 10)),
    )


def _layer_sizes(size: int) -> list[int]:
    """Layer sizes from the root down (1, 10, 100, …), the last holding what is left."""
    sizes = [1]
    while sum(sizes) + sizes[-1] * FAN_IN < size:
        sizes.append(sizes[-1] * FAN_IN)
    rest = size - sum(sizes)
    if rest > 0:
        sizes.append(rest)
    return sizes


def _group(size: int, rng: random.Random, number: int) -> list[list[TaskSpec]]:
    """``size`` tasks numbered from ``number``, per layer from the bottom: a root over layers
    of fan-in, every task needing a slice of the layer below and one more task of it at
    random."""
    shape = _layer_sizes(size)[::-1]  # leaves first
    layers: list[list[TaskSpec]] = []
    for depth, count in enumerate(shape):
        below = layers[-1] if layers else []
        children: list[list[str]] = [[] for _ in range(count)]
        for j, child in enumerate(below):
            children[j * count // len(below)].append(child.task_id)
        layer = []
        for j in range(count):
            deps = children[j]
            if below:
                deps = [*deps, below[rng.randrange(len(below))].task_id]
            top = depth == len(shape) - 1
            if not below:
                family, module = f"Extract{number % 80:02d}", "pipeline.extract"
            elif top:
                family, module = "Report", "pipeline.report"
            else:
                family, module = f"Transform{number % 19:02d}", "pipeline.transform"
            layer.append(_spec(family, module, number, rng, tuple(dict.fromkeys(deps))))
            number += 1
        layers.append(layer)
    return layers


def _fan_in(size: int, rng: random.Random, number: int) -> list[TaskSpec]:
    """A root needing ``size - 1`` tasks directly, leaves first; the root is registered again
    after every :data:`FAN_IN_CHUNK` leaves with those as more dependencies (the scheduler
    merges them), so that no request is larger than the server takes."""
    leaves = [
        _spec(f"Extract{n % 80:02d}", "pipeline.extract", n, rng)
        for n in range(number, number + size - 1)
    ]
    root = _spec("Report", "pipeline.report", number + size - 1, rng)
    specs: list[TaskSpec] = []
    for start in range(0, len(leaves), FAN_IN_CHUNK):
        chunk = leaves[start : start + FAN_IN_CHUNK]
        specs += chunk
        specs.append(dataclasses.replace(root, deps=tuple(s.task_id for s in chunk)))
    return specs or [root]


def make_plan(tasks: int, seed: int, graph_tasks: int = 0, graph_shape: str = "layers") -> Plan:
    """``tasks`` tasks in groups of about :data:`GROUP`, each a root over layers of fan-in
    (:func:`_group`); and with ``graph_tasks``, one more graph of that many tasks
    (``graph_shape``: ``layers`` or ``fan-in``), registered last."""
    rng = random.Random(seed)
    groups = max(1, tasks // GROUP)
    sizes = [tasks // groups + (1 if g < tasks % groups else 0) for g in range(groups)]
    built: list[list[list[TaskSpec]]] = []  # per group, per layer from the bottom: the specs
    number = 0
    for size in sizes:
        built.append(_group(size, rng, number))
        number += size
    depth = max(len(layers) for layers in built)
    specs = [
        spec
        for level in range(depth)
        for layers in built
        if level < len(layers)
        for spec in layers[level]
    ]
    roots = [layers[-1][0].task_id for layers in built]
    middle = [spec.task_id for layers in built if len(layers) > 2 for spec in layers[-3][:5]]
    plan = Plan(specs, roots, [*roots, *middle], depth)
    if graph_tasks:
        if graph_shape == "fan-in":
            big = _fan_in(graph_tasks, rng, number)
        else:
            big = [spec for layer in _group(graph_tasks, rng, number) for spec in layer]
        plan.specs += big
        plan.graph_root = big[-1].task_id
    return plan


# --- HTTP ----------------------------------------------------------------------------------


class Client:
    """One keep-alive HTTP/1.1 connection that records each call's latency (seconds)."""

    def __init__(self, port: int) -> None:
        """No connection yet: the first call opens it."""
        self.port = port
        self.conn: http.client.HTTPConnection | None = None
        self.latencies: dict[str, list[float]] = {}
        self.errors: dict[str, int] = {}
        self.record_from = math.inf  # calls starting before this are not recorded
        self.record_until = math.inf

    def close(self) -> None:
        """Drop the connection (the next call opens a new one)."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def call(self, route: str, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer of one request, or None when it failed (counted)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        started = time.monotonic()
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(HOST, self.port, timeout=TIMEOUT)
            self.conn.request(method, path, body=data, headers=headers)
            response = self.conn.getresponse()
            raw = response.read()
            if response.will_close:
                self.close()
            ok = response.status == 200
        except (OSError, http.client.HTTPException):
            self.close()
            ok, raw = False, b""
            time.sleep(FAILURE_PAUSE)  # (a server that is gone must not make clients spin)
        ended = time.monotonic()
        if self.record_from <= started < self.record_until:
            if ok:
                self.latencies.setdefault(route, []).append(ended - started)
            else:
                self.errors[route] = self.errors.get(route, 0) + 1
        if not ok:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def post(self, route: str, request: Any) -> Any:
        """``POST /api/v1/<route>`` with a protocol request."""
        return self.call(route, "POST", f"/api/v1/{route}", encode(request))


def get_json(port: int, path: str) -> Any:
    """One GET on a fresh connection; the JSON answer (RuntimeError unless 200)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=TIMEOUT)
    try:
        conn.request("GET", path, headers={"Accept": "application/json"})
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"GET {path} answered {response.status}: {raw[:200]!r}")
    return json.loads(raw)


# --- the server ----------------------------------------------------------------------------


@contextlib.contextmanager
def scheduler(directory: Path) -> Iterator[SchedulerProcess]:
    """A fresh ``conveyor scheduler`` with SQLite state in ``directory``; killed (its whole
    process group) on the way out, whatever happens."""
    directory.mkdir(parents=True)
    config = directory / "conveyor.toml"
    config.write_text('[server]\nstate_store = "sqlite"\n', encoding="utf-8")
    env = child_env(directory, MARKER, str(os.getpid()), CONVEYOR_DISABLE_PLUGIN_AUTOLOAD="1")
    server = SchedulerProcess(directory, config, env, port=free_port(HOST))
    try:
        server.start(timeout=60)
        yield server
    finally:
        proc = server.proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # started with start_new_session
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)


def populate(port: int, plan: Plan, worker_ids: list[str], batch: int) -> tuple[float, int]:
    """Register the plan's tasks, ``batch`` at a time, round robin from ``worker_ids``;
    seconds taken and failed batches."""
    client = Client(port)
    client.record_from = -math.inf
    started = time.perf_counter()
    for n, start in enumerate(range(0, len(plan.specs), batch)):
        chunk = tuple(plan.specs[start : start + batch])
        client.post("add_tasks", AddTasks(worker_ids[n % len(worker_ids)], chunk))
    client.close()
    return time.perf_counter() - started, client.errors.get("add_tasks", 0)


def time_graph(port: int, root: str, reads: int) -> dict[str, Any]:
    """``reads`` reads of ``root``'s graph one after another on the idle server: the nodes
    shown, whether truncated, and each read's seconds."""
    path = f"/ui/api/graph?id={urllib.parse.quote(root, safe='')}&down=0"
    seconds, answer = [], None
    for _ in range(reads):
        started = time.perf_counter()
        answer = get_json(port, path)
        seconds.append(time.perf_counter() - started)
    if answer is None:
        return {}
    return {"nodes": len(answer["nodes"]), "truncated": answer["truncated"], "seconds": seconds}


# --- worker clients ------------------------------------------------------------------------


@dataclass
class Window:
    """When calls are recorded (monotonic seconds) and when the clients stop."""

    record_from: float
    until: float


@dataclass
class WorkerStats:
    """What one worker thread did."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    handed_out: int = 0
    idle: int = 0


def worker_loop(port: int, worker_id: str, index: int, window: Window, out: WorkerStats) -> None:
    """A worker's calls in a loop until ``window.until``: get_work, task_done, ping, and every
    :data:`ADD_EVERY` rounds add_tasks of :data:`ADD_BATCH` new tasks."""
    client = Client(port)
    client.record_from, client.record_until = window.record_from, window.until
    rng = random.Random(index)
    rounds = 0
    try:
        while time.monotonic() < window.until:
            rounds += 1
            answer = client.post("get_work", GetWork(worker_id, running=()))
            work = answer.get("work") if isinstance(answer, dict) else None
            if work:
                done = TaskDone(worker_id, work["task_id"], work.get("attempt", 0))
                client.post("task_done", done)
                if time.monotonic() >= window.record_from:
                    out.handed_out += 1
            elif answer is not None:
                if time.monotonic() >= window.record_from:
                    out.idle += 1
                time.sleep(IDLE_PAUSE)
            client.post("ping", Ping(worker_id))
            if rounds % ADD_EVERY == 0:
                base = 1_000_000 * (index + 1) + rounds
                leaves = [
                    _spec(f"Extract{(base + i) % 80:02d}", "pipeline.extract", base * 100 + i, rng)
                    for i in range(ADD_BATCH - 1)
                ]
                deps = tuple(s.task_id for s in leaves)
                parent = _spec(f"Transform{base % 19:02d}", "pipeline.transform", base, rng, deps)
                client.post("add_tasks", AddTasks(worker_id, (*leaves, parent)))
    finally:
        client.close()
        out.latencies, out.errors = client.latencies, client.errors


# --- UI clients (in a process of their own) ------------------------------------------------


def ui_loop(
    port: int, index: int, plan: dict[str, list[str]], flat_out: bool, window: Window
) -> tuple[dict[str, list[float]], dict[str, int], int]:
    """One open page: poll changes every second (``flat_out``: without pause) and re-read the
    view when the change number moved; its latencies, failures and refreshes."""
    client = Client(port)
    client.record_from, client.record_until = window.record_from, window.until
    roots, details = plan["graph_roots"], plan["details"]
    root = urllib.parse.quote(roots[index % len(roots)], safe="")
    filtered = urllib.parse.urlencode({"state": "DONE", "q": FILTER_TEXT, "limit": 50})
    seq: int | None = None
    drawn: int | None = None
    cycle = 0  # refreshes so far
    refreshes = 0  # ... of them in the recorded window
    try:
        while time.monotonic() < window.until:
            answer = client.call("changes", "GET", f"/ui/api/changes?since={seq or 0}")
            polled = time.monotonic()
            if isinstance(answer, dict):
                seq = answer.get("seq")
            if flat_out or (answer is not None and seq != drawn):
                drawn = seq
                detail = urllib.parse.quote(details[(index + cycle) % len(details)], safe="")
                client.call("summary", "GET", "/ui/api/summary")
                client.call("tasks", "GET", "/ui/api/tasks?limit=50")
                client.call("tasks?state&q", "GET", f"/ui/api/tasks?{filtered}")
                client.call("task", "GET", f"/ui/api/task?id={detail}")
                if (cycle + index) % GRAPH_EVERY == 0:  # (staggered across clients)
                    client.call("graph", "GET", f"/ui/api/graph?id={root}&down=0")
                    client.call("workers", "GET", "/ui/api/workers")
                cycle += 1
                if time.monotonic() >= window.record_from:
                    refreshes += 1
            if not flat_out:  # the page polls again a second after the last poll answered
                time.sleep(max(0.0, polled + 1.0 - time.monotonic()))
    finally:
        client.close()
    return client.latencies, client.errors, refreshes


def ui_process(
    port: int,
    clients: int,
    plan: dict[str, list[str]],
    flat_out: bool,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """Run ``clients`` UI clients as threads once the window arrives on ``go``; put their
    merged latencies, failures and refresh count on ``results``."""
    ready.set()
    record_from, until = go.get()
    window = Window(record_from, until)
    found: list[tuple[dict[str, list[float]], dict[str, int], int]] = []

    def run(i: int) -> None:
        found.append(ui_loop(port, i, plan, flat_out, window))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    for lat, err, _ in found:
        for route, values in lat.items():
            latencies.setdefault(route, []).extend(values)
        for route, count in err.items():
            errors[route] = errors.get(route, 0) + count
    results.put((latencies, errors, sum(r for _, _, r in found)))


# --- one run -------------------------------------------------------------------------------


@dataclass
class RunResult:
    """What one run measured."""

    name: str
    worker_latencies: dict[str, list[float]]
    worker_errors: dict[str, int]
    handed_out: int
    idle: int
    ui_latencies: dict[str, list[float]]
    ui_errors: dict[str, int]
    ui_refreshes: int
    populate_s: float
    populate_errors: int
    graph_nodes: int
    seconds: float
    big_graph: dict[str, Any] = field(default_factory=dict)  # the --graph-tasks graph's reads


def run_once(
    directory: Path, plan: Plan, args: argparse.Namespace, ui_clients: int, name: str
) -> RunResult:
    """A fresh scheduler with the plan's tasks, the worker threads, and ``ui_clients`` UI
    clients alongside."""
    worker_ids = [f"bench-worker-{k}" for k in range(args.workers)]
    with scheduler(directory) as server:
        populate_s, populate_errors = populate(server.port, plan, worker_ids, args.batch)
        root = urllib.parse.quote(plan.roots[0], safe="")
        graph_nodes = -1
        big_graph: dict[str, Any] = {}
        try:
            total = get_json(server.port, "/ui/api/summary")["total"]
            if total < plan.tasks():
                print(f"warning: the server holds {total} tasks, not {plan.tasks()}")
            graph_nodes = len(get_json(server.port, f"/ui/api/graph?id={root}&down=0")["nodes"])
            if plan.graph_root is not None:
                big_graph = time_graph(server.port, plan.graph_root, args.graph_reads)
        except (OSError, http.client.HTTPException, RuntimeError, ValueError, KeyError) as exc:
            print(f"warning: the UI routes do not answer as expected: {exc}")
        ui: Any = None
        context = multiprocessing.get_context("spawn")
        results: Any = context.Queue()
        go: Any = context.Queue()
        try:
            if ui_clients:
                ready = context.Event()
                graph_roots = [plan.graph_root] if plan.graph_root else plan.roots
                shared = {"graph_roots": graph_roots, "details": plan.details}
                ui = context.Process(
                    target=ui_process,
                    args=(
                        server.port,
                        ui_clients,
                        shared,
                        args.ui_rate == "max",
                        ready,
                        go,
                        results,
                    ),
                    daemon=True,
                )
                ui.start()
                if not ready.wait(60):
                    raise RuntimeError("the UI client process did not start")
            now = time.monotonic()
            window = Window(now + args.warmup, now + args.warmup + args.seconds)
            if ui is not None:
                go.put((window.record_from, window.until))
            stats = [WorkerStats() for _ in worker_ids]
            threads = [
                threading.Thread(
                    target=worker_loop,
                    args=(server.port, worker_id, k, window, stats[k]),
                    daemon=True,
                )
                for k, worker_id in enumerate(worker_ids)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            ui_latencies: dict[str, list[float]] = {}
            ui_errors: dict[str, int] = {}
            refreshes = 0
            if ui is not None:
                try:
                    ui_latencies, ui_errors, refreshes = results.get(timeout=TIMEOUT + 30)
                except queue.Empty:
                    ui_errors = {"(no results from the UI process)": 1}
                ui.join(timeout=10)
        finally:
            if ui is not None and ui.is_alive():
                ui.kill()
                ui.join(timeout=10)
    latencies: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    for st in stats:
        for route, values in st.latencies.items():
            latencies.setdefault(route, []).extend(values)
        for route, count in st.errors.items():
            errors[route] = errors.get(route, 0) + count
    return RunResult(
        name=name,
        worker_latencies=latencies,
        worker_errors=errors,
        handed_out=sum(st.handed_out for st in stats),
        idle=sum(st.idle for st in stats),
        ui_latencies=ui_latencies,
        ui_errors=ui_errors,
        ui_refreshes=refreshes,
        populate_s=populate_s,
        populate_errors=populate_errors,
        graph_nodes=graph_nodes,
        seconds=args.seconds,
        big_graph=big_graph,
    )


# --- the report ----------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0 to 100) of sorted values (nan for none)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": percentile(ordered, 50) * 1000,
        "p90": percentile(ordered, 90) * 1000,
        "p99": percentile(ordered, 99) * 1000,
        "max": (ordered[-1] * 1000) if ordered else math.nan,
    }


def _all(latencies: dict[str, list[float]]) -> list[float]:
    return [v for values in latencies.values() for v in values]


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def report(runs: list[RunResult], args: argparse.Namespace, plan: Plan) -> None:
    """Print the machine, the command line and the tables."""
    base, loaded = runs[0], runs[-1]
    print(
        f"machine: {platform.system()} {platform.machine()}, os.cpu_count()={os.cpu_count()}, "
        f"Python {platform.python_version()}"
    )
    print("command: " + shlex.join([sys.executable, *sys.argv]))
    print(
        f"tasks: {plan.tasks()} ({len(plan.roots)} roots, {plan.layers} layers, 100 families;"
        f" graph of a root: {base.graph_nodes} nodes), registered in batches of {args.batch} in "
        + ", ".join(f"{r.populate_s:.1f} s" for r in runs)
    )
    print(
        f"workers: {args.workers} threads x {args.seconds:g} s (after {args.warmup:g} s warm-up); "
        f"UI clients: {args.ui_clients}, rate {args.ui_rate}"
    )
    if plan.graph_root is not None:
        print(
            f"graph: {args.graph_tasks} tasks ({args.graph_shape}) under one root, read by the UI"
            " clients; idle reads of it before each run (ms, sorted):"
        )
        for run in runs:
            big = run.big_graph
            if big:
                times = " ".join(f"{t * 1000:.0f}" for t in sorted(big["seconds"]))
                s = _stats(big["seconds"])
                print(
                    f"  {run.name}: {big['nodes']} nodes, truncated {big['truncated']};"
                    f" p50 {_ms(s['p50'])} ms; {times}"
                )
    print()
    header = f"{'run':<16}{'route':<16}{'calls':>8}{'failed':>8}"
    header += "".join(f"{h:>9}" for h in ("p50 ms", "p90 ms", "p99 ms", "max ms"))
    print("worker routes")
    print(header)
    for run in runs:
        rows = [(route, run.worker_latencies.get(route, [])) for route in WORKER_ROUTES]
        rows.append(("all", _all(run.worker_latencies)))
        for n, (route, values) in enumerate(rows):
            failed = (
                sum(run.worker_errors.values())
                if route == "all"
                else run.worker_errors.get(route, 0)
            )
            s = _stats(values)
            label = run.name if n == 0 else ""
            print(
                f"{label:<16}{route:<16}{len(values):>8}{failed:>8}"
                + "".join(f"{_ms(s[k]):>9}" for k in ("p50", "p90", "p99", "max"))
            )
        calls = len(_all(run.worker_latencies))
        print(
            f"{'':<16}{calls / run.seconds:.0f} calls/s, {run.handed_out} tasks handed out, "
            f"{run.idle} get_work answered no work"
            + (f", populate failures {run.populate_errors}" if run.populate_errors else "")
        )
    print()
    print(f"UI reads ({loaded.name}; {loaded.ui_refreshes} view refreshes)")
    header = f"{'route':<16}{'requests':>9}{'failed':>8}"
    header += "".join(f"{h:>9}" for h in ("p50 ms", "p99 ms", "max ms"))
    print(header)
    extra = sorted(set(loaded.ui_errors) - set(UI_ROUTES))
    rows = [(route, loaded.ui_latencies.get(route, [])) for route in (*UI_ROUTES, *extra)]
    rows.append(("all", _all(loaded.ui_latencies)))
    for route, values in rows:
        failed = (
            sum(loaded.ui_errors.values()) if route == "all" else loaded.ui_errors.get(route, 0)
        )
        s = _stats(values)
        print(
            f"{route:<16}{len(values):>9}{failed:>8}"
            + "".join(f"{_ms(s[k]):>9}" for k in ("p50", "p99", "max"))
        )
    served = len(_all(loaded.ui_latencies))
    print(f"{served / loaded.seconds:.0f} UI requests/s")
    print()
    print(f"p99 with UI / without ({loaded.name} / {base.name})")
    for route in (*WORKER_ROUTES, "all"):
        if route == "all":
            a, b = _all(base.worker_latencies), _all(loaded.worker_latencies)
        else:
            a, b = base.worker_latencies.get(route, []), loaded.worker_latencies.get(route, [])
        before, after = _stats(a)["p99"], _stats(b)["p99"]
        ratio = after / before if before and not math.isnan(before + after) else math.nan
        print(f"{route:<16}{_ms(before):>9} -> {_ms(after):>9} ms   x{ratio:.2f}")


def main() -> int:
    """Parse the options, run without and with UI clients, print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks registered first")
    parser.add_argument("--workers", type=int, default=4, help="worker client threads")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds not recorded")
    parser.add_argument("--ui-clients", type=int, default=5, help="UI clients in run (b)")
    parser.add_argument(
        "--ui-rate",
        choices=("page", "max"),
        default="page",
        help="page: poll once a second like the page; max: read flat out",
    )
    parser.add_argument("--batch", type=int, default=500, help="tasks per add_tasks at first")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--graph-tasks", type=int, default=0, help="one more graph of this many tasks (0: none)"
    )
    parser.add_argument(
        "--graph-shape",
        choices=("layers", "fan-in"),
        default="layers",
        help="layers: layers of fan-in; fan-in: a root needing every other task directly",
    )
    parser.add_argument("--graph-reads", type=int, default=10, help="idle reads of that graph")
    args = parser.parse_args()
    if args.tasks < 1 or args.workers < 1 or args.ui_clients < 0 or args.batch < 1:
        parser.error("--tasks, --workers and --batch must be positive, --ui-clients >= 0")
    if args.graph_tasks < 0 or args.graph_reads < 1:
        parser.error("--graph-tasks must be >= 0 and --graph-reads positive")
    plan = make_plan(args.tasks, args.seed, args.graph_tasks, args.graph_shape)
    work = Path(tempfile.mkdtemp(prefix="conveyor-bench-ui-"))
    try:
        runs = [run_once(work / "a", plan, args, 0, "(a) without UI")]
        runs.append(run_once(work / "b", plan, args, args.ui_clients, f"(b) {args.ui_clients} UI"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(runs, args, plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
