"""The central scheduler's HTTP API (SPEC §6, §7), tested against the real server process.

Every test talks to ``python -m conveyor scheduler`` started as a subprocess on a free loopback
port, with ``[server] token`` set, through the standard library's ``http.client`` (or a raw
socket where a request must be malformed on purpose). The server's stdout and stderr go to
files, so that a test can check what it printed; every process a test starts is killed, with
its whole tree, when the test (or the module, for the shared server) ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import re
import signal
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.protocol import ROUTES
from conveyor.testing.processes import (
    Reply,
    SchedulerProcess,
    free_port,
    http_request,
    kill_marked,
)
from conveyor.testing.processes import child_env as processes_env

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the run_cli fixture (conftest.py)
WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

LOOPBACK = "127.0.0.1"
TOKEN = "s3cret-token"
MARKER_VARIABLE = "SERVERTEST_MARKER"  # not CONVEYOR_*: those are configuration overrides
TASK_KEYS = {
    "task_id",
    "family",
    "params",
    "status",
    "worker",
    "priority",
    "dependencies",
    "status_message",
    "progress",
    "tracking_url",
    "explanation",  # an addition to SPEC §7's keys: the last failure's explanation
    "waiting",  # another: why a ready task no live worker can take waits
    "submitted_by",  # another: who submitted it (conveyor submit), "" if nobody did
}
POST_ROUTES = sorted(ROUTES)
GET_ROUTES = ["tasks", "workers"]
BAD_AUTHORIZATIONS: list[str | None] = [
    None,
    "Bearer wrong-token",
    f"Bearer {TOKEN}x",
    f"Bearer {TOKEN[:-1]}",
    f"Bearer {TOKEN.upper()}",
    f"Basic {TOKEN}",
    TOKEN,
    "Bearer",
    "Bearer ",
]

TASKS = """
import os

import conveyor


class Leaf(conveyor.Task):
    \"\"\"Writes its output and leaves a status message.\"\"\"

    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, f"leaf-{self.n}.out"))

    def run(self):
        self.set_status_message(f"leaf {self.n} ran")
        with self.output().open("w") as f:
            f.write("ok")


class Root(conveyor.Task):
    \"\"\"Needs three leaves.\"\"\"

    root = conveyor.Parameter()

    def requires(self):
        return [Leaf(root=self.root, n=n) for n in range(3)]

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "root.out"))

    def run(self):
        with self.output().open("w") as f:
            f.write("ok")
"""


# --- helpers -------------------------------------------------------------------------------------


def child_env(directory: Path, marker: str, **extra: str) -> dict[str, str]:
    """Our environment without CONVEYOR_* variables, ``directory`` on PYTHONPATH, the marker."""
    return processes_env(directory, MARKER_VARIABLE, marker, **extra)


def write_config(path: Path, text: str) -> Path:
    """Write a worker.toml and return its path."""
    path.write_text(text, encoding="utf-8")
    return path


class Server(SchedulerProcess):
    """One ``conveyor scheduler`` subprocess on a loopback port; restartable on the same state."""

    def __init__(self, directory: Path, config: Path, marker: str, port: int = 0) -> None:
        """Describe the server; nothing is started yet."""
        super().__init__(directory, config, child_env(directory, marker), port)
        self.marker = marker

    def request(
        self,
        method: str,
        path: str,
        body: bytes | str | None = None,
        *,
        token: str | None = TOKEN,
        authorization: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """One request on a fresh connection; ``authorization`` overrides the bearer token."""
        sent = {"Content-Type": "application/json", **(headers or {})}
        if authorization is not None:
            sent["Authorization"] = authorization
        elif token is not None:
            sent["Authorization"] = f"Bearer {token}"
        return http_request(self.port, method, path, body, sent, host=LOOPBACK)

    def post(self, route: str, body: Any) -> Reply:
        """POST ``body`` as JSON to ``/api/v1/<route>`` with the token."""
        return self.request("POST", f"/api/v1/{route}", json.dumps(body))

    def tasks(self) -> list[dict[str, Any]]:
        """The server's task list."""
        reply = self.request("GET", "/api/v1/tasks")
        assert reply.status == 200, reply
        return list(reply.json()["tasks"])


