"""Helpers for the dask executor's tests: external Dask clusters started with the ``dask``
commands, worker configuration files, process checks (imported by conftest.py and the tests;
a distinct name, so that it never collides with another directory's modules)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conveyor.testing.processes import free_port, kill_tree
from distributed import Client

DASK = str(Path(sys.executable).with_name("dask"))
MARKER_VARIABLE = "DASKTEST_MARKER"  # the session marker (conftest.py); not CONVEYOR_*


class DaskCluster:
    """A ``dask scheduler`` on a free loopback port and ``dask worker`` subprocesses joining it
    (one ``--nworkers 1 --nthreads 1`` process per entry of ``workers``, with those extra
    flags). Output goes to files in ``directory``."""

    def __init__(self, directory: Path, workers: list[list[str]]) -> None:
        self.directory = directory
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.worker_flags = workers
        self.procs: list[subprocess.Popen[bytes]] = []
        self.client: Client | None = None

    def _spawn(self, name: str, args: list[str]) -> None:
        with (self.directory / f"{name}.log").open("ab") as log:
            self.procs.append(
                subprocess.Popen(
                    [DASK, *args],
                    cwd=self.directory,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def start(self) -> None:
        """Start the scheduler and the workers; wait (bounded) until every worker joined."""
        self._spawn(
            "scheduler",
            ["scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"],
        )
        for n, flags in enumerate(self.worker_flags):
            args = ["worker", self.address, "--nworkers", "1", "--nthreads", "1"]
            args += ["--host", "127.0.0.1", "--no-dashboard", "--name", f"w{n}", *flags]
            self._spawn(f"worker{n}", args)
        self.client = Client(self.address, timeout=60, set_as_default=False)
        self.client.wait_for_workers(len(self.worker_flags), timeout=90)

    def worker_pids(self) -> dict[str, int]:
        """The pid of each Dask worker process (the parent of the attempts it runs), by name."""
        assert self.client is not None
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        pids = self.client.run(os.getpid)
        return {info[address]["name"]: pid for address, pid in pids.items()}

    def logs(self) -> str:
        """Everything the scheduler and workers printed."""
        return "".join(p.read_text(errors="replace") for p in sorted(self.directory.glob("*.log")))

    def stop(self) -> None:
        """Leave, then kill every process of the cluster and reap them."""
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close(timeout=10)
        for proc in self.procs:
            kill_tree(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


def write_config(
    directory: Path,
    worker: Mapping[str, Any],
    dask: Mapping[str, Any] | None = None,
    scheduler: Mapping[str, Any] | None = None,
    resources: Mapping[str, int] | None = None,
) -> Path:
    """A worker.toml in ``directory`` with these ``[worker]``, ``[executors.dask]``,
    ``[scheduler]`` and ``[scheduler.resources]`` keys; its path."""
    lines: list[str] = []
    tables = {
        "worker": worker,
        "scheduler": scheduler,
        "scheduler.resources": resources,
        "executors.dask": dask,
    }
    for table, keys in tables.items():
        if keys is None:
            continue
        lines.append(f"[{table}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    path = directory / f"worker-{uuid.uuid4().hex[:8]}.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
