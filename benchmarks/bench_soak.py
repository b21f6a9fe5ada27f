"""A long-lived scheduler under churn: does its memory plateau? Prints JSON lines.

Round after round, a new worker registers ``--per-round`` new tasks, runs them all (get_work,
task_done) and goes silent; a fake clock moves ``--step`` seconds per round, so workers are
declared gone after ``worker_disconnect_delay`` and their tasks pruned ``remove_delay`` later.
One line per tenth of the run gives the live task count and the process's RSS; the last line
gives the RSS growth over the second half. ``--no-prune`` sets ``remove_delay`` to a year, to
show what the growth would be without pruning. ``--one-worker`` makes every round the run of one
long-lived worker id that never goes silent and releases its tasks when each run ends (as
``Worker.run()`` does); add ``--no-release`` to see what it kept before runs released. Example::

    python benchmarks/bench_soak.py --lifecycles 1000000
    python benchmarks/bench_soak.py --lifecycles 200000 --one-worker --remove-delay 1
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import psutil

from conveyor.protocol import TaskSpec
from conveyor.scheduler.policy import SchedulerCore
from conveyor.testing import FakeClock


def soak(
    lifecycles: int,
    per_round: int,
    step: float,
    prune: bool,
    remove_delay: float = 600.0,
    one_worker: bool = False,
    release: bool = True,
) -> list[dict[str, float]]:
    """Run the churn and return one measurement per tenth of it."""
    clock = FakeClock()
    core = SchedulerCore(
        clock=clock,
        worker_disconnect_delay=60.0,
        remove_delay=remove_delay if prune else 365 * 86400.0,
    )
    me = psutil.Process()
    rounds = max(1, lifecycles // per_round)
    marks = {max(1, rounds * k // 10) for k in range(1, 11)}
    out: list[dict[str, float]] = []
    started = time.perf_counter()
    for n in range(1, rounds + 1):
        worker = "long-lived" if one_worker else f"w{n}"
        base = n * per_round
        core.add_tasks(worker, [TaskSpec(f"t{base + i}", "Fam", "m") for i in range(per_round)])
        while (work := core.get_work(worker)) is not None:
            core.task_done(worker, work.task_id, work.attempt)
        if one_worker and release:
            core.release(worker)  # what Worker.run() does when it ends
        clock.advance(step)
        core.statuses(())  # what the server's tick does: let time-based changes happen
        if n in marks:
            gc.collect()
            out.append(
                {
                    "lifecycles": n * per_round,
                    "live_tasks": len(core._tasks),
                    "rss_mib": round(me.memory_info().rss / 2**20, 1),
                    "elapsed_s": round(time.perf_counter() - started, 1),
                }
            )
    return out


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
    args = parser.parse_args()
    points = soak(
        args.lifecycles,
        args.per_round,
        args.step,
        not args.no_prune,
        args.remove_delay,
        args.one_worker,
        not args.no_release,
    )
    for point in points:
        print(json.dumps(point))
    half = points[len(points) // 2 - 1]["rss_mib"]
    growth = (points[-1]["rss_mib"] - half) / half * 100
    summary = {"second_half_rss_growth_pct": round(growth, 1), "prune": not args.no_prune}
    if args.one_worker:
        summary["release"] = not args.no_release
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
