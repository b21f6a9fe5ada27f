"""Workers follow the leader: ``[scheduler] url`` as a list, and the ``http`` transport that
finds the leader among several schedulers, follows a standby's hint and rides out a fail-over.

The leader is a real ``conveyor scheduler`` (SQLite); standbys are small real HTTP servers on
loopback that answer as a standby does (503, ``Retry-After: 1``, ``{"leader": URL}``) and record
what they were sent; the same stand-in refuses (401, 403) as a leader behind a proxy that does
not take the token would, or speaks TLS (a throwaway CA from trustme) and forwards to the real
leader, as a TLS-terminating proxy does. Standbys backed by PostgreSQL are tested with the
postgres plugin.
"""

from __future__ import annotations

import http.client
import http.server
import json
import ssl
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
import trustme

from conveyor.config import Config, load_config
from conveyor.errors import ConfigError, ConveyorError, SchedulerUnavailable
from conveyor.protocol import Ping
from conveyor.testing.processes import (
    SchedulerProcess,
    child_env,
    free_port,
    json_lines,
    kill_marked,
    kill_tree,
    put,
    wait_file,
    wait_for,
)
from conveyor.transports.base import TransportContext
from conveyor.transports.http import HttpTransport

TOKEN = "leader-t0ken-s3cret"
MARKER = "LEADERTEST_MARKER"  # not CONVEYOR_*: those are configuration overrides

TASKS = '''
import os

import conveyor
from conveyor.testing.processes import append_line, put, wait_file


class Part(conveyor.Task):
    """Appends its id to ran.log (once per run) and writes its output."""

    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, f"part-{self.n}.out"))

    def run(self):
        append_line(os.path.join(self.root, "ran.log"), self.task_id)
        with self.output().open("w") as f:
            f.write("ok")


class Gate(Part):
    """Like Part, but says it started (gate.pid) and waits (bounded) for ``gate.go``."""

    def run(self):
        put(os.path.join(self.root, "gate.pid"), str(os.getpid()))
        if not wait_file(os.path.join(self.root, "gate.go"), 120):
            raise RuntimeError("never released")
        super().run()


class All(conveyor.Task):
    """Needs ``count`` parts; with ``gated``, part 0 is a Gate."""

    root = conveyor.Parameter()
    count = conveyor.IntParameter()
    gated = conveyor.BoolParameter(default=False)

    def requires(self):
        first = Gate if self.gated else Part
        parts = [first(root=self.root, n=0)]
        return parts + [Part(root=self.root, n=n) for n in range(1, self.count)]

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "all.out"))

    def run(self):
        append_line(os.path.join(self.root, "ran.log"), self.task_id)
        with self.output().open("w") as f:
            f.write("ok")
'''


# --- a standby's stand-in ------------------------------------------------------------------------


