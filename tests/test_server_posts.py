"""The worker-facing ``POST`` routes, answered in front of the Starlette app (``_Posts`` in
:mod:`conveyor.server.app`): their errors are the app's errors, a client that goes away half
way through its body is no fault of the server's, and everything else still reaches the app.

Each test serves ``create_app`` with the real uvicorn on a free loopback port
(:func:`~conveyor.testing.processes.serve_app`), over an in-memory state store; requests go
over real sockets. Nothing is mocked but the one scheduler call a test makes fail.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import structlog

import conveyor.server.app as app_module
from conveyor.protocol import GetWork
from conveyor.scheduler.policy import SchedulerCore
from conveyor.server.app import SchedulerService, create_app
from conveyor.server.guard import _OWN_HOSTS_KEPT, SECURITY_HEADERS, Guard
from conveyor.server.hosts import OwnAddress
from conveyor.server.stores import MemoryStore
from conveyor.testing.processes import http_request, serve_app, wait_for

pytestmark = pytest.mark.timeout(120)

LOOPBACK = "127.0.0.1"
JSON = {"Content-Type": "application/json"}


def new_service() -> SchedulerService:
    """A scheduler over an empty in-memory store."""
    store = MemoryStore()
    _, workers = store.load()
    core = SchedulerCore()
    core.restore([], workers)
    return SchedulerService(core, store)


@pytest.fixture
def service() -> Iterator[SchedulerService]:
    """A fresh scheduler; closed after the test."""
    made = new_service()
    try:
        yield made
    finally:
        made.close(0.0)


def serving(service: SchedulerService) -> Any:
    """The app of ``service`` served on a free loopback port (a context giving the port)."""

    def app_for(port: int) -> Any:
        address = OwnAddress.of(LOOPBACK, port)
        return create_app(service, token="", max_request_bytes=1 << 20, address=address)

    return serve_app(app_for)


def post(port: int, route: str, body: Any) -> Any:
    """``POST /api/v1/<route>`` with ``body`` as JSON; the reply."""
    return http_request(port, "POST", f"/api/v1/{route}", json.dumps(body), JSON)


def test_a_fault_in_a_worker_route_is_a_logged_json_500_and_the_server_goes_on(
    service: SchedulerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler call that raises what nobody expects after it changed something (it handed
    out the task): the caller gets the app's JSON 500 (no traceback, the security headers
    on), the fault is logged once with its traceback, what the call changed is undone (the
    task is handed to the next worker that asks), and the next calls are served."""
    real = service.core.call

    def call(request: Any) -> Any:
        answer = real(request)
        if isinstance(request, GetWork) and request.worker_id == "faulty":
            assert answer.work is not None and answer.work.task_id == "T1"
            raise RuntimeError("a fault in the scheduler")
        return answer

    monkeypatch.setattr(service.core, "call", call)
    with serving(service) as port, structlog.testing.capture_logs() as logs:
        added = post(port, "add_tasks", {"worker_id": "w", "tasks": [{"task_id": "T1"}]})
        assert added.status == 200, added
        failed = post(port, "get_work", {"worker_id": "faulty", "assistant": True})
        assert failed.status == 500, failed
        assert failed.json() == {
            "error": "internal error: the server failed to answer; it is logged"
        }
        assert b"a fault" not in failed.body and b"Traceback" not in failed.body
        for name, value in SECURITY_HEADERS:
            assert failed.headers[name.decode()] == value.decode()
        work = post(port, "get_work", {"worker_id": "w"})
        assert work.status == 200, work
        assert work.json()["work"]["task_id"] == "T1"
    faults = [e for e in logs if e["event"] == "request failed"]
    assert len(faults) == 1, logs
    assert faults[0]["path"] == "/api/v1/get_work" and faults[0].get("exc_info"), faults


