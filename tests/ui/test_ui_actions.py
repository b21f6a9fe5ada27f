"""The web UI's actions (SPEC §9 Actions): Retry now, Re-enable and Retry all failed, each
behind the page's own confirmation dialog (Cancel changes nothing, Confirm changes the state,
checked through GET /api/v1/tasks) and recorded as an audit line in the server's stderr.

One scheduler for this module, populated by a real worker; each test acts on tasks of its own.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from ui_support import (
    UiServer,
    Workers,
    audit_lines,
    by_family,
    list_route,
    rows_become,
    stderr_size,
    task_route,
    ui_url,
    write_tasks,
)

from conveyor.testing.processes import kill_marked, wait_for

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails on CI)
    expect = None


@dataclass
class Targets:
    server: UiServer
    ids: dict[str, str]


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Targets]:
    """A scheduler where a real worker left Bad, BadA(1), BadA(2), BadB FAILED, Fragile
    DISABLED, Good(1) DONE and ActionTargets PENDING; nothing runs them again."""
    directory = tmp_path_factory.mktemp("ui-actions")
    marker = uuid.uuid4().hex
    server = UiServer(directory, marker)
    root = directory / "out"
    root.mkdir()
    workers = Workers(server, directory, write_tasks(directory, "ui_action_tasks"))
    try:
        server.start()
        workers.run("ActionTargets", "--root", str(root), workers=1)
        ids = {name: by_family(server, name) for name in ("Bad", "BadA", "BadB", "Fragile")}
        found = Targets(
            server,
            {
                "bad": ids["Bad"][0],
                "fragile": ids["Fragile"][0],
                "bada1": ids["BadA"][0],
                "bada2": ids["BadA"][1],
                "badb": ids["BadB"][0],
            },
        )
        states = server.states()
        assert [states[found.ids[n]] for n in ("bad", "fragile", "bada1", "bada2", "badb")] == [
            "FAILED",
            "DISABLED",
            "FAILED",
            "FAILED",
            "FAILED",
        ]
        yield found
    finally:
        workers.stop()
        server.kill()
        kill_marked("UITEST_MARKER", marker)


def _watch(page: Any) -> tuple[list[str], list[str]]:
    """Record native dialogs (dismissed) and POSTs the page sends."""
    natives: list[str] = []
    posts: list[str] = []

    def native(dialog: Any) -> None:
        natives.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", native)
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    return natives, posts


def _dialog(page: Any) -> Any:
    return page.locator('[data-testid="confirm-dialog"]')


def _answer(page: Any, choice: str) -> None:
    dialog = _dialog(page)
    dialog.get_by_role("button", name=choice, exact=True).click()
    expect(dialog).to_be_hidden()


def _cancel_then_confirm(
    page: Any, server: UiServer, button: Any, task_id: str, posts: list[str]
) -> tuple[list[tuple[Any, ...]], int]:
    """Click ``button``: the dialog names the task, and Cancel changes and posts nothing;
    click again and Confirm. Returns the state before, and the server's stderr size before
    the confirmed action (for its audit line)."""
    before = server.snapshot()
    button.click()
    expect(_dialog(page)).to_be_visible()
    expect(_dialog(page)).to_contain_text(task_id)
    _answer(page, "Cancel")
    assert server.snapshot() == before
    assert posts == []
    since = stderr_size(server)
    button.click()
    _answer(page, "Confirm")
    return before, since


def test_retry_now(page: Any, targets: Targets) -> None:
    """Retry now on a FAILED task asks first; Cancel changes nothing and sends nothing;
    Confirm makes it PENDING at once with its failure count kept, and is audited."""
    server, bad = targets.server, targets.ids["bad"]
    natives, posts = _watch(page)
    failures = server.ui_task(bad)["failures"]
    assert failures >= 1
    page.goto(ui_url(server, task_route(bad)))
    expect(page.locator('[data-testid="task-state"]')).to_have_text("FAILED")
    expect(page.get_by_role("button", name="Re-enable", exact=True)).to_have_count(0)
    button = page.get_by_role("button", name="Retry now", exact=True)
    before, since = _cancel_then_confirm(page, server, button, bad, posts)
    wait_for(lambda: server.states()[bad] == "PENDING", 30, "the retried task to be PENDING")
    expect(page.locator('[data-testid="task-state"]')).to_have_text("PENDING")
    expect(button).to_have_count(0)
    assert server.ui_task(bad)["failures"] == failures
    changed = {t for t, s in server.states().items() if before_state(before, t) != s}
    assert changed == {bad}
    assert [p for p in posts if p.endswith("/ui/api/retry")], posts
    wait_for(
        lambda: audit_lines(server, bad, re.compile("retry", re.I), since),
        30,
        "an audit line naming the retry and the task",
    )
    assert natives == []


def before_state(snapshot: list[tuple[Any, ...]], task_id: str) -> str:
    """The status of ``task_id`` in a snapshot."""
    return next(row[1] for row in snapshot if row[0] == task_id)


def test_re_enable(page: Any, targets: Targets) -> None:
    """Re-enable on a DISABLED task asks first; Cancel changes nothing; Confirm makes it
    PENDING with its failure count reset (0; the policy already empties the count of recent
    failures when it disables a task, as Luigi does), and is audited."""
    server, fragile = targets.server, targets.ids["fragile"]
    natives, posts = _watch(page)
    page.goto(ui_url(server, task_route(fragile)))
    expect(page.locator('[data-testid="task-state"]')).to_have_text("DISABLED")
    expect(page.get_by_role("button", name="Retry now", exact=True)).to_have_count(0)
    button = page.get_by_role("button", name="Re-enable", exact=True)
    before, since = _cancel_then_confirm(page, server, button, fragile, posts)
    wait_for(lambda: server.states()[fragile] == "PENDING", 30, "the task to be PENDING")
    expect(page.locator('[data-testid="task-state"]')).to_have_text("PENDING")
    assert server.ui_task(fragile)["failures"] == 0
    changed = {t for t, s in server.states().items() if before_state(before, t) != s}
    assert changed == {fragile}
    wait_for(
        lambda: audit_lines(server, fragile, re.compile(r"re-?enable", re.I), since),
        30,
        "an audit line naming the re-enable and the task",
    )
    assert natives == []


def test_retry_all_failed_follows_the_lists_filter(page: Any, targets: Targets) -> None:
    """Retry all failed in the list filtered to family BadA asks about 2 tasks; Cancel
    changes nothing; Confirm makes exactly those two PENDING (BadB stays FAILED); audited."""
    server, ids = targets.server, targets.ids
    natives, posts = _watch(page)
    page.goto(ui_url(server, list_route(family="BadA")))
    rows_become(page, [ids["bada1"], ids["bada2"]], what="the BadA rows")
    button = page.get_by_role("button", name="Retry all failed", exact=True)
    before = server.snapshot()

    button.click()
    expect(_dialog(page)).to_be_visible()
    expect(_dialog(page)).to_contain_text("2")
    _answer(page, "Cancel")
    assert server.snapshot() == before
    assert posts == []

    since = stderr_size(server)
    button.click()
    _answer(page, "Confirm")

    def retried() -> bool:
        states = server.states()
        return states[ids["bada1"]] == states[ids["bada2"]] == "PENDING"

    wait_for(retried, 30, "both BadA tasks to be PENDING")
    states = server.states()
    changed = {t for t, s in states.items() if before_state(before, t) != s}
    assert changed == {ids["bada1"], ids["bada2"]}
    assert states[ids["badb"]] == "FAILED"
    for name in ("bada1", "bada2"):
        wait_for(
            lambda name=name: audit_lines(server, ids[name], re.compile("retry", re.I), since),
            30,
            f"an audit line naming the retry of {name}",
        )
    page.goto(ui_url(server, list_route(state="PENDING", family="BadA")))
    rows_become(page, [ids["bada1"], ids["bada2"]], what="the BadA rows, now PENDING")
    assert natives == []