class StandIn:
    """A real loopback HTTP server answering every request as a standby does: 503,
    ``Retry-After: 1`` and ``{"error": ..., "leader": self.leader}`` — or, with ``status``,
    that status and ``{"error": ...}``; with ``forward``, what the server on that loopback port
    answers (a proxy in front of it). With ``tls`` it speaks TLS with that server context. It
    records each request (method, path, Authorization header) and counts the connections it
    accepted (those whose TLS handshake failed included)."""

    def __init__(
        self,
        leader: str = "",
        status: int = 503,
        tls: ssl.SSLContext | None = None,
        forward: int | None = None,
    ) -> None:
        """Start serving on a free port (:attr:`url`); :meth:`close` stops it."""
        self.leader = leader
        self.seen: list[tuple[str, str, str]] = []
        self.connections = 0
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self) -> None:
                auth = self.headers.get("Authorization", "")
                stand_in.seen.append((self.command, self.path, auth))
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if forward is not None:
                    code, body = relay(forward, self.command, self.path, data, auth)
                    self.reply(code, body)
                    return
                if status != 503:
                    self.reply(status, json.dumps({"error": f"HTTP {status} here"}).encode())
                    return
                leader = stand_in.leader
                where = f"the leader is {leader}" if leader else "no leader is known yet"
                body = json.dumps(
                    {
                        "error": f"this scheduler is a standby and changes nothing: {where}",
                        "leader": leader,
                    }
                ).encode()
                self.reply(503, body, {"Retry-After": "1"})

            def reply(self, code: int, body: bytes, extra: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = answer
            do_POST = answer

            def log_message(self, *args: object) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[Any, Any]:
                raw, address = super().get_request()
                stand_in.connections += 1
                if tls is None:
                    return raw, address
                raw.settimeout(10)
                try:  # the handshake; a client that refuses the certificate ends it here
                    return tls.wrap_socket(raw, server_side=True), address
                except OSError:
                    raw.close()
                    raise

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()


def relay(port: int, method: str, path: str, data: bytes, auth: str) -> tuple[int, bytes]:
    """What the server on loopback ``port`` answers to the request: its status and body."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if auth:
        headers["Authorization"] = auth
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=data if method == "POST" else None, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# --- fixtures ------------------------------------------------------------------------------------


class Leader(SchedulerProcess):
    """The real scheduler that leads (it has a token)."""

    token = TOKEN


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A per-test marker; every process carrying it is killed after the test."""
    monkeypatch.chdir(tmp_path)
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER, value)


@pytest.fixture
def leader(tmp_path: Path, marker: str) -> Iterator[Leader]:
    """A started ``conveyor scheduler`` on SQLite with a token."""
    config = tmp_path / "server.toml"
    config.write_text(f'[server]\ntoken = "{TOKEN}"\n', encoding="utf-8")
    server = Leader(tmp_path, config, child_env(tmp_path, MARKER, marker))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def stand_ins() -> Iterator[list[StandIn]]:
    """The test's stand-ins (append to the list); closed afterwards."""
    made: list[StandIn] = []
    try:
        yield made
    finally:
        for stand_in in made:
            stand_in.close()


def stand_in(made: list[StandIn], leader: str = "", **how: Any) -> StandIn:
    """A new stand-in registered for closing (``how``: StandIn's keywords)."""
    server = StandIn(leader, **how)
    made.append(server)
    return server


@pytest.fixture
def mod(task_module: Any) -> str:
    """The task module's name (importable from tmp_path)."""
    name: str = task_module(TASKS)
    return name


def run_worker(
    tmp_path: Path, marker: str, url: str, *args: str, timeout: float = 120, **env: str
) -> tuple[int, str]:
    """``conveyor run *args --scheduler-url url`` with the token in its environment, JSON logs
    at info; its exit code and everything it printed."""
    command = [sys.executable, "-m", "conveyor", "run", *args, "--scheduler-url", url]
    command += ["--log-level", "info", "--log-format", "json"]
    extra = {"CONVEYOR_SCHEDULER__TOKEN": TOKEN, **env}
    proc = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=child_env(tmp_path, MARKER, marker, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, _ = proc.communicate()
        text = out.decode(errors="replace")[-3000:]
        raise AssertionError(f"conveyor run did not end in {timeout} s: {text}") from None
    return proc.returncode, out.decode(errors="replace")


def transport(url: str, failover_window: float | None = None, **scheduler: Any) -> HttpTransport:
    """An http transport for ``url`` with a quick retry budget (``scheduler`` overrides it)."""
    keys = {"rpc_retries": 3, "rpc_retry_wait": 0.01, "rpc_retry_max_wait": 0.05, **scheduler}
    config = Config().with_overrides(scheduler_url=url).with_section("scheduler", **keys)
    settings = {} if failover_window is None else {"failover_window": failover_window}
    return HttpTransport(TransportContext(config.scheduler, settings))


def events(output: str, name: str) -> list[dict[str, Any]]:
    """The JSON log records of ``output`` whose event is ``name``."""
    return [r for r in json_lines(output) if r.get("event") == name]


def ran(root: Path) -> list[str]:
    """The task ids in ran.log, one line per run."""
    path = root / "ran.log"
    return path.read_text(encoding="utf-8").split() if path.exists() else []


# --- a run finds the leader ----------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_a_dead_url_first_moves_on_to_the_leader(
    tmp_path: Path, marker: str, leader: Leader, mod: str
) -> None:
    """url = a port nothing listens on, then the leader: the run completes on the leader."""
    dead = f"http://127.0.0.1:{free_port()}"
    root = tmp_path / "out"
    root.mkdir()
    code, out = run_worker(
        tmp_path, marker, f"{dead}, {leader.url}", f"{mod}.All", "--root", str(root), "--count", "3"
    )
    assert code == 0, out
    assert sorted(ran(root)) == sorted(set(ran(root))) and len(ran(root)) == 4, ran(root)
    statuses = {
        t["task_id"]: t["status"] for t in leader.request("GET", "/api/v1/tasks").json()["tasks"]
    }
    assert len(statuses) == 4 and set(statuses.values()) == {"DONE"}, statuses
    moved = events(out, "no answer from a scheduler; trying the next URL")
    assert moved and moved[0]["to"] == leader.url, out[-3000:]
    assert TOKEN not in out


