"""Helpers of the fail-over tests (test_failover.py): several real ``conveyor scheduler``
processes sharing one database of the session's throwaway PostgreSQL, real ``conveyor run``
workers, and the task module they run.

Every process carries a per-test marker in its environment (:data:`MARKER_VARIABLE`) and is
killed, with its tree, when the test ends. Tests poll with deadlines; nothing is synchronised by
sleeping. The task module (:data:`TASKS`) talks to the tests through files in its ``root``:
each run appends its task id to ``ran.log`` (one ``O_APPEND`` write, so concurrent writers never
mix lines) and creates ``<root>/<task_id>.done`` with ``O_CREAT | O_EXCL``, so a second run of a
task raises (and fails the task) instead of passing unnoticed.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from conveyor.testing.processes import (
    Reply,
    SchedulerProcess,
    child_env,
    kill_tree,
    wait_for,
)

__all__ = [
    "MARKER_VARIABLE",
    "RIDE_OUT_FAILOVERS",
    "TASKS",
    "TOKEN",
    "PgScheduler",
    "Workers",
    "done_markers",
    "leader_among",
    "one_leader",
    "ran_lines",
    "stored_rows",
    "wait_for_leader",
    "wait_for_standby",
    "write_tasks",
]

MARKER_VARIABLE = "PGFAILOVER_MARKER"
"""The environment variable marking every process a test starts (not ``CONVEYOR_*``: those
are configuration overrides)."""

TOKEN = "failover-s3cret-token"
"""The bearer token every scheduler of these tests requires."""

RIDE_OUT_FAILOVERS = {
    "CONVEYOR_SCHEDULER__RPC_RETRIES": "200",
    "CONVEYOR_SCHEDULER__RPC_RETRY_WAIT": "0.1",
    "CONVEYOR_SCHEDULER__RPC_RETRY_MAX_WAIT": "1.0",
    "CONVEYOR_SCHEDULER__RPC_TIMEOUT": "10",
}
"""A retry budget (about three minutes of attempts per call) that covers any fail-over of a
test, however loaded the machine: a fail-over must never fail or re-run a task, and a budget
running out would hide that behind a different error."""

TASKS = '''
"""Tasks of the fail-over tests: files in ``root`` tell the test what ran."""

import os
import time

import conveyor
from conveyor.testing.processes import append_line, put, wait_file


class Marked(conveyor.Task):
    """Each run: a line in ran.log, then ``<task_id>.done`` created exclusively (a second
    run raises FileExistsError, failing the task), then the output."""

    root = conveyor.Parameter()

    def path(self, name):
        return os.path.join(self.root, name)

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "out", self.task_id + ".out"))

    def mark(self):
        append_line(self.path("ran.log"), self.task_id)
        fd = os.open(self.path(self.task_id + ".done"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        os.close(fd)

    def finish(self):
        with self.output().open("w") as f:
            f.write(str(os.getpid()))

    def wait_for_gate(self):
        if not wait_file(self.path("gate"), 300):
            raise RuntimeError("the gate never opened")


class Node(Marked):
    """Node ``n`` of a layered graph ``width`` wide: it needs two nodes of the layer below."""

    n = conveyor.IntParameter()
    width = conveyor.IntParameter()
    pause = conveyor.FloatParameter(default=0.0)

    def requires(self):
        layer, pos = divmod(self.n, self.width)
        if layer == 0:
            return []
        below = sorted({pos, (pos + 1) % self.width})
        return [
            Node(root=self.root, n=(layer - 1) * self.width + p, width=self.width, pause=self.pause)
            for p in below
        ]

    def run(self):
        self.wait_for_gate()
        self.mark()
        if self.pause:
            time.sleep(self.pause)
        self.finish()


class Root(Marked):
    """Needs nodes 0 .. count - 2: the graph has ``count`` tasks."""

    count = conveyor.IntParameter()
    width = conveyor.IntParameter()
    pause = conveyor.FloatParameter(default=0.0)

    def requires(self):
        return [
            Node(root=self.root, n=n, width=self.width, pause=self.pause)
            for n in range(self.count - 1)
        ]

    def run(self):
        self.mark()
        self.finish()


class Blocker(Marked):
    """Writes ``<tag>.pid``, waits (bounded) for ``<tag>.go``, then marks and finishes."""

    tag = conveyor.Parameter(default="b")

    def run(self):
        put(self.path(self.tag + ".pid"), str(os.getpid()))
        if not wait_file(self.path(self.tag + ".go"), 300):
            raise RuntimeError("never released")
        self.mark()
        self.finish()
'''


def write_tasks(directory: Path) -> str:
    """Write :data:`TASKS` into ``directory`` as a uniquely named module; its name (importable
    by the processes started here: ``directory`` is first on their ``PYTHONPATH``)."""
    name = f"failover_tasks_{uuid.uuid4().hex[:8]}"
    (directory / f"{name}.py").write_text(TASKS, encoding="utf-8")
    return name


def _toml_string(value: str) -> str:
    return json.dumps(value)  # (a JSON string of printable ASCII is a TOML basic string)


class PgScheduler(SchedulerProcess):
    """One ``conveyor scheduler`` on the shared postgres store, in a directory of its own
    (``<base>/<name>``); it can be killed, paused and started again on the same port."""

    token = TOKEN

    def __init__(
        self, base: Path, name: str, dsn: str, marker: str, lease: float, extra: str = ""
    ) -> None:
        """Describe the server ``name`` (``extra``: more worker.toml text, after the
        ``[state_stores.postgres]`` table); nothing is started yet."""
        directory = base / name
        directory.mkdir()
        config = directory / "server.toml"
        config.write_text(
            "[server]\n"
            f"token = {_toml_string(TOKEN)}\n"
            'state_store = "postgres"\n'
            f"leader_lease = {lease}\n"
            "[state_stores.postgres]\n"
            f"dsn = {_toml_string(dsn)}\n"
            f"{extra}",
            encoding="utf-8",
        )
        super().__init__(directory, config, child_env(base, MARKER_VARIABLE, marker))
        self.name = name

    def health(self) -> dict[str, Any] | None:
        """``GET /health``'s answer, or None if the server does not answer (dead, paused)."""
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as answer:
                body = json.loads(answer.read())
        except (OSError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def role(self) -> str:
        """``leader`` or ``standby`` as ``/health`` says, "" if it does not answer."""
        health = self.health()
        return str(health.get("role", "")) if health else ""

    def tasks(self) -> dict[str, dict[str, Any]]:
        """``GET /api/v1/tasks``, by task id (an AssertionError unless it answers 200)."""
        reply = self.request("GET", "/api/v1/tasks")
        assert reply.status == 200, (reply.status, reply.body[:500])
        return {t["task_id"]: t for t in reply.json()["tasks"]}

    def statuses(self) -> dict[str, str]:
        """Task id → status, from :meth:`tasks`."""
        return {task_id: t["status"] for task_id, t in self.tasks().items()}

    def post(self, route: str, body: Any) -> Reply:
        """``POST /api/v1/<route>`` with the token and a JSON body."""
        return self.request("POST", f"/api/v1/{route}", body)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the server process (SIGSTOP / SIGCONT / SIGTERM)."""
        assert self.proc is not None and self.proc.poll() is None, f"{self.name} is not running"
        os.kill(self.proc.pid, signum)

    def terminate(self, timeout: float) -> int:
        """SIGTERM the server and wait (bounded) for it to exit; its exit code."""
        self.signal(signal.SIGTERM)
        assert self.proc is not None
        try:
            return int(self.proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not stop within {timeout} s of SIGTERM: {self.output()[-2000:]}"
            ) from None

    def running(self) -> bool:
        """Whether the server process was started and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        """Kill the server if it runs (a paused one too) and reap it."""
        if self.proc is not None:
            with contextlib.suppress(OSError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.kill()


def leader_among(servers: Iterable[PgScheduler]) -> list[PgScheduler]:
    """The servers whose ``/health`` says they lead right now."""
    return [s for s in servers if s.running() and s.role() == "leader"]


def one_leader(servers: Iterable[PgScheduler], timeout: float) -> PgScheduler:
    """Poll until exactly one of ``servers`` says it leads; that one."""
    among = list(servers)

    def one() -> PgScheduler | None:
        leading = leader_among(among)
        return leading[0] if len(leading) == 1 else None

    found: PgScheduler = wait_for(one, timeout, "exactly one server to lead")
    return found


def wait_for_leader(server: PgScheduler, timeout: float) -> float:
    """Poll until ``server``'s ``/health`` says it leads (naming itself as the leader); the
    seconds it took. AssertionError after ``timeout`` (with the end of its output)."""
    started = time.monotonic()

    def leads() -> bool:
        assert server.running(), f"{server.name} exited: {server.output()[-3000:]}"
        health = server.health()
        return bool(health and health["role"] == "leader" and health["leader"] == server.url)

    try:
        wait_for(leads, timeout, f"{server.name} to lead")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; its output: {server.output()[-3000:]}") from None
    return time.monotonic() - started


def wait_for_standby(server: PgScheduler, leader: PgScheduler, timeout: float) -> None:
    """Poll until ``server``'s ``/health`` says it stands by with ``leader`` leading."""

    def stands_by() -> bool:
        assert server.running(), f"{server.name} exited: {server.output()[-3000:]}"
        health = server.health()
        return bool(health and health["role"] == "standby" and health["leader"] == leader.url)

    wait_for(stands_by, timeout, f"{server.name} to stand by for {leader.name}")


class Workers:
    """The ``conveyor`` CLI processes of one test (``conveyor run``): each started in its own
    session, output to ``<name>.stdout`` / ``<name>.stderr`` in ``directory``."""

    def __init__(self, directory: Path, marker: str) -> None:
        """Processes run in ``directory`` (first on their PYTHONPATH) with ``marker``."""
        self.directory = directory
        self.marker = marker
        self.started: list[subprocess.Popen[bytes]] = []
        self.names: dict[int, str] = {}

    def start(
        self, name: str, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``python -m conveyor *args`` with the token and ``env`` in its environment."""
        extra = {"CONVEYOR_SCHEDULER__TOKEN": TOKEN, **(env or {})}
        stdout, stderr = self.directory / f"{name}.stdout", self.directory / f"{name}.stderr"
        with stdout.open("wb") as out, stderr.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "conveyor", *args],
                cwd=self.directory,
                env=child_env(self.directory, MARKER_VARIABLE, self.marker, **extra),
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.names[proc.pid] = name
        self.started.append(proc)
        return proc

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        """What a process printed (stdout, then stderr)."""
        name = self.names[proc.pid]
        return "".join(
            path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
            for path in (self.directory / f"{name}.stdout", self.directory / f"{name}.stderr")
        )

    def wait(self, proc: subprocess.Popen[bytes], timeout: float) -> int:
        """Wait (bounded) for ``proc`` to exit; its exit code."""
        try:
            return int(proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            name, text = self.names[proc.pid], self.output(proc)[-3000:]
            raise AssertionError(f"{name} did not exit within {timeout} s: {text}") from None

    def kill_all(self) -> None:
        """Kill every process tree started here and reap it."""
        for proc in self.started:
            kill_tree(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


def ran_lines(root: Path) -> collections.Counter[str]:
    """How many times each task id was run (its lines in ``ran.log``)."""
    path = root / "ran.log"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return collections.Counter(text.split())


def done_markers(root: Path) -> set[str]:
    """The task ids with a ``<task_id>.done`` marker in ``root``."""
    return {p.name[: -len(".done")] for p in root.glob("*.done")}


def stored_rows(dsn: str) -> dict[str, dict[str, Any]]:
    """The task rows in the store at ``dsn``, by task id, read by a fresh
    :class:`~conveyor_postgres.PostgresStore` that never leads (so it takes no lease)."""
    from conveyor.server.stores import StoreContext

    from conveyor_postgres import PostgresStore

    store = PostgresStore(StoreContext(settings={"dsn": dsn}))
    try:
        rows, _workers = store.load()
    finally:
        store.close()
    return {row["task_id"]: dict(row) for row in rows}
