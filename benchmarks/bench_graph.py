"""Run N no-op tasks through build() with the in-process scheduler; print time and memory as JSON.

With ``--executor fork``, ``subprocess`` or ``dask`` each task's completion is a marker file in
a fresh temporary directory (a child process cannot update the worker's memory); otherwise it is
kept in memory, so no file I/O is measured. ``dask`` (plugins/conveyor-dask) starts its
``LocalCluster`` of 2 workers inside the clock.

Shapes: ``chain`` (each task needs the previous one), ``fanin`` (N leaves into one root),
``layered`` (layers of 100 tasks, each needing 3 tasks of the layer below), ``dynamic`` (a root
whose run() yields N leaves), ``batches`` (a root whose run() yields N leaves 10 at a time).
Each measurement runs in a fresh subprocess so peak memory is the
run's own. ``--observability`` turns the Prometheus and OpenTelemetry plugins on (see
benchmarks/observability.py), to measure what they cost per task. Example::

    python benchmarks/bench_graph.py --shape chain fanin --n 5000 20000
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import conveyor

_DONE: set[str] = set()
# With process executors a task's completion must be visible to the worker: it is a file.
FILES = os.environ.get("CONVEYOR_BENCH_DIR", "")


def _mark_done(task_id: str) -> None:
    if FILES:
        with open(os.path.join(FILES, task_id), "w"):
            pass
    else:
        _DONE.add(task_id)


class Noop(conveyor.Task):
    """A task that is complete once it has run (in memory, or a marker file for processes)."""

    i = conveyor.IntParameter()
    shape = conveyor.Parameter()
    n = conveyor.IntParameter()

    def complete(self) -> bool:
        if FILES:
            return os.path.exists(os.path.join(FILES, self.task_id))
        return self.task_id in _DONE

    def run(self) -> None:
        _mark_done(self.task_id)


class ChainLink(Noop):
    """Needs the link before it."""

    def requires(self) -> Any:
        return ChainLink(i=self.i - 1, shape=self.shape, n=self.n) if self.i > 0 else []


class FanInRoot(Noop):
    """Needs n leaves."""

    def requires(self) -> Any:
        return [Noop(i=k, shape=self.shape, n=self.n) for k in range(self.n - 1)]


LAYER = 100


class LayerTask(Noop):
    """Needs 3 tasks of the layer below."""

    def requires(self) -> Any:
        layer = self.i // LAYER
        if layer == 0:
            return []
        base = (layer - 1) * LAYER
        return [
            LayerTask(i=base + (self.i + k) % LAYER, shape=self.shape, n=self.n) for k in range(3)
        ]


class LayeredRoot(Noop):
    """Needs the whole top layer."""

    def requires(self) -> Any:
        top = (self.n // LAYER - 1) * LAYER
        return [LayerTask(i=top + k, shape=self.shape, n=self.n) for k in range(LAYER)]


class DynamicRoot(Noop):
    """Yields n - 1 leaves from run()."""

    def run(self) -> Any:
        yield [Noop(i=k, shape=self.shape, n=self.n) for k in range(self.n - 1)]
        _mark_done(self.task_id)


BATCH = 10


class BatchedRoot(Noop):
    """Yields n - 1 leaves from run(), ``BATCH`` at a time (each yield waits for its batch)."""

    def run(self) -> Any:
        for start in range(0, self.n - 1, BATCH):
            stop = min(self.n - 1, start + BATCH)
            yield [Noop(i=k, shape=self.shape, n=self.n) for k in range(start, stop)]
        _mark_done(self.task_id)


ROOTS = {
    "chain": lambda n: ChainLink(i=n - 1, shape="chain", n=n),
    "fanin": lambda n: FanInRoot(i=-1, shape="fanin", n=n),
    "layered": lambda n: LayeredRoot(i=-1, shape="layered", n=n),
    "dynamic": lambda n: DynamicRoot(i=-1, shape="dynamic", n=n),
    "batches": lambda n: BatchedRoot(i=-1, shape="batches", n=n),
}


def measure(shape: str, n: int, executor: str, workers: int, warm: bool = False) -> dict[str, Any]:
    """Build one graph in this process and report wall time, per-task time and peak RSS.

    With ``warm``, a small graph of the same shape is built first, so that imports and
    first-call costs are paid before the clock starts.
    """
    sys.setrecursionlimit(max(10_000, n * 4))
    root = ROOTS[shape](n)
    build, config = conveyor.build, conveyor.load_config(None)  # imports outside the clock
    if warm:
        warm_root = ROOTS[shape](200)
        build(warm_root, config=config, log_level="warning", executor=executor, workers=workers)
    started = time.perf_counter()
    result = build(
        root,
        config=config,
        log_level="warning",
        executor=executor,
        workers=workers,
    )
    wall = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "shape": shape,
        "n": n,
        "tasks": len(result.states),
        "executor": executor,
        "workers": workers,
        "warm": warm,
        "ok": result.ok,
        "wall_s": round(wall, 4),
        "per_task_us": round(wall / max(1, len(result.states)) * 1e6, 2),
        "peak_rss_mib": round(peak_kib / 1024, 1),
    }


def main() -> None:
    """Parse arguments; run each (shape, n) in a fresh interpreter; print JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", nargs="+", default=list(ROOTS), choices=list(ROOTS))
    parser.add_argument("--n", nargs="+", type=int, default=[5000, 20000])
    parser.add_argument("--executor", default="inline")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--warm", action="store_true", help="build a small graph first (imports warmed up)"
    )
    parser.add_argument(
        "--observability",
        action="store_true",
        help="with the Prometheus (textfile) and OpenTelemetry (OTLP to a loopback sink) "
        "plugins on (see benchmarks/observability.py)",
    )
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # (a SIGTERM ends the run through its clean-up: no scratch directory is left behind)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.one:
        # import by name, so that task classes live in an importable module (the subprocess
        # executor imports them in a fresh interpreter)
        import bench_graph

        result = bench_graph.measure(
            args.shape[0], args.n[0], args.executor, args.workers, args.warm
        )
        print(json.dumps(result))
        return
    sink = None
    if args.observability:
        from observability import SpanSink, observability_env

        sink = SpanSink()
    for shape in args.shape:
        for n in args.n:
            env = {**os.environ, "CONVEYOR_DISABLE_PLUGIN_AUTOLOAD": "1"}
            scratch = tempfile.mkdtemp(prefix="conveyor-bench-")  # (removed after the run)
            atexit.register(shutil.rmtree, scratch, ignore_errors=True)  # (or at exit)
            if sink is not None:
                del env["CONVEYOR_DISABLE_PLUGIN_AUTOLOAD"]
                env.update(observability_env(Path(scratch), sink))
            if args.executor in ("fork", "subprocess", "dask"):
                env["CONVEYOR_BENCH_DIR"] = scratch
            cmd = [
                sys.executable,
                __file__,
                "--one",
                "--shape",
                shape,
                "--n",
                str(n),
                "--executor",
                args.executor,
                "--workers",
                str(args.workers),
                *(["--warm"] if args.warm else []),
            ]
            before = sink.exports if sink is not None else 0
            try:
                out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            line = out.stdout.strip()
            if sink is not None:  # (what the plugins sent, to show they were on)
                line = json.dumps(
                    {
                        **json.loads(line),
                        "observability": True,
                        "span_exports": sink.exports - before,
                    }
                )
            print(line, flush=True)


if __name__ == "__main__":
    main()