@pytest.mark.timeout(180)
def test_a_standby_first_sends_the_run_to_the_leader(
    tmp_path: Path, marker: str, leader: Leader, mod: str, stand_ins: list[StandIn]
) -> None:
    """url = a standby naming the leader, then the leader: the hint is followed at once, the
    server that answered is remembered, and the standby hears only the first calls."""
    standby = stand_in(stand_ins, leader.url)
    root = tmp_path / "out"
    root.mkdir()
    args = (f"{mod}.All", "--root", str(root), "--count", "5", "--workers", "2")
    code, out = run_worker(tmp_path, marker, f"{standby.url}, {leader.url}", *args)
    assert code == 0, out
    assert len(ran(root)) == 6 and len(set(ran(root))) == 6, ran(root)
    # the first registration (and the /health asked before it) reached the standby; after
    # the hint every call, the pinger's too, starts at the leader
    assert 1 <= len(standby.seen) <= 4, standby.seen
    followed = events(out, "following a standby to the leader")
    assert followed and followed[0]["to"] == leader.url, out[-3000:]
    assert TOKEN not in out


@pytest.mark.timeout(180)
def test_a_leader_only_a_hint_names_gets_the_token(
    tmp_path: Path, marker: str, leader: Leader, mod: str, stand_ins: list[StandIn]
) -> None:
    """url = one standby, whose hint names the leader (not in the configured list): the run
    completes there — the leader, which has a token, got it in the Authorization header."""
    standby = stand_in(stand_ins, leader.url)
    root = tmp_path / "out"
    root.mkdir()
    code, out = run_worker(
        tmp_path, marker, standby.url, f"{mod}.All", "--root", str(root), "--count", "2"
    )
    assert code == 0, out
    assert len(ran(root)) == 3, ran(root)
    posts = [auth for method, _path, auth in standby.seen if method == "POST"]
    assert posts and all(auth == f"Bearer {TOKEN}" for auth in posts), standby.seen
    assert TOKEN not in out


# --- hints that are not followed, loops that end --------------------------------------------------


@pytest.mark.parametrize(
    "hint",
    [
        "file:///etc/passwd",
        "ftp://127.0.0.1:{port}/",
        "javascript:alert(1)",
        "https://127.0.0.1:{port}",
    ],
)
def test_a_hint_of_another_scheme_is_not_followed(
    leader: Leader, stand_ins: list[StandIn], hint: str
) -> None:
    """A hint that is not an http URL (or not of the configured scheme: an http transport is
    not sent to https, nor an https one downgraded) is ignored: the call moves on to the next
    configured URL; the hinted server is never contacted."""
    hinted = stand_in(stand_ins)
    standby = stand_in(stand_ins, hint.format(port=hinted.port))
    http = transport(f"{standby.url}, {leader.url}", token=TOKEN)
    assert http.call(Ping("w-hint")) is not None
    assert hinted.connections == 0
    assert len(standby.seen) == 1, standby.seen