def raw_exchange(port: int, head: bytes, timeout: float = 5) -> bytes:
    """Send raw request bytes (no body follows) and return the start of the answer."""
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
        sock.sendall(head)
        chunks = b""
        while b"\r\n\r\n" not in chunks:
            data = sock.recv(65536)
            if not data:
                break
            chunks += data
        return chunks


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run in tmp_path with a per-test marker; kill every process that carries it afterwards."""
    monkeypatch.chdir(tmp_path)
    marker = uuid.uuid4().hex
    monkeypatch.setenv(MARKER_VARIABLE, marker)  # run_cli's children carry it too
    yield marker
    kill_marked(MARKER_VARIABLE, marker)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server shared by the module's request-level tests (token ``s3cret-token``)."""
    directory = tmp_path_factory.mktemp("api")
    config = write_config(directory / "worker.toml", f'[server]\ntoken = "{TOKEN}"\n')
    server = Server(directory, config, marker=uuid.uuid4().hex)
    try:
        server.start()
        yield server
    finally:
        server.kill()
        kill_marked(MARKER_VARIABLE, server.marker)


@pytest.fixture
def fresh(tmp_path: Path, _isolated: str) -> Iterator[Server]:
    """A server of this test alone, its token read from a token file (whitespace around it)."""
    (tmp_path / "token.txt").write_text(f"  {TOKEN}\n\n", encoding="utf-8")
    config = write_config(tmp_path / "server.toml", '[server]\ntoken_file = "token.txt"\n')
    server = Server(tmp_path, config, marker=_isolated)
    try:
        server.start()
        yield server
    finally:
        server.kill()


@pytest.fixture
def mod(task_module: WriteModule) -> str:
    """The name of a task module (Root needing three Leaf tasks) importable from tmp_path."""
    return task_module(TASKS)


def run_root(run_cli: RunCli, server: Server, mod: str, tmp_path: Path) -> Any:
    """``conveyor run <mod>.Root`` against ``server``, the token in the environment."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return run_cli(
        "run",
        f"{mod}.Root",
        "--root",
        str(out),
        "--scheduler-url",
        server.url,
        cwd=tmp_path,
        env={"CONVEYOR_SCHEDULER__TOKEN": TOKEN},
        timeout=60,
    )


# --- no authentication needed --------------------------------------------------------------------


def test_health_and_openapi_answer_without_a_token(api: Server) -> None:
    """GET /health and GET /openapi.json answer 200 with JSON and need no token; no answer
    names the server's software (no ``server`` header)."""
    health = api.request("GET", "/health", token=None)
    assert health.status == 200
    assert health.json()["status"] == "ok"
    assert "server" not in health.headers and "date" in health.headers, health.headers
    document = api.request("GET", "/openapi.json", token=None)
    assert document.status == 200
    paths = document.json()["paths"]
    for route in POST_ROUTES:
        assert "post" in paths[f"/api/v1/{route}"], route
    for route in GET_ROUTES:
        assert "get" in paths[f"/api/v1/{route}"], route


# --- authentication ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "route"),
    [("POST", r) for r in POST_ROUTES] + [("GET", r) for r in GET_ROUTES],
)
def test_every_api_route_refuses_a_missing_or_wrong_token(
    api: Server, method: str, route: str
) -> None:
    """Every /api/v1 route answers 401 (JSON, WWW-Authenticate) to a bad token, before the body."""
    for authorization in BAD_AUTHORIZATIONS:
        reply = api.request(
            method,
            f"/api/v1/{route}",
            b'{"this is": not json',
            token=None,
            authorization=authorization,
        )
        assert reply.status == 401, (authorization, reply)
        assert "error" in reply.json()
        assert reply.headers.get("www-authenticate", "").lower().startswith("bearer")


def test_a_missing_token_is_refused_before_an_oversized_body_is_looked_at(api: Server) -> None:
    """Without a token, a request announcing a 2 MiB body gets 401, not 413."""
    head = (
        b"POST /api/v1/ping HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 2097152\r\n\r\n"
    )
    answer = raw_exchange(api.port, head)
    assert answer.startswith(b"HTTP/1.1 401"), answer


def test_the_right_token_is_accepted(api: Server) -> None:
    """With the token, a valid ping is answered 200 (so the 401s above are about the token)."""
    reply = api.post("ping", {"worker_id": "auth-check"})
    assert reply.status == 200, reply
    workers = api.request("GET", "/api/v1/workers").json()["workers"]
    assert "auth-check" in [w["worker_id"] for w in workers]


