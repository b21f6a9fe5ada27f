"""Fixtures of the web UI's browser tests: one headless Chromium per session (Debian's, never a
downloaded one), a fresh browser context per test, and a scheduler populated by real workers
that the read-only tests share.

Without playwright or chromium the tests are skipped, except on CI (``CI=true``), where that is
a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ui_support import (
    XSS_IMG,
    XSS_SCRIPT,
    XSS_TASK_ID,
    XSS_WORKER,
    UiServer,
    Workers,
    by_family,
    worker_id_of,
    write_tasks,
)

from conveyor.testing.processes import kill_marked, put, wait_for

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BULK = 300  # tasks of family Bulk: several pages of the list


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the UI tests need it on CI: {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the whole session."""
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError as exc:
        _unavailable(f"playwright is not installed ({exc})")
    # expect() waits 5 s by default; like every deadline here it only bounds a failure, so
    # it is generous: a loaded 2-core machine can take longer to draw a view
    expect.set_options(timeout=30_000)
    executable = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(executable, os.X_OK):
        _unavailable(f"no chromium at {executable}")
    manager = sync_playwright().start()
    try:
        chromium = manager.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    except Exception as exc:
        manager.stop()
        _unavailable(f"chromium did not start: {exc}")
    yield chromium
    chromium.close()
    manager.stop()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies, no cache) for one test."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(30_000)  # a bound on failures only: generous for a loaded machine
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: Any) -> Any:
    """A page of the test's context; uncaught script errors collect in ``page.js_errors``."""
    tab = context.new_page()
    tab.js_errors = []
    tab.on("pageerror", lambda error: tab.js_errors.append(str(error)))
    return tab


@pytest.fixture
def marker() -> Iterator[str]:
    """A per-test marker; every process carrying it is killed afterwards."""
    value = uuid.uuid4().hex
    yield value
    kill_marked("UITEST_MARKER", value)


@dataclass
class Population:
    """The shared scheduler and what the real workers left in it."""

    server: UiServer
    root: Path
    ids: dict[str, str] = field(default_factory=dict)  # short name -> task id
    bulk: list[str] = field(default_factory=list)
    pipeline_worker: str = ""
    gated_worker: str = ""
    stuck_worker: str = ""


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Population]:
    """A scheduler (no token) whose tasks real workers left DONE, FAILED (raised, timed out,
    process died, interrupted by SIGTERM), DISABLED, PENDING behind failures and RUNNING
    (Gated, until the module ends, with a status message, 42 % progress, a tracking URL and
    one of two ``db``); 300 DONE ``Bulk`` tasks, an UNKNOWN task, and a task and a worker with
    markup in their ids, registered through the worker API. Shared by the tests of a module
    that only read."""
    directory = tmp_path_factory.mktemp("ui-populated")
    marker = uuid.uuid4().hex
    server = UiServer(directory, marker, config="[scheduler.resources]\ndb = 2\n")
    root = directory / "out"
    root.mkdir()
    module = write_tasks(directory, "ui_pop_tasks")
    workers = Workers(server, directory, module)
    try:
        server.start()
        gated = workers.start("Gated", "--root", str(root))
        stuck = workers.start("Stuck", "--root", str(root))
        pipeline_pid = workers.run("Pipeline", "--root", str(root), workers=2)
        wait_for((root / "stuck.started").exists, 30, "Stuck to start")
        stuck.send_signal(signal.SIGTERM)
        stuck.wait(timeout=30)

        def gated_running() -> bool:
            return any(
                t["family"] == "Gated" and t["status"] == "RUNNING" and t["progress"] == 42
                for t in server.tasks().values()
            )

        wait_for(gated_running, 30, "Gated to run and publish its progress")
        pop = Population(server, root)
        for name, family in [
            ("bad", "Bad"),
            ("fragile", "Fragile"),
            ("evil", "Evil"),
            ("slowpoke", "Slowpoke"),
            ("dies", "Dies"),
            ("pipeline", "Pipeline"),
            ("gated", "Gated"),
            ("stuck", "Stuck"),
        ]:
            [pop.ids[name]] = by_family(server, family)
        tasks = server.tasks()
        for tid in by_family(server, "Good"):
            pop.ids[f"good{tasks[tid]['params']['n']}"] = tid
        pop.pipeline_worker = worker_id_of(server, pipeline_pid)
        pop.gated_worker = worker_id_of(server, gated.pid)
        pop.stuck_worker = worker_id_of(server, stuck.pid)
        pop.bulk = [f"Bulk_{n:04d}" for n in range(BULK)]
        server.add_tasks(
            "bulk-loader",
            [
                {
                    "task_id": t,
                    "family": "Bulk",
                    "module": "bulk",
                    "params": {"n": t[-4:]},
                    "status": "DONE",
                }
                for t in pop.bulk
            ],
        )
        server.add_tasks(
            XSS_WORKER,
            [
                {
                    "task_id": XSS_TASK_ID,
                    "family": "Markup",
                    "module": "m",
                    "params": {"html": XSS_IMG, "script": XSS_SCRIPT},
                }
            ],
        )
        pop.ids["markup"] = XSS_TASK_ID
        server.add_tasks(
            "probe-worker",
            [
                {
                    "task_id": "Broken-1",
                    "family": "Broken",
                    "status": "UNKNOWN",
                    "explanation": "RuntimeError: cannot reach the share",
                }
            ],
        )
        pop.ids["broken"] = "Broken-1"
        expected = {
            "good1": "DONE",
            "good2": "DONE",
            "bad": "FAILED",
            "fragile": "DISABLED",
            "evil": "FAILED",
            "slowpoke": "FAILED",
            "dies": "FAILED",
            "pipeline": "PENDING",
            "gated": "RUNNING",
            "markup": "PENDING",
            "broken": "UNKNOWN",
            "stuck": "FAILED",
        }
        states = server.states()
        assert {k: states[v] for k, v in pop.ids.items()} == expected
        yield pop
    finally:
        put(root / "gate", "open")
        workers.stop()
        server.kill()
        kill_marked("UITEST_MARKER", marker)