def test_standbys_naming_each_other_end_in_the_retry_budget(stand_ins: list[StandIn]) -> None:
    """Two standbys whose hints point at each other: each is followed once for free, then
    every hint counts; the call ends with the usual SchedulerUnavailable after rpc_retries
    attempts (no hang, no endless ping-pong)."""
    a = stand_in(stand_ins)
    b = stand_in(stand_ins, a.url)
    a.leader = b.url
    http = transport(a.url, rpc_retries=3)
    with pytest.raises(SchedulerUnavailable) as info:
        http.call(Ping("w-loop"))
    message = str(info.value)
    assert "did not answer /api/v1/ping after 3 attempt(s)" in message, message
    assert "standby and changes nothing" in message
    assert len(a.seen) + len(b.seen) <= 3 + 2, (a.seen, b.seen)
    assert TOKEN not in message


def test_one_url_fails_as_before(stand_ins: list[StandIn]) -> None:
    """One configured URL, a standby that knows no leader: rpc_retries attempts, the same
    error as a single scheduler always gave."""
    standby = stand_in(stand_ins)
    http = transport(standby.url, rpc_retries=2)
    with pytest.raises(SchedulerUnavailable) as info:
        http.call(Ping("w-one"))
    assert str(info.value).startswith(
        f"the scheduler at {standby.url} did not answer /api/v1/ping after 2 attempt(s): HTTP 503"
    ), info.value
    assert len(standby.seen) == 2


REFUSED = "the leader a standby named refused the call; using the configured URLs"


def logged(
    logs: list[MutableMapping[str, Any]], event: str, level: str = "warning"
) -> list[MutableMapping[str, Any]]:
    """The captured log records of ``event`` at ``level``."""
    return [e for e in logs if e.get("event") == event and e.get("log_level") == level]


@pytest.mark.parametrize("status", [401, 403])
def test_a_hinted_leader_that_refuses_is_left_for_the_configured_urls(
    leader: Leader, stand_ins: list[StandIn], status: int
) -> None:
    """A standby names a "leader" that refuses the worker (401/403: a proxy there that does
    not take the token): the call goes on to the configured URLs and the real leader answers
    it; the refusing server is not made the current one, and is not asked again, nor warned
    about again, by later calls."""
    refuser = stand_in(stand_ins, status=status)
    standby = stand_in(stand_ins, refuser.url)
    http = transport(f"{standby.url}, {leader.url}", token=TOKEN)
    with structlog.testing.capture_logs() as logs:
        assert http.call(Ping("w-refused")) is not None
        assert http.call(Ping("w-refused")) is not None
    assert [(m, p) for m, p, _ in refuser.seen] == [("POST", "/api/v1/ping")], refuser.seen
    assert len(standby.seen) == 1, standby.seen  # the second call started at the leader
    [warned] = logged(logs, REFUSED)
    assert warned["leader"] == refuser.url and f"HTTP {status}" in warned["reason"], warned
    assert leader.request("GET", "/api/v1/workers").json()["workers"], "the leader was not pinged"


def test_a_refusing_hint_with_no_other_leader_ends_the_call_saying_why(
    stand_ins: list[StandIn],
) -> None:
    """One configured URL, a standby naming a leader that answers 401: the hint is unusable,
    so the call ends as any call that finds no leader (SchedulerUnavailable, the worker keeps
    its results), its message naming the refusal; the next call does not ask that leader."""
    refuser = stand_in(stand_ins, status=401)
    standby = stand_in(stand_ins, refuser.url)
    http = transport(standby.url, rpc_retries=2, token=TOKEN)
    for _ in range(2):
        with pytest.raises(SchedulerUnavailable) as info:
            http.call(Ping("w-refused-only"))
        message = str(info.value)
        assert message.startswith(f"the scheduler at {standby.url} did not answer"), message
        assert f"the leader a standby named, {refuser.url}, was not used" in message, message
        assert "HTTP 401" in message and TOKEN not in message, message
    assert len(refuser.seen) == 1, refuser.seen
    # rpc_retries attempts per call, and the first call's free hint: asked once more
    assert len(standby.seen) == 2 + 1 + 2, standby.seen


