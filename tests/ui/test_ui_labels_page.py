"""Routing by labels as the web UI shows it in headless Chromium: a ready task that no live
worker can take (none has its labels) shows why it waits in its task list row and its detail,
with its labels; the text is the scheduler's and is shown as text.

One scheduler: a task needing ``gpu`` and ``<b>eu</b>`` (markup in a label must stay text) is
registered by a worker that offers ``cpu`` only and asks for work through the real API.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from ui_support import UiServer, list_route, task_route, ui_url

from conveyor.testing.processes import kill_marked

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails on CI)
    expect = None

LABELS = ["<b>eu</b>", "gpu"]
WAITING = (
    "waiting for a worker with the labels <b>eu</b>, gpu: no live worker that may run it has them"
)
TASK = "Render_frame_1"


@pytest.fixture(scope="module")
def waiting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """A scheduler holding one ready task no live worker can take."""
    directory = tmp_path_factory.mktemp("ui-labels")
    marker = uuid.uuid4().hex
    server = UiServer(directory, marker)
    try:
        server.start()
        spec = {"task_id": TASK, "family": "Render", "params": {"frame": "1"}, "labels": LABELS}
        server.add_tasks("cpu-worker", [spec])
        answer = server.json(
            "POST", "/api/v1/get_work", {"worker_id": "cpu-worker", "labels": ["cpu"]}
        )
        assert answer["work"] is None, answer
        assert server.ui_task(TASK)["waiting"] == WAITING
        yield server
    finally:
        server.kill()
        kill_marked("UITEST_MARKER", marker)


def test_the_list_row_says_why_the_task_waits(page: Any, waiting: UiServer) -> None:
    """The PENDING row's reason is the waiting text, markup in it shown as text."""
    page.goto(ui_url(waiting, list_route(state="PENDING")))
    row = page.locator(f'[data-testid="task-row"][data-task-id="{TASK}"]')
    expect(row.locator('[data-testid="task-reason"]')).to_have_text(WAITING)
    assert row.locator("b").count() == 0  # (never rendered as HTML)
    assert page.js_errors == []


def test_the_detail_shows_the_labels_and_why_it_waits(page: Any, waiting: UiServer) -> None:
    """The detail lists the task's labels and the waiting text, both as text."""
    page.goto(ui_url(waiting, task_route(TASK)))
    expect(page.locator('[data-testid="task-labels"]')).to_have_text(", ".join(LABELS))
    expect(page.locator('[data-testid="task-waiting"]')).to_have_text(WAITING)
    assert page.locator(".detail b").count() == 0
    assert page.js_errors == []