# --- methods ------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", POST_ROUTES)
def test_state_changing_routes_accept_only_post(api: Server, route: str) -> None:
    """GET, PUT, PATCH and DELETE on a state-changing route answer 405, even with the token."""
    for method in ("GET", "PUT", "PATCH", "DELETE"):
        body = None if method in ("GET", "DELETE") else b'{"worker_id": "w"}'
        reply = api.request(method, f"/api/v1/{route}", body)
        assert reply.status == 405, (method, reply)
        assert reply.headers.get("allow") == "POST", (method, reply.headers)


@pytest.mark.parametrize("route", GET_ROUTES)
def test_read_only_routes_refuse_post(api: Server, route: str) -> None:
    """POST on the task and worker lists answers 405, with an Allow header naming GET."""
    reply = api.request("POST", f"/api/v1/{route}", b"{}")
    assert reply.status == 405
    assert "GET" in reply.headers.get("allow", ""), reply.headers


# --- request size -------------------------------------------------------------------------------


def test_a_2_mib_body_gets_413(api: Server) -> None:
    """A 2 MiB body (over the 1 MiB default) sent with its Content-Length gets 413 JSON."""
    big = json.dumps({"worker_id": "x" * (2 * 1024 * 1024)}).encode()
    conn = http.client.HTTPConnection(LOOPBACK, api.port, timeout=15)
    try:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        # the server may answer and close before the whole body is sent
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.request("POST", "/api/v1/ping", body=big, headers=headers)
        response = conn.getresponse()
        status, body = response.status, response.read()
    finally:
        conn.close()
    assert status == 413, (status, body[:200])
    assert "error" in json.loads(body)


def test_an_announced_2_mib_body_gets_413_without_being_sent(api: Server) -> None:
    """A Content-Length announcing 2 MiB gets 413 at once, before any byte of the body is sent."""
    head = (
        b"POST /api/v1/ping HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {TOKEN}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 2097152\r\n\r\n"
    )
    answer = raw_exchange(api.port, head)
    assert answer.startswith(b"HTTP/1.1 413"), answer


def test_a_2_mib_chunked_body_gets_413(api: Server) -> None:
    """A 2 MiB body streamed in chunks (no Content-Length) gets 413 JSON, not a 500."""

    def chunks() -> Iterator[bytes]:
        yield b'{"worker_id": "'
        for _ in range(32):
            yield b"x" * 65536
        yield b'"}'

    conn = http.client.HTTPConnection(LOOPBACK, api.port, timeout=15)
    try:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        # the server may answer and close before the whole body is sent
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.request(
                "POST", "/api/v1/ping", body=chunks(), headers=headers, encode_chunked=True
            )
        response = conn.getresponse()
        status, body = response.status, response.read()
    finally:
        conn.close()
    assert status == 413, (status, body[:200])
    assert "error" in json.loads(body)


# --- bad bodies ---------------------------------------------------------------------------------

BAD_JSON = [
    b"",
    b"{",
    b'{"worker_id": ',
    b"{'worker_id': 'single quotes'}",
    b'{"worker_id": "w",}',
    b"\xff\xfe\x00garbage",
    b"nul\x00l",
]


@pytest.mark.parametrize("route", POST_ROUTES)
def test_malformed_json_gets_400_with_a_json_error(api: Server, route: str) -> None:
    """A body that is not JSON gets 400 with a JSON error, on every route."""
    for raw in BAD_JSON:
        reply = api.request("POST", f"/api/v1/{route}", raw)
        assert reply.status == 400, (raw, reply)
        assert isinstance(reply.json()["error"], str)


def test_deeply_nested_json_gets_a_4xx_not_a_500(api: Server) -> None:
    """JSON nested 200,000 levels deep (under the size limit) gets a 4xx JSON error."""
    reply = api.request("POST", "/api/v1/ping", b"[" * 200_000 + b"]" * 200_000)
    assert 400 <= reply.status < 500, reply
    assert "error" in reply.json()