def test_a_hinted_https_leader_whose_certificate_does_not_verify_is_left(
    tmp_path: Path, leader: Leader, stand_ins: list[StandIn]
) -> None:
    """https: a standby names a leader by an address its certificate does not cover (the
    certificate is for scheduler.example, the hint says 127.0.0.1): the call goes on to the
    configured URLs — a TLS proxy in front of the real leader — and succeeds there; the bad
    hint is tried once."""
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))

    def context(*names: str) -> ssl.SSLContext:
        made = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(*names).configure_cert(made)
        return made

    good = context("127.0.0.1", "localhost")
    front = stand_in(stand_ins, tls=good, forward=leader.port)
    elsewhere = stand_in(stand_ins, tls=context("scheduler.example"), forward=leader.port)
    standby = stand_in(stand_ins, elsewhere.url, tls=good)
    assert elsewhere.url.startswith("https://127.0.0.1:")
    http = transport(f"{standby.url}, {front.url}", token=TOKEN, ca_file=str(ca_file))
    with structlog.testing.capture_logs() as logs:
        assert http.call(Ping("w-tls")) is not None
        assert http.call(Ping("w-tls")) is not None
    assert elsewhere.connections == 1 and not elsewhere.seen, elsewhere.seen
    assert [auth for _, _, auth in front.seen] == [f"Bearer {TOKEN}"] * 2, front.seen
    assert len(standby.seen) == 1, standby.seen
    [warned] = logged(logs, REFUSED)
    assert "certificate did not verify" in warned["reason"], warned


def test_a_refusal_from_a_configured_url_is_raised_as_before(
    stand_ins: list[StandIn],
) -> None:
    """A configured URL that answers 401 is a refusal, not a hint: raised at once, as it
    always was (only a leader learnt from a hint is left for the list)."""
    refuser = stand_in(stand_ins, status=401)
    other = stand_in(stand_ins)
    http = transport(f"{refuser.url}, {other.url}")
    with pytest.raises(ConveyorError, match="HTTP 401") as info:
        http.call(Ping("w-configured"))
    assert not isinstance(info.value, SchedulerUnavailable)
    assert len(refuser.seen) == 1 and not other.seen


def test_an_ignored_hint_is_warned_about_once(stand_ins: list[StandIn]) -> None:
    """A standby (behind a load balancer, say) whose every answer names a leader of another
    scheme: one warning for that hint, however often it is ignored."""
    standby = stand_in(stand_ins, "https://127.0.0.1:1")
    http = transport(standby.url, rpc_retries=3)
    with structlog.testing.capture_logs() as logs:
        for _ in range(2):
            with pytest.raises(SchedulerUnavailable):
                http.call(Ping("w-ignored"))
    assert len(standby.seen) == 6, standby.seen
    event = "ignored a standby's leader hint: expected a URL of the configured scheme"
    [warned] = logged(logs, event)
    assert warned["leader"] == "https://127.0.0.1:1", warned