def test_a_handler_that_fails_gets_the_500_of_the_last_handler(
    service: SchedulerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error whose own handler fails in turn (here the standby's answer to ``NotLeader``)
    is answered as Starlette answers it: the JSON 500 of the handler of ``Exception``, the
    handler's error logged once by the guard."""
    real = service.core.call

    def call(request: Any) -> Any:
        if isinstance(request, GetWork) and request.worker_id == "standby-caller":
            raise app_module.NotLeader("")
        return real(request)

    def broken_answer(exc: Exception, headers: Any = None) -> Any:
        raise RuntimeError("the standby's answer failed")

    monkeypatch.setattr(service.core, "call", call)
    monkeypatch.setattr(app_module, "not_leader_answer", broken_answer)
    with serving(service) as port, structlog.testing.capture_logs() as logs:
        failed = post(port, "get_work", {"worker_id": "standby-caller"})
        assert failed.status == 500, failed
        assert failed.json() == {
            "error": "internal error: the server failed to answer; it is logged"
        }
        assert post(port, "get_work", {"worker_id": "w"}).status == 200
    faults = [e for e in logs if e["event"] == "request failed"]
    assert len(faults) == 1 and faults[0]["path"] == "/api/v1/get_work", logs


@pytest.mark.parametrize("path", ["/api/v1/add_tasks", "/ui/login"])
def test_a_client_gone_before_its_body_ends_is_answered_nothing_and_logged_nothing(
    service: SchedulerService, path: str
) -> None:
    """A client that announces a body and hangs up half way through it, on a worker route
    (answered in front of Starlette) and on a route of the web UI (Starlette's): nothing of
    it is applied, no fault is logged (the client went away; the server did nothing wrong),
    and the server serves the next caller."""
    with serving(service) as port, structlog.testing.capture_logs() as logs:
        body = json.dumps({"worker_id": "w", "tasks": [{"task_id": "Half"}]}).encode()
        with socket.create_connection((LOOPBACK, port), timeout=15) as sock:
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            sock.sendall(head.encode() + body[: len(body) // 2])
            client_port = sock.getsockname()[1]
            # (the server, this process, has the connection once it has accepted it)
            wait_for(lambda: server_end_open(port, client_port), 30, "the server to accept")
        # (and has seen the hang-up once it has closed its end)
        wait_for(lambda: not server_end_open(port, client_port), 30, "the server to close")
        added = post(port, "add_tasks", {"worker_id": "w", "tasks": [{"task_id": "Whole"}]})
        assert added.status == 200, added
        listed = http_request(port, "GET", "/api/v1/tasks")
        assert [t["task_id"] for t in listed.json()["tasks"]] == ["Whole"]
    assert not [e for e in logs if e["log_level"] in ("error", "critical")], logs


def test_an_answer_is_compact_utf8_json(service: SchedulerService) -> None:
    """A worker-facing route answers the text Starlette's ``JSONResponse`` would: compact
    separators, non-ASCII characters as UTF-8 (not escaped), ``application/json``."""
    with serving(service) as port:
        task = {"task_id": "Tâche_é", "family": "Tâche", "params": {"ville": "Zürich"}}
        assert post(port, "add_tasks", {"worker_id": "w", "tasks": [task]}).status == 200
        reply = post(port, "get_work", {"worker_id": "w"})
        assert reply.status == 200, reply
        assert reply.headers["content-type"] == "application/json"
        assert int(reply.headers["content-length"]) == len(reply.body)
        answer = reply.json()
        assert answer["work"]["task_id"] == "Tâche_é"
        expected = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
        assert reply.body == expected
        assert "Zürich".encode() in reply.body


def server_end_open(port: int, client_port: int) -> bool:
    """Whether this process (the server's, in these tests) still has its end of the
    connection from ``client_port`` to ``port`` open."""
    return any(
        c.laddr and c.raddr and c.laddr.port == port and c.raddr.port == client_port
        for c in psutil.Process().net_connections(kind="tcp")
    )


def test_other_routes_and_methods_still_reach_the_app(service: SchedulerService) -> None:
    """What is not a ``POST`` to a worker-facing route is the app's: ``GET`` on one is its 405
    naming ``POST``, an unknown ``/api/v1/`` route its JSON 404, ``/health`` its answer."""
    with serving(service) as port:
        wrong = http_request(port, "GET", "/api/v1/get_work")
        assert wrong.status == 405 and wrong.headers["allow"] == "POST", wrong
        assert wrong.json()["error"]
        unknown = post(port, "no_such_route", {})
        assert unknown.status == 404 and unknown.json()["error"], unknown
        health = http_request(port, "GET", "/health")
        assert health.status == 200 and health.json()["status"] == "ok", health
        assert health.json()["api_requests"] == 2, health  # (the two /api/ requests above)


def test_the_guard_remembers_a_bounded_number_of_own_host_forms() -> None:
    """The guard parses a ``Host`` header once it has accepted it, and keeps at most a
    bounded number of them (a server's names with any port are its own: a caller could send
    many): past the bound it starts again, every own form is still served and every foreign
    one still refused 421, whatever came before."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guard = Guard(app, token="", max_request_bytes=1024, address=OwnAddress.of(LOOPBACK, 8082))

    async def status(host: bytes) -> int:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": "/health", "headers": [(b"host", host)]}
        await guard(scope, receive, send)
        return int(sent[0]["status"])

    async def main() -> None:
        for port in range(1, 3 * _OWN_HOSTS_KEPT):
            assert await status(f"{LOOPBACK}:{port}".encode()) == 204, port
            assert await status(b"evil.example") == 421
            assert await status(f"evil.example:{port}".encode()) == 421
            assert len(guard._own_hosts) <= _OWN_HOSTS_KEPT
        assert await status(b"localhost:8082") == 204

    asyncio.run(main())