# route, body, field the error must name
FIELD_ERRORS: list[tuple[str, Any, str]] = [
    ("ping", [], "body"),
    ("ping", "a string", "body"),
    ("ping", None, "body"),
    ("ping", {}, "worker_id"),
    ("ping", {"worker_id": 5}, "worker_id"),
    ("ping", {"worker_id": None}, "worker_id"),
    ("ping", {"worker_id": "w", "bogus": 1}, "bogus"),
    ("get_work", {"worker_id": "w", "assistant": "yes"}, "assistant"),
    ("add_tasks", {"worker_id": "w"}, "tasks"),
    ("add_tasks", {"worker_id": "w", "tasks": {"task_id": "t"}}, "tasks"),
    ("add_tasks", {"worker_id": "w", "tasks": ["t"]}, "tasks[0]"),
    ("add_tasks", {"worker_id": "w", "tasks": [{"task_id": 3}]}, "tasks[0].task_id"),
    ("add_tasks", {"worker_id": "w", "tasks": [{"family": "F"}]}, "tasks[0].task_id"),
    (
        "add_tasks",
        {"worker_id": "w", "tasks": [{"task_id": "a"}, {"task_id": "b", "priority": "high"}]},
        "tasks[1].priority",
    ),
    ("add_tasks", {"worker_id": "w", "tasks": [{"task_id": "t", "status": "DONE!"}]}, "status"),
    ("add_tasks", {"worker_id": "w", "tasks": [{"task_id": "t", "deps": "a"}]}, "deps"),
    ("add_tasks", {"worker_id": "w", "tasks": [{"task_id": "t", "params": {"a": 1}}]}, "params"),
    ("add_tasks", {"worker_id": "w", "tasks": [{"task_id": "t", "evil": True}]}, "evil"),
    ("add_tasks", {"worker_id": "w", "tasks": [{"task_id": "t", "priority": True}]}, "priority"),
    ("add_tasks", {"worker_id": "w", "tasks": [{"task_id": "t", "resources": {"d": -1}}]}, "res"),
    ("task_done", {"worker_id": "w"}, "task_id"),
    ("task_failed", {"worker_id": "w", "task_id": "t"}, "explanation"),
    ("annotate", {"task_id": "t", "kind": "colour", "value": "x"}, "kind"),
    ("annotate", {"task_id": "t", "kind": "progress", "value": [1]}, "value"),
    ("statuses", {"task_ids": "abc"}, "task_ids"),
    ("statuses", {"task_ids": [1, 2]}, "task_ids"),
    ("explanation", {"task": "t"}, "task"),
    ("work_left", {"worker_id": ["w"]}, "worker_id"),
]


@pytest.mark.parametrize(("route", "body", "field"), FIELD_ERRORS)
def test_wrong_fields_get_a_4xx_json_error_naming_the_field(
    api: Server, route: str, body: Any, field: str
) -> None:
    """Missing, mistyped and unknown fields get 400/422 with a JSON error that names the field."""
    reply = api.post(route, body)
    assert reply.status in (400, 422), reply
    error = reply.json()
    assert field in error["error"], error
    if "field" in error:
        assert field in error["field"], error


def test_every_route_takes_a_request_without_its_defaulted_fields(api: Server) -> None:
    """The compatibility rule, server side: each route answers 200 to a request the http
    transport encodes at its defaults (every defaulted field left out, as a worker older than
    such a field sends it), and refuses a field it does not know with a 422 naming it."""
    from conveyor import protocol as p

    requests = [
        p.Ping("compat"),
        p.AddTasks("compat", (p.TaskSpec("compat-t"),)),
        p.GetWork("compat"),
        p.WorkLeftRequest("compat"),
        p.Annotate("compat-t", p.NoteKind.STATUS_MESSAGE, "hi"),
        p.TaskFailed("compat", "compat-t", "boom"),
        p.TaskDone("compat", "compat-t"),
        p.Statuses(("compat-t",)),
        p.Explanation("compat-t"),
        p.Release("compat"),
        p.Submit(p.TaskSpec("compat-s")),
        p.Cancel("compat-s"),
    ]
    assert {type(r) for r in requests} == {route.request for route in ROUTES.values()}
    for request in requests:
        route = p.route_of(request)
        body = p.encode_request(request)
        assert body == {f: v for f, v in body.items() if f not in _defaulted(route.request)}
        reply = api.post(route.name, body)
        assert reply.status == 200, (route.name, reply)
        assert isinstance(p.decode(route.answer, reply.json()), route.answer)
        refused = api.post(route.name, {**body, "added_later": 1})
        assert refused.status == 422 and refused.json()["field"] == "added_later", refused


