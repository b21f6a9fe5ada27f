"""Hardening of the central scheduler server (issue 9): corrupt or foreign state, a 413 that
closes the connection instead of draining the body, and the Host / Origin / Content-Type checks
against DNS rebinding and cross-site requests.

Every server is a real ``conveyor scheduler`` subprocess on a free loopback port with real
SQLite state; malformed requests go over raw sockets or ``http.client``. Nothing is mocked, and
no test waits by sleeping: every wait polls, or blocks on a socket, with a deadline.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import sqlite3
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from conveyor.protocol import ROUTES, TaskStatus
from conveyor.scheduler.persist import ADDED_FIELDS, RowError, from_row, to_row
from conveyor.scheduler.policy import TaskRecord
from conveyor.server.stores import SqliteStore, StoreContext
from conveyor.testing.processes import (
    SchedulerProcess,
    child_env,
    free_port,
    kill_marked,
)

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the run_cli fixture (conftest.py)
WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

LOOPBACK = "127.0.0.1"
TOKEN = "hardening-token"
MARKER_VARIABLE = "HARDENINGTEST_MARKER"  # not CONVEYOR_*: those are configuration overrides
SPEC_STATES = {"PENDING", "RUNNING", "DONE", "FAILED", "DISABLED", "UNKNOWN"}
GIB = 1024**3
JSON_TYPE = "Content-Type: application/json"
LENGTH = "Content-Length: 2000"  # a body of which only a few bytes are ever sent
SMALL_LIMIT = 4096  # max_request_bytes of the servers that test the size limit
# uvicorn closes an idle keep-alive connection after 5 s by itself; "promptly" must be sooner,
# or a server that kept the connection open (to drain the body) would pass too
PROMPTLY = 3.0


# --- helpers -------------------------------------------------------------------------------------


class Server(SchedulerProcess):
    """A ``conveyor scheduler`` subprocess with extra command-line flags and request helpers."""

    def __init__(
        self,
        directory: Path,
        config_text: str,
        marker: str,
        flags: Sequence[str] = (),
        token: str = "",
    ) -> None:
        """Describe the server (config written to ``directory``; ``token`` is the one the
        config sets, sent by :meth:`request`); nothing is started yet."""
        config = directory / "server.toml"
        config.write_text(config_text, encoding="utf-8")
        env = child_env(directory, MARKER_VARIABLE, marker)
        super().__init__(directory, config, env, flags=flags)
        self.token = token

    def worker_ids(self) -> set[str]:
        """The ids of the workers the server knows."""
        reply = self.request("GET", "/api/v1/workers")
        assert reply.status == 200, reply
        return {w["worker_id"] for w in reply.json()["workers"]}

    def tasks(self) -> dict[str, str]:
        """Task id -> status, from the server's task list."""
        reply = self.request("GET", "/api/v1/tasks")
        assert reply.status == 200, reply
        return {t["task_id"]: t["status"] for t in reply.json()["tasks"]}

    def stderr_lines(self) -> list[str]:
        """What the server printed on stderr so far, line by line."""
        return self.stderr.read_text(encoding="utf-8", errors="replace").splitlines()


@contextlib.contextmanager
def running(server: Server) -> Iterator[Server]:
    """Start ``server`` and kill it (and its tree) when the block ends."""
    try:
        server.start()
        yield server
    finally:
        server.kill()


def read_head(sock: socket.socket) -> tuple[int, dict[str, str]]:
    """Read one answer's status line and headers from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before an answer: {data!r}"
        data += chunk
    lines = data.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    fields = (line.partition(":") for line in lines[1:])
    return int(lines[0].split()[1]), {k.strip().lower(): v.strip() for k, _, v in fields}


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """True if the server closes the connection within ``seconds`` (the rest of its answer is
    read and thrown away): recv returns b"", or the connection is reset."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
    return False


def head(port: int, method: str, path: str, *lines: str) -> bytes:
    """A raw request head for ``127.0.0.1:port`` with the extra header ``lines``."""
    text = "".join(f"{line}\r\n" for line in (f"Host: {LOOPBACK}:{port}", *lines))
    return f"{method} {path} HTTP/1.1\r\n{text}\r\n".encode()