# --- riding out a fail-over -----------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_call_outlasts_a_failover_within_the_window(
    tmp_path: Path, marker: str, stand_ins: list[StandIn]
) -> None:
    """The leader's port is dead and the standby still names it (as a standby does until the
    lease runs out); then a scheduler comes up there. A call with a tiny rpc budget but
    several URLs keeps trying for failover_window seconds and is answered by it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    standby = stand_in(stand_ins, url)
    config = tmp_path / "server.toml"
    config.write_text("", encoding="utf-8")
    late = Leader(tmp_path, config, child_env(tmp_path, MARKER, marker), port=port)
    late.token = ""
    http = transport(f"{url}, {standby.url}", failover_window=90, rpc_retries=2)
    answer: list[Any] = []
    caller = threading.Thread(target=lambda: answer.append(http.call(Ping("w-late"))))
    caller.start()
    try:
        # the call is failing over (the dead port, the standby's stale hint) when the
        # scheduler comes up; its rpc_retries alone would have given up long before
        wait_for(lambda: len(standby.seen) >= 3, 30, "the standby to be asked again")
        assert not answer
        late.start(timeout=60)
        caller.join(timeout=100)
        assert answer, "the call did not get through"
    finally:
        caller.join(timeout=100)
        late.kill()


def test_several_dead_urls_fail_after_the_window(tmp_path: Path) -> None:
    """Every URL dead: the call gives up once both rpc_retries attempts and failover_window
    seconds are spent, naming every scheduler."""
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    http = transport(", ".join(urls), failover_window=1.0, rpc_retries=2)
    started = time.monotonic()
    with pytest.raises(SchedulerUnavailable) as info:
        http.call(Ping("w-dead"))
    assert time.monotonic() - started >= 1.0
    message = str(info.value)
    assert message.startswith(f"the schedulers at {urls[0]}, {urls[1]} did not answer"), message
    assert "ConnectionRefusedError" in message


@pytest.mark.timeout(240)
def test_a_running_task_survives_the_leader_going_away(
    tmp_path: Path, marker: str, leader: Leader, mod: str, stand_ins: list[StandIn]
) -> None:
    """The leader is killed (kill -9) while a task runs, a standby names the dead leader, and
    the leader comes back on its state: the task keeps running, its result reaches the
    leader, nothing fails and nothing runs twice — with the default retry settings."""
    standby = stand_in(stand_ins, leader.url)
    root = tmp_path / "out"
    root.mkdir()
    args = (f"{mod}.All", "--root", str(root), "--count", "3", "--gated")
    result: list[tuple[int, str]] = []
    worker = threading.Thread(
        target=lambda: result.append(
            run_worker(tmp_path, marker, f"{leader.url}, {standby.url}", *args, timeout=200)
        )
    )
    worker.start()
    try:
        assert wait_file(root / "gate.pid", 90), "the gated task never started"
        leader.kill()
        seen = len(standby.seen)
        wait_for(lambda: len(standby.seen) > seen, 60, "the worker to ask the standby")
        put(root / "gate.go", "")
        assert wait_file(root / "part-0.out", 60)
        leader.start()
    finally:
        worker.join(timeout=210)
    assert result, "the worker did not end"
    code, out = result[0]
    assert code == 0, out[-4000:]
    assert len(ran(root)) == 4 and len(set(ran(root))) == 4, ran(root)
    listed = leader.request("GET", "/api/v1/tasks").json()["tasks"]
    assert {t["status"] for t in listed} == {"DONE"} and len(listed) == 4, listed
    assert not events(out, "gave up reporting to the scheduler")


# --- configuration -------------------------------------------------------------------------------


def test_a_toml_list_and_a_comma_string_give_the_same_urls(tmp_path: Path) -> None:
    """A TOML list, or one string of comma-separated URLs (a variable, --scheduler-url), are
    kept as the URLs joined by ", "; ``urls`` splits them; one URL stays as it was."""
    (tmp_path / "worker.toml").write_text(
        '[scheduler]\nurl = ["http://a:8082", "https://b.example/x/"]\n', encoding="utf-8"
    )
    from_file = load_config(cwd=tmp_path, env={})
    assert from_file.scheduler.url == "http://a:8082, https://b.example/x/"
    assert from_file.scheduler.urls == ("http://a:8082", "https://b.example/x/")
    from_env = load_config(
        cwd=tmp_path, env={"CONVEYOR_SCHEDULER__URL": "http://a:8082,https://b.example/x/ "}
    )
    assert from_env.scheduler.urls == from_file.scheduler.urls
    single = Config().with_overrides(scheduler_url="http://one:1")
    assert single.scheduler.url == "http://one:1" and single.scheduler.urls == ("http://one:1",)


def test_a_bad_url_in_the_list_is_named(tmp_path: Path) -> None:
    """A URL of the list that is not http(s): one error naming it (credentials hidden)."""
    (tmp_path / "worker.toml").write_text(
        '[scheduler]\nurl = ["http://a:8082", "ftp://user:pw@b"]\n', encoding="utf-8"
    )
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, env={})
    assert str(info.value) == (
        'worker.toml: scheduler.url = ["http://a:8082", "ftp://***@b"] lists "ftp://***@b", '
        "which is invalid; expected each URL to be an http:// or https:// URL"
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://a:8082/x,y", '"y"'),
        ("http://u:p,w@host:8082", "URL 2"),  # the password's tail is not shown
        ("http://a:8082,", '""'),
    ],
)
def test_a_comma_in_a_url_gets_a_clear_error(url: str, shown: str) -> None:
    """A comma always separates URLs: a URL with one is cut in two, and the part that is no
    URL is named (or, if it is part of a hidden password, counted) with the way out, %2C."""
    with pytest.raises(ConfigError) as info:
        load_config(env={"CONVEYOR_SCHEDULER__URL": url})
    message = str(info.value)
    assert f" lists {shown}, which is invalid; " in message, message
    assert message.endswith("(a comma separates URLs: write one inside a URL as %2C)"), message
    assert "p,w" not in message and "w@" not in message


def test_mixed_schemes_are_refused() -> None:
    """http and https URLs together: the transport refuses the configuration."""
    config = Config().with_overrides(scheduler_url="http://a:1, https://b:2")
    with pytest.raises(ConfigError, match="mixes http:// and https:// URLs"):
        HttpTransport(config)


@pytest.mark.timeout(120)
def test_conveyor_config_shows_the_list_and_exits_2_on_a_bad_one(
    tmp_path: Path, marker: str
) -> None:
    """``conveyor config`` prints several URLs as a TOML list (read back, the same); a bad one
    is exit 2 with one line naming it, no traceback, no secret."""
    env = child_env(tmp_path, MARKER, marker)
    env["CONVEYOR_SCHEDULER__URL"] = "http://a:8082, http://u:pw@b:8082"
    shown = subprocess.run(
        [sys.executable, "-m", "conveyor", "config"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert tomllib.loads(shown.stdout)["scheduler"]["url"] == ["http://a:8082", "http://***@b:8082"]
    assert "u:pw" not in shown.stdout
    env["CONVEYOR_SCHEDULER__URL"] = "http://a:8082, gopher://u:pw@b"
    bad = subprocess.run(
        [sys.executable, "-m", "conveyor", "config"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2, bad
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1, bad.stderr
    assert '"gopher://***@b"' in lines[0] and "Traceback" not in bad.stderr
    assert "u:pw" not in bad.stderr


@pytest.mark.timeout(120)
def test_failover_window_is_checked_like_any_key(tmp_path: Path, marker: str) -> None:
    """``[schedulers.http] failover_window`` is the http transport's own key: shown by
    ``conveyor config``, and a bad value is exit 2 naming it."""
    env = child_env(tmp_path, MARKER, marker)
    toml = '[scheduler]\ntransport = "http"\nurl = ["http://a:1", "http://b:2"]\n'
    (tmp_path / "worker.toml").write_text(
        toml + "[schedulers.http]\nfailover_window = 45\n", encoding="utf-8"
    )
    command = [sys.executable, "-m", "conveyor", "config"]
    good = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert good.returncode == 0, good.stderr
    assert tomllib.loads(good.stdout)["schedulers"]["http"]["failover_window"] == 45
    (tmp_path / "worker.toml").write_text(
        toml + "[schedulers.http]\nfailover_window = -1\n", encoding="utf-8"
    )
    bad = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2, bad
    assert bad.stderr.strip() == (
        f"conveyor: error: {tmp_path / 'worker.toml'}: schedulers.http.failover_window = -1 is "
        "out of range; expected a number of seconds >= 0"
    )
