"""A third-party state store serves the web UI (SPEC §10, issue 21): ``conveyor scheduler`` with
``[server] state_store = "dict"``, the store of tests/thirdparty-plugin written only against
``StateStore`` and ``TaskReads`` (rows in a dict saved as JSON, no SQL), drawn in headless
Chromium: the overview counts, the task list, a task's detail with what blocks it, and its
graph. Tasks are registered through the worker API; the server is a real subprocess.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_support import UiServer, graph_route, list_route, row_ids, task_route, ui_url

from conveyor.testing.processes import kill_marked

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails on CI)
    expect = None

SPECS: list[dict[str, Any]] = [
    {"task_id": "Load-1", "family": "Load", "deps": ["Clean-1", "Clean-2"]},
    {"task_id": "Clean-1", "family": "Clean", "deps": ["Fetch-1"]},
    {"task_id": "Clean-2", "family": "Clean", "status": "DONE"},
    {"task_id": "Fetch-1", "family": "Fetch", "status": "DISABLED"},
]


@pytest.fixture(scope="module")
def dict_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """A scheduler on the third-party ``dict`` store, holding :data:`SPECS`."""
    marker = uuid.uuid4().hex
    directory = tmp_path_factory.mktemp("ui-dict-store")
    server = UiServer(directory, marker, config='[server]\nstate_store = "dict"\n')
    server.start()
    try:
        server.add_tasks("dict-loader", SPECS)
        yield server
    finally:
        server.kill()
        kill_marked("UITEST_MARKER", marker)


def test_the_server_reads_and_writes_the_third_party_store(dict_server: UiServer) -> None:
    """What the UI shows comes from the store: its file at the state path (``--state-path``)
    is the dict store's JSON, not an SQLite database, holding the tasks registered; and the
    UI's summary counts them."""
    saved = json.loads(Path(dict_server.state).read_text(encoding="utf-8"))
    assert sorted(saved["tasks"]) == sorted(s["task_id"] for s in SPECS)
    summary = dict_server.json("GET", "/ui/api/summary")
    assert summary["counts"]["PENDING"] == 2 and summary["counts"]["DONE"] == 1
    assert summary["counts"]["DISABLED"] == 1 and summary["total"] == 4


@pytest.mark.timeout(120)
def test_the_list_detail_and_graph_are_drawn_from_it(page: Any, dict_server: UiServer) -> None:
    """The overview counts, the list (newest change first), a task's detail with its
    dependencies and what blocks it, and its graph, all drawn in the browser."""
    page.goto(ui_url(dict_server, "/"))
    expect(page.locator('[data-testid="count-PENDING"]')).to_have_text("2")
    expect(page.locator('[data-testid="count-DISABLED"]')).to_have_text("1")

    page.goto(ui_url(dict_server, list_route()))
    expect(page.locator('[data-testid="task-row"]')).to_have_count(4)
    assert sorted(row_ids(page)) == sorted(s["task_id"] for s in SPECS)

    page.goto(ui_url(dict_server, list_route(family="Clean")))
    expect(page.locator('[data-testid="task-row"]')).to_have_count(2)
    assert sorted(row_ids(page)) == ["Clean-1", "Clean-2"]

    page.goto(ui_url(dict_server, task_route("Load-1")))
    expect(page.locator('[data-testid="task-state"]')).to_have_text("PENDING")
    expect(page.locator('[data-testid="blocked-by"]')).to_contain_text("Fetch-1")

    page.goto(ui_url(dict_server, graph_route("Load-1")))
    graph = page.locator('[data-testid="graph"]')
    expect(graph).to_have_attribute("data-node-count", "4")
    page.goto(ui_url(dict_server, graph_route("Clean-1", down=True)))
    expect(graph).to_have_attribute("data-node-count", "3")
    assert page.js_errors == []