def _defaulted(cls: type[Any]) -> set[str]:
    """The names of the fields of dataclass ``cls`` that have a default."""
    missing = dataclasses.MISSING
    return {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is not missing or f.default_factory is not missing
    }


def test_an_unknown_route_is_a_404(api: Server) -> None:
    """An unknown /api/v1 route answers 404."""
    assert api.request("POST", "/api/v1/no_such_route", b"{}").status == 404


# --- values that pass validation but must not crash the handlers ---------------------------------


@pytest.mark.parametrize("value", ["not a number", 10**400, "1e999"], ids=["text", "huge", "inf"])
def test_annotating_progress_with_an_unusable_value_is_not_a_500(fresh: Server, value: Any) -> None:
    """annotate(progress) with a non-numeric or overflowing value gets a 4xx, never a 500."""
    assert fresh.post("add_tasks", {"worker_id": "w", "tasks": [{"task_id": "t"}]}).status == 200
    reply = fresh.post("annotate", {"task_id": "t", "kind": "progress", "value": value})
    assert reply.status < 500, reply
    reply.json()
    assert fresh.request("GET", "/api/v1/tasks").status == 200


def test_a_nan_progress_does_not_break_the_task_list(fresh: Server) -> None:
    """After annotate(progress=NaN) or Infinity, GET /api/v1/tasks still answers 200 JSON."""
    body = {"worker_id": "w", "tasks": [{"task_id": "nan-task"}]}
    assert fresh.post("add_tasks", body).status == 200
    for literal in (b"NaN", b"Infinity", b"-Infinity"):
        raw = b'{"task_id": "nan-task", "kind": "progress", "value": ' + literal + b"}"
        reply = fresh.request("POST", "/api/v1/annotate", raw)
        assert reply.status < 500, (literal, reply)
        listing = fresh.request("GET", "/api/v1/tasks")
        assert listing.status == 200, (literal, listing)
        json.loads(listing.body, parse_constant=lambda c: pytest.fail(f"{c} in the task list"))


@pytest.mark.parametrize(
    ("route", "raw"),
    [
        ("ping", b'{"worker_id": "\\ud800"}'),
        ("add_tasks", b'{"worker_id": "w", "tasks": [{"task_id": "\\udfff"}]}'),
        (
            "add_tasks",
            b'{"worker_id": "w", "tasks": [{"task_id": "t", "family": "F", '
            b'"params": {"p": "\\ud800"}}]}',
        ),
    ],
    ids=["worker-id", "task-id", "param-value"],
)
def test_lone_surrogates_neither_crash_nor_poison_the_lists(
    fresh: Server, route: str, raw: bytes
) -> None:
    """A string holding a lone UTF-16 surrogate is no 500, and the lists still answer 200."""
    reply = fresh.request("POST", f"/api/v1/{route}", raw)
    assert reply.status < 500, reply
    reply.json()
    assert fresh.request("GET", "/api/v1/tasks").status == 200
    assert fresh.request("GET", "/api/v1/workers").status == 200


def test_bad_input_leaves_no_traceback_in_the_server_output(fresh: Server) -> None:
    """Malformed, mistyped and oversized requests leave no traceback in the server's output."""
    for route in POST_ROUTES:
        for raw in BAD_JSON:
            fresh.request("POST", f"/api/v1/{route}", raw)
    for route, body, _ in FIELD_ERRORS:
        fresh.post(route, body)
    fresh.request("POST", "/api/v1/ping", b"[" * 200_000 + b"]" * 200_000)
    fresh.request("POST", "/api/v1/ping", b"{" * 100_000)
    assert fresh.request("GET", "/health", token=None).status == 200
    assert "Traceback" not in fresh.output(), fresh.output()[-3000:]


# --- secrets ------------------------------------------------------------------------------------


