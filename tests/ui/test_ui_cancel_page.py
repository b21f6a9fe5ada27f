"""The web UI's Cancel action and "Submitted by" (issue 26, items 1 and 2), in headless Chromium
against a real ``conveyor scheduler``: a task's detail offers *Cancel* (not for a DONE or
DISABLED task), asks in the page's own dialog whether to cancel what needs the task too, and
the task (with its dependents, when asked) becomes DISABLED with the reason "cancelled",
committed, audited in the server's log, and told to the worker running it. A submitted task
shows who submitted it, as text.

The route itself (``POST /ui/api/cancel``) is also checked without a browser: its errors, its
``conveyor_scheduler_ui_action`` event and session name behind a token (an in-process app on
a real uvicorn, with :class:`~conveyor.testing.RecordingPlugin`), and a standby's refusal.

One scheduler for the browser tests; the tasks are registered and handed out through the real
worker API by workers named here (no task code runs), each test acting on tasks of its own.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from ui_support import UiServer, audit_lines, stderr_size, task_route, ui_url

from conveyor import Scheduler
from conveyor.events import SchedulerTaskChanged, SchedulerUiAction
from conveyor.plugins import LifecycleRelay
from conveyor.protocol import AddTasks, GetWork, TaskSpec
from conveyor.server.app import SchedulerService, create_app
from conveyor.server.hooks import ServerHooks
from conveyor.server.hosts import OwnAddress
from conveyor.server.stores import MemoryStore
from conveyor.testing import RecordingPlugin
from conveyor.testing.processes import http_request, kill_marked, serve_app, wait_for

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails on CI)
    expect = None  # type: ignore[assignment]

RUNNER = "w-runner"
RUNNING = "Extract_1"  # RUNNING on RUNNER; Load_1 needs it, and Report_1 needs Load_1
CHAIN = ["Load_1", "Report_1"]
ALONE = "Clean_1"  # PENDING; Publish_1 needs it
ALONE_DEPENDENT = "Publish_1"
DONE = "Archive_1"
SUBMITTED = "Ingest_1"
SUBMITTER = "<b>x</b>"
SUBMITTED_BY = "<b>x</b> via API, no token"  # (what the server records: how it let them in)
CANCEL_OFFER = "also cancel every task that needs it"
AUDIT = re.compile(r'"action": "cancel"')


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """A scheduler (no token) with Extract_1 RUNNING and its chain of two dependents, Clean_1
    PENDING with one dependent, Archive_1 DONE, and Ingest_1 submitted by ``<b>x</b>``."""
    directory = tmp_path_factory.mktemp("ui-cancel")
    marker = uuid.uuid4().hex
    ui = UiServer(directory, marker)
    try:
        ui.start()
        specs: list[dict[str, Any]] = [
            {"task_id": RUNNING, "family": "Extract"},
            {"task_id": CHAIN[0], "family": "Load", "deps": [RUNNING]},
            {"task_id": CHAIN[1], "family": "Report", "deps": [CHAIN[0]]},
            {"task_id": ALONE, "family": "Clean"},
            {"task_id": ALONE_DEPENDENT, "family": "Publish", "deps": [ALONE]},
            {"task_id": DONE, "family": "Archive", "status": "DONE"},
        ]
        ui.add_tasks(RUNNER, specs[:3])
        answer = ui.json("POST", "/api/v1/get_work", {"worker_id": RUNNER})
        assert answer["work"]["task_id"] == RUNNING, answer
        ui.add_tasks("w-other", specs[3:])
        task = {"task_id": SUBMITTED, "family": "Ingest", "module": "ingest"}
        answer = ui.json("POST", "/api/v1/submit", {"task": task, "by": SUBMITTER})
        assert answer == {"task_id": SUBMITTED, "status": "PENDING"}, answer
        states = ui.states()
        assert [states[t] for t in (RUNNING, *CHAIN, ALONE, ALONE_DEPENDENT, DONE)] == [
            "RUNNING",
            "PENDING",
            "PENDING",
            "PENDING",
            "PENDING",
            "DONE",
        ]
        yield ui
    finally:
        ui.kill()
        kill_marked("UITEST_MARKER", marker)


def _posts(page: Any) -> list[str]:
    """The URLs of the POSTs the page sends from now on."""
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    return posts


def _dialog(page: Any) -> Any:
    return page.locator('[data-testid="confirm-dialog"]')


def _cancel_button(page: Any) -> Any:
    return page.get_by_role("button", name="Cancel", exact=True)


@pytest.mark.timeout(120)
def test_cancel_with_downstream(page: Any, server: UiServer) -> None:
    """Cancel on a RUNNING task asks in the page's dialog (naming the task, offering its
    dependents, unticked); *Keep it* changes and sends nothing. Ticked and confirmed, the task
    and every task that needs it, directly or not, are DISABLED with the reason "cancelled";
    its attempt ends interrupted, its worker is told to stop it, the page offers Re-enable
    instead of Cancel, and the server logged one audit line."""
    page.on("dialog", lambda native: native.dismiss())  # (a native dialog would fail below)
    posts = _posts(page)
    page.goto(ui_url(server, task_route(RUNNING)))
    expect(page.get_by_test_id("task-state")).to_have_text("RUNNING")
    button = _cancel_button(page)
    before = server.snapshot()

    button.click()
    dialog = _dialog(page)
    expect(dialog).to_be_visible()
    expect(dialog.locator("#confirm-q")).to_have_text(
        f'Cancel {RUNNING}? It becomes DISABLED with the reason "cancelled". Its worker is '
        "told to stop its running attempt. Re-enable undoes it."
    )
    expect(dialog).to_contain_text(CANCEL_OFFER)
    downstream = dialog.get_by_label(CANCEL_OFFER)
    expect(downstream).not_to_be_checked()
    dialog.get_by_role("button", name="Keep it", exact=True).click()
    expect(dialog).to_be_hidden()
    expect(dialog.get_by_label(CANCEL_OFFER)).to_have_count(0)  # (gone with the dialog)
    assert server.snapshot() == before
    assert posts == []

    since = stderr_size(server)
    button.click()
    dialog.get_by_label(CANCEL_OFFER).check()
    dialog.get_by_role("button", name="Cancel task", exact=True).click()
    expect(dialog).to_be_hidden()
    expect(page.get_by_test_id("task-state")).to_have_text("DISABLED")
    expect(page.get_by_test_id("task-error")).to_have_text("cancelled")
    expect(page.locator("#notice")).to_have_text("3 tasks cancelled.")
    expect(page.locator('[data-testid="attempt-row"]')).to_have_attribute(
        "data-outcome", "interrupted"
    )
    expect(page.get_by_role("button", name="Re-enable", exact=True)).to_be_visible()
    expect(_cancel_button(page)).to_have_count(0)
    assert [p.rsplit("/", 3)[-3:] for p in posts] == [["ui", "api", "cancel"]]

    for task_id in (RUNNING, *CHAIN):  # (committed: the UI's JSON reads the store)
        detail = server.ui_task(task_id)
        assert (detail["status"], detail["explanation"]) == ("DISABLED", "cancelled"), task_id
    states = server.states()
    assert (states[ALONE], states[DONE]) == ("PENDING", "DONE")  # (not downstream of it)
    ping = server.json("POST", "/api/v1/ping", {"worker_id": RUNNER})
    assert [s["task_id"] for s in ping["stop"]] == [RUNNING], ping

    [line] = wait_for(
        lambda: audit_lines(server, RUNNING, AUDIT, since), 15, "the audit line of the cancel"
    )
    logged = json.loads(line)
    assert logged["event"] == "ui action", logged
    assert (logged["tasks"], logged["changed"], logged["skipped"]) == ([RUNNING, *CHAIN], 3, 0)
    assert (logged["session"], logged["downstream"]) == ("open", True)
    assert page.js_errors == []


def test_cancel_without_downstream(page: Any, server: UiServer) -> None:
    """Left unticked, Cancel disables the PENDING task alone: its dependent stays PENDING."""
    page.goto(ui_url(server, task_route(ALONE)))
    expect(page.get_by_test_id("task-state")).to_have_text("PENDING")
    _cancel_button(page).click()
    dialog = _dialog(page)
    expect(dialog.locator("#confirm-q")).to_have_text(
        f'Cancel {ALONE}? It becomes DISABLED with the reason "cancelled". Re-enable undoes it.'
    )
    dialog.get_by_role("button", name="Cancel task", exact=True).click()
    expect(page.get_by_test_id("task-state")).to_have_text("DISABLED")
    expect(page.get_by_test_id("task-error")).to_have_text("cancelled")
    expect(page.locator("#notice")).to_have_text("1 task cancelled.")
    states = server.states()
    assert (states[ALONE], states[ALONE_DEPENDENT]) == ("DISABLED", "PENDING")
    assert page.js_errors == []


def test_the_dialog_keeps_its_own_buttons_for_other_actions(page: Any, server: UiServer) -> None:
    """After a Cancel dialog, another action's dialog reads Confirm / Cancel again, without
    the checkbox (the dialog is shared)."""
    page.goto(ui_url(server, task_route(ALONE_DEPENDENT)))
    _cancel_button(page).click()
    dialog = _dialog(page)
    dialog.get_by_role("button", name="Keep it", exact=True).click()
    expect(dialog).to_be_hidden()
    page.evaluate(
        """async () => {
          const dialog = await import("./dialog.js");
          dialog.confirm("Other question?");
        }"""
    )
    expect(dialog.locator("#confirm-q")).to_have_text("Other question?")
    expect(dialog.get_by_role("button")).to_have_text(["Cancel", "Confirm"])
    assert dialog.locator("input").count() == 0
    dialog.get_by_role("button", name="Cancel", exact=True).click()
    expect(dialog).to_be_hidden()
    assert server.states()[ALONE_DEPENDENT] == "PENDING"
    assert page.js_errors == []


def test_no_cancel_for_a_done_task(page: Any, server: UiServer) -> None:
    """A DONE task offers no Cancel (and shows no "Submitted by": nobody submitted it)."""
    page.goto(ui_url(server, task_route(DONE)))
    expect(page.get_by_test_id("task-state")).to_have_text("DONE")
    expect(page.locator('[data-action="cancel"]')).to_have_count(0)
    expect(page.get_by_test_id("task-submitted-by")).to_have_count(0)
    assert page.js_errors == []


def test_a_submitted_task_shows_who_submitted_it_as_text(page: Any, server: UiServer) -> None:
    """ "Submitted by" is what the server recorded, markup in the name shown as characters."""
    assert server.ui_task(SUBMITTED)["submitted_by"] == SUBMITTED_BY
    page.goto(ui_url(server, task_route(SUBMITTED)))
    expect(page.get_by_test_id("task-submitted-by")).to_have_text(SUBMITTED_BY)
    expect(page.locator(".fields dt", has_text="Submitted by")).to_have_count(1)
    assert page.locator(".detail b").count() == 0  # (never rendered as HTML)
    expect(_cancel_button(page)).to_be_visible()  # (PENDING: it may be cancelled)
    assert page.js_errors == []


def test_cancel_route_errors(server: UiServer) -> None:
    """An unknown task is 404, a body without a task id or with a downstream that is not a
    boolean 422, each a JSON error naming its field; nothing changes."""
    before = server.snapshot()
    for body, status, named, says in [
        ({"task_id": "No_such_task"}, 404, "task_id", "no task 'No_such_task'"),
        ({"downstream": True}, 422, "task_id", "task_id"),
        ({"task_id": ""}, 422, "task_id", "task_id"),
        ({"task_id": 7}, 422, "task_id", "task_id"),
        ({"task_id": ALONE_DEPENDENT, "downstream": "yes"}, 422, "downstream", "downstream"),
    ]:
        reply = server.request("POST", "/ui/api/cancel", body)
        assert reply.status == status, (body, reply)
        assert reply.json()["field"] == named, (body, reply.body)
        assert says in reply.error(), reply.body
    reply = server.request("POST", "/ui/api/cancel", "[1]")
    assert reply.status == 422 and "JSON object" in reply.error(), reply
    assert server.snapshot() == before


# --- in process: the hook, the session's name, a standby ---------------------------------------

TOKEN = "cancel-test-token"
HOST = "127.0.0.1"


def _service(hooks: ServerHooks | None = None) -> SchedulerService:
    """A service on a MemoryStore where worker w1 runs A-1, which B-1 needs."""
    service = SchedulerService(Scheduler(), MemoryStore(), hooks=hooks)
    core = service.core
    tasks = (TaskSpec(task_id="A-1", family="A"), TaskSpec(task_id="B-1", deps=("A-1",)))
    service.call(core.call, AddTasks(worker_id="w1", tasks=tasks))
    work = service.call(core.call, GetWork(worker_id="w1")).work
    assert work is not None and work.task_id == "A-1"
    return service


def _post(port: int, path: str, body: Any, cookie: str = "") -> Any:
    headers = {"Content-Type": "application/json", "Cookie": cookie or None}
    return http_request(port, "POST", path, json.dumps(body), headers)


def test_the_cancel_hook_names_the_session() -> None:
    """Behind a token: 401 without a session; signed in, an unknown task is a 404 that
    leaves the scheduler's state as it was (not reloaded from the store), and the cancel fires
    one ``ui_action`` event (action "cancel", the tasks, the session's name) after the moves it
    made."""
    recorder = RecordingPlugin()
    relay = LifecycleRelay()
    relay.register(recorder, recorder.name)
    service = _service(ServerHooks(relay))

    def app_for(port: int) -> Any:
        address = OwnAddress.of(HOST, port)
        return create_app(service, token=TOKEN, max_request_bytes=1 << 20, address=address)

    try:
        with serve_app(app_for) as port:
            body = {"task_id": "A-1", "downstream": True}
            assert _post(port, "/ui/api/cancel", body).status == 401
            assert service.core.peek("A-1").status == "RUNNING"  # type: ignore[union-attr]
            login = _post(port, "/ui/login", {"token": TOKEN})
            assert login.status == 200, login
            cookie = login.headers["set-cookie"].split(";")[0]
            record = service.core.peek("A-1")
            unknown = _post(port, "/ui/api/cancel", {"task_id": "No-such"}, cookie)
            assert unknown.status == 404 and unknown.json()["field"] == "task_id", unknown
            assert service.core.peek("A-1") is record  # (no roll-back: the state not reloaded)
            reply = _post(port, "/ui/api/cancel", body, cookie)
            assert reply.status == 200, reply
            assert reply.json() == {
                "changed": ["A-1", "B-1"],
                "skipped": [],
                "stopping": ["A-1"],
            }
        [event] = recorder.events("scheduler_ui_action")
        assert isinstance(event, SchedulerUiAction)
        assert (event.action, event.task_ids, event.changed, event.skipped) == (
            "cancel",
            ("A-1", "B-1"),
            2,
            0,
        )
        assert re.fullmatch(r"s-[0-9a-f]{12}", event.who), event.who
        hooks = recorder.hooks()
        moves = [
            e.task_id
            for e in recorder.events("scheduler_task_changed")
            if isinstance(e, SchedulerTaskChanged) and e.new_status == "DISABLED"
        ]
        assert sorted(moves) == ["A-1", "B-1"]
        last_move = max(i for i, h in enumerate(hooks) if h == "conveyor_scheduler_task_changed")
        assert hooks.index("conveyor_scheduler_ui_action") > last_move
    finally:
        service.store.close()


def test_a_standby_refuses_cancel(page: Any) -> None:
    """A standby answers 503 with the leader's URL and changes nothing; its page draws the
    Cancel button hidden."""
    leader = "http://leader.test:8082"
    service = _service()
    service.step_down(leader, "another server took the lease")

    def app_for(port: int) -> Any:
        address = OwnAddress.of(HOST, port)
        return create_app(service, token="", max_request_bytes=1 << 20, address=address)

    try:
        with serve_app(app_for) as port:
            reply = _post(port, "/ui/api/cancel", {"task_id": "A-1"})
            assert reply.status == 503, reply
            assert reply.json()["leader"] == leader
            assert service.reads.detail("A-1").status == "RUNNING"  # type: ignore[union-attr]
            page.goto(f"http://{HOST}:{port}/ui/#/task/A-1")
            expect(page.get_by_test_id("standby-banner")).to_be_visible()
            expect(page.get_by_test_id("task-state")).to_have_text("RUNNING")
            cancel = page.locator('[data-action="cancel"]')
            expect(cancel).to_have_count(1)
            expect(cancel).to_be_hidden()
            assert page.js_errors == []
    finally:
        service.store.close()
