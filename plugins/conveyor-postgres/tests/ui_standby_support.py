"""Helpers of test_ui_standby.py: real ``conveyor scheduler`` processes sharing one PostgreSQL
database, a real ``conveyor run`` worker, the task module it runs, and a Chromium launcher.

The browser runs in a thread of its own (:func:`in_own_thread`): playwright's sync API allows
one instance per thread, and the core's UI tests (tests/ui) keep theirs open for the whole
session when both are collected in one run.

Imported by module name (pytest puts this directory on ``sys.path``); nothing here sleeps to
synchronise: everything polls with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conveyor.testing.processes import SchedulerProcess, child_env, free_port, wait_for

MARKER = "UISTANDBY_MARKER"  # not CONVEYOR_*: those are configuration overrides
LEASE = 2.0  # [server] leader_lease: a short one, so the standby takes over soon
DEADLINE = 60.0  # seconds; bounds a failure only (a loaded 2-core machine is slow)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

TASKS = """
import os

import conveyor


class Base(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, self.task_id + ".out"))


class Good(Base):
    n = conveyor.IntParameter()

    def run(self):
        with self.output().open("w") as out:
            out.write("ok")


class Bad(Base):
    def run(self):
        raise ValueError("the standby cannot fix this")


class Small(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Good(root=self.root, n=n) for n in range(1, 4)] + [Bad(root=self.root)]
"""


def unavailable(why: str) -> None:
    """Skip, except on CI (``CI`` set), where a missing browser is a failure."""
    if os.environ.get("CI"):
        pytest.fail(f"the standby UI test needs it on CI: {why}")
    pytest.skip(why)


def chromium_executable() -> str:
    """Debian's Chromium (never a downloaded browser), playwright being installed; skips
    (fails on CI) when either is missing."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        unavailable(f"playwright is not installed ({exc})")
    executable = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(executable, os.X_OK):
        unavailable(f"no chromium at {executable}")
    return executable


@contextlib.contextmanager
def launch_chromium(executable: str) -> Iterator[Any]:
    """A headless Chromium of this thread's own playwright; closed after."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=30_000)  # bounds a failure only
    manager = sync_playwright().start()
    try:
        browser = manager.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    except Exception as exc:
        manager.stop()
        unavailable(f"chromium did not start: {exc}")
    try:
        yield browser
    finally:
        browser.close()
        manager.stop()


def in_own_thread(fn: Callable[[], None], timeout: float) -> None:
    """Run ``fn()`` on a new thread and wait for it (at most ``timeout`` seconds: then an
    AssertionError); whatever it raises (a skip, a failure) is raised here."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # (pytest's skip and fail outcomes included)
            raised.append(exc)

    thread = threading.Thread(target=run, name="ui-standby-browser", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"the browser's part of the test did not end within {timeout} s")
    if raised:
        raise raised[0]


class PgScheduler(SchedulerProcess):
    """A ``conveyor scheduler`` on a free loopback port whose state is the ``postgres`` store
    at ``dsn``, with a bearer ``token`` and a short leader lease."""

    def __init__(self, directory: Path, marker: str, *, dsn: str, token: str) -> None:
        """Write the configuration; nothing is started yet."""
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        config = directory / "server.toml"
        config.write_text(
            "[scheduler]\n"
            "retry_delay = 3600\n"
            "worker_disconnect_delay = 600\n"
            "[server]\n"
            f"token = {json.dumps(token)}\n"
            'state_store = "postgres"\n'
            f"leader_lease = {LEASE}\n"
            f'public_url = "http://127.0.0.1:{port}"\n'
            "[state_stores.postgres]\n"
            f"dsn = {json.dumps(dsn)}\n",
            encoding="utf-8",
        )
        super().__init__(directory, config, child_env(directory, MARKER, marker), port=port)
        self.token = token

    def health(self) -> dict[str, Any]:
        """``GET /health`` (open to anybody): the server's role and the leader's URL."""
        reply = self.request("GET", "/health")
        assert reply.status == 200, reply
        answer: dict[str, Any] = reply.json()
        return answer

    def wait_role(self, role: str, leader: str) -> None:
        """Poll /health until it says ``role`` with ``leader`` as the leader."""

        def there() -> bool:
            seen = self.health()
            return bool(seen["role"] == role and seen["leader"] == leader)

        wait_for(there, DEADLINE, f"{self.url} to be {role} with leader {leader}")

    def states(self) -> dict[str, str]:
        """Each task's status by id, from ``GET /api/v1/tasks`` (a standby reads the store)."""
        reply = self.request("GET", "/api/v1/tasks")
        assert reply.status == 200, reply
        return {t["task_id"]: t["status"] for t in reply.json()["tasks"]}


def run_worker(
    server: PgScheduler, directory: Path, marker: str, root: Path
) -> subprocess.CompletedProcess[str]:
    """Write the task module and run ``conveyor run ui_standby_tasks.Small`` against
    ``server`` to its end (bounded); its result."""
    (directory / "ui_standby_tasks.py").write_text(TASKS, encoding="utf-8")
    env = child_env(
        directory,
        MARKER,
        marker,
        CONVEYOR_SCHEDULER__TOKEN=server.token,
        CONVEYOR_WORKER__WAIT_INTERVAL="0.1",
        CONVEYOR_WORKER__WAIT_JITTER="0",
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "conveyor",
            "run",
            "ui_standby_tasks.Small",
            "--root",
            str(root),
            "--scheduler-url",
            server.url,
            "--log-level",
            "warning",
        ],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE * 2,
        check=False,
    )