def test_the_token_appears_in_no_answer_and_no_server_output(api: Server) -> None:
    """After good and bad requests of every kind, the token is in no body and not in the logs."""
    bodies: list[bytes] = []
    near_misses = [f"Bearer {TOKEN}x", f"Bearer x{TOKEN}", f"Basic {TOKEN}", TOKEN]
    for route in POST_ROUTES:
        path = f"/api/v1/{route}"
        for authorization in near_misses:
            bodies.append(api.request("POST", path, b"{}", authorization=authorization).body)
        bodies.append(api.request("POST", path, b"{bad").body)
        bodies.append(api.request("POST", path, b'{"worker_id": "' + TOKEN.encode()).body)
        bodies.append(api.request("POST", path, json.dumps({"token": TOKEN})).body)
        bodies.append(api.request("GET", path).body)
    bodies.append(api.request("GET", "/api/v1/tasks").body)
    bodies.append(api.request("GET", "/api/v1/workers").body)
    bodies.append(api.request("GET", "/openapi.json", token=None).body)
    bodies.append(api.request("GET", "/health", token=None).body)
    for body in bodies:
        assert TOKEN.encode() not in body, body[:300]
    assert TOKEN not in api.output()


# --- start-up -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "config", "env"),
    [
        (["--host", "0.0.0.0"], "", {}),
        (["--host", "::"], "", {}),
        ([], '[server]\nhost = "0.0.0.0"\n', {}),
        ([], "", {"CONVEYOR_SERVER__HOST": "0.0.0.0"}),
    ],
    ids=["flag", "flag-ipv6", "config", "environment"],
)
def test_a_non_loopback_bind_without_a_token_refuses_to_start(
    run_cli: RunCli, tmp_path: Path, flags: list[str], config: str, env: dict[str, str]
) -> None:
    """`conveyor scheduler` on a non-loopback address without a token exits 2: token required."""
    config_path = write_config(tmp_path / "worker.toml", config)
    state = tmp_path / "state.db"
    args = ["--port", str(free_port()), "--state-path", str(state), "--config", str(config_path)]
    result = run_cli("scheduler", *flags, *args, cwd=tmp_path, env=env, timeout=30)
    assert result.returncode == 2, result
    assert "token" in result.stderr.lower()
    assert "required" in result.stderr.lower() or "needs" in result.stderr.lower(), result.stderr
    assert "Traceback" not in result.stderr
    assert not state.exists(), "the server opened its state before refusing to start"


def test_a_token_file_with_surrounding_whitespace_is_stripped(fresh: Server) -> None:
    """The token read from a token file (spaces and newlines around it) is the bare token."""
    assert fresh.post("ping", {"worker_id": "w"}).status == 200
    assert fresh.request("POST", "/api/v1/ping", b'{"worker_id": "w"}', token=None).status == 401


# --- a real worker run --------------------------------------------------------------------------


