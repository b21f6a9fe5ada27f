"""A long-lived scheduler under churn: does its memory plateau? Prints JSON lines.

Round after round, a new worker registers ``--per-round`` new tasks, runs them all (get_work,
task_done) and goes silent; a fake clock moves ``--step`` seconds per round, so workers are
declared gone after ``worker_disconnect_delay`` and their tasks pruned ``remove_delay`` later.
One line per tenth of the run gives the live task count and the process's RSS; the last line
gives the RSS growth over the second half. ``--no-prune`` sets ``remove_delay`` to a year, to
show what the growth would be without pruning. ``--one-worker`` makes every round the run of one
long-lived worker id that never goes silent and releases its tasks when each run ends (as
``Worker.run()`` does); add ``--no-release`` to see what it kept before runs released.

``--state PATH`` (a new file) or ``--sqlite`` (a temporary one) runs the same churn through the
server's ``SchedulerService`` over an SQLite state store: every state-changing call is
committed before it returns, as in the server, and ``service.tick()`` (time-based changes, and
the store's compaction where it has one) runs once per round instead of the server's once per
second. Each line then also gives the state file's and its write-ahead log's size, the free
pages in the file and the longest ``tick()`` and compaction of that tenth. ``--drain N`` adds N
rounds without new tasks at the end (the clock still moves), in which everything is pruned:
does the file give the space back? Example::

    python benchmarks/bench_soak.py --lifecycles 1000000
    python benchmarks/bench_soak.py --lifecycles 200000 --one-worker --remove-delay 1
    python benchmarks/bench_soak.py --lifecycles 100000 --sqlite --drain 40
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import psutil

from conveyor.protocol import TaskSpec
from conveyor.scheduler.policy import SchedulerCore
from conveyor.testing import FakeClock


class _State:
    """The churn's calls through ``SchedulerService`` over an SQLite store at ``path``, and
    what the file looks like. Runs on stores with and without ``compact()`` (before it)."""

    def __init__(self, core: SchedulerCore, path: str) -> None:
        from conveyor.server.app import SchedulerService
        from conveyor.server.stores import SqliteStore, StoreContext

        self.path = path
        self.store = SqliteStore(StoreContext(path))
        self.store.load()  # as the server does before it serves (nothing in a new file)
        self.service = SchedulerService(core, self.store)
        self.max_tick = self.max_compact = 0.0  # seconds, since the last measure()
        self.top_tick = self.top_compact = 0.0  # seconds, over the whole run
        self.compactions = 0  # compact() calls that gave pages back
        self.pages_given = 0
        compact: Callable[[], int] | None = getattr(self.store, "compact", None)
        self.compacts = compact is not None
        if compact is not None:

            def timed() -> int:
                started = time.perf_counter()
                pages = compact()
                spent = time.perf_counter() - started
                self.max_compact = max(self.max_compact, spent)
                if pages:
                    self.compactions += 1
                    self.pages_given += pages
                return pages

            self.store.compact = timed  # type: ignore[method-assign]  # (what tick() calls)

    def call(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as the server calls it: applied and committed under the service's lock."""
        return functools.partial(self.service.call, fn)

    def tick(self) -> None:
        started = time.perf_counter()
        self.service.tick()
        self.max_tick = max(self.max_tick, time.perf_counter() - started)

    def measure(self) -> dict[str, float]:
        """The file now, and the longest tick and compaction since the last call."""
        free = self.store._read(lambda db: db.execute("PRAGMA freelist_count").fetchone()[0])
        wal = self.path + "-wal"
        point = {
            "state_mib": round(os.path.getsize(self.path) / 2**20, 2),
            "wal_mib": round(os.path.getsize(wal) / 2**20, 2) if os.path.exists(wal) else 0.0,
            "free_pages": int(free),
            "max_tick_ms": round(self.max_tick * 1000, 1),
        }
        if self.compacts:
            point["max_compact_ms"] = round(self.max_compact * 1000, 1)
        self.top_tick = max(self.top_tick, self.max_tick)
        self.top_compact = max(self.top_compact, self.max_compact)
        self.max_tick = self.max_compact = 0.0
        return point

    def close(self) -> None:
        self.store.close()