def record(task_id: str, status: TaskStatus = TaskStatus.PENDING, seq: int = 1) -> TaskRecord:
    """A task record as the scheduler keeps a task a worker registered."""
    return TaskRecord(
        task_id=task_id, seq=seq, family="F", module="m", status=status, registered=True
    )


def save_state(path: Path, records: Sequence[TaskRecord]) -> None:
    """Write ``records`` (and worker w1) through the real sqlite store, as a server would."""
    store = SqliteStore(StoreContext(str(path)))
    try:
        store.save([to_row(r) for r in records], [("w1", False)])
    finally:
        store.close()


def execute(path: Path, statement: str, *params: Any) -> None:
    """Run one SQL statement on the database at ``path`` and commit it."""
    db = sqlite3.connect(path)
    try:
        db.execute(statement, params)
        db.commit()
    finally:
        db.close()


def row_json(task_id: str, drop: str = "", **changes: Any) -> str:
    """The JSON text of a saved row of ``task_id``, with fields changed and ``drop`` left out."""
    row = json.loads(json.dumps(to_row(record(task_id))))
    row.update(changes)
    return json.dumps({k: v for k, v in row.items() if k != drop})


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file of ``directory`` with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def start_failing(
    run_cli: RunCli, cwd: Path, state: Path, config: str = "", *flags: str
) -> subprocess.CompletedProcess[str]:
    """``conveyor scheduler`` on ``state`` that is expected to stop at start-up."""
    config_path = cwd / "refused.toml"
    config_path.write_text(config, encoding="utf-8")
    args = ["--port", str(free_port()), "--state-path", str(state), "--config", str(config_path)]
    return run_cli("scheduler", *args, *flags, cwd=cwd, timeout=30)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``conveyor: error:`` line of a start-up that stopped with exit code 2."""
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("conveyor: error: "), result.stderr
    return lines[0]


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run in tmp_path with a per-test marker; kill every process that carries it afterwards."""
    monkeypatch.chdir(tmp_path)
    marker = uuid.uuid4().hex
    monkeypatch.setenv(MARKER_VARIABLE, marker)  # run_cli's children carry it too
    yield marker
    kill_marked(MARKER_VARIABLE, marker)


def _module_server(
    factory: pytest.TempPathFactory, name: str, config: str, token: str = ""
) -> Iterator[Server]:
    server = Server(factory.mktemp(name), config, uuid.uuid4().hex, token=token)
    try:
        with running(server):
            yield server
    finally:
        kill_marked(MARKER_VARIABLE, server.env[MARKER_VARIABLE])


