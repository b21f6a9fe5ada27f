"""Batch tasks as the web UI shows them in headless Chromium: the detail of a task that ran in
a batch lists the batch's members (as text, each a link to its own detail); a task that ran
alone has no such section.

One scheduler: three batchable tasks of one key (one id with markup in it, which must stay
text) and one plain task, registered and handed out through the real API to a worker that
asks for batches.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from ui_support import UiServer, task_route, ui_url

from conveyor.testing.processes import kill_marked

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails on CI)
    expect = None

MEMBERS = ["Load_day_1", "Load_day_2", "Load_<b>3</b>"]
ALONE = "Plain_1"


@pytest.fixture(scope="module")
def batched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """A scheduler that handed out one batch of three members, and one task alone."""
    directory = tmp_path_factory.mktemp("ui-batch")
    marker = uuid.uuid4().hex
    server = UiServer(directory, marker)
    try:
        server.start()
        specs: list[dict[str, Any]] = [
            {
                "task_id": task_id,
                "family": "Load",
                "params": {"day": str(n)},
                "batch": {"key": "load-key"},
            }
            for n, task_id in enumerate(MEMBERS)
        ]
        server.add_tasks("batch-worker", specs)
        answer = server.json(
            "POST", "/api/v1/get_work", {"worker_id": "batch-worker", "batches": True}
        )
        work = answer["work"]
        assert sorted(m["task_id"] for m in work["batch"]) == sorted(MEMBERS), answer
        server.add_tasks("plain-worker", [{"task_id": ALONE, "family": "Plain"}])
        answer = server.json(
            "POST", "/api/v1/get_work", {"worker_id": "plain-worker", "batches": True}
        )
        assert answer["work"]["task_id"] == ALONE and answer["work"]["batch"] == [], answer
        assert sorted(server.ui_task(MEMBERS[1])["batch"]) == sorted(MEMBERS)
        yield server
    finally:
        server.kill()
        kill_marked("UITEST_MARKER", marker)


def test_the_detail_lists_the_batch_members(page: Any, batched: UiServer) -> None:
    """Every member is listed, as text, in the detail of any one of them."""
    page.goto(ui_url(batched, task_route(MEMBERS[0])))
    members = page.locator('[data-testid="task-batch"] li')
    expect(members).to_have_count(len(MEMBERS))
    assert sorted(members.all_inner_texts()) == sorted(MEMBERS)
    assert page.locator(".detail b").count() == 0  # (the id with markup stays text)
    assert page.js_errors == []


def test_a_task_run_alone_has_no_batch_section(page: Any, batched: UiServer) -> None:
    """No batch list for a task whose attempt was not a batch."""
    page.goto(ui_url(batched, task_route(ALONE)))
    expect(page.locator('[data-testid="task-state"]')).to_be_visible()
    assert page.locator('[data-testid="task-batch"]').count() == 0
    assert page.js_errors == []
