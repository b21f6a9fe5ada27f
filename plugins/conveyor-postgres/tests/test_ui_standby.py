"""The web UI of a standby scheduler, in Chromium, against real processes (SPEC §11: "its web
UI is read-only (it reads the store) and says which server is the leader").

Two real ``conveyor scheduler`` processes share one throwaway PostgreSQL database; a real
``conveyor run`` worker runs a small graph (one task fails) against the leader. The standby's
page shows the tasks it reads from the store, names the leader and offers no action; an action
that reaches it anyway is refused with the server's words shown. Once the leader is killed
(``kill -9``) the standby leads: its banner goes and its Retry works.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from conveyor.testing.processes import kill_marked

from ui_standby_support import (
    DEADLINE,
    MARKER,
    PgScheduler,
    chromium_executable,
    in_own_thread,
    launch_chromium,
    run_worker,
)

TOKEN = "ui-standby-token-8c1f"
REFUSED = "this scheduler is a standby and changes nothing: the leader is "


@pytest.fixture
def chromium() -> str:
    """Debian's Chromium (skipped without it or without playwright, except on CI)."""
    return chromium_executable()


@pytest.fixture
def marker() -> Iterator[str]:
    """A per-test marker; every process carrying it is killed afterwards."""
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER, value)


def _sign_in(page: Any, url: str) -> None:
    """Open ``url``'s UI and sign in with the token through the page's own form."""
    page.goto(f"{url}/ui/#/tasks")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()


def _row_ids(page: Any) -> list[str]:
    ids: list[str] = page.locator('[data-testid="task-row"]').evaluate_all(
        "rows => rows.map(r => r.getAttribute('data-task-id'))"
    )
    return sorted(ids)


# Posts a Retry through the page's own modules (its dialog and its API client), as a click
# does: what happens when an action reaches a standby anyway (a page that was drawn while
# this server led, a button clicked just before it stepped down).
_RETRY_THROUGH_THE_PAGE = """async (id) => {
  const api = await import("./api.js");
  const dialog = await import("./dialog.js");
  dialog.confirmed(`Retry ${id} now?`, () => api.post("api/retry", { task_ids: [id] }), () => {});
}"""


@pytest.mark.timeout(240)
def test_standby_ui_is_read_only_names_the_leader_and_leads_after_a_kill(
    tmp_path: Path, pg_dsn: str, chromium: str, marker: str
) -> None:
    """The standby's page lists the tasks the leader stored, its banner names the leader's
    URL, Retry is not offered and a Retry posted anyway shows the 503's text and changes
    nothing; after the leader's ``kill -9`` the banner goes and Retry works there."""
    first = PgScheduler(tmp_path / "s1", marker, dsn=pg_dsn, token=TOKEN)
    second = PgScheduler(tmp_path / "s2", marker, dsn=pg_dsn, token=TOKEN)
    root = tmp_path / "out"
    root.mkdir()
    try:
        first.start()
        first.wait_role("leader", first.url)
        second.start()
        second.wait_role("standby", first.url)

        done = run_worker(first, tmp_path, marker, root)
        assert done.returncode == 1, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
        stored = first.states()
        [bad] = [t for t in stored if t.startswith("Bad")]
        assert sorted(stored.values()) == ["DONE"] * 3 + ["FAILED", "PENDING"], stored
        assert second.states() == stored  # the standby reads what the leader stored

        in_own_thread(lambda: _browse(chromium, first, second, stored, bad), timeout=180)
    finally:
        first.kill()
        second.kill()


def _browse(
    chromium: str, first: PgScheduler, second: PgScheduler, stored: dict[str, str], bad: str
) -> None:
    """The browser's part of the test (on a thread of its own: see ui_standby_support)."""
    from playwright.sync_api import expect

    with launch_chromium(chromium) as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(30_000)  # bounds a failure only
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        _sign_in(page, second.url)

        banner = page.get_by_test_id("standby-banner")
        expect(banner).to_have_text(
            f"This scheduler is a standby: read-only. The leader is {first.url}."
        )
        expect(page.get_by_test_id("leader-url")).to_have_attribute("href", first.url)
        expect(page.locator('[data-testid="task-row"]')).to_have_count(len(stored))
        assert _row_ids(page) == sorted(stored)
        retry_all = page.locator('[data-action="retry-failed"]')
        expect(retry_all).to_have_count(1)  # drawn, and hidden: a standby offers no action
        expect(retry_all).to_be_hidden()

        detail = f"{second.url}/ui/#/task/{quote(bad, safe='')}"
        page.goto(detail)
        expect(page.get_by_test_id("task-state")).to_have_text("FAILED")
        retry = page.locator('[data-action="retry"]')
        expect(retry).to_have_count(1)
        expect(retry).to_be_hidden()

        page.evaluate(_RETRY_THROUGH_THE_PAGE, bad)
        page.get_by_role("button", name="Confirm").click()
        notice = page.locator("#notice")
        expect(notice).to_have_text(f"Failed: {REFUSED}{first.url}")
        assert first.states()[bad] == second.states()[bad] == "FAILED"

        page.goto(f"{second.url}/ui/#/workers")
        expect(page.get_by_test_id("workers-not-live")).to_contain_text(first.url)
        expect(page.locator('[data-testid="worker-row"]')).to_have_count(0)

        first.kill()
        second.wait_role("leader", second.url)
        expect(banner).to_be_hidden(timeout=DEADLINE * 1000)
        expect(page.get_by_test_id("workers-not-live")).to_have_count(0)

        page.goto(detail)
        expect(retry).to_have_text("Retry now")
        expect(retry).to_be_visible()
        retry.click()
        page.get_by_role("button", name="Confirm").click()
        expect(notice).to_have_text("1 task now PENDING.")
        expect(page.get_by_test_id("task-state")).to_have_text("PENDING")
        assert second.states()[bad] == "PENDING"

        assert errors == []
        refused = [m for m in console if "status of 503" in m]
        assert len(refused) == 1 and console == refused, console
        context.close()
