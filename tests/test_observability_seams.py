"""The observability seams that metrics and tracing plugins build on (SPEC §10):
``conveyor_notification_sent`` from the notifier dispatch, and on the central server
``conveyor_scheduler_request`` per answered request, the hand-out wait and the ended attempt's
outcome on ``conveyor_scheduler_task_changed``, and the read-only server view given to
``conveyor_scheduler_routes``.

Workers are real ``conveyor.Worker`` objects with the notifiers of tests/thirdparty-plugin
(``jsonl``, which writes each message to a file, and ``refuses``, which fails every send). The
server is a real ``conveyor scheduler`` process with a ``[plugins] local`` module written to
``tmp_path`` that appends each event to a JSON-lines file and serves one route from the view;
it is driven with real HTTP calls, and the file is polled (a request's event is delivered after
its answer is sent).
"""

from __future__ import annotations

import importlib
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.events import NotificationSent
from conveyor.testing.processes import kill_marked, wait_for
from seam_support import SEAM_MARKER, SeamServer, json_file_lines, worker_config

pytestmark = pytest.mark.timeout(120)

# --- conveyor_notification_sent ------------------------------------------------------------------

TASKS = """
import conveyor


class Boom(conveyor.Task):
    i = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(f"/nonexistent/conveyor-seam-boom-{self.i}")

    def run(self):
        raise RuntimeError(f"boom {self.i}")
"""


class Sent:
    """Records each NotificationSent with the thread it was fired on."""

    name = "sent-recorder"

    def __init__(self) -> None:
        """Nothing heard yet."""
        self.heard: list[tuple[NotificationSent, int]] = []
        self._lock = threading.Lock()

    @conveyor.hookimpl
    def conveyor_notification_sent(self, event: NotificationSent) -> None:
        """Keep it."""
        with self._lock:
            self.heard.append((event, threading.get_ident()))

    def results(self) -> list[tuple[str, str, str]]:
        """(notifier, kind, result) of each, in order."""
        with self._lock:
            return [(e.notifier, e.kind, e.result) for e, _ in self.heard]


@pytest.fixture
def boom(task_module: Callable[..., str]) -> Any:
    """The failing task's module."""
    return importlib.import_module(task_module(TASKS))


def test_each_delivery_is_told_as_sent(boom: Any, tmp_path: Path) -> None:
    """With the jsonl notifier every delivery is one ``sent`` event, on the dispatch's sender
    thread, carrying the notifier, the kind and (for a task's notification) its fields."""
    messages = tmp_path / "messages.jsonl"
    config = worker_config(
        tmp_path,
        f'[notifiers]\nenabled = ["jsonl"]\non = ["failed", "run_finished"]\n'
        f'[notifiers.jsonl]\npath = "{messages}"\n',
    )
    sent = Sent()
    task = boom.Boom(i=1)
    with conveyor.Worker(config=config, plugins=[sent], worker_id="seam-w") as worker:
        assert worker.add(task)
        assert worker.run() is False
    wait_for(lambda: len(sent.results()) >= 2, 30, "two notification results")
    assert sent.results() == [("jsonl", "failed", "sent"), ("jsonl", "run_finished", "sent")]
    assert len(json_file_lines(messages)) == 2  # each "sent" is a message written
    failed, _finished = (event for event, _ in sent.heard)
    assert (failed.task_id, failed.family, failed.worker_id) == (task.task_id, "Boom", "seam-w")
    assert threading.get_ident() not in {thread for _, thread in sent.heard}  # the sender's


@pytest.mark.parametrize(
    ("retries", "expected"),
    [(0, ["failed", "dropped"]), (1, ["failed", "failed", "dropped"])],
)
def test_a_failing_notifier_is_told_failed_per_try_then_dropped(
    retries: int, expected: list[str], boom: Any, tmp_path: Path
) -> None:
    """A notifier whose every send fails: one ``failed`` per try (``max_retries`` + 1), then
    one ``dropped`` when the dispatch gives up."""
    config = worker_config(
        tmp_path,
        f'[notifiers]\nenabled = ["refuses"]\non = ["failed"]\n'
        f"[notifiers.refuses]\nmax_retries = {retries}\n",
    )
    sent = Sent()
    with conveyor.Worker(config=config, plugins=[sent]) as worker:
        assert worker.add(boom.Boom(i=2))
        assert worker.run() is False
    wait_for(lambda: len(sent.results()) >= len(expected), 30, "every try's result")
    assert sent.results() == [("refuses", "failed", result) for result in expected]


