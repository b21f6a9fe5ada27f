"""The central server's own plugins (SPEC §10, issue 21 item 5): observer hooks fed by the
scheduling policy and delivered only once committed, and routes mounted behind the guard.

The end-to-end tests run a real ``conveyor scheduler`` with ``[plugins] local`` modules written
to ``tmp_path``: one records every event to a JSON-lines file and contributes two routes, one
raises from every hook. They are driven with real HTTP calls; each event is delivered before
the request that caused it is answered, so the file is read right after the answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from conveyor.events import SchedulerTaskChanged
from conveyor.plugins import LifecycleRelay
from conveyor.protocol import TaskSpec
from conveyor.scheduler.policy import SchedulerCore
from conveyor.server.app import SchedulerService
from conveyor.server.hooks import ServerHooks
from conveyor.server.stores import MemoryStore, Unstored
from conveyor.testing import RecordingPlugin
from conveyor.testing.processes import (
    Reply,
    SchedulerProcess,
    child_env,
    free_port,
    kill_marked,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

MARKER_VARIABLE = "SERVERHOOKSTEST_MARKER"
TOKEN = "hooks-test-token"
W1 = "hooks-worker-1"

RECORDER = """
import dataclasses
import json
import os

from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

import conveyor

OUT = os.environ["SERVERHOOKSTEST_OUT"]


def _write(event):
    record = {"hook": event.hook, **dataclasses.asdict(event)}
    with open(OUT, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\\n")


@conveyor.hookimpl
def conveyor_scheduler_task_changed(event):
    _write(event)


@conveyor.hookimpl
def conveyor_configure(config):
    with open(OUT, "a", encoding="utf-8") as out:
        out.write(json.dumps({"hook": "conveyor_configure", "port": config.server.port}) + "\\n")


@conveyor.hookimpl
def conveyor_unconfigure(flush_timeout):
    with open(OUT, "a", encoding="utf-8") as out:
        out.write(json.dumps({"hook": "conveyor_unconfigure", "flush": flush_timeout}) + "\\n")


@conveyor.hookimpl
def conveyor_scheduler_worker_seen(event):
    _write(event)


@conveyor.hookimpl
def conveyor_scheduler_worker_lost(event):
    _write(event)


@conveyor.hookimpl
def conveyor_scheduler_report_refused(event):
    _write(event)


@conveyor.hookimpl
def conveyor_scheduler_ui_action(event):
    _write(event)


async def ping(request):
    return JSONResponse({"pong": True})


async def hello(request):
    return PlainTextResponse("hello from a plugin")


@conveyor.hookimpl
def conveyor_scheduler_routes():
    return [Route("/api/v1/plugin-ping", ping), Route("/plugin/hello", hello)]
"""

BOOM = """
import conveyor


@conveyor.hookimpl
def conveyor_scheduler_task_changed(event):
    raise RuntimeError("boom from a server plugin")


@conveyor.hookimpl
def conveyor_scheduler_worker_seen(event):
    raise RuntimeError("boom from a server plugin")
"""

CLASH = """
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import conveyor


async def mine(request):
    return PlainTextResponse("mine")


@conveyor.hookimpl
def conveyor_scheduler_routes():
    return [Route("/api/v1/get_work", mine, methods=["POST"])]
"""


class Server(SchedulerProcess):
    """A ``conveyor scheduler`` with the plugin modules and the calls these tests make."""

    token = TOKEN

    def __init__(self, directory: Path, marker: str, plugins: list[str], extra: str = "") -> None:
        """Write the config (``[plugins] local = plugins``, a token, ``extra`` TOML)."""
        (directory / "hookrec.py").write_text(RECORDER, encoding="utf-8")
        (directory / "hookboom.py").write_text(BOOM, encoding="utf-8")
        (directory / "hookclash.py").write_text(CLASH, encoding="utf-8")
        self.events_file = directory / "events.jsonl"
        config = directory / "server.toml"
        config.write_text(
            f'[server]\ntoken = "{TOKEN}"\n\n[plugins]\nlocal = {json.dumps(plugins)}\n{extra}',
            encoding="utf-8",
        )
        env = child_env(
            directory, MARKER_VARIABLE, marker, SERVERHOOKSTEST_OUT=str(self.events_file)
        )
        env["CONVEYOR_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        super().__init__(directory, config, env)

    def post(self, route: str, body: Any) -> Reply:
        """POST ``body`` to ``/api/v1/<route>``."""
        return self.request("POST", f"/api/v1/{route}", body)

    def events(self, lifecycle: bool = False) -> list[dict[str, Any]]:
        """Every event the recording plugin wrote, in order (the lifecycle calls too, if
        ``lifecycle``)."""
        if not self.events_file.exists():
            return []
        lines = self.events_file.read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        return [r for r in records if lifecycle or r["hook"] not in _LIFECYCLE]

    def work(self, worker: str) -> dict[str, Any]:
        """One ``get_work`` for ``worker``: the work handed out."""
        reply = self.post("get_work", {"worker_id": worker})
        assert reply.status == 200, reply
        work: dict[str, Any] = reply.json()["work"]
        return work


@pytest.fixture
def marker() -> Any:
    """A marker for this test's server processes; every one left is killed at the end."""
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER_VARIABLE, value)