def test_task_list_has_exactly_the_spec_keys_after_a_worker_run(
    run_cli: RunCli, fresh: Server, mod: str, tmp_path: Path
) -> None:
    """After `conveyor run` on the server, each listed task has exactly the SPEC §7 keys."""
    result = run_root(run_cli, fresh, mod, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert TOKEN not in result.stdout + result.stderr
    tasks = fresh.tasks()
    assert len(tasks) == 4
    for task in tasks:
        assert set(task) == TASK_KEYS, task
        assert task["status"] == "DONE", task
        assert isinstance(task["params"], dict)
        assert all(isinstance(v, str) for v in task["params"].values())
        assert isinstance(task["dependencies"], list)
        assert isinstance(task["priority"], int)
    by_family: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        by_family.setdefault(task["family"], []).append(task)
    assert sorted(by_family) == ["Leaf", "Root"]
    (root,) = by_family["Root"]
    leaves = by_family["Leaf"]
    assert sorted(root["dependencies"]) == sorted(t["task_id"] for t in leaves)
    assert sorted(t["params"]["n"] for t in leaves) == ["0", "1", "2"]
    assert {t["status_message"] for t in leaves} == {"leaf 0 ran", "leaf 1 ran", "leaf 2 ran"}
    workers = fresh.request("GET", "/api/v1/workers").json()["workers"]
    assert len(workers) == 1
    assert isinstance(workers[0]["last_seen"], int | float)
    assert TOKEN not in fresh.output()


def test_conveyor_tasks_prints_a_table_and_json(
    run_cli: RunCli, fresh: Server, mod: str, tmp_path: Path
) -> None:
    """`conveyor tasks` prints the task list as a table, and with --json as the API's JSON."""
    assert run_root(run_cli, fresh, mod, tmp_path).returncode == 0
    env = {"CONVEYOR_SCHEDULER__TOKEN": TOKEN}
    expected = {t["task_id"]: t for t in fresh.tasks()}

    table = run_cli("tasks", "--scheduler-url", fresh.url, cwd=tmp_path, env=env, timeout=30)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.strip().splitlines()
    assert lines[0].split() == ["STATUS", "TASK", "WORKER", "REASON/MESSAGE"]
    assert len(lines) == 1 + len(expected)
    for task_id, task in expected.items():
        (line,) = [line for line in lines if task_id in line]
        assert line.split()[0] == "DONE"
        assert task["status_message"] in line

    as_json = run_cli(
        "tasks", "--scheduler-url", fresh.url, "--json", cwd=tmp_path, env=env, timeout=30
    )
    assert as_json.returncode == 0, as_json.stderr
    listed = json.loads(as_json.stdout)["tasks"]
    assert {t["task_id"]: t for t in listed} == expected
    for task in listed:
        assert set(task) == TASK_KEYS
    assert TOKEN not in table.stdout + table.stderr + as_json.stdout + as_json.stderr


def test_conveyor_tasks_without_the_token_is_a_clear_error(
    run_cli: RunCli, fresh: Server, tmp_path: Path
) -> None:
    """`conveyor tasks` without the token exits 2 with one error line naming the 401."""
    result = run_cli("tasks", "--scheduler-url", fresh.url, cwd=tmp_path, timeout=30)
    assert result.returncode == 2, result
    assert "401" in result.stderr
    assert "Traceback" not in result.stderr


# --- fuzzing -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of the fuzz test alone, so whatever the fuzz registers stays there."""
    directory = tmp_path_factory.mktemp("fuzz")
    config = write_config(directory / "worker.toml", f'[server]\ntoken = "{TOKEN}"\n')
    server = Server(directory, config, marker=uuid.uuid4().hex)
    try:
        server.start()
        yield server
    finally:
        server.kill()
        kill_marked(MARKER_VARIABLE, server.marker)


def test_fuzzed_bodies_never_get_a_500(fuzz_server: Server) -> None:
    """200 random JSON (and non-JSON) bodies over every POST route: never a 5xx, always JSON."""
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    pool = ["t1", "t2"]  # registered below, so annotate & co. reach a real task
    for task_id in pool:
        body = {"worker_id": "w1", "tasks": [{"task_id": task_id, "family": "F"}]}
        assert fuzz_server.post("add_tasks", body).status == 200
    surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=())
    chars = st.one_of(st.characters(exclude_categories=()), surrogates, st.sampled_from("az"))
    any_text = st.lists(chars, max_size=12).map("".join)  # lone surrogates are frequent
    ids = st.sampled_from(pool) | any_text
    big = 10**400
    numbers = st.integers() | st.integers(min_value=-big, max_value=big) | st.floats()
    values = st.recursive(
        st.none() | st.booleans() | numbers | any_text | ids,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=10,
    )
    task = st.fixed_dictionaries(
        {"task_id": ids},
        optional={
            "family": any_text,
            "module": any_text,
            "params": st.dictionaries(any_text, any_text, max_size=3),
            "status": st.sampled_from(["PENDING", "RUNNING", "DONE", "FAILED", "DISABLED"]),
            "deps": st.lists(ids, max_size=3),
            "priority": st.integers() | st.integers(min_value=-big, max_value=big),
            "resources": st.dictionaries(any_text, st.integers(min_value=0), max_size=2),
            "runnable": st.booleans(),
            "retry_count": st.none() | st.integers(),
            "explanation": any_text,
            "loader": any_text,
            "labels": st.lists(ids, max_size=3),
            "batch": st.none()
            | st.fixed_dictionaries({"key": ids}, optional={"max_size": st.integers() | any_text}),
        },
    )
    typed = {
        "str": ids,
        "bool": st.booleans(),
        "str_list": st.lists(ids, max_size=4),
        "tasks": st.lists(task, max_size=3),
        "task": task,
        "note": st.sampled_from(["status_message", "progress", "tracking_url"]),
        "outcome": st.sampled_from(["failed", "timed_out", "process_died", "interrupted"]),
        "any": any_text | numbers,
    }
    report = st.fixed_dictionaries(
        {"worker_id": st.sampled_from(["w", "x"]) | ids, "task_id": ids},
        optional={
            "attempt": typed["any"],
            "explanation": any_text,
            "outcome": typed["outcome"],
            "not_retried": any_text,
        },
    )
    typed["reports"] = st.lists(report, max_size=3)

    kind_of = {
        "worker_id": "str",
        "task_id": "str",
        "explanation": "str",
        "assistant": "bool",
        "running": "str_list",
        "loaders": "str_list",
        "task_ids": "str_list",
        "tasks": "tasks",
        "kind": "note",
        "value": "any",
        "attempt": "any",
        "outcome": "outcome",
        "max_tasks": "any",
        "done": "reports",
        "failed": "reports",
        "not_retried": "str",
        "labels": "str_list",
        "batches": "bool",
        "task": "task",
        "downstream": "bool",
        "by": "str",
    }

    def route_fields(route: str) -> dict[str, tuple[str, bool]]:
        """Each request field of the route's protocol dataclass: (kind, required)."""
        return {
            f.name: (
                kind_of[f.name],
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(ROUTES[route].request)
        }

    def well_typed(route: str) -> Any:
        """Bodies that pass validation: every required field, of the right type."""
        fields = route_fields(route)
        return st.fixed_dictionaries(
            {name: typed[kind] for name, (kind, required) in fields.items() if required},
            optional={
                name: typed[kind] for name, (kind, required) in fields.items() if not required
            },
        )

    def loose(route: str) -> Any:
        """Bodies with the route's field names (maybe an unknown one) and any values."""
        fields = route_fields(route)
        return st.fixed_dictionaries(
            {},
            optional={"extra": values}
            | {name: typed[kind] | values for name, (kind, _) in fields.items()},
        )

    encoded = lambda strategy: strategy.map(lambda v: json.dumps(v).encode())  # noqa: E731
    bodies = st.sampled_from(POST_ROUTES).flatmap(
        lambda route: st.tuples(
            st.just(route),
            st.one_of(
                encoded(well_typed(route)),
                encoded(well_typed(route)),
                encoded(well_typed(route)),
                encoded(loose(route)),
                encoded(values),
                st.binary(max_size=40),
            ),
        )
    )
    first_5xx: list[tuple[str, bytes, Reply]] = []
    poisoned: list[tuple[str, bytes]] = []

    @hypothesis.settings(
        max_examples=200,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(bodies)
    def fuzz(case: tuple[str, bytes]) -> None:
        route, raw = case
        reply = fuzz_server.request("POST", f"/api/v1/{route}", raw)
        if reply.status >= 500 and not first_5xx:
            first_5xx.append((route, raw, reply))
        assert reply.status < 500, (route, raw, reply)
        reply.json()
        if not poisoned:
            for listing in ("tasks", "workers"):
                if fuzz_server.request("GET", f"/api/v1/{listing}").status != 200:
                    poisoned.append((route, raw))

    try:
        fuzz()
    except Exception as exc:
        if not first_5xx:
            raise
        route, raw, reply = first_5xx[0]
        errors = sorted(
            set(re.findall(r"^\w+(?:Error|Exception)\b.*$", fuzz_server.output(), re.M))
        )
        raise AssertionError(
            f"first 5xx: POST /api/v1/{route} {raw[:300]!r} -> HTTP {reply.status}; "
            f"exceptions in the server's log: {errors}; shrunk example (the server keeps state, "
            f"so it may depend on earlier requests): {exc}"
        ) from None
    assert not poisoned, f"GET /api/v1/tasks or /workers broke after POST {poisoned[0]}"
    assert "Traceback" not in fuzz_server.output(), fuzz_server.output()[-3000:]


def test_the_server_survives_sigterm_and_keeps_its_state(tmp_path: Path, _isolated: str) -> None:
    """SIGTERM stops the server cleanly; a restart on the same state path still lists the task."""
    config = write_config(tmp_path / "worker.toml", f'[server]\ntoken = "{TOKEN}"\n')
    server = Server(tmp_path, config, marker=_isolated)
    try:
        server.start()
        body = {"worker_id": "w", "tasks": [{"task_id": "kept", "family": "F"}]}
        assert server.post("add_tasks", body).status == 200
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=20) in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
        server.start()
        assert [t["task_id"] for t in server.tasks()] == ["kept"]
    finally:
        server.kill()
