"""What notifiers cost a run: 1,000 failing tasks with the email notifier pointed at an SMTP
"blackhole" (a server that accepts connections and never answers) against the same run
without notifiers.

    .venv-test/bin/python benchmarks/bench_notify.py [--n 1000] [--flush-timeout 10] \\
        [--smtp-timeout 10]

The promise (SPEC §4.3): sending never blocks the worker's loop, so the run with notifiers takes
no longer than the run without them plus ``flush_timeout`` (spent at exit on what is still
queued). Prints one JSON line per configuration and the difference.
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
from pathlib import Path

TASKS = """
import conveyor


class Fails(conveyor.Task):
    i = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(f"/nonexistent/conveyor-bench-notify-{self.i}")

    def run(self):
        raise RuntimeError(f"task {self.i} fails on purpose")


class Many(conveyor.WrapperTask):
    n = conveyor.IntParameter()

    def requires(self):
        return [Fails(i=i) for i in range(self.n)]
"""


def run(directory: Path, n: int, config: str) -> float:
    """Wall time of ``conveyor run bench_notify_tasks.Many`` with ``config`` as worker.toml."""
    (directory / "worker.toml").write_text(config)
    env = {**os.environ, "PYTHONPATH": str(directory), "CONVEYOR_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-m", "conveyor", "run", "bench_notify_tasks.Many", "--n", str(n)]
    started = time.perf_counter()
    result = subprocess.run(
        [*command, "--log-level", "critical"],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 1:  # every task fails: exit code 1, with or without notifiers
        raise SystemExit(f"unexpected exit code {result.returncode}: {result.stderr[-2000:]}")
    return elapsed


def main() -> None:
    """Run both configurations and print their times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--flush-timeout", type=float, default=10.0)
    parser.add_argument("--smtp-timeout", type=float, default=10.0)
    args = parser.parse_args()
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(1024)  # accepted by the kernel, never answered
    port = blackhole.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-notify-") as tmp:
        directory = Path(tmp)
        (directory / "bench_notify_tasks.py").write_text(TASKS)
        plain = run(directory, args.n, "")
        notified = run(
            directory,
            args.n,
            textwrap.dedent(
                f"""
                [notifiers]
                enabled = ["email"]
                flush_timeout = {args.flush_timeout}
                [notifiers.email]
                smtp_host = "127.0.0.1"
                smtp_port = {port}
                recipients = ["oncall@example.com"]
                timeout = {args.smtp_timeout}
                """
            ),
        )
    for name, seconds in (("no notifiers", plain), ("email to a blackhole", notified)):
        print(json.dumps({"config": name, "tasks": args.n, "wall_s": round(seconds, 3)}))
    print(
        json.dumps(
            {
                "extra_s": round(notified - plain, 3),
                "flush_timeout": args.flush_timeout,
                "within_bound": notified <= plain + args.flush_timeout + 1.0,
            }
        )
    )


if __name__ == "__main__":
    main()