@pytest.fixture(scope="module", params=["without-token", "with-token"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A shared server, once without and once with a token: the checks apply to both."""
    token = TOKEN if request.param == "with-token" else ""
    config = f'[server]\ntoken = "{token}"\n'
    yield from _module_server(tmp_path_factory, request.param, config, token)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A shared server with a token and ``max_request_bytes`` = SMALL_LIMIT."""
    config = f'[server]\ntoken = "{TOKEN}"\nmax_request_bytes = {SMALL_LIMIT}\n'
    yield from _module_server(tmp_path_factory, "small", config, TOKEN)


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A shared server with two ``[server] allowed_hosts`` entries (a reverse proxy's names)."""
    config = '[server]\nallowed_hosts = ["conveyor.example.com", "proxy.example:8443"]\n'
    yield from _module_server(tmp_path_factory, "proxied", config)


# --- item 4: a row is validated in one place ------------------------------------------------------


def test_from_row_reads_back_everything_to_row_writes() -> None:
    """A record with every field set survives to_row -> JSON -> from_row unchanged."""
    rec = TaskRecord(
        task_id="t",
        seq=4,
        family="F",
        module="m.n",
        params={"a": "1"},
        status=TaskStatus.FAILED,
        deps=("d1", "d2"),
        own_priority=3,
        priority=5,
        resources={"db": 2},
        stakeholders=("w1",),
        runners=("w1", "w2"),
        worker="w2",
        retry_count=2,
        wake_at=12.5,
        explanation="boom",
        status_message="half",
        progress=50.0,
        tracking_url="http://x",
        registered=True,
        failures=deque([1.0, 2.0]),
        attempt=3,
        reported=2,
    )
    row = json.loads(json.dumps(to_row(rec)))
    assert to_row(from_row(row)) == to_row(rec)


@pytest.mark.parametrize("name", sorted(to_row(record("t"))))
def test_from_row_names_every_field_that_is_missing_or_mistyped(name: str) -> None:
    """Each field of a row, missing (unless added later) or of the wrong type, is a RowError
    naming that field."""
    row = json.loads(row_json("t"))
    del row[name]
    if name in ADDED_FIELDS:
        default = ADDED_FIELDS[name]  # (a list in the row; a record may hold it as a tuple)
        assert getattr(from_row(row), name) in (
            default,
            tuple(default) if default == [] else default,
        )
    else:
        with pytest.raises(RowError, match=f"'{name}' is missing") as missing:
            from_row(row)
        assert missing.value.field == name
    row[name] = [{}]  # wrong for every field
    with pytest.raises(RowError, match="expected") as mistyped:
        from_row(row)
    assert mistyped.value.field == name


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ([1, 2], ""),
        ("text", ""),
        (None, ""),
        (json.loads(row_json("t", status="BOGUS")), "status"),
        (json.loads(row_json("t", status="done")), "status"),
        (json.loads(row_json("t", seq=True)), "seq"),
        (json.loads(row_json("t", resources={"db": -1})), "resources"),
        (json.loads(row_json("t", params={"a": 1})), "params"),
        ({**json.loads(row_json("t")), "colour": "red"}, "colour"),
    ],
    ids=["list", "string", "null", "status", "lower-case-status", "bool-seq", "negative",
         "int-param", "unknown-field"],
)  # fmt: skip
def test_from_row_refuses_rows_the_scheduler_cannot_have_written(row: Any, field: str) -> None:
    """Non-objects, states outside SPEC §7, wrong types and unknown fields are RowErrors."""
    with pytest.raises(RowError) as caught:
        from_row(row)
    assert caught.value.field == field, caught.value


# --- item 4: corrupt rows stop the server, naming file, row and problem ---------------------------

# id -> (what the data of task "bad" becomes, what the error line must say about it)
SPOILT_DATA: dict[str, tuple[Any, str]] = {
    "not-json": ('{"task_id": "bad", ', "data is not JSON"),
    "json-list": ('["bad"]', "a JSON list; expected a JSON object"),
    "missing-field": (row_json("bad", drop="status"), "'status' is missing"),
    "unknown-status": (row_json("bad", status="BOGUS"), "'status' is \"BOGUS\"; expected one of"),
    "lower-case-status": (row_json("bad", status="done"), "'status' is \"done\"; expected one of"),
    "wrong-type": (row_json("bad", seq="7"), "'seq' is \"7\"; expected an integer"),
    "blob": (b"\x00\x01binary", "a BLOB; expected JSON text"),
    "other-task-id": (
        row_json("someone-else"),
        "is 'someone-else', but the row's task_id is 'bad'",
    ),
}
# id -> (SQL that spoils task "bad" or worker w1, its parameters, what the error line must name)
CORRUPTIONS: dict[str, tuple[str, tuple[Any, ...], list[str]]] = {
    **{
        name: (
            "UPDATE tasks SET data = ? WHERE task_id = 'bad'",
            (data,),
            ["task row 2 (task_id 'bad')", said],
        )
        for name, (data, said) in SPOILT_DATA.items()
    },
    "worker-row": (
        "UPDATE workers SET assistant = 'yes' WHERE worker_id = 'w1'",
        (),
        ["worker row 1 (worker_id 'w1')", "assistant is 'yes'; expected 0 or 1"],
    ),
}


@pytest.mark.parametrize(
    ("sql", "params", "named"), list(CORRUPTIONS.values()), ids=list(CORRUPTIONS)
)
def test_a_corrupt_row_stops_the_server_with_one_line_and_changes_nothing(
    run_cli: RunCli, tmp_path: Path, sql: str, params: tuple[Any, ...], named: list[str]
) -> None:
    """A spoilt row: exit 2, one error line naming the file, the row and what is wrong (and
    --recover), no traceback, and the database directory byte for byte as it was."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    state = state_dir / "state.db"
    save_state(state, [record("good", TaskStatus.DONE, 1), record("bad", seq=2)])
    execute(state, sql, *params)
    before = snapshot(state_dir)
    line = one_error_line(start_failing(run_cli, tmp_path, state))
    for text in [repr(str(state)), *named, "nothing was changed", "--recover"]:
        assert text in line, (text, line)
    assert snapshot(state_dir) == before


# id -> (whether conveyor's own state is saved first, statements that make the file foreign)
FOREIGN: dict[str, tuple[bool, list[str]]] = {
    "unrelated-tables": (
        False,
        ["CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)",
         "INSERT INTO customers VALUES (1, 'Ada')"],
    ),
    "tasks-with-other-columns": (
        False,
        ["CREATE TABLE tasks (id INTEGER PRIMARY KEY, title TEXT, done INTEGER)",
         "INSERT INTO tasks VALUES (1, 'buy milk', 0)"],
    ),
    "ours-with-an-extra-table": (True, ["CREATE TABLE notes (body TEXT)"]),
}  # fmt: skip


@pytest.mark.parametrize("flags", [[], ["--recover"]], ids=["refuse", "recover"])
@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_a_foreign_sqlite_file_is_refused_even_with_recover(
    run_cli: RunCli, tmp_path: Path, kind: str, flags: list[str]
) -> None:
    """Another application's SQLite file: exit 2 with one line saying it is not a conveyor
    state database and that --recover does not apply, and the file is left untouched."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    state = state_dir / "foreign.db"
    ours, statements = FOREIGN[kind]
    if ours:
        save_state(state, [record("t")])
    for statement in statements:
        execute(state, statement)
    before = snapshot(state_dir)
    line = one_error_line(start_failing(run_cli, tmp_path, state, "", *flags))
    for text in [repr(str(state)), "not a conveyor state database", "even with --recover"]:
        assert text in line, (text, line)
    assert snapshot(state_dir) == before


def test_a_file_that_is_not_sqlite_is_refused_even_with_recover(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """A text file as state_path: exit 2, one line naming it, the file unchanged."""
    state = tmp_path / "notes.txt"
    state.write_text("not a database\n" * 200, encoding="utf-8")
    before = state.read_bytes()
    line = one_error_line(start_failing(run_cli, tmp_path, state, "", "--recover"))
    assert repr(str(state)) in line and "not a database" in line, line
    assert state.read_bytes() == before


def test_an_unknown_on_corrupt_state_value_is_a_config_error(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """``on_corrupt_state = "delete"`` stops the server, naming the key and the two choices."""
    config = '[server]\non_corrupt_state = "delete"\n'
    line = one_error_line(start_failing(run_cli, tmp_path, tmp_path / "s.db", config))
    assert "server.on_corrupt_state" in line and '"quarantine"' in line, line
    assert not (tmp_path / "s.db").exists()


# --- item 4: quarantine --------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["flag", "config"])
def test_recover_moves_bad_rows_into_quarantine_and_serves_the_rest(
    tmp_path: Path, _isolated: str, how: str
) -> None:
    """With --recover (or on_corrupt_state = "quarantine") the server moves the bad rows, raw
    data and reason, into the quarantine table, says so in one stderr line and a warning, and
    serves only the good tasks; restarted without it, it still starts and keeps them aside."""
    config = '[server]\non_corrupt_state = "quarantine"\n' if how == "config" else ""
    server = Server(tmp_path, config, _isolated, flags=["--recover"] if how == "flag" else [])
    records = [
        record("good-done", TaskStatus.DONE, 1),
        record("good-pending", seq=2),
        record("bad-status", seq=3),
        record("bad-json", seq=4),
    ]
    save_state(server.state, records)
    spoilt = {"bad-status": row_json("bad-status", status="BOGUS"), "bad-json": "{oops"}
    for task_id, data in spoilt.items():
        execute(server.state, "UPDATE tasks SET data = ? WHERE task_id = ?", data, task_id)

    with running(server):
        lines = server.stderr_lines()
        moved = [line for line in lines if line.startswith("conveyor scheduler: moved")]
        assert len(moved) == 1, lines
        assert moved[0].startswith("conveyor scheduler: moved 2 unusable rows into the table"), (
            moved
        )
        logged = [json.loads(line) for line in lines if line.startswith("{")]
        warned = [e for e in logged if e["event"] == "unusable state rows quarantined"]
        assert [(e["level"], e["count"]) for e in warned] == [("warning", 2)], logged
        assert server.tasks() == {"good-done": "DONE", "good-pending": "PENDING"}
        body = {"worker_id": "w9", "tasks": [{"task_id": "new", "family": "F"}]}
        assert server.request("POST", "/api/v1/add_tasks", body).status == 200

    with contextlib.closing(sqlite3.connect(server.state)) as db:
        kept = {
            key: (source, data, reason)
            for source, key, data, reason in db.execute(
                "SELECT source_table, row_key, data, reason FROM quarantine"
            )
        }
    assert {k: v[:2] for k, v in kept.items()} == {k: ("tasks", d) for k, d in spoilt.items()}
    assert "'status'" in kept["bad-status"][2] and "not JSON" in kept["bad-json"][2], kept

    server.flags = []
    server.config.write_text("", encoding="utf-8")
    with running(server):
        listed = server.tasks()
        assert listed == {"good-done": "DONE", "good-pending": "PENDING", "new": "PENDING"}
        assert set(listed.values()) <= SPEC_STATES
    assert "Traceback" not in server.output()


# --- item 7: a 413 closes the connection; the body is not read -----------------------------------


@pytest.mark.parametrize(
    ("lines", "sent"),
    [
        ([f"Content-Length: {GIB}"], b"x" * 1000),
        (["Transfer-Encoding: chunked"], b"%x\r\n" % (2 * SMALL_LIMIT) + b"x" * 2 * SMALL_LIMIT),
    ],
    ids=["content-length-1-gib", "chunked"],
)
def test_a_413_closes_the_connection_without_reading_the_body(
    small: Server, lines: list[str], sent: bytes
) -> None:
    """An oversized body (announced as 1 GiB, or chunked past the limit) gets 413 with
    Connection: close, and the server closes the connection at once, though most of the
    body was never sent; the next client is served."""
    auth = f"Authorization: Bearer {TOKEN}"
    with socket.create_connection((LOOPBACK, small.port), timeout=10) as sock:
        sock.sendall(head(small.port, "POST", "/api/v1/ping", auth, JSON_TYPE, *lines) + sent)
        status, headers = read_head(sock)
        assert status == 413
        assert headers.get("connection", "").lower() == "close", headers
        assert closed_within(sock, PROMPTLY), "the server kept the connection to read the body"
    assert small.request("POST", "/api/v1/ping", {"worker_id": "after-413"}).status == 200
    assert small.request("GET", "/health").json()["status"] == "ok"


@pytest.mark.parametrize(
    ("method", "path", "lines", "status"),
    [
        ("POST", "/api/v1/ping", [JSON_TYPE, LENGTH], 401),
        ("POST", "/api/v1/ping", ["Content-Type: text/plain", LENGTH], 415),
        ("PUT", "/api/v1/ping", [JSON_TYPE, LENGTH], 405),
        ("POST", "/api/v1/nope", [JSON_TYPE, LENGTH], 404),
        ("PUT", "/api/v1/ping", [JSON_TYPE, "Transfer-Encoding: chunked"], 405),
    ],
    ids=["401", "415", "405", "404", "405-chunked"],
)
def test_any_answer_before_the_body_is_read_closes_the_connection(
    small: Server, method: str, path: str, lines: list[str], status: int
) -> None:
    """A refusal (or an app answer) sent before the body was read closes the connection, so
    the unread body is not drained; only part of it was ever sent."""
    extra = lines if status == 401 else [f"Authorization: Bearer {TOKEN}", *lines]
    with socket.create_connection((LOOPBACK, small.port), timeout=10) as sock:
        start_of_body = b"10\r\n" + b"x" * 16  # a chunk or 20 bytes: never finished
        sock.sendall(head(small.port, method, path, *extra) + start_of_body)
        answered, headers = read_head(sock)
        assert answered == status
        assert headers.get("connection", "").lower() == "close", headers
        assert closed_within(sock, PROMPTLY)


def test_complete_requests_keep_their_connection_alive(small: Server) -> None:
    """Requests whose body was read keep the connection open (the http transport reuses it)."""
    conn = http.client.HTTPConnection(LOOPBACK, small.port, timeout=15)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    try:
        socks = []
        for n in range(3):
            conn.request("POST", "/api/v1/ping", json.dumps({"worker_id": f"ka{n}"}), headers)
            response = conn.getresponse()
            assert (response.status, json.loads(response.read())) == (200, {"ok": True, "stop": []})
            socks.append(conn.sock)
        assert socks[0] is not None and socks.count(socks[0]) == 3, socks
    finally:
        conn.close()


def test_health_reports_max_request_bytes(server: Server, small: Server) -> None:
    """GET /health carries max_request_bytes: the default, and a configured one."""
    assert server.request("GET", "/health").json()["max_request_bytes"] == 1048576
    assert small.request("GET", "/health").json()["max_request_bytes"] == SMALL_LIMIT


# --- item 11: Host (DNS rebinding) ---------------------------------------------------------------

FOREIGN_HOSTS = [
    "evil.example:{port}",
    "evil.example",
    "127.0.0.1.nip.io:{port}",
    "127.0.0.1:{port}@evil.example",
    "127.0.0.1:{port}/x",
    "127.0.0.1:99999",
]


@pytest.mark.parametrize("template", FOREIGN_HOSTS)
def test_a_foreign_host_header_gets_421_on_every_route(server: Server, template: str) -> None:
    """A Host that is not the server's (a rebound name, or not a host at all) gets 421 with a
    JSON error naming it and the expected names, on open, read and state-changing routes."""
    host = template.format(port=server.port)
    for method, path, body in [
        ("GET", "/health", None),
        ("GET", "/api/v1/tasks", None),
        ("POST", "/api/v1/ping", {"worker_id": "rebound"}),
    ]:
        reply = server.request(method, path, body, headers={"Host": host})
        assert reply.status == 421, (method, path, reply)
        assert repr(host) in reply.error() and "127.0.0.1, localhost or [::1]" in reply.error()
    assert "rebound" not in server.worker_ids()


@pytest.mark.parametrize(
    "template",
    [
        "127.0.0.1:{port}",
        "localhost:{port}",
        "[::1]:{port}",
        "LocalHost:{port}",
        "127.0.0.1",
        "localhost:1",
    ],
)
def test_the_servers_own_host_forms_are_served(server: Server, template: str) -> None:
    """127.0.0.1, localhost and [::1] are its own names, with its port, no port, or another
    one (a forwarded port, as through an SSH tunnel, still reaches this server)."""
    host = template.format(port=server.port)
    assert server.request("GET", "/health", headers={"Host": host}).status == 200
    body = {"worker_id": f"own-{host}"}
    assert server.request("POST", "/api/v1/ping", body, headers={"Host": host}).status == 200


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("conveyor.example.com", 200),
        ("conveyor.example.com:443", 200),
        ("proxy.example:8443", 200),
        ("proxy.example:9", 421),
        ("proxy.example", 421),
        ("other.example", 421),
    ],
)
def test_allowed_hosts_entries_are_accepted(proxied: Server, host: str, status: int) -> None:
    """An allowed_hosts entry without a port allows any port; one with a port, that port."""
    reply = proxied.request("GET", "/health", headers={"Host": host})
    assert reply.status == status, reply
    if status == 421:
        assert "conveyor.example.com, proxy.example:8443" in reply.error()


def test_a_malformed_allowed_hosts_entry_stops_the_server(run_cli: RunCli, tmp_path: Path) -> None:
    """An entry with a scheme or path: exit 2, one line naming the key, the entry and the form
    expected, before anything is bound or created."""
    config = '[server]\nallowed_hosts = ["https://conveyor.example.com/"]\n'
    line = one_error_line(start_failing(run_cli, tmp_path, tmp_path / "s.db", config))
    assert "server.allowed_hosts" in line and "'https://conveyor.example.com/'" in line, line
    assert "without a scheme or path" in line
    assert not (tmp_path / "s.db").exists()


# --- item 11: Origin and Content-Type (cross-site requests) ---------------------------------------

FOREIGN_ORIGINS = [
    "http://evil.example",
    "http://evil.example:{port}",
    "null",
    "http://127.0.0.1",
    "https://127.0.0.1:{port}",
    "http://localhost:1",
]


@pytest.mark.parametrize("template", FOREIGN_ORIGINS)
def test_a_foreign_origin_gets_403_and_changes_nothing(server: Server, template: str) -> None:
    """A request from another site's page (any Origin but the server's own) gets 403 with a
    JSON error naming the Origin and the expected one; the ping is not recorded."""
    origin = template.format(port=server.port)
    worker = f"csrf-{uuid.uuid4().hex[:8]}"
    reply = server.request(
        "POST", "/api/v1/ping", {"worker_id": worker}, headers={"Origin": origin}
    )
    assert reply.status == 403, reply
    assert repr(origin) in reply.error() and f"http://127.0.0.1:{server.port}" in reply.error()
    assert "access-control-allow-origin" not in reply.headers
    assert server.request("GET", "/api/v1/tasks", headers={"Origin": origin}).status == 403
    assert worker not in server.worker_ids()


@pytest.mark.parametrize("template", ["http://127.0.0.1:{port}", "http://localhost:{port}"])
def test_the_servers_own_origin_is_accepted(server: Server, template: str) -> None:
    """A request from the server's own origin (its own pages) is served."""
    origin = template.format(port=server.port)
    body = {"worker_id": "same-origin"}
    assert server.request("POST", "/api/v1/ping", body, headers={"Origin": origin}).status == 200


@pytest.mark.parametrize(
    ("origin", "status"), [("http://localhost:9000", 200), ("http://localhost:3000", 403)]
)
def test_through_a_forwarded_port_the_requests_own_origin_is_accepted(
    server: Server, origin: str, status: int
) -> None:
    """Sent to localhost:9000 (a tunnel to the server), a page from http://localhost:9000 is
    the server's own; one from another port of localhost is another site."""
    headers: dict[str, str | None] = {"Host": "localhost:9000", "Origin": origin}
    reply = server.request("POST", "/api/v1/ping", {"worker_id": "tunnel"}, headers=headers)
    assert reply.status == status, reply


def test_allowed_hosts_are_accepted_origins(proxied: Server) -> None:
    """Behind a proxy, the allowed names are origins too, http or https, with the entry's port."""
    for origin, status in [
        ("https://conveyor.example.com", 200),
        ("http://conveyor.example.com:8080", 200),
        ("https://proxy.example:8443", 200),
        ("https://proxy.example", 403),
    ]:
        headers: dict[str, str | None] = {"Origin": origin}
        reply = proxied.request("POST", "/api/v1/ping", {"worker_id": "p"}, headers=headers)
        assert reply.status == status, (origin, reply)


CSRF_CONTENT_TYPES = [
    None,
    "application/x-www-form-urlencoded",
    "text/plain",
    "text/plain; charset=utf-8",
    "multipart/form-data; boundary=xyz",
    "application/jsonp",
    "text/json",
]


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_body_that_is_not_declared_json_gets_415_on_every_state_changing_route(
    server: Server, route: str
) -> None:
    """Form, text/plain, multipart or undeclared bodies (what a page can send to another site
    without a preflight) get 415 naming application/json, even when the body is JSON."""
    worker = f"form-{uuid.uuid4().hex[:8]}"
    for kind in CSRF_CONTENT_TYPES:
        headers: dict[str, str | None] = {"Content-Type": kind}
        reply = server.request("POST", f"/api/v1/{route}", {"worker_id": worker}, headers=headers)
        assert reply.status == 415, (kind, reply)
        assert "expected application/json" in reply.error(), reply
    assert worker not in server.worker_ids()


@pytest.mark.parametrize("kind", ["application/json; charset=utf-8", "Application/JSON"])
def test_json_with_parameters_or_in_capitals_is_accepted(server: Server, kind: str) -> None:
    """application/json is matched case-insensitively, whatever its parameters."""
    headers: dict[str, str | None] = {"Content-Type": kind}
    reply = server.request("POST", "/api/v1/ping", {"worker_id": "typed"}, headers=headers)
    assert reply.status == 200, reply


@pytest.mark.parametrize(
    ("origin", "status"),
    [("http://evil.example", 403), (None, 204), ("http://127.0.0.1:{port}", 204)],
    ids=["foreign", "none", "own"],
)
def test_a_cors_preflight_approves_no_other_origin(
    server: Server, origin: str | None, status: int
) -> None:
    """OPTIONS (a CORS preflight) is answered without any Access-Control-Allow-* header, and
    with 403 for another site's origin: a browser then sends nothing."""
    headers: dict[str, str | None] = {
        "Origin": None if origin is None else origin.format(port=server.port),
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization",
    }
    reply = server.request("OPTIONS", "/api/v1/ping", headers=headers)
    assert reply.status == status, reply
    assert not [h for h in reply.headers if h.startswith("access-control-")], reply.headers


def test_host_and_origin_are_checked_before_the_token(small: Server) -> None:
    """Without a token, a rebound Host still gets 421 and a foreign Origin 403 (not 401)."""
    body = b'{"worker_id": "x"}'
    for headers, status in [
        ({"Host": "evil.example", "Authorization": None}, 421),
        ({"Origin": "http://evil.example", "Authorization": None}, 403),
        ({"Authorization": None}, 401),
    ]:
        assert small.request("POST", "/api/v1/ping", body, headers=headers).status == status


# --- item 11: the http transport still gets through -----------------------------------------------

TASKS = """
import os

import conveyor


class Touch(conveyor.Task):
    \"\"\"Writes one file.\"\"\"

    path = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(self.path)

    def run(self):
        with self.output().open("w") as f:
            f.write("ok")
"""


class Forwarder:
    """A plain TCP port forward (like ``ssh -L``) from a free loopback port to ``target``."""

    def __init__(self, target: int) -> None:
        """Listen at once; forward every connection, both ways, until :meth:`close`."""
        self.target = target
        self.listener = socket.create_server((LOOPBACK, 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection((LOOPBACK, self.target), timeout=30)
            self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        """Stop listening and close every forwarded connection."""
        self.listener.close()
        for sock in self.sockets:
            sock.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "forwarded"])
def test_a_worker_reaches_a_loopback_server_by_localhost_127_or_a_forwarded_port(
    run_cli: RunCli, task_module: WriteModule, tmp_path: Path, _isolated: str, host: str
) -> None:
    """`conveyor run` with [scheduler] url = http://localhost:PORT, http://127.0.0.1:PORT or
    a forwarded port's URL works against a server bound to 127.0.0.1: its Host is one of the
    server's names."""
    mod = task_module(TASKS)
    server = Server(tmp_path, "", _isolated)
    with running(server), contextlib.closing(Forwarder(server.port)) as forward:
        config = tmp_path / "worker.toml"
        url = f"http://{host}:{server.port}"
        if host == "forwarded":
            url = f"http://localhost:{forward.port}"
        config.write_text(f'[scheduler]\ntransport = "http"\nurl = "{url}"\n', encoding="utf-8")
        out = tmp_path / f"{host}.out"
        result = run_cli(
            "run", f"{mod}.Touch", "--path", str(out), "--config", str(config), cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert out.read_text(encoding="utf-8") == "ok"
        assert list(server.tasks().values()) == ["DONE"]
