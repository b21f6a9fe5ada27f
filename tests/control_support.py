"""Helpers of the tests of submit, cancel and :class:`conveyor.Client` (test_submit_cancel.py,
test_control_client.py): a task module written to the test's directory, a real ``conveyor
scheduler`` (with or without a token) and real assistants (``conveyor worker``).

(A uniquely named module, never ``conftest``: pytest collects several test directories.)
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from conveyor.testing.processes import SchedulerProcess, child_env, kill_marked, wait_for

MARKER = "CTLTEST_MARKER"
"""The variable marking the processes a test starts (not CONVEYOR_*: that is configuration)."""

TOKEN = "ctl-test-token"
"""The ``[server] token`` of :func:`scheduler` with ``token=True``."""

SERVER_CONFIG = "[scheduler]\nworker_disconnect_delay = 60\nretry_delay = 600\n"
"""The scheduler's configuration: a failed task is not retried during a test."""

TASKS = '''
"""Tasks of the submit and cancel tests: each run appends its name to <root>/runs; A waits
(writing its pid first) until it is killed while <root>/hold exists."""

import os
import time
from pathlib import Path

import conveyor
from conveyor.testing.processes import append_line


class _Step(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/{type(self).__name__}.out")

    def run(self):
        append_line(f"{self.root}/runs", type(self).__name__)
        with self.output().open("w") as out:
            out.write("ok")


class A(_Step):
    def run(self):
        root = Path(self.root)
        if (root / "hold").exists():
            append_line(f"{self.root}/runs", "A")
            (root / "A.pid.tmp").write_text(str(os.getpid()))
            os.replace(root / "A.pid.tmp", root / "A.pid")
            while True:  # until the attempt is stopped
                time.sleep(0.5)
        super().run()


class B(_Step):
    def requires(self):
        return A(root=self.root)


class C(_Step):
    def requires(self):
        return B(root=self.root)


class D(_Step):
    pass


class K(_Step):
    def requires(self):
        return A(root=self.root)


class Top(_Step):
    def requires(self):
        return [K(root=self.root), D(root=self.root)]


class R(_Step):
    def requires(self):
        return [C(root=self.root), D(root=self.root)]
'''
"""The task module's source (:func:`write_tasks`); the 4-task graph is Top <- K <- A, Top <- D."""

FORBIDDEN = '''
"""A module no assistant may import: importing it appends the importer's pid to a file."""

import os
from pathlib import Path

import conveyor
from conveyor.testing.processes import append_line

append_line(str(Path(__file__).with_suffix(".imported")), str(os.getpid()))


class Forbidden(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/Forbidden.out")

    def run(self):
        with self.output().open("w") as out:
            out.write("ran")
'''
"""A task module the assistants' ``task_modules`` do not list."""


def write_tasks(directory: Path, source: str = TASKS, prefix: str = "ctltasks") -> str:
    """Write ``source`` as a uniquely named module in ``directory``; its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    (directory / f"{name}.py").write_text(source, encoding="utf-8")
    return name


def runs(root: Path) -> list[str]:
    """The names of the tasks that ran under ``root``, in order."""
    path = root / "runs"
    return path.read_text(encoding="utf-8").split() if path.exists() else []


@contextlib.contextmanager
def scheduler(directory: Path, *, token: bool = False) -> Iterator[SchedulerProcess]:
    """A started ``conveyor scheduler`` (with ``token``: its ``[server] token`` is
    :data:`TOKEN`, which :meth:`SchedulerProcess.request` sends); it and every process the test
    started with :func:`spawn` are killed at the end."""
    marker = directory.name + uuid.uuid4().hex[:8]
    config = directory / "server.toml"
    text = SERVER_CONFIG + (f'\n[server]\ntoken = "{TOKEN}"\n' if token else "")
    config.write_text(text, encoding="utf-8")
    started = SchedulerProcess(directory, config, child_env(directory, MARKER, marker))
    if token:
        started.token = TOKEN
    try:
        started.start(timeout=60)
        yield started
    finally:
        kill_marked(MARKER, marker)


def client_config(directory: Path, server: SchedulerProcess, *, token: bool = True) -> Path:
    """A worker.toml naming ``server`` (and its token, if it has one and ``token``)."""
    path = directory / f"client-{uuid.uuid4().hex[:6]}.toml"
    lines = ["[scheduler]", 'transport = "http"', f'url = "{server.url}"']
    if token and server.token:
        lines.append(f'token = "{server.token}"')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def spawn(
    directory: Path, server: SchedulerProcess, name: str, *args: str, modules: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """Start ``conveyor <args>`` in ``directory`` (marked like ``server``, so killed with it);
    with no ``args``, an assistant (``conveyor worker``, ``fork``, 2 slots) allowed
    ``modules``. Its output goes to ``<name>.out`` and ``<name>.err``."""
    env = dict(server.env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(directory), env.get("PYTHONPATH")]))
    if not args:
        config = directory / f"{name}.toml"
        listed = ", ".join(f'"{m}"' for m in modules)
        text = (
            f'[worker]\ntask_modules = [{listed}]\nexecutor = "fork"\nworkers = 2\n'
            "wait_interval = 0.2\nwait_jitter = 0\nping_interval = 0.2\n"
        )
        if server.token:
            text += f'\n[scheduler]\ntoken = "{server.token}"\n'
        config.write_text(text, encoding="utf-8")
        args = ("worker", "--scheduler-url", server.url, "--config", str(config))
    return subprocess.Popen(
        [sys.executable, "-m", "conveyor", *args],
        cwd=directory,
        env=env,
        stdout=(directory / f"{name}.out").open("wb"),
        stderr=(directory / f"{name}.err").open("wb"),
    )


def run_cli(
    directory: Path, server: SchedulerProcess, *args: str, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run ``conveyor <args>`` in ``directory`` to its end (bounded); its result."""
    env = dict(server.env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(directory), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "conveyor", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def task_rows(server: SchedulerProcess) -> dict[str, dict[str, Any]]:
    """``GET /api/v1/tasks``, by family."""
    reply = server.request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply
    return {t["family"]: t for t in reply.json()["tasks"]}


def detail(server: SchedulerProcess, task_id: str) -> dict[str, Any]:
    """The web UI's task detail (``GET /ui/api/task?id=…``; a server without a token)."""
    reply = server.request("GET", f"/ui/api/task?id={quote(task_id)}")
    assert reply.status == 200, reply
    task: dict[str, Any] = reply.json()["task"]
    return task


def wait_status(
    server: SchedulerProcess, family: str, statuses: set[str], timeout: float = 90
) -> dict[str, Any]:
    """Poll (bounded) until the task of ``family`` has one of ``statuses``; its row."""
    row: dict[str, Any] = wait_for(
        lambda: (r := task_rows(server).get(family)) and r["status"] in statuses and r,
        timeout,
        f"{family} to be one of {sorted(statuses)}",
        interval=0.2,
    )
    return row


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``proc`` (if it still runs) and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