_LIFECYCLE = ("conveyor_configure", "conveyor_unconfigure")


def _moves(events: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """The task-changed events as (task id, old, new, cause)."""
    return [
        (e["task_id"], e["old_status"], e["new_status"], e["cause"])
        for e in events
        if e["hook"] == "conveyor_scheduler_task_changed"
    ]


def test_server_plugin_sees_committed_changes_in_order(tmp_path: Path, marker: str):
    """A [plugins] local plugin of the server is told of a new worker, each status move (with
    family, worker and attempt), a refused stale report and a UI action, in order."""
    server = Server(tmp_path, marker, ["hookrec"])
    server.start()
    tasks = [{"task_id": t, "family": "Fam", "params": {"p": t}} for t in ("A", "B")]
    assert server.post("add_tasks", {"worker_id": W1, "tasks": tasks}).status == 200
    seen = server.events(lifecycle=True)
    assert [e["hook"] for e in seen] == ["conveyor_configure", "conveyor_scheduler_worker_seen"]
    assert seen[0]["port"] == server.port  # (the server's own configuration)
    seen = seen[1:]
    assert seen[0]["worker_id"] == W1 and seen[0]["returned"] is False

    first = server.work(W1)
    done = {"worker_id": W1, "task_id": first["task_id"], "attempt": first["attempt"]}
    assert server.post("task_done", done).status == 200
    second = server.work(W1)
    stale = {"worker_id": W1, "task_id": second["task_id"], "attempt": second["attempt"] + 1}
    assert server.post("task_done", stale).status == 409
    failed = {"worker_id": W1, "task_id": second["task_id"], "attempt": second["attempt"]}
    assert server.post("task_failed", {**failed, "explanation": "it broke"}).status == 200

    login = server.request("POST", "/ui/login", {"token": TOKEN})
    assert login.status == 200, login
    cookie = login.headers["set-cookie"].split(";")[0]
    retried = server.request(
        "POST", "/ui/api/retry", {"task_ids": [second["task_id"]]}, {"Cookie": cookie}
    )
    assert retried.status == 200, retried
    assert retried.json()["changed"] == [second["task_id"]]

    events = server.events()
    a, b = first["task_id"], second["task_id"]
    assert _moves(events) == [
        (a, "PENDING", "RUNNING", "handed out"),
        (a, "RUNNING", "DONE", "done"),
        (b, "PENDING", "RUNNING", "handed out"),
        (b, "RUNNING", "FAILED", "failed"),
        (b, "FAILED", "PENDING", "retried"),
    ]
    changed = [e for e in events if e["hook"] == "conveyor_scheduler_task_changed"]
    assert {e["family"] for e in changed} == {"Fam"}
    assert [e["worker_id"] for e in changed[:4]] == [W1] * 4
    assert changed[0]["attempt"] == first["attempt"] and changed[1]["attempt"] == first["attempt"]
    assert changed[0]["params"] == {"p": a}
    hooks = [e["hook"].removeprefix("conveyor_scheduler_") for e in events]
    assert hooks == [
        "worker_seen",
        "task_changed",
        "task_changed",
        "task_changed",
        "report_refused",
        "task_changed",
        "task_changed",
        "ui_action",
    ]
    refused = next(e for e in events if e["hook"] == "conveyor_scheduler_report_refused")
    assert refused["task_id"] == b and refused["worker_id"] == W1
    assert refused["route"] == "task_done" and refused["attempt"] == second["attempt"] + 1
    assert "was refused" in refused["reason"]
    action = events[-1]
    assert action["action"] == "retry" and action["task_ids"] == [b]
    assert action["changed"] == 1 and action["skipped"] == 0 and action["who"]


def test_plugin_routes_are_served_behind_the_guard(tmp_path: Path, marker: str):
    """A plugin's routes need the token (401 without), whatever their path, and get the
    guard's security headers and Host check."""
    server = Server(tmp_path, marker, ["hookrec"])
    server.start()
    ping = server.request("GET", "/api/v1/plugin-ping")
    assert ping.status == 200 and ping.json() == {"pong": True}
    assert ping.headers.get("x-content-type-options") == "nosniff"
    refused = server.request("GET", "/api/v1/plugin-ping", headers={"Authorization": None})
    assert refused.status == 401
    hello = server.request("GET", "/plugin/hello")
    assert hello.status == 200 and hello.body == b"hello from a plugin"
    anonymous = server.request("GET", "/plugin/hello", headers={"Authorization": None})
    assert anonymous.status == 401
    assert hello.headers.get("x-content-type-options") == "nosniff"
    assert "content-security-policy" in hello.headers
    foreign = server.request("GET", "/plugin/hello", headers={"Host": "evil.example"})
    assert foreign.status in (400, 403, 421)


def test_a_failing_server_plugin_breaks_no_request(tmp_path: Path, marker: str):
    """A plugin whose hooks raise is logged with its name; requests are answered and the other
    plugin still receives every event."""
    server = Server(tmp_path, marker, ["hookboom", "hookrec"])
    server.start()
    tasks = [{"task_id": "A", "family": "Fam", "params": {}}]
    assert server.post("add_tasks", {"worker_id": W1, "tasks": tasks}).status == 200
    work = server.work(W1)
    done = {"worker_id": W1, "task_id": "A", "attempt": work["attempt"]}
    assert server.post("task_done", done).status == 200
    assert _moves(server.events()) == [
        ("A", "PENDING", "RUNNING", "handed out"),
        ("A", "RUNNING", "DONE", "done"),
    ]
    output = server.output()
    assert "hook implementation raised" in output and "hookboom" in output
    assert "boom from a server plugin" in output


def test_a_silent_worker_is_lost_and_its_return_seen(tmp_path: Path, marker: str):
    """A worker silent for worker_disconnect_delay is reported lost (with its running task),
    then its task's failure, and it is reported seen again (returned) when it calls."""
    extra = "\n[scheduler]\nworker_disconnect_delay = 1\n"
    server = Server(tmp_path, marker, ["hookrec"], extra)
    server.start()
    tasks = [{"task_id": "A", "family": "Fam", "params": {}}]
    assert server.post("add_tasks", {"worker_id": W1, "tasks": tasks}).status == 200
    server.work(W1)

    def lost() -> bool:
        return any(e["hook"] == "conveyor_scheduler_worker_lost" for e in server.events())

    wait_for(lost, 30, "the silent worker to be declared gone")
    assert server.post("ping", {"worker_id": W1}).status == 200
    events = server.events()
    hooks = [e["hook"].removeprefix("conveyor_scheduler_") for e in events]
    assert hooks == ["worker_seen", "task_changed", "worker_lost", "task_changed", "worker_seen"]
    assert events[2]["worker_id"] == W1 and events[2]["running"] == ["A"]
    assert _moves(events)[-1] == ("A", "RUNNING", "FAILED", "worker gone")
    assert events[-1]["worker_id"] == W1 and events[-1]["returned"] is True


def test_a_plugin_route_that_collides_stops_the_start(tmp_path: Path, marker: str):
    """A plugin route on a built-in path stops ``conveyor scheduler`` with exit 2 and one
    error line naming the plugin."""
    server = Server(tmp_path, marker, ["hookclash"])
    args = ["--port", str(free_port()), "--state-path", str(server.state)]
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor", "scheduler", *args, "--config", str(server.config)],
        cwd=tmp_path,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("conveyor: error:")
    assert "'hookclash'" in lines[0] and "/api/v1/get_work" in lines[0]


class FailingStore(MemoryStore):
    """A MemoryStore whose ``save`` raises while ``failing`` is set."""

    failing = False

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Refuse the write (OSError) while failing; store it otherwise."""
        if self.failing:
            raise OSError(28, "No space left on device")
        super().save(*args, **kwargs)


def test_a_rolled_back_change_is_never_delivered():
    """A move whose commit fails (and is rolled back) fires no task_changed; once the store
    takes writes again, the move made then is delivered."""
    recorder = RecordingPlugin()
    relay = LifecycleRelay()
    relay.register(recorder, recorder.name)
    store = FailingStore()
    service = SchedulerService(SchedulerCore(), store, hooks=ServerHooks(relay))
    core = service.core
    service.call(core.add_tasks, W1, [TaskSpec(task_id="A", family="Fam")])
    assert recorder.hooks() == ["conveyor_scheduler_worker_seen"]
    store.failing = True
    with pytest.raises(Unstored):
        service.call(core.get_work, W1)
    assert recorder.events("scheduler_task_changed") == []
    store.failing = False
    work = service.call(core.get_work, W1)
    assert work is not None
    changed = recorder.events("scheduler_task_changed")
    assert len(changed) == 1 and isinstance(changed[0], SchedulerTaskChanged)
    assert (changed[0].old_status, changed[0].new_status) == ("PENDING", "RUNNING")
    assert changed[0].attempt == work.attempt


def test_no_observer_is_installed_without_a_plugin():
    """With no server plugin, the policy has no observers: no event is ever built."""
    service = SchedulerService(SchedulerCore(), MemoryStore())
    assert service.core.on_move is None and service.core.on_worker is None
    assert service.hooks.routes([]) == []


@pytest.mark.parametrize("path", ["/health", "/ui/anything"])
def test_check_routes_refuses_built_in_paths(path: str):
    """A plugin route whose path a built-in route serves is refused, naming the plugin."""
    from starlette.routing import Route

    from conveyor.errors import PluginError
    from conveyor.server.hooks import check_routes

    builtin = [Route("/health", lambda r: None), Route("/ui/{name:str}", lambda r: None)]
    with pytest.raises(PluginError, match="'mine'"):
        check_routes("mine", Route(path, lambda r: None), builtin, {})


def test_a_server_plugin_is_unconfigured_when_the_server_stops(tmp_path: Path, marker: str):
    """``conveyor_configure`` comes first, once the state is loaded; a SIGTERM'd server
    calls ``conveyor_unconfigure`` with ``[notifiers] flush_timeout`` as it shuts down."""
    server = Server(tmp_path, marker, ["hookrec"], extra="\n[notifiers]\nflush_timeout = 3\n")
    server.start()
    assert [e["hook"] for e in server.events(lifecycle=True)] == ["conveyor_configure"]
    assert server.proc is not None
    server.proc.terminate()
    server.proc.wait(timeout=60)  # (uvicorn re-raises the SIGTERM once it has shut down)
    hooks = [(e["hook"], e.get("flush")) for e in server.events(lifecycle=True)]
    assert hooks == [("conveyor_configure", None), ("conveyor_unconfigure", 3.0)]
    assert not (tmp_path / "state.db.lock").exists()  # the store was closed too


LEAVER = """
import conveyor


@conveyor.hookimpl
def conveyor_configure(config):
    return False


@conveyor.hookimpl
def conveyor_scheduler_task_changed(event):
    raise AssertionError("a plugin that left is told nothing")


@conveyor.hookimpl
def conveyor_scheduler_worker_seen(event):
    raise AssertionError("a plugin that left is told nothing")
"""


def test_a_server_plugin_that_leaves_is_not_observed_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """``conveyor scheduler``'s service, built with a ``[plugins] local`` plugin whose
    ``conveyor_configure`` returns False: the plugin is unregistered and the policy is left
    without observers, so no server event is built for it."""
    from conveyor.config import load_config
    from conveyor.server.main import build_service

    (tmp_path / "hookleaver.py").write_text(LEAVER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CONVEYOR_DISABLE_PLUGIN_AUTOLOAD", "1")
    config = tmp_path / "server.toml"
    config.write_text(
        f'[server]\nstate_path = "{tmp_path / "state.db"}"\n\n[plugins]\nlocal = ["hookleaver"]\n',
        encoding="utf-8",
    )
    service = build_service(load_config(config))
    try:
        assert "hookleaver" not in service.hooks.relay.names()
        assert service.core.on_move is None and service.core.on_worker is None
    finally:
        service.close(0.0)