# --- the central server --------------------------------------------------------------------------

TOKEN = "seam-test-token"
W1 = "seam-worker-1"

SERVER_PLUGIN = """
import asyncio
import dataclasses
import json
import os

from starlette.responses import JSONResponse
from starlette.routing import Route

import conveyor

OUT = os.environ["SEAMTEST_OUT"]


def _write(record):
    with open(OUT, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\\n")


@conveyor.hookimpl
def conveyor_scheduler_request(event):
    _write({"hook": event.hook, **dataclasses.asdict(event)})


@conveyor.hookimpl
def conveyor_scheduler_task_changed(event):
    _write({"hook": event.hook, **dataclasses.asdict(event)})


@conveyor.hookimpl
def conveyor_scheduler_routes(server):
    def read():
        return {
            "view": type(server).__name__,
            "task_counts": dict(server.task_counts()),
            "live_workers": server.live_workers(),
            "is_leader": server.is_leader(),
            "role": server.role,
        }

    async def view(request):
        return JSONResponse(await asyncio.to_thread(read))  # (the store may block)

    return [Route("/seam/view", view)]
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SeamServer]:
    """A started server with the recording plugin; killed (and every process it started) at
    the end."""
    marker = uuid.uuid4().hex
    out = tmp_path / "events.jsonl"
    started = SeamServer(tmp_path, marker, {"seamrec": SERVER_PLUGIN}, TOKEN, SEAMTEST_OUT=str(out))
    try:
        started.start()
        yield started
    finally:
        kill_marked(SEAM_MARKER, marker)


def _events(server: SeamServer, hook: str) -> list[dict[str, Any]]:
    records = json_file_lines(server.directory / "events.jsonl")
    return [r for r in records if r["hook"] == f"conveyor_scheduler_{hook}"]


def _run_two_tasks(server: SeamServer) -> tuple[dict[str, Any], dict[str, Any]]:
    """Add A and B; A is handed out and done, then B is handed out and fails."""
    tasks = [{"task_id": t, "family": "Fam", "params": {"p": t}} for t in ("A", "B")]
    assert server.post("add_tasks", {"worker_id": W1, "tasks": tasks}).status == 200
    first = server.work(W1)
    done = {"worker_id": W1, "task_id": first["task_id"], "attempt": first["attempt"]}
    assert server.post("task_done", done).status == 200
    second = server.work(W1)
    failed = {"worker_id": W1, "task_id": second["task_id"], "attempt": second["attempt"]}
    assert server.post("task_failed", {**failed, "explanation": "it broke"}).status == 200
    return first, second


def test_each_answered_request_is_an_event_with_its_declared_route(server: SeamServer) -> None:
    """get_work answered 200, a request refused for want of the token ``(refused)`` 401, a
    path no route serves ``(unmatched)`` 404, a CORS preflight ``(preflight)`` 204, a UI route
    with a path parameter as declared, and a method outside the usual ones as ``OTHER``: each
    one event with method, code and a duration >= 0."""
    assert server.post("get_work", {"worker_id": W1}).status == 200
    refused = server.post("get_work", {"worker_id": W1}, Authorization=None)
    assert refused.status == 401
    assert server.request("GET", "/no/such/path").status == 404
    assert server.request("OPTIONS", "/api/v1/get_work").status == 204
    foreign = {"Origin": "https://evil.example"}
    assert server.request("OPTIONS", "/api/v1/get_work", headers=foreign).status == 403
    assert server.request("GET", "/ui/no-such-file.css").status == 404
    # (a method the HTTP parser knows, httptools refusing made-up ones with 400 before the
    # app, that is not one the events name: counted as OTHER)
    assert server.request("PROPFIND", "/api/v1/tasks").status == 405
    wanted = [
        ("/api/v1/get_work", "POST", 200),
        ("(refused)", "POST", 401),
        ("(unmatched)", "GET", 404),
        ("(preflight)", "OPTIONS", 204),
        ("(refused)", "OPTIONS", 403),
        ("/ui/{name:str}", "GET", 404),
        ("/api/v1/tasks", "OTHER", 405),
    ]

    def key(e: dict[str, Any]) -> tuple[str, str, int]:
        return e["route"], e["method"], e["code"]

    def seen() -> list[dict[str, Any]]:
        return [e for e in _events(server, "request") if key(e) in wanted]

    wait_for(lambda: len(seen()) >= len(wanted), 30, "the request events")
    events = seen()
    assert [key(e) for e in events] == wanted
    assert all(isinstance(e["duration"], float) and e["duration"] >= 0 for e in events)
    assert all(e["task_id"] == "" for e in events)


def test_task_changes_carry_the_wait_and_the_ended_attempts_outcome(server: SeamServer) -> None:
    """``waited`` (>= 0) only on hand-outs; ``outcome`` and ``duration`` only on a move out of
    RUNNING that ended an attempt (``succeeded``, ``failed``); "" and None elsewhere."""
    first, second = _run_two_tasks(server)
    a, b = first["task_id"], second["task_id"]

    def moves() -> list[dict[str, Any]]:
        return _events(server, "task_changed")

    wait_for(lambda: len(moves()) >= 4, 30, "four task changes")
    login = server.request("POST", "/ui/login", {"token": TOKEN})
    assert login.status == 200, login
    cookie = login.headers["set-cookie"].split(";")[0]
    retried = server.request("POST", "/ui/api/retry", {"task_ids": [b]}, {"Cookie": cookie})
    assert retried.status == 200 and retried.json()["changed"] == [b], retried
    wait_for(lambda: len(moves()) >= 5, 30, "the retry's task change")
    changed = {(e["task_id"], e["old_status"], e["new_status"]): e for e in moves()}
    assert len(changed) == len(moves()) == 5, moves()
    for task in (a, b):
        handed = changed[(task, "PENDING", "RUNNING")]
        assert handed["cause"] == "handed out"
        assert isinstance(handed["waited"], float) and handed["waited"] >= 0
        assert (handed["outcome"], handed["duration"]) == ("", None)
    for task, status, outcome in ((a, "DONE", "succeeded"), (b, "FAILED", "failed")):
        ended = changed[(task, "RUNNING", status)]
        assert ended["outcome"] == outcome and ended["waited"] is None
        assert isinstance(ended["duration"], float) and ended["duration"] >= 0
        assert ended["attempt"] == (first if task == a else second)["attempt"]
    again = changed[(b, "FAILED", "PENDING")]  # a move that ends no attempt
    assert again["cause"] == "retried"
    assert (again["waited"], again["outcome"], again["duration"]) == (None, "", None)


def test_a_plugin_route_answers_from_the_server_view(server: SeamServer) -> None:
    """The route of conveyor_scheduler_routes(server) reads the SchedulerView when called
    (tasks per state from the store, live workers, leadership, role) and needs the token."""
    _run_two_tasks(server)
    reply = server.request("GET", "/seam/view")
    assert reply.status == 200, reply
    view = reply.json()
    assert view["view"] == "SchedulerView"
    assert view["task_counts"] == {
        "PENDING": 0,
        "RUNNING": 0,
        "DONE": 1,
        "FAILED": 1,
        "DISABLED": 0,
        "UNKNOWN": 0,
    }
    assert view["live_workers"] == 1
    assert view["is_leader"] is True and view["role"] == "leader"
    anonymous = server.request("GET", "/seam/view", headers={"Authorization": None})
    assert anonymous.status == 401
    wrong = server.request("GET", "/seam/view", headers={"Authorization": "Bearer wrong"})
    assert wrong.status == 401

    def served() -> list[tuple[str, int]]:
        return [(e["route"], e["code"]) for e in _events(server, "request")]

    wait_for(lambda: ("/seam/view", 200) in served(), 30, "the plugin route's request event")
