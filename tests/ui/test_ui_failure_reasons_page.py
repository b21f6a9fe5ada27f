"""Why a task failed, as the web UI shows it in headless Chromium: the task list's row and the
overview's "Failed most recently" give the failure's one-line reason (not the status message the
task set before it raised), and the detail numbers the attempts 1, 2, … oldest first.

One scheduler for this module: a real worker runs ``Loader`` (it sets a status message, then
raises ``ValueError("bad row 7")``), the UI's *Retry now* route makes it PENDING, and a second
real worker fails it again, so it has two attempts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from ui_support import UiServer, Workers, eventually, list_route, task_route, ui_url

from conveyor.testing.processes import kill_marked

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails on CI)
    expect = None

REASON = "ValueError: bad row 7"
STATUS_MESSAGE = "loading row 7 of 10"

TASKS = f"""
import os

import conveyor


class Loader(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "loaded"))

    def run(self):
        self.set_status_message({STATUS_MESSAGE!r})
        raise ValueError("bad row 7")
"""


@dataclass
class Failed:
    server: UiServer
    task_id: str


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Failed]:
    """A scheduler where real workers failed ``Loader`` twice (retried in between)."""
    directory = tmp_path_factory.mktemp("ui-reasons")
    marker = uuid.uuid4().hex
    server = UiServer(directory, marker)
    (directory / "ui_reason_tasks.py").write_text(TASKS, encoding="utf-8")
    root = directory / "out"
    root.mkdir()
    workers = Workers(server, directory, "ui_reason_tasks")
    try:
        server.start()
        workers.run("Loader", "--root", str(root))
        [task_id] = server.tasks()
        assert server.states() == {task_id: "FAILED"}
        retried = server.json("POST", "/ui/api/retry", {"task_ids": [task_id]})
        assert retried["changed"] == [task_id], retried
        workers.run("Loader", "--root", str(root))
        assert server.states() == {task_id: "FAILED"}
        assert len(server.ui_task(task_id)["attempts"]) == 2
        yield Failed(server, task_id)
    finally:
        workers.stop()
        server.kill()
        kill_marked("UITEST_MARKER", marker)


def test_the_task_list_row_shows_why_the_task_failed(page: Any, failed: Failed) -> None:
    """The FAILED task's list row shows 'ValueError: bad row 7', not its status message."""
    page.goto(ui_url(failed.server, list_route(state="FAILED")))
    row = page.locator(f'[data-testid="task-row"][data-task-id="{failed.task_id}"]')
    expect(row.locator('[data-testid="task-reason"]')).to_have_text(REASON)
    expect(row).not_to_contain_text(STATUS_MESSAGE)
    assert page.js_errors == []


def test_the_overview_shows_why_the_latest_failures_failed(page: Any, failed: Failed) -> None:
    """The overview's "Failed most recently" row of the task gives its reason, not its status
    message."""
    page.goto(ui_url(failed.server, "/"))
    recent = page.locator('[data-testid="failed-recently"]')
    row = recent.locator(f'tr[data-task-id="{failed.task_id}"]')
    expect(row.locator('[data-testid="task-reason"]')).to_have_text(REASON)
    expect(recent).not_to_contain_text(STATUS_MESSAGE)
    assert page.js_errors == []


def test_the_attempts_are_numbered_from_one_oldest_first(page: Any, failed: Failed) -> None:
    """The detail's attempt rows are numbered 1 and 2, oldest first; the scheduler's long
    attempt id is not the number, but the row's data-attempt-id and the number's tooltip."""
    ids = [str(a["attempt"]) for a in failed.server.ui_task(failed.task_id)["attempts"]]
    page.goto(ui_url(failed.server, task_route(failed.task_id)))
    rows = page.locator('[data-testid="attempt-row"]')

    def numbers() -> list[dict[str, str]]:
        found: list[dict[str, str]] = rows.evaluate_all(
            "rows => rows.map(r => ({number: r.cells[0].textContent,"
            " id: r.getAttribute('data-attempt-id'), title: r.cells[0].title,"
            " outcome: r.getAttribute('data-outcome')}))"
        )
        return found

    want = [
        {"number": str(n), "id": i, "title": f"attempt id {i}", "outcome": "failed"}
        for n, i in enumerate(ids, start=1)
    ]
    eventually(numbers, want, 10, "the numbered attempt rows")
    assert page.js_errors == []