def soak(
    lifecycles: int,
    per_round: int,
    step: float,
    prune: bool,
    remove_delay: float = 600.0,
    one_worker: bool = False,
    release: bool = True,
    state: str | None = None,
    drain: int = 0,
) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """Run the churn and return one measurement per tenth of it (and per tenth of the drain),
    and, with ``state``, a summary of the state file."""
    clock = FakeClock()
    core = SchedulerCore(
        clock=clock,
        worker_disconnect_delay=60.0,
        remove_delay=remove_delay if prune else 365 * 86400.0,
    )
    stored = _State(core, state) if state else None
    if stored is None:
        add_tasks, get_work, task_done = core.add_tasks, core.get_work, core.task_done
        release_worker = core.release

        def tick() -> None:
            core.statuses(())  # what the server's tick does: let time-based changes happen

    else:
        add_tasks, get_work, task_done = (
            stored.call(core.add_tasks),
            stored.call(core.get_work),
            stored.call(core.task_done),
        )
        release_worker = stored.call(core.release)
        tick = stored.tick
    me = psutil.Process()
    rounds = max(1, lifecycles // per_round)
    marks = {max(1, rounds * k // 10) for k in range(1, 11)}
    marks |= {rounds + max(1, drain * k // 10) for k in range(1, 11) if drain}
    out: list[dict[str, float]] = []
    started = time.perf_counter()
    churned = 0.0
    try:
        for n in range(1, rounds + drain + 1):
            if n <= rounds:
                worker = "long-lived" if one_worker else f"w{n}"
                base = n * per_round
                add_tasks(worker, [TaskSpec(f"t{base + i}", "Fam", "m") for i in range(per_round)])
                while (work := get_work(worker)) is not None:
                    task_done(worker, work.task_id, work.attempt)
                if one_worker and release:
                    release_worker(worker)  # what Worker.run() does when it ends
            clock.advance(step)
            tick()
            if n == rounds:
                churned = time.perf_counter() - started
            if n in marks:
                gc.collect()
                point: dict[str, float] = {
                    "lifecycles": min(n, rounds) * per_round,
                    "live_tasks": len(core._tasks),
                    "rss_mib": round(me.memory_info().rss / 2**20, 1),
                    "elapsed_s": round(time.perf_counter() - started, 1),
                }
                if n > rounds:
                    point["drain_rounds"] = n - rounds
                if stored is not None:
                    point.update(stored.measure())
                out.append(point)
    finally:
        if stored is not None:
            stored.close()
    summary: dict[str, Any] = {}
    if stored is not None:
        summary = {
            "us_per_lifecycle": round(churned / (rounds * per_round) * 1e6, 1),
            "max_tick_ms": round(stored.top_tick * 1000, 1),
        }
        if stored.compacts:
            summary["max_compact_ms"] = round(stored.top_compact * 1000, 1)
            summary["compactions"] = stored.compactions
            summary["pages_given_back"] = stored.pages_given
        summary["final_state_mib"] = out[-1]["state_mib"]
    return out, summary


def main() -> None:
    """Parse arguments, run, print the measurements and the second half's growth."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lifecycles", type=int, default=1_000_000)
    parser.add_argument("--per-round", type=int, default=1000)
    parser.add_argument("--step", type=float, default=30.0, help="fake seconds per round")
    parser.add_argument("--no-prune", action="store_true")
    parser.add_argument("--remove-delay", type=float, default=600.0)
    parser.add_argument("--one-worker", action="store_true", help="one long-lived worker id")
    parser.add_argument("--no-release", action="store_true", help="with --one-worker")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--state", metavar="PATH", help="run through an SQLite state (a new file)")
    where.add_argument("--sqlite", action="store_true", help="--state in a temporary directory")
    parser.add_argument(
        "--drain", type=int, default=0, metavar="ROUNDS", help="rounds without new tasks at the end"
    )
    args = parser.parse_args()
    if args.state and os.path.exists(args.state):
        parser.error(f"--state {args.state!r} exists; expected a path for a new file")
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as scratch:
        state = os.path.join(scratch, "state.db") if args.sqlite else args.state
        points, stored = soak(
            args.lifecycles,
            args.per_round,
            args.step,
            not args.no_prune,
            args.remove_delay,
            args.one_worker,
            not args.no_release,
            state,
            args.drain,
        )
    for point in points:
        print(json.dumps(point))
    churn = [p for p in points if "drain_rounds" not in p]
    half = churn[len(churn) // 2 - 1]["rss_mib"]
    growth = (churn[-1]["rss_mib"] - half) / half * 100
    summary = {"second_half_rss_growth_pct": round(growth, 1), "prune": not args.no_prune}
    if args.one_worker:
        summary["release"] = not args.no_release
    summary.update(stored)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
