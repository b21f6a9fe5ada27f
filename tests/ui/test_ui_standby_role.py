"""The web UI of a server that stands by (SPEC §11), without PostgreSQL: the real app on a real
uvicorn, its :class:`~conveyor.server.app.SchedulerService` made a standby and a leader again
through its own ``step_down`` and ``promote`` (what the leadership campaign calls), on a
``MemoryStore``. The same page against two real schedulers sharing a real PostgreSQL is
plugins/conveyor-postgres/tests/test_ui_standby.py.

A standby's UI reads the store, is read-only (its actions answer 503 with ``Retry-After`` and
the leader's URL, its buttons are hidden) and names the leader: as a link only when the URL is
http(s), and never as markup.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import Scheduler
from conveyor.protocol import AddTasks, GetWork, TaskFailed, TaskSpec
from conveyor.scheduler.persist import from_row
from conveyor.server.app import LEADER, STANDBY, SchedulerService, create_app
from conveyor.server.hosts import OwnAddress
from conveyor.server.stores import MemoryStore
from conveyor.testing.processes import http_request, serve_app

LOOPBACK = "127.0.0.1"
LEADER_URL = "http://leader.test:8082"
REFUSED = f"this scheduler is a standby and changes nothing: the leader is {LEADER_URL}"


@pytest.fixture
def standby() -> Iterator[tuple[SchedulerService, int, str]]:
    """A service that led while worker ``w1`` failed ``A-1`` (``B-1`` stays PENDING), then
    stood by with :data:`LEADER_URL` leading; served on loopback. (service, port, failed id)"""
    store = MemoryStore()
    service = SchedulerService(Scheduler(), store)
    core = service.core
    tasks = (TaskSpec(task_id="A-1", family="A"), TaskSpec(task_id="B-1", family="B"))
    service.call(core.call, AddTasks(worker_id="w1", tasks=tasks))
    work = service.call(core.call, GetWork(worker_id="w1")).work
    assert work is not None
    failed = TaskFailed(
        worker_id="w1", task_id=work.task_id, explanation="boom", attempt=work.attempt
    )
    service.call(core.call, failed)
    service.step_down(LEADER_URL, "another server took the lease")

    def app_for(port: int) -> Any:
        address = OwnAddress.of(LOOPBACK, port)
        return create_app(service, token="", max_request_bytes=1 << 20, address=address)

    with serve_app(app_for) as port:
        yield service, port, work.task_id
    store.close()


def _lead(service: SchedulerService) -> None:
    """Lead again with the stored state, as the campaign does once it took the lease."""
    rows, workers = service.store.load()
    service.promote([from_row(r) for r in rows], workers, float("inf"), 1)


def _post(port: int, path: str, body: Any) -> Any:
    headers = {"Content-Type": "application/json"}
    return http_request(port, "POST", path, json.dumps(body), headers)


def _get(port: int, path: str) -> Any:
    reply = http_request(port, "GET", path)
    assert reply.status == 200, (path, reply)
    return reply.json()


def test_a_standby_answers_reads_and_refuses_actions(
    standby: tuple[SchedulerService, int, str],
) -> None:
    """``/ui/api/changes`` says the role and the leader; every action answers 503 with
    ``Retry-After`` and ``{"error", "leader"}`` and changes nothing (Retry all failed too);
    the workers view is marked not live and lists the stored workers only; as leader again,
    the same Retry works."""
    service, port, failed = standby
    changes = _get(port, "/ui/api/changes")
    assert (changes["role"], changes["leader"]) == (STANDBY, LEADER_URL)
    assert _get(port, "/ui/api/summary")["counts"]["FAILED"] == 1
    for path, body in [
        ("/ui/api/retry", {"task_ids": [failed]}),
        ("/ui/api/reenable", {"task_ids": [failed]}),
        ("/ui/api/retry-failed", {"family": "", "worker": "", "q": ""}),
    ]:
        reply = _post(port, path, body)
        assert reply.status == 503, (path, reply)
        assert reply.headers["retry-after"] == "1", reply.headers
        assert reply.json() == {"error": REFUSED, "leader": LEADER_URL}, path
    assert _get(port, f"/ui/api/task?id={failed}")["task"]["status"] == "FAILED"
    workers = _get(port, "/ui/api/workers")
    assert workers == {
        "live": False,
        "leader": LEADER_URL,
        "workers": [{"worker_id": "w1", "assistant": False}],
        "resources": [],
    }

    _lead(service)
    changes = _get(port, "/ui/api/changes")
    assert (changes["role"], changes["leader"]) == (LEADER, "")
    assert _get(port, "/ui/api/workers")["live"] is True
    reply = _post(port, "/ui/api/retry", {"task_ids": [failed]})
    assert reply.status == 200 and reply.json()["changed"] == [failed], reply
    assert _get(port, f"/ui/api/task?id={failed}")["task"]["status"] == "PENDING"


# Posts a Retry through the page's own modules (its dialog and API client), as a click does:
# an action that reaches a standby anyway (a page drawn while the server led).
_RETRY_THROUGH_THE_PAGE = """async (id) => {
  const api = await import("./api.js");
  const dialog = await import("./dialog.js");
  dialog.confirmed(`Retry ${id} now?`, () => api.post("api/retry", { task_ids: [id] }), () => {});
}"""


@pytest.mark.timeout(120)
def test_the_standby_page_is_read_only_and_names_the_leader(
    page: Any, standby: tuple[SchedulerService, int, str]
) -> None:
    """The banner names the leader (a link), the action buttons are drawn but hidden, a Retry
    posted anyway shows the server's refusal as text; a leader URL that is not http(s), or
    holds markup, is shown as text and runs nothing; "no leader yet" while none is known; once
    the server leads the banner goes and Retry works."""
    from playwright.sync_api import expect  # (the page fixture skips without playwright)

    service, port, failed = standby
    page.goto(f"http://{LOOPBACK}:{port}/ui/#/task/{failed}")
    banner = page.get_by_test_id("standby-banner")
    expect(banner).to_have_text(
        f"This scheduler is a standby: read-only. The leader is {LEADER_URL}."
    )
    expect(page.get_by_test_id("leader-url")).to_have_attribute("href", LEADER_URL)
    expect(page.get_by_test_id("task-state")).to_have_text("FAILED")
    retry = page.locator('[data-action="retry"]')
    expect(retry).to_have_count(1)
    expect(retry).to_be_hidden()

    page.evaluate(_RETRY_THROUGH_THE_PAGE, failed)
    page.get_by_role("button", name="Confirm").click()
    expect(page.locator("#notice")).to_have_text(f"Failed: {REFUSED}")
    assert service.reads.detail(failed).status == "FAILED"  # type: ignore[union-attr]

    page.goto(f"http://{LOOPBACK}:{port}/ui/#/tasks")
    expect(page.locator('[data-testid="task-row"]')).to_have_count(2)
    expect(page.locator('[data-action="retry-failed"]')).to_be_hidden()
    page.goto(f"http://{LOOPBACK}:{port}/ui/#/workers")
    expect(page.get_by_test_id("workers-not-live")).to_contain_text(LEADER_URL)
    expect(page.locator('[data-testid="stored-worker-row"]')).to_have_count(1)

    for odd in ("javascript:window.__xss=1", "<img src=x onerror=window.__xss=2>"):
        service.leader = odd
        expect(banner).to_have_text(f"This scheduler is a standby: read-only. The leader is {odd}.")
        expect(page.get_by_test_id("leader-url")).to_have_js_property("tagName", "CODE")
    assert page.evaluate("window.__xss") is None
    service.leader = ""
    expect(banner).to_have_text("This scheduler is a standby: read-only. There is no leader yet.")

    _lead(service)
    expect(banner).to_be_hidden()
    expect(page.get_by_test_id("workers-not-live")).to_have_count(0)
    page.goto(f"http://{LOOPBACK}:{port}/ui/#/task/{failed}")
    expect(retry).to_be_visible()
    retry.click()
    page.get_by_role("button", name="Confirm").click()
    expect(page.locator("#notice")).to_have_text("1 task now PENDING.")
    expect(page.get_by_test_id("task-state")).to_have_text("PENDING")
    assert page.js_errors == []
