"""The web UI's HTTP side (SPEC §9, the routes of the UI contract), without a browser.

Every server is a real ``conveyor scheduler`` subprocess on a free loopback port with real
SQLite state, asked through the standard library's ``http.client``; what workers cause is
caused by real ``python -m conveyor run`` workers talking HTTP to it. Tasks that only need to
exist are registered cheaply through ``POST /api/v1/add_tasks`` (and failed through
``get_work`` / ``task_failed``, as a worker would). Two things run in this process instead: a
state store that is not SQLite (mirrored for the UI), served by the real app on the
real uvicorn on loopback, and the schema migration of a hand-made version-1 database opened
with :class:`~conveyor.server.stores.SqliteStore`. Nothing is mocked; every wait polls with a
deadline, and every process a test starts carries a marker and is killed afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.resources
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote, urlencode

import pytest

from conveyor.errors import ConfigError
from conveyor.protocol import TaskFilters, TaskStatus
from conveyor.scheduler.persist import from_row, to_row
from conveyor.scheduler.policy import SchedulerCore, TaskRecord
from conveyor.server.sqlite.store import SCHEMA_VERSION as SQLITE_SCHEMA
from conveyor.server.stores import SqliteStore, StoreContext
from conveyor.server.webui import SESSION_COOKIE
from conveyor.testing.processes import (
    Reply,
    SchedulerProcess,
    child_env,
    free_port,
    http_request,
    kill_marked,
    put,
    serve_app,
    wait_for,
)

MARKER_VARIABLE = "UIAPITEST_MARKER"  # not CONVEYOR_*: those are configuration overrides
LOOPBACK = "127.0.0.1"
HOST = socket.gethostname()
TOKEN = "ui-token-7Qx9-kept"
STATES = ("PENDING", "RUNNING", "DONE", "FAILED", "DISABLED", "UNKNOWN")
ROW_KEYS = {
    "task_id",
    "family",
    "params",
    "status",
    "worker",
    "priority",
    "status_message",
    "progress",
    "changed",
}
DETAIL_KEYS = {
    "task_id",
    "family",
    "module",
    "params",
    "status",
    "worker",
    "priority",
    "resources",
    "deps",
    "dependents",
    "dependents_total",
    "status_message",
    "progress",
    "tracking_url",
    "explanation",
    "failures",
    "retry_count",
    "attempts",
    "blocked_by",
}
# secrets the populated scheduler holds: two parameters of a worker's task, one of a task
# registered through the API (each also written into texts the UI shows)
PASSWORD = "Hunter2-PW-q8r7"
API_TOKEN = "TokVal-998877-zz"
API_SECRET = "ApiSide-Secret-31337"
SECRETS = (PASSWORD, API_TOKEN, API_SECRET)
QUICK_WORKER = {
    "CONVEYOR_WORKER__WAIT_INTERVAL": "0.1",
    "CONVEYOR_WORKER__WAIT_JITTER": "0",
    "CONVEYOR_WORKER__PING_INTERVAL": "0.2",
}

PIPELINE = f"""
import os

import conveyor


class _Base(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        name = type(self).__name__ + "-" + "-".join(self.to_str_params().values())[-8:]
        return conveyor.LocalTarget(os.path.join(self.root, name.replace("/", "_")))

    def run(self):
        with self.output().open("w") as out:
            out.write("ok")


class Good(_Base):
    n = conveyor.IntParameter()

    def run(self):
        self.set_status_message(f"quokka {{self.n}} ran")
        super().run()


class Bad(_Base):
    password = conveyor.Parameter(default={PASSWORD!r})
    api_token = conveyor.Parameter(default={API_TOKEN!r})

    def run(self):
        self.set_status_message(f"connecting with {{self.api_token}}")
        raise ValueError(f"cannot connect with {{self.password}} and {{self.api_token}}")


class Middle(_Base):
    def requires(self):
        return Bad(root=self.root)


class Top(_Base):
    def requires(self):
        return [Middle(root=self.root), Good(root=self.root, n=0)]


class Fragile(_Base):
    retry_count = 1

    def run(self):
        raise RuntimeError("fragile broke")


class Pipeline(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [
            Top(root=self.root),
            Good(root=self.root, n=1),
            Good(root=self.root, n=2),
            Fragile(root=self.root),
        ]
"""

ACTIONS = """
import os

import conveyor
from conveyor.testing.processes import put, wait_file


class _Base(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        name = type(self).__name__ + "".join(self.to_str_params().values())[-3:]
        return conveyor.LocalTarget(os.path.join(self.root, name.replace("/", "_")))


class Flaky(_Base):
    def run(self):
        raise RuntimeError("flaky failed")


class Fragile(_Base):
    retry_count = 1

    def run(self):
        raise RuntimeError("fragile failed")


class Fine(_Base):
    def run(self):
        with self.output().open("w") as out:
            out.write("ok")


class Batch(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Flaky(root=self.root), Fragile(root=self.root), Fine(root=self.root)]


class BadA(_Base):
    n = conveyor.IntParameter()

    def run(self):
        raise RuntimeError("a failed")


class BadB(_Base):
    def run(self):
        raise RuntimeError("b failed")


class AllBad(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [BadA(root=self.root, n=0), BadA(root=self.root, n=1), BadB(root=self.root)]


class Gated(_Base):
    '''Holds one unit of the db resource until the file gate exists in root (bounded).'''

    resources = {"db": 1}

    def run(self):
        put(os.path.join(self.root, "started"), str(os.getpid()))
        if not wait_file(os.path.join(self.root, "gate"), 50):
            raise RuntimeError("the gate never opened")
        with self.output().open("w") as out:
            out.write("ok")
"""


# --- helpers -------------------------------------------------------------------------------------


class UiServer(SchedulerProcess):
    """A ``conveyor scheduler`` subprocess with request helpers for the UI and the API."""

    def __init__(
        self,
        directory: Path,
        config_text: str,
        marker: str,
        token: str = "",
        flags: Sequence[str] = (),
    ) -> None:
        """Describe the server (config written into ``directory``; ``token`` is the one that
        config sets); nothing is started yet."""
        config = directory / "server.toml"
        config.write_text(config_text, encoding="utf-8")
        env = child_env(directory, MARKER_VARIABLE, marker)
        super().__init__(directory, config, env, flags=flags)
        self.token = token

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        cookie: str | None = None,
        headers: Mapping[str, str | None] | None = None,
    ) -> Reply:
        """:meth:`SchedulerProcess.request`, with ``cookie`` sent as the session cookie."""
        sent: dict[str, str | None] = {}
        if cookie is not None:
            sent["Cookie"] = f"{SESSION_COOKIE}={cookie}"
        sent.update(headers or {})
        return super().request(method, path, body, sent)

    def ui(self, path: str, cookie: str | None = None) -> Any:
        """GET a UI route; its JSON (asserting 200)."""
        reply = self.request("GET", path, cookie=cookie)
        assert reply.status == 200, (path, reply)
        return reply.json()

    def act(self, action: str, body: Any, cookie: str | None = None) -> dict[str, Any]:
        """POST a UI action; its JSON answer (asserting 200)."""
        reply = self.request("POST", f"/ui/api/{action}", body, cookie=cookie)
        assert reply.status == 200, (action, body, reply)
        answer: dict[str, Any] = reply.json()
        return answer

    def api(self, route: str, body: Any) -> Any:
        """POST to the worker API ``/api/v1/<route>`` (with the token if there is one)."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        reply = self.request("POST", f"/api/v1/{route}", body, headers=headers)
        assert reply.status == 200, (route, body, reply)
        return reply.json()

    def api_tasks(self) -> dict[str, dict[str, Any]]:
        """The worker API's task list (``GET /api/v1/tasks``) by task id."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        reply = self.request("GET", "/api/v1/tasks", headers=headers)
        assert reply.status == 200, reply
        return {t["task_id"]: t for t in reply.json()["tasks"]}

    def register(self, worker_id: str, *specs: dict[str, Any]) -> None:
        """Register tasks (TaskSpec dicts) on behalf of ``worker_id``."""
        self.api("add_tasks", {"worker_id": worker_id, "tasks": list(specs)})

    def fail(
        self, worker_id: str, task_id: str, explanation: str = "it broke", **spec: Any
    ) -> None:
        """Register ``task_id`` for ``worker_id`` (family F unless ``spec`` says; a
        registration replaces the family and parameters), hand it out and report it failed."""
        self.register(worker_id, {"task_id": task_id, "family": "F", **spec})
        work = self.api("get_work", {"worker_id": worker_id})["work"]
        assert work is not None and work["task_id"] == task_id, work
        body = {"worker_id": worker_id, "task_id": task_id, "explanation": explanation}
        self.api("task_failed", {**body, "attempt": work["attempt"]})

    def login(self) -> str:
        """Sign in with the token; the session cookie's value."""
        reply = self.request("POST", "/ui/login", {"token": self.token})
        assert reply.status == 200, reply
        name, value, _ = parse_cookie(reply.headers["set-cookie"])
        assert name == SESSION_COOKIE
        return value

    def detail(self, task_id: str, cookie: str | None = None) -> dict[str, Any]:
        """The task detail the UI shows."""
        task: dict[str, Any] = self.ui(f"/ui/api/task?id={quote(task_id)}", cookie)["task"]
        return task

    def listed(self, cookie: str | None = None, **filters: str) -> list[dict[str, Any]]:
        """Every row of the filtered task list (one page of the largest size)."""
        answer = self.ui("/ui/api/tasks?" + urlencode({**filters, "limit": "500"}), cookie)
        assert answer["next"] is None, "more than one page"
        rows: list[dict[str, Any]] = answer["tasks"]
        return rows

    def stderr_text(self) -> str:
        """Everything the server wrote on stderr so far."""
        return self.stderr.read_text(encoding="utf-8", errors="replace")

    def events(self) -> list[dict[str, Any]]:
        """The server's JSON log lines on stderr so far."""
        found = []
        for line in self.stderr_text().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        return found

    def audits(self) -> list[dict[str, Any]]:
        """The audit log lines of UI actions so far."""
        return [e for e in self.events() if "action" in e]


def parse_cookie(header: str) -> tuple[str, str, dict[str, str]]:
    """A Set-Cookie header: name, value and the attributes (names lower-case)."""
    first, *rest = (part.strip() for part in header.split(";"))
    name, _, value = first.partition("=")
    attributes = {}
    for part in rest:
        key, _, attr = part.partition("=")
        attributes[key.strip().lower()] = attr.strip()
    return name, value, attributes


def csp_directives(value: str) -> dict[str, list[str]]:
    """A Content-Security-Policy header as directive -> sources."""
    directives = {}
    for part in value.split(";"):
        words = part.split()
        if words:
            directives[words[0].lower()] = words[1:]
    return directives


def check_security_headers(reply: Reply, what: str) -> None:
    """SPEC §9's headers: a strict CSP and nosniff."""
    csp = reply.headers.get("content-security-policy")
    assert csp, (what, reply.headers)
    directives = csp_directives(csp)
    assert directives.get("default-src") == ["'self'"], (what, csp)
    assert directives.get("frame-ancestors") == ["'none'"], (what, csp)
    assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp, (what, csp)
    for sources in directives.values():
        assert "*" not in sources and "data:" not in directives.get("script-src", []), (what, csp)
    assert reply.headers.get("x-content-type-options") == "nosniff", (what, reply.headers)


def packaged_ui_files() -> dict[str, bytes]:
    """The UI's files as the package ships them."""
    directory = importlib.resources.files("conveyor.server").joinpath("ui")
    return {e.name: e.read_bytes() for e in directory.iterdir() if e.is_file()}


def walk_pages(
    server: UiServer, limit: int, cursor: str | None = None, **filters: str
) -> list[list[dict[str, Any]]]:
    """Every page of the task list from ``cursor`` on, following ``next``."""
    pages = []
    while True:
        query = {**filters, "limit": str(limit), **({"cursor": cursor} if cursor else {})}
        answer = server.ui("/ui/api/tasks?" + urlencode(query))
        pages.append(answer["tasks"])
        cursor = answer["next"]
        if cursor is None:
            return pages
        assert isinstance(cursor, str), answer
        assert len(pages) < 1000, "the pages never end"


def ids_of(rows: Sequence[dict[str, Any]], key: str = "task_id") -> list[str]:
    return [row[key] for row in rows]


def run_worker(
    server: UiServer, module: str, target: str, root: Path, marker: str, *flags: str
) -> subprocess.CompletedProcess[str]:
    """``conveyor run <module>.<target> --root <root>`` against ``server``, to its end."""
    root.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [
            *(sys.executable, "-m", "conveyor", "run", f"{module}.{target}"),
            *("--root", str(root), "--scheduler-url", server.url, *flags),
        ],
        cwd=server.directory,
        env=child_env(server.directory, MARKER_VARIABLE, marker, **QUICK_WORKER),
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )


def by_family(server: UiServer, root: Path) -> dict[str, str]:
    """Family (with ``n`` appended when the task has it) -> task id, for tasks of ``root``."""
    found = {}
    for task_id, task in server.api_tasks().items():
        if task["params"].get("root") == str(root):
            found[task["family"] + task["params"].get("n", "")] = task_id
    return found


def ref(task_id: str, family: str, status: str) -> dict[str, str]:
    return {"task_id": task_id, "family": family, "status": status}


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def marker() -> Iterator[str]:
    """A per-test marker: every process carrying it is killed when the test ends."""
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER_VARIABLE, value)


@pytest.fixture
def start(tmp_path: Path, marker: str) -> Iterator[Callable[..., UiServer]]:
    """Start a scheduler of this test alone: ``start(config_text, token="")``."""
    servers: list[UiServer] = []

    def build(config_text: str = "", token: str = "", flags: Sequence[str] = ()) -> UiServer:
        directory = tmp_path / f"server{len(servers)}"
        directory.mkdir()
        server = UiServer(directory, config_text, marker, token, flags)
        servers.append(server)
        server.start()
        return server

    yield build
    for server in servers:
        server.kill()


def _module_server(
    factory: pytest.TempPathFactory, name: str, config: str, token: str = ""
) -> Iterator[UiServer]:
    value = uuid.uuid4().hex
    server = UiServer(factory.mktemp(name), config, value, token)
    try:
        server.start()
        yield server
    finally:
        server.kill()
        kill_marked(MARKER_VARIABLE, value)


@dataclass
class Populated:
    """A scheduler after a real worker ran a pipeline (and an API client added three tasks)."""

    server: UiServer
    root: Path
    ids: dict[str, str]
    """Good0, Good1, Good2, Bad, Middle, Top, Fragile, Pipeline, Api, Running, Unknown."""
    worker: str
    """The id of the real worker."""
    api_explanation: str
    """The (long) explanation the API client reported for the Api task, secret included."""


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Populated]:
    """Three DONE, two FAILED, one DISABLED, three PENDING (behind the failures), one RUNNING
    and one UNKNOWN task: the pipeline by a real worker, the last three through the API."""
    config = "[scheduler]\nretry_delay = 3600\nworker_disconnect_delay = 900\n"
    for server in _module_server(tmp_path_factory, "populated", config):
        (server.directory / "uiapi_pipeline.py").write_text(PIPELINE, encoding="utf-8")
        root = server.directory / "out"
        ran = run_worker(server, "uiapi_pipeline", "Pipeline", root, uuid.uuid4().hex)
        assert ran.returncode == 1, ran.stdout + ran.stderr
        ids = by_family(server, root)
        assert sorted(ids) == sorted(
            ["Good0", "Good1", "Good2", "Bad", "Middle", "Top", "Fragile", "Pipeline"]
        ), ids
        api = "api-worker"
        explanation = "".join(f"line {n}: nothing to see here\n" for n in range(800))
        explanation += f"connect failed for password {API_SECRET}\n" + explanation
        server.register(
            api,
            {
                "task_id": "api-side-task",
                "family": "ApiSide",
                "module": "elsewhere",
                "params": {"password": API_SECRET, "region": "eu-WEST-3"},
                "priority": 5,
            },
        )
        work = server.api("get_work", {"worker_id": api})["work"]
        assert work["task_id"] == "api-side-task", work
        failure = {"worker_id": api, "task_id": "api-side-task", "explanation": explanation}
        server.api("task_failed", {**failure, "attempt": work["attempt"]})
        for kind, value in [
            ("status_message", f"retrying with {API_SECRET} soon"),
            ("progress", 42),
            ("tracking_url", f"https://track.example/run/{API_SECRET}/log"),
        ]:
            server.api("annotate", {"task_id": "api-side-task", "kind": kind, "value": value})
        server.register(api, {"task_id": "api-running", "family": "ApiSide"})
        work = server.api("get_work", {"worker_id": api})["work"]
        assert work["task_id"] == "api-running", work
        server.register(api, {"task_id": "api-unknown", "family": "ApiSide", "status": "UNKNOWN"})
        ids.update(Api="api-side-task", Running="api-running", Unknown="api-unknown")
        workers = {w["worker_id"] for w in server.ui("/ui/api/workers")["workers"]}
        (worker,) = workers - {api}
        yield Populated(server, root, ids, worker, explanation)


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """A scheduler with ``[server] token`` and one FAILED task, ``tok-task``."""
    config = f'[server]\ntoken = "{TOKEN}"\n'
    for server in _module_server(tmp_path_factory, "token", config, TOKEN):
        server.fail("tok-worker", "tok-task")
        yield server


def _get_routes(task_id: str) -> list[str]:
    """Every UI data route (with the ids they need)."""
    quoted = quote(task_id)
    return [
        "/ui/api/summary",
        "/ui/api/changes?since=0",
        "/ui/api/families",
        "/ui/api/tasks",
        "/ui/api/tasks?state=FAILED&limit=5",
        f"/ui/api/task?id={quoted}",
        f"/ui/api/graph?id={quoted}",
        f"/ui/api/graph?id={quoted}&down=1",
        "/ui/api/workers",
    ]


# --- the page ------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["open", "token"])
def test_root_and_ui_redirect_to_the_ui_directory(
    request: pytest.FixtureRequest, which: str
) -> None:
    """GET / and GET /ui answer 307 to the relative 'ui/'; GET /ui/ is the packaged
    index.html as text/html (also before signing in, which the page itself asks for)."""
    server = (
        request.getfixturevalue("populated").server
        if which == "open"
        else request.getfixturevalue("token_server")
    )
    for path in ("/", "/ui"):
        reply = server.request("GET", path)
        assert reply.status == 307, (path, reply)
        assert reply.headers["location"] == "ui/", (path, reply.headers)
    page = server.request("GET", "/ui/")
    assert page.status == 200, page
    assert page.headers["content-type"].split(";")[0] == "text/html"
    assert page.body == packaged_ui_files()["index.html"]


def test_every_packaged_file_is_served_with_its_type_and_nothing_else(populated: Populated) -> None:
    """Each file of the UI package is served under /ui/<name> with its content type; names
    not in the package (including traversal attempts) are 404."""
    server = populated.server
    kinds = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
    files = packaged_ui_files()
    assert {"index.html"} <= set(files)
    for name, data in files.items():
        suffix = os.path.splitext(name)[1]
        if suffix not in kinds:
            continue
        reply = server.request("GET", f"/ui/{name}")
        assert reply.status == 200, (name, reply)
        assert reply.headers["content-type"].split(";")[0] == kinds[suffix], (name, reply.headers)
        assert reply.body == data, name
    for name in [
        "nope.js",
        "index.htm",
        "INDEX.HTML",
        ".hidden",
        "..%2Fapp.py",
        "%2e%2e/app.py",
        "..%2F..%2Fpyproject.toml",
        "__init__.py",
        "api",
    ]:
        reply = server.request("GET", f"/ui/{name}")
        assert reply.status == 404, (name, reply)


@pytest.mark.parametrize("which", ["open", "token"])
def test_every_ui_and_api_answer_carries_the_security_headers(
    request: pytest.FixtureRequest, which: str
) -> None:
    """Successes, redirects and refusals of every kind, of the UI and of the API, carry a CSP
    with default-src 'self' and frame-ancestors 'none', no unsafe-inline or unsafe-eval, and
    X-Content-Type-Options: nosniff."""
    if which == "open":
        server = request.getfixturevalue("populated").server
        task_id = "api-side-task"
    else:
        server = request.getfixturevalue("token_server")
        task_id = "tok-task"
    cookie = server.login() if server.token else None
    bearer: dict[str, str | None] = {}
    if server.token:
        bearer["Authorization"] = f"Bearer {server.token}"
    files = [f"/ui/{name}" for name in packaged_ui_files()]
    gets = ["/", "/ui", "/ui/", *files, "/ui/missing.js", "/ui/api/session", "/ui/api/nope"]
    gets += [*_get_routes(task_id), "/ui/api/task?id=no-such", "/ui/api/task", "/health"]
    gets += ["/ui/api/tasks?limit=0", "/openapi.json"]
    replies: list[tuple[str, Reply]] = []
    for path in gets:
        replies.append((path, server.request("GET", path)))
        replies.append((f"{path} (signed in)", server.request("GET", path, cookie=cookie)))
    for path in ("/api/v1/tasks", "/api/v1/workers"):
        replies.append((path, server.request("GET", path, headers=bearer)))
        replies.append((f"{path} (no token)", server.request("GET", path)))
    posts: list[tuple[str, Any, Mapping[str, str | None]]] = [
        ("/ui/login", {"token": "wrong"}, {}),
        ("/ui/login", b"{", {}),
        ("/ui/api/retry", {"task_ids": ["no-such"]}, {}),
        ("/ui/api/retry", {"task_ids": "x"}, {}),
        ("/ui/api/retry", b"task_ids=x", {"Content-Type": "application/x-www-form-urlencoded"}),
        ("/ui/api/reenable", {"task_ids": ["no-such"]}, {"Origin": "http://evil.example"}),
        ("/ui/api/summary", {}, {}),
        ("/api/v1/ping", {"worker_id": "hdr"}, bearer),
        ("/api/v1/ping", {"worker_id": "hdr"}, {}),
        ("/ui/api/retry", {"task_ids": ["x"]}, {"Host": "evil.example"}),
    ]
    for path, body, headers in posts:
        for session in (None, cookie):
            reply = server.request("POST", path, body, cookie=session, headers=headers)
            replies.append((f"POST {path} {headers}", reply))
    statuses = {reply.status for _, reply in replies}
    assert {200, 307, 401 if server.token else 200, 403, 404, 405, 415, 421, 422} <= statuses
    for what, reply in replies:
        check_security_headers(reply, what)


# --- access ----------------------------------------------------------------------------------


def test_with_a_token_every_data_and_action_route_needs_a_session(token_server: UiServer) -> None:
    """Without a session cookie (none, a forged one, or only the API's bearer token) every
    /ui/api route but session answers 401 JSON, and no action changes anything."""
    before = token_server.api_tasks()
    audits = len(token_server.audits())
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    forged = "A" * 43
    for path in _get_routes("tok-task"):
        for cookie, headers in [(None, {}), (forged, {}), (None, bearer), (TOKEN, {})]:
            reply = token_server.request("GET", path, cookie=cookie, headers=headers)
            assert reply.status == 401, (path, cookie, headers, reply)
            assert reply.error(), reply
    actions = [
        ("retry", {"task_ids": ["tok-task"]}),
        ("reenable", {"task_ids": ["tok-task"]}),
        ("retry-failed", {"family": "", "worker": "", "q": ""}),
    ]
    for action, body in actions:
        for cookie in (None, forged, TOKEN):
            reply = token_server.request("POST", f"/ui/api/{action}", body, cookie=cookie)
            assert reply.status == 401, (action, cookie, reply)
    assert token_server.api_tasks() == before
    assert token_server.api_tasks()["tok-task"]["status"] == "FAILED"
    assert len(token_server.audits()) == audits


def test_the_session_route_says_a_sign_in_is_needed(token_server: UiServer) -> None:
    """GET /ui/api/session never answers 401: it says a token is needed and nobody is
    signed in (with no cookie or a forged one)."""
    for cookie in (None, "forged-session-id"):
        reply = token_server.request("GET", "/ui/api/session", cookie=cookie)
        assert reply.status == 200, reply
        assert reply.json() == {"auth_required": True, "signed_in": False}


def test_a_wrong_token_is_refused_and_logged_without_the_token(token_server: UiServer) -> None:
    """POST /ui/login with wrong tokens: 401 JSON and no cookie; each leaves a log line about
    the refused sign-in, and no wrong token (nor the right one) is anywhere on stderr."""
    wrong = [f"wrong-{uuid.uuid4().hex}", f"{TOKEN}-{uuid.uuid4().hex}", f"X{uuid.uuid4().hex}"]

    def refusals() -> list[str]:
        lines = token_server.stderr_text().splitlines()
        return [line for line in lines if "sign" in line.lower() and "refused" in line.lower()]

    already = len(refusals())
    for n, token in enumerate(wrong, start=1):
        reply = token_server.request("POST", "/ui/login", {"token": token})
        assert reply.status == 401, (token, reply)
        assert reply.error()
        assert "set-cookie" not in reply.headers, reply.headers

        def logged(count: int = already + n) -> bool:
            return len(refusals()) >= count

        wait_for(logged, 30, "the refusal's log line")
    stderr = token_server.stderr_text()
    for token in wrong:
        assert token not in stderr, token
    assert TOKEN not in stderr
    for body, field in [({"token": 5}, "token"), ({}, "token"), ({"token": None}, "token")]:
        reply = token_server.request("POST", "/ui/login", body)
        assert reply.status == 422, (body, reply)
        assert reply.json().get("field") == field, reply
    assert token_server.request("GET", "/ui/api/summary").status == 401


def test_the_right_token_gives_a_strict_cookie_that_opens_every_read(
    token_server: UiServer,
) -> None:
    """POST /ui/login with the token: 200 {signed_in: true} and a session cookie that is
    HttpOnly, SameSite=Strict and has no Path (the browser's default: the UI's directory,
    under any proxy prefix); with it every UI read answers 200 and the session says signed in.
    The cookie's value is never logged."""
    reply = token_server.request("POST", "/ui/login", {"token": TOKEN})
    assert reply.status == 200, reply
    assert reply.json() == {"signed_in": True}
    name, value, attributes = parse_cookie(reply.headers["set-cookie"])
    assert name == SESSION_COOKIE
    assert len(value) >= 32 and TOKEN not in value, value
    assert "httponly" in attributes, attributes
    assert attributes.get("samesite", "").lower() == "strict", attributes
    assert "path" not in attributes, attributes
    for path in _get_routes("tok-task"):
        answer = token_server.ui(path, cookie=value)
        assert isinstance(answer, dict), (path, answer)
    assert token_server.detail("tok-task", value)["status"] in STATES
    session = token_server.ui("/ui/api/session", cookie=value)
    assert session == {"auth_required": True, "signed_in": True}
    assert value not in token_server.stderr_text()


def test_sign_out_ends_the_session(token_server: UiServer) -> None:
    """POST /ui/logout answers {signed_in: false} and clears the cookie; the old cookie then
    gets 401 everywhere, while another browser's session stays valid."""
    cookie, other = token_server.login(), token_server.login()
    assert cookie != other
    assert token_server.request("GET", "/ui/api/summary", cookie=cookie).status == 200
    reply = token_server.request("POST", "/ui/logout", {}, cookie=cookie)
    assert reply.status == 200, reply
    assert reply.json() == {"signed_in": False}
    name, value, attributes = parse_cookie(reply.headers["set-cookie"])
    assert name == SESSION_COOKIE
    assert value in ("", '""') and attributes.get("max-age") == "0", reply.headers
    assert "path" not in attributes, attributes  # the same (default) path as the sign-in's
    for path in _get_routes("tok-task"):
        assert token_server.request("GET", path, cookie=cookie).status == 401, path
    session = token_server.ui("/ui/api/session", cookie=cookie)
    assert session == {"auth_required": True, "signed_in": False}
    assert token_server.request("GET", "/ui/api/summary", cookie=other).status == 200


def test_without_a_token_everything_is_open(populated: Populated) -> None:
    """No [server] token: the session says so, every read answers 200 without a cookie, and
    a sign-in (with anything) is a 200 that sets no cookie."""
    server = populated.server
    assert server.ui("/ui/api/session") == {"auth_required": False, "signed_in": True}
    for path in _get_routes(populated.ids["Bad"]):
        server.ui(path)
    reply = server.request("POST", "/ui/login", {"token": "anything"})
    assert reply.status == 200 and reply.json() == {"signed_in": True}, reply
    assert "set-cookie" not in reply.headers


# --- what a POST must be --------------------------------------------------------------------


def test_action_posts_that_are_not_json_from_this_origin_are_refused(
    start: Callable[..., UiServer],
) -> None:
    """Form and text bodies get 415, another site's Origin 403, malformed JSON 400 and
    mistyped fields 422 naming the field; none changes anything or writes an audit line. The
    same request as plain JSON from the server's own origin then works."""
    server = start("[scheduler]\nretry_delay = 3600\n")
    server.fail("w1", "f1")
    before = server.api_tasks()
    own = f"http://127.0.0.1:{server.port}"
    good = json.dumps({"task_ids": ["f1"]})
    kinds = [
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=xyz",
        "application/jsonx",
        None,
    ]
    for action in ("retry", "reenable", "retry-failed"):
        path = f"/ui/api/{action}"
        for kind in kinds:
            for body in (good, "task_ids=f1"):
                reply = server.request("POST", path, body, headers={"Content-Type": kind})
                assert reply.status == 415, (path, kind, reply)
        for origin in ("http://evil.example", "null", f"http://127.0.0.1:{server.port + 1}"):
            reply = server.request("POST", path, good, headers={"Origin": origin})
            assert reply.status == 403, (path, origin, reply)
        for raw in (b"{", b"", b'{"task_ids": ["f1"],}', b"nul", b"\xff\xfe"):
            reply = server.request("POST", path, raw)
            assert reply.status == 400, (path, raw, reply)
            assert reply.error()
        assert server.request("POST", path, [["f1"]]).status == 422
    for value in ("f1", [1], None, {"f1": True}, [], ["f1", 2], [["f1"]]):
        for action in ("retry", "reenable"):
            reply = server.request("POST", f"/ui/api/{action}", {"task_ids": value})
            assert reply.status == 422, (action, value, reply)
            assert reply.json().get("field") == "task_ids", reply
            assert "task_ids" in reply.error()
    reply = server.request("POST", "/ui/api/retry", {"ids": ["f1"]})
    assert reply.status == 422 and reply.json().get("field") == "task_ids", reply
    for field in ("family", "worker", "q"):
        for wrong in (3, ["F"], None, True):
            reply = server.request("POST", "/ui/api/retry-failed", {field: wrong})
            assert reply.status == 422, (field, wrong, reply)
            assert reply.json().get("field") == field, reply
    assert server.api_tasks() == before
    assert server.audits() == []

    answer = server.request("POST", "/ui/api/retry", good, headers={"Origin": own})
    assert answer.status == 200 and answer.json() == {"changed": ["f1"], "skipped": []}, answer
    assert server.api_tasks()["f1"]["status"] == "PENDING"


def test_other_methods_on_the_action_routes_are_405(populated: Populated) -> None:
    """GET (also with the action's arguments in the query), PUT and DELETE on an action route
    answer 405; POST on a read route answers 405."""
    server = populated.server
    fragile = quote(populated.ids["Fragile"])
    for path in (
        "/ui/api/retry",
        f"/ui/api/retry?task_ids={quote(populated.ids['Bad'])}",
        f"/ui/api/reenable?task_ids={fragile}",
        "/ui/api/retry-failed?family=Bad",
    ):
        for method in ("GET", "PUT", "DELETE", "PATCH"):
            reply = server.request(method, path)
            assert reply.status == 405, (method, path, reply)
    for route in ("summary", "tasks", "task", "graph", "workers", "families", "changes"):
        assert server.request("POST", f"/ui/api/{route}", {}).status == 405, route


def test_a_get_on_sign_in_or_sign_out_is_405(token_server: UiServer) -> None:
    """/ui/login and /ui/logout are POST routes: a GET (even carrying a token in the query)
    answers 405, signs nobody in and out."""
    cookie = token_server.login()
    for path in ("/ui/login", f"/ui/login?token={TOKEN}", "/ui/logout"):
        reply = token_server.request("GET", path, cookie=cookie)
        assert "set-cookie" not in reply.headers, (path, reply.headers)
        assert reply.status == 405, (path, reply)
    assert token_server.request("GET", "/ui/api/summary", cookie=cookie).status == 200


def _everything_a_get_can_reach(populated: Populated) -> list[str]:
    ids = populated.ids.values()
    paths = ["/", "/ui", "/ui/", *(f"/ui/{name}" for name in packaged_ui_files())]
    paths += ["/ui/nope", "/ui/api/session", "/ui/api/summary?retry=all", "/ui/api/families"]
    paths += ["/ui/api/changes", "/ui/api/changes?since=0", "/ui/api/changes?since=-1&x=y"]
    paths += ["/ui/api/workers?reenable=all", "/ui/api/tasks", "/ui/api/tasks?limit=1"]
    paths += [f"/ui/api/tasks?state={s}&action=retry" for s in STATES]
    paths += ["/ui/api/tasks?family=Bad&worker=x&q=%00", "/ui/api/tasks?cursor=zz"]
    paths += ["/ui/api/tasks?limit=9999", "/ui/api/tasks?state=FAILED&retry-failed=1"]
    for task_id in ids:
        quoted = quote(task_id)
        paths += [f"/ui/api/task?id={quoted}&retry=1", f"/ui/api/graph?id={quoted}&down=1"]
        paths += [f"/ui/api/graph?id={quoted}&down=0&reenable=1"]
        paths += [f"/ui/api/retry?task_ids={quoted}", f"/ui/api/reenable?task_ids={quoted}"]
    paths += ["/ui/api/retry-failed", "/ui/api/retry-failed?family=Bad&q="]
    paths += ["/ui/login?token=x", "/ui/logout", "/ui/api/task?id=", "/ui/api/graph"]
    paths += ["/api/v1/tasks", "/api/v1/workers", "/health", "/openapi.json"]
    return paths


def _state_of(server: UiServer) -> tuple[Any, ...]:
    """What a GET must not change: the task list, the UI's list, counts, latest change number,
    and the workers with their running tasks."""
    workers = server.ui("/ui/api/workers")
    return (
        server.api_tasks(),
        server.listed(),
        server.ui("/ui/api/summary"),
        server.ui("/ui/api/changes"),
        sorted((w["worker_id"], w["running"], w["last_seen"]) for w in workers["workers"]),
        workers["resources"],
    )


def test_no_get_changes_state(populated: Populated) -> None:
    """GET and HEAD on every UI and API route, with odd query parameters (an action's
    arguments among them), change nothing the scheduler reports."""
    server = populated.server
    before = _state_of(server)
    audits = len(server.audits())
    for path in _everything_a_get_can_reach(populated):
        for method in ("GET", "HEAD"):
            reply = server.request(method, path)
            assert reply.status < 500, (method, path, reply)
    assert _state_of(server) == before
    assert server.api_tasks()[populated.ids["Bad"]]["status"] == "FAILED"
    assert server.api_tasks()[populated.ids["Fragile"]]["status"] == "DISABLED"
    assert len(server.audits()) == audits


# --- overview and list ---------------------------------------------------------------------


def test_summary_counts_equal_the_task_lists_counts(populated: Populated) -> None:
    """The overview's count of each of the six states equals the count in GET /api/v1/tasks
    (3 DONE, 2 FAILED, 1 DISABLED, 3 PENDING behind failures, 1 RUNNING, 1 UNKNOWN); the
    total is their sum and the change number is the one /changes and /tasks report."""
    server = populated.server
    summary = server.ui("/ui/api/summary")
    tasks = server.api_tasks()
    counted = Counter(t["status"] for t in tasks.values())
    assert list(summary["counts"]) == list(STATES) or set(summary["counts"]) == set(STATES)
    assert summary["counts"] == {state: counted.get(state, 0) for state in STATES}
    assert summary["counts"] == {
        "PENDING": 3,
        "RUNNING": 1,
        "DONE": 3,
        "FAILED": 2,
        "DISABLED": 1,
        "UNKNOWN": 1,
    }
    assert summary["total"] == len(tasks) == 11
    seq = summary["seq"]
    assert isinstance(seq, int) and seq > 0
    assert server.ui("/ui/api/changes")["seq"] == seq
    assert server.ui(f"/ui/api/changes?since={seq}")["seq"] == seq
    assert server.ui("/ui/api/tasks")["seq"] == seq
    families = server.ui("/ui/api/families")["families"]
    assert families == sorted({t["family"] for t in tasks.values()})


def test_the_task_list_holds_every_task_newest_change_first(populated: Populated) -> None:
    """Unfiltered, the list holds exactly the registered tasks, each with the contract's
    keys and the state the API reports, in order of their last change, newest first."""
    server = populated.server
    rows = server.listed()
    tasks = server.api_tasks()
    assert sorted(ids_of(rows)) == sorted(tasks)
    for row in rows:
        assert set(row) >= ROW_KEYS, row
        assert row["status"] == tasks[row["task_id"]]["status"], row
        assert row["family"] == tasks[row["task_id"]]["family"], row
        assert isinstance(row["changed"], float), row
    changed = [row["changed"] for row in rows]
    assert changed == sorted(changed, reverse=True)
    assert rows[0]["task_id"] == "api-unknown"  # the last registered
    by_id = {row["task_id"]: row for row in rows}
    assert by_id[populated.ids["Good0"]]["worker"] == populated.worker
    assert by_id[populated.ids["Middle"]]["worker"] is None  # never ran
    assert by_id["api-running"]["worker"] == "api-worker"
    assert by_id["api-side-task"]["priority"] == 5
    assert by_id["api-side-task"]["progress"] == 42.0


def test_the_list_filters_by_state_family_worker_and_text(populated: Populated) -> None:
    """Each filter, alone and combined, answers exactly the matching tasks (newest first): a
    state, a family, the worker that ran them, and a case-insensitive text in the id or a
    parameter value; the text never matches a status message or a secret parameter's value."""
    server = populated.server
    ids = populated.ids
    tasks = server.api_tasks()

    def listed(**filters: str) -> set[str]:
        rows = server.listed(**filters)
        changed = [row["changed"] for row in rows]
        assert changed == sorted(changed, reverse=True), filters
        assert len(set(ids_of(rows))) == len(rows), filters
        return set(ids_of(rows))

    for state in STATES:
        expected = {t for t, task in tasks.items() if task["status"] == state}
        assert listed(state=state) == expected, state
    for family in {task["family"] for task in tasks.values()}:
        expected = {t for t, task in tasks.items() if task["family"] == family}
        assert listed(family=family) == expected, family
    assert listed(family="good") == set()  # exact family names
    ran = {ids[k] for k in ("Good0", "Good1", "Good2", "Bad", "Fragile")}
    assert listed(worker=populated.worker) == ran
    assert listed(worker="api-worker") == {"api-side-task", "api-running"}
    assert listed(worker="nobody") == set()
    goods = {ids["Good0"], ids["Good1"], ids["Good2"]}
    assert listed(state="DONE", family="Good") == goods
    assert listed(state="FAILED", worker=populated.worker) == {ids["Bad"]}
    assert listed(state="FAILED", family="Good") == set()
    assert listed(q="gOoD_") == goods  # in the id, any case
    assert listed(q=ids["Top"].upper()) == {ids["Top"]}
    assert listed(q="EU-west-3") == {"api-side-task"}  # a parameter value
    marked = str(populated.root)[-12:].upper()  # in every pipeline task's root parameter
    expected = {ids[k] for k in ids if k not in ("Api", "Running", "Unknown")}
    assert listed(q=marked) == expected
    assert listed(q=marked, family="Good", state="DONE") == goods
    assert listed(q="QUOKKA") == set()  # in status messages only
    for secret in SECRETS:
        assert listed(q=secret) == set(), secret
        assert listed(q=secret[3:-2].swapcase()) == set(), secret


def test_the_text_filter_matches_any_characters_of_ids_and_parameters(
    start: Callable[..., UiServer],
) -> None:
    """The text filter is a case-insensitive substring match on the id and the parameter
    values whatever characters they hold: letters beyond ASCII (in any case), quotes and
    backslashes; retry-failed with that text filter picks the same tasks."""
    server = start("[scheduler]\nretry_delay = 3600\n")
    tasks = {
        "CAFÉ-crème": {"n": "1"},
        "city-task": {"city": "Zürich"},
        "quote-task": {"greeting": 'say "hi" now'},
        "path-task": {"path": "C:\\data\\in"},
        "plain-task": {"city": "Bern"},
    }
    for task_id, params in tasks.items():
        server.register("w", {"task_id": task_id, "family": "T", "params": params})
    cases = {
        "bern": {"plain-task"},  # (ASCII works)
        "café": {"CAFÉ-crème"},
        "CAFÉ-CRÈME": {"CAFÉ-crème"},
        "Zürich": {"city-task"},
        "zÜrich": {"city-task"},
        '"hi"': {"quote-task"},
        "c:\\data": {"path-task"},
    }
    misses = {}
    for text, expected in cases.items():
        found = set(ids_of(server.listed(q=text)))
        if found != expected:
            misses[text] = sorted(found)
    assert misses == {}, f"q -> tasks listed, where each should list one task: {misses}"
    for task_id, params in tasks.items():
        server.fail("w", task_id, family="T", params=params)
    answer = server.act("retry-failed", {"q": "zürich"})
    assert answer["changed"] == ["city-task"], answer


def test_secret_parameters_are_hidden_in_every_ui_answer(populated: Populated) -> None:
    """Values of secret-named parameters (password, api_token) are *** in the list and the
    detail, and appear in no /ui/api answer at all, not even inside the status message,
    explanation or tracking URL that contain them; the scheduler itself does hold them."""
    server = populated.server
    ids = populated.ids
    held = json.dumps(server.api_tasks())
    assert PASSWORD in held and API_SECRET in held  # so hiding them is the UI's doing
    rows = {row["task_id"]: row for row in server.listed()}
    bad, api = rows[ids["Bad"]], rows["api-side-task"]
    assert bad["params"] == {"root": str(populated.root), "password": "***", "api_token": "***"}
    assert api["params"] == {"password": "***", "region": "eu-WEST-3"}
    assert "***" in bad["status_message"] and "***" in api["status_message"]
    bad_detail, api_detail = server.detail(ids["Bad"]), server.detail("api-side-task")
    assert bad_detail["params"] == bad["params"] and api_detail["params"] == api["params"]
    assert "cannot connect with *** and ***" in bad_detail["explanation"]
    assert api_detail["status_message"] == "retrying with *** soon"
    assert api_detail["tracking_url"] == "https://track.example/run/***/log"
    assert api_detail["explanation"] == populated.api_explanation.replace(API_SECRET, "***")

    bodies: dict[str, bytes] = {}
    paths = ["/ui/api/summary", "/ui/api/families", "/ui/api/workers", "/ui/api/changes"]
    paths += ["/ui/api/tasks?limit=500", "/ui/api/session"]
    paths += [f"/ui/api/tasks?limit=500&state={s}" for s in STATES]
    paths += [f"/ui/api/tasks?q={quote(s)}" for s in SECRETS]
    for task_id in ids.values():
        quoted = quote(task_id)
        paths += [f"/ui/api/task?id={quoted}", f"/ui/api/graph?id={quoted}&down=1"]
        paths += [f"/ui/api/tasks?q={quoted}", f"/ui/api/graph?id={quoted}"]
    for path in paths:
        reply = server.request("GET", path)
        assert reply.status == 200, (path, reply)
        bodies[path] = reply.body
    for path, body in bodies.items():
        text = body.decode("utf-8").lower()
        for secret in SECRETS:
            assert secret.lower() not in text, (path, secret)
            assert json.dumps(secret)[1:-1].lower() not in text, (path, secret)


def test_the_list_is_ordered_by_the_latest_change(start: Callable[..., UiServer]) -> None:
    """Tasks registered one after another come newest first; a task that changes (a status
    message, a failure) moves to the front."""
    server = start("[scheduler]\nretry_delay = 3600\n")
    for task_id in ("o-a", "o-b", "o-c"):
        server.register("w1", {"task_id": task_id, "family": "O"})
    assert ids_of(server.listed()) == ["o-c", "o-b", "o-a"]
    server.api("annotate", {"task_id": "o-a", "kind": "status_message", "value": "moved"})
    assert ids_of(server.listed()) == ["o-a", "o-c", "o-b"]
    work = server.api("get_work", {"worker_id": "w1"})["work"]
    body = {"worker_id": "w1", "task_id": work["task_id"], "explanation": "x"}
    server.api("task_failed", {**body, "attempt": work["attempt"]})
    rows = server.listed()
    assert rows[0]["task_id"] == work["task_id"] and rows[0]["status"] == "FAILED", rows
    assert [r["changed"] for r in rows] == sorted((r["changed"] for r in rows), reverse=True)


def test_keyset_pages_visit_every_task_once_even_while_tasks_change(
    start: Callable[..., UiServer],
) -> None:
    """300 tasks in pages of 50: six pages, each task exactly once, newest change first.

    While a walk is under way a task that changes moves ahead of the walk's cursor. What is
    asserted: the rest of the walk returns no task twice and none of the first page again;
    it returns every task that did not change; a task that changed (seen already, or not
    yet reached) or was added meanwhile is not returned by the rest of that walk, and a new
    first page shows them first, the latest change first.
    """
    server = start()
    ids = [f"p-{n:03d}" for n in range(300)]
    for begin in range(0, 300, 100):
        specs = [{"task_id": t, "family": "Page", "params": {"n": t}} for t in ids[begin:]]
        server.register("w-pages", *specs[:100])
    summary = server.ui("/ui/api/summary")
    assert summary["total"] == 300 and summary["counts"]["PENDING"] == 300

    pages = walk_pages(server, 50)
    assert [len(page) for page in pages] == [50] * 6
    walked = [row["task_id"] for page in pages for row in page]
    assert len(walked) == len(set(walked)) == 300 and set(walked) == set(ids)
    changed = [row["changed"] for page in pages for row in page]
    assert changed == sorted(changed, reverse=True)
    assert walked[0] == server.listed()[0]["task_id"]

    first = server.ui("/ui/api/tasks?limit=50")
    first_ids = ids_of(first["tasks"])
    assert first_ids == ids_of(pages[0])
    seen, unseen = first_ids[10], walked[-1]
    for task_id in (seen, unseen):
        server.api("annotate", {"task_id": task_id, "kind": "progress", "value": 50})
    server.register("w-pages", {"task_id": "p-new", "family": "Page"})
    rest = [row["task_id"] for page in walk_pages(server, 50, first["next"]) for row in page]
    assert len(rest) == len(set(rest)), "a task came twice"
    assert not set(rest) & set(first_ids), "a task of the first page came again"
    assert set(rest) == set(ids) - set(first_ids) - {unseen}
    assert ids_of(server.ui("/ui/api/tasks?limit=3")["tasks"]) == ["p-new", unseen, seen]
    again = [row["task_id"] for page in walk_pages(server, 50) for row in page]
    assert sorted(again) == sorted([*ids, "p-new"])


def test_out_of_range_list_arguments_are_422_naming_the_field(
    start: Callable[..., UiServer],
) -> None:
    """limit outside 1..500 or not an integer, a cursor that is not one the server gives,
    and a state that is not one of the six: 422 naming the field; the limits themselves work."""
    server = start()
    server.register("w", *({"task_id": f"t{n}", "family": "T"} for n in range(3)))
    bad = [
        ("limit", ["0", "501", "-1", "ten", "1.5", "1e2", "99999999999999999999999"]),
        ("cursor", ["abc", "-1", "1.5", "0x10", str(2**70)]),
        ("state", ["BOGUS", "running!", "done", "PENDING,FAILED"]),
    ]
    for field, values in bad:
        for value in values:
            reply = server.request("GET", "/ui/api/tasks?" + urlencode({field: value}))
            assert reply.status == 422, (field, value, reply)
            assert reply.json().get("field") == field, (field, value, reply)
            assert reply.error()
    assert len(server.ui("/ui/api/tasks?limit=500")["tasks"]) == 3
    one = server.ui("/ui/api/tasks?limit=1")
    assert len(one["tasks"]) == 1 and one["next"] is not None
    assert server.ui("/ui/api/tasks?state=")["tasks"]  # empty means any


# --- task detail -----------------------------------------------------------------------------


def test_task_detail_shows_deps_dependents_and_what_blocks_it(populated: Populated) -> None:
    """The detail holds the contract's keys; deps and dependents with their states;
    blocked_by names the FAILED (and DISABLED) tasks upstream that keep a task from running,
    one and two levels up; a DONE task's attempt shows the real worker."""
    server = populated.server
    ids = populated.ids
    middle = server.detail(ids["Middle"])
    assert set(middle) >= DETAIL_KEYS, middle
    bad_ref = ref(ids["Bad"], "Bad", "FAILED")
    assert middle["deps"] == [bad_ref]
    assert middle["dependents"] == [ref(ids["Top"], "Top", "PENDING")]
    assert middle["dependents_total"] == 1
    assert middle["blocked_by"] == [bad_ref]
    assert middle["status"] == "PENDING" and middle["worker"] is None
    assert middle["family"] == "Middle" and middle["module"] == "uiapi_pipeline"
    assert middle["params"] == {"root": str(populated.root)}
    assert (middle["failures"], middle["attempts"], middle["resources"]) == (0, [], {})

    top = server.detail(ids["Top"])
    assert top["deps"] == [
        ref(ids["Middle"], "Middle", "PENDING"),
        ref(ids["Good0"], "Good", "DONE"),
    ]
    assert top["blocked_by"] == [bad_ref]  # two levels up
    pipeline = server.detail(ids["Pipeline"])
    blockers = {(r["task_id"], r["status"]) for r in pipeline["blocked_by"]}
    assert blockers == {(ids["Bad"], "FAILED"), (ids["Fragile"], "DISABLED")}

    good = server.detail(ids["Good0"])
    assert good["dependents"] == [ref(ids["Top"], "Top", "PENDING")]
    assert good["blocked_by"] == [] and good["status"] == "DONE"
    assert good["status_message"] == "quokka 0 ran"
    (attempt,) = good["attempts"]
    assert attempt["outcome"] == "succeeded" and attempt["worker"] == populated.worker

    bad = server.detail(ids["Bad"])
    assert bad["dependents"] == [ref(ids["Middle"], "Middle", "PENDING")]
    assert bad["failures"] == 1 and bad["blocked_by"] == []
    assert [a["outcome"] for a in bad["attempts"]] == ["failed"]
    assert server.detail(ids["Fragile"])["retry_count"] == 1
    assert server.detail("api-unknown")["status"] == "UNKNOWN"
    assert server.detail("api-running")["attempts"][0]["outcome"] is None


def test_task_detail_gives_the_explanation_in_full(populated: Populated) -> None:
    """The explanation is the whole text the worker (or API client) reported, only secrets
    hidden: a traceback of a real worker, and a 40 KB text reported through the API."""
    server = populated.server
    tasks = server.api_tasks()
    bad = tasks[populated.ids["Bad"]]
    shown = server.detail(bad["task_id"])["explanation"]
    expected = bad["explanation"].replace(PASSWORD, "***").replace(API_TOKEN, "***")
    assert shown == expected
    assert shown.startswith("Traceback") and "ValueError" in shown
    long = server.detail("api-side-task")["explanation"]
    assert len(populated.api_explanation) > 40_000
    assert long == populated.api_explanation.replace(API_SECRET, "***")


def test_an_unknown_task_is_404_and_a_missing_id_422(populated: Populated) -> None:
    """/task and /graph answer 404 JSON for an id the scheduler does not have and 422 naming
    'id' without one."""
    server = populated.server
    for route in ("task", "graph"):
        for task_id in ("no-such-task", populated.ids["Bad"] + "x", "<script>"):
            reply = server.request("GET", f"/ui/api/{route}?id={quote(task_id)}")
            assert reply.status == 404, (route, task_id, reply)
            assert reply.error()
        reply = server.request("GET", f"/ui/api/{route}")
        assert reply.status == 422 and reply.json().get("field") == "id", reply


def test_a_task_with_many_dependents_lists_500_and_counts_all(
    start: Callable[..., UiServer],
) -> None:
    """600 tasks need one: its detail lists 500 distinct dependents of those, with their
    states, and dependents_total 600."""
    server = start()
    server.register("w", {"task_id": "hub", "family": "Hub"})
    leaves = [f"leaf-{n:03d}" for n in range(600)]
    server.register("w", *({"task_id": t, "family": "Leaf", "deps": ["hub"]} for t in leaves))
    hub = server.detail("hub")
    assert hub["dependents_total"] == 600
    listed = ids_of(hub["dependents"])
    assert len(listed) == len(set(listed)) == 500 and set(listed) <= set(leaves)
    assert all(r["family"] == "Leaf" and r["status"] == "PENDING" for r in hub["dependents"])
    leaf = server.detail("leaf-007")
    assert leaf["deps"] == [ref("hub", "Hub", "PENDING")]


# --- graph ---------------------------------------------------------------------------------------


def _graph(server: UiServer, task_id: str, down: bool = False) -> dict[str, Any]:
    answer: dict[str, Any] = server.ui(f"/ui/api/graph?id={quote(task_id)}&down={1 if down else 0}")
    nodes = answer["nodes"]
    assert answer["root"] == 0 and nodes[0]["id"] == task_id, answer
    assert nodes[0]["layer"] == 0
    assert len({n["id"] for n in nodes}) == len(nodes), "a node came twice"
    for a, b in answer["edges"]:
        assert 0 <= a < len(nodes) and 0 <= b < len(nodes), (a, b)
    return answer


def _named(answer: dict[str, Any]) -> tuple[dict[str, int], set[tuple[str, str]]]:
    """Node id -> layer, and the edges as (task id, dependency id)."""
    nodes = answer["nodes"]
    layers = {n["id"]: n["layer"] for n in nodes}
    edges = {(nodes[a]["id"], nodes[b]["id"]) for a, b in answer["edges"]}
    assert len(edges) == len(answer["edges"]), "an edge came twice"
    return layers, edges


def test_the_graph_has_layers_edges_and_the_failure_path(populated: Populated) -> None:
    """Upstream: the task at layer 0, its deps at 1, theirs at 2; edges are [task, dependency]
    index pairs; blocking holds the FAILED task two levels up, path the nodes from the task
    to it. With down=1 the dependents come at -1, -2. States are the tasks' own."""
    server = populated.server
    ids = populated.ids
    tasks = server.api_tasks()
    top = _graph(server, ids["Top"])
    layers, edges = _named(top)
    assert layers == {ids["Top"]: 0, ids["Middle"]: 1, ids["Good0"]: 1, ids["Bad"]: 2}
    assert edges == {
        (ids["Top"], ids["Middle"]),
        (ids["Top"], ids["Good0"]),
        (ids["Middle"], ids["Bad"]),
    }
    index = {n["id"]: i for i, n in enumerate(top["nodes"])}
    assert top["blocking"] == [index[ids["Bad"]]]
    assert sorted(top["path"]) == sorted(index[ids[k]] for k in ("Top", "Middle", "Bad"))
    assert (top["truncated"], top["cap"]) == (False, 10_000)
    for node in top["nodes"]:
        assert node["status"] == tasks[node["id"]]["status"], node
        assert node["family"] == tasks[node["id"]]["family"], node

    middle = _graph(server, ids["Middle"], down=True)
    layers, edges = _named(middle)
    assert layers == {ids["Middle"]: 0, ids["Bad"]: 1, ids["Top"]: -1, ids["Pipeline"]: -2}
    assert edges == {
        (ids["Middle"], ids["Bad"]),
        (ids["Top"], ids["Middle"]),
        (ids["Pipeline"], ids["Top"]),
    }
    assert [middle["nodes"][i]["id"] for i in middle["blocking"]] == [ids["Bad"]]
    assert _named(_graph(server, ids["Middle"]))[0] == {ids["Middle"]: 0, ids["Bad"]: 1}

    pipeline = _graph(server, ids["Pipeline"])
    layers, _ = _named(pipeline)
    assert layers == {
        ids["Pipeline"]: 0,
        **{ids[k]: 1 for k in ("Top", "Good1", "Good2", "Fragile")},
        **{ids[k]: 2 for k in ("Middle", "Good0")},
        ids["Bad"]: 3,
    }
    nodes = pipeline["nodes"]
    assert {nodes[i]["id"] for i in pipeline["blocking"]} == {ids["Bad"], ids["Fragile"]}
    assert {nodes[i]["id"] for i in pipeline["path"]} == {
        ids[k] for k in ("Pipeline", "Top", "Middle", "Bad", "Fragile")
    }

    good = _graph(server, ids["Good0"], down=True)
    assert _named(good)[0] == {ids["Good0"]: 0, ids["Top"]: -1, ids["Pipeline"]: -2}
    assert (good["blocking"], good["path"]) == ([], [])


def test_the_graph_is_capped_at_10000_nodes(start: Callable[..., UiServer]) -> None:
    """A task with 9,999 dependencies: all 10,000 nodes, not truncated. One with 10,000: the
    answer holds exactly 10,000 nodes (the task first) and says truncated. The same for the
    dependents of a task with down=1."""
    server = start()
    deps = [f"n-{n:05d}" for n in range(10_000)]
    for begin in range(0, len(deps), 2_500):
        server.register("w", *({"task_id": t, "family": "N"} for t in deps[begin : begin + 2_500]))
    server.register("w", {"task_id": "cap-at", "family": "Root", "deps": deps[:9_999]})
    server.register("w", {"task_id": "cap-over", "family": "Root", "deps": deps})

    exact = _graph(server, "cap-at")
    assert len(exact["nodes"]) == 10_000 and exact["truncated"] is False
    assert {n["layer"] for n in exact["nodes"][1:]} == {1}
    assert len(exact["edges"]) == 9_999
    assert {n["id"] for n in exact["nodes"][1:]} == set(deps[:9_999])
    assert exact["blocking"] == []

    over = _graph(server, "cap-over")
    assert len(over["nodes"]) == 10_000 and over["truncated"] is True
    assert over["cap"] == 10_000
    assert {n["id"] for n in over["nodes"][1:]} < set(deps)
    assert len(over["edges"]) == 9_999

    server.register("w", {"task_id": "base", "family": "Base"})
    users = [f"u-{n:05d}" for n in range(10_000)]
    specs = [{"task_id": t, "family": "U", "deps": ["base"]} for t in users]
    server.register("w", *specs[:9_999])
    below = _graph(server, "base", down=True)
    assert len(below["nodes"]) == 10_000 and below["truncated"] is False
    assert {n["layer"] for n in below["nodes"][1:]} == {-1}
    assert _graph(server, "base")["nodes"] == [below["nodes"][0]]
    server.register("w", specs[-1])
    below = _graph(server, "base", down=True)
    assert len(below["nodes"]) == 10_000 and below["truncated"] is True


# --- actions ---------------------------------------------------------------------------------


def _one_new_audit(server: UiServer, before: int) -> dict[str, Any]:
    """The single audit line written since there were ``before``."""
    wait_for(lambda: len(server.audits()) > before, 30, "the action's audit line")
    audits = server.audits()
    assert len(audits) == before + 1, audits[before:]
    return audits[-1]


def test_retry_now_keeps_the_failure_count_and_reenable_resets_it(
    start: Callable[..., UiServer], marker: str
) -> None:
    """Real workers, [scheduler] retry_count = 2 and retry_delay = 3600. Retry now makes a
    FAILED task PENDING at once with its failure kept (so its next failure disables it);
    re-enable makes DISABLED tasks PENDING with the count reset (so the next failure does
    not). Ids not in the right state are skipped. Each action is one audit line naming the
    action, the tasks it changed and the session ("open": no token)."""
    server = start("[scheduler]\nretry_count = 2\nretry_delay = 3600\n")
    (server.directory / "uiapi_actions.py").write_text(ACTIONS, encoding="utf-8")
    root = server.directory / "out"
    ran = run_worker(server, "uiapi_actions", "Batch", root, marker)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    ids = by_family(server, root)
    flaky, fragile, fine = ids["Flaky"], ids["Fragile"], ids["Fine"]
    statuses = {t: server.detail(t)["status"] for t in (flaky, fragile, fine)}
    assert statuses == {flaky: "FAILED", fragile: "DISABLED", fine: "DONE"}
    assert server.detail(flaky)["failures"] == 1

    audits = len(server.audits())
    answer = server.act("retry", {"task_ids": [flaky, fine, fragile, "no-such-task", flaky]})
    assert answer == {"changed": [flaky], "skipped": [fine, fragile, "no-such-task"]}
    detail = server.detail(flaky)
    assert (detail["status"], detail["failures"]) == ("PENDING", 1)
    assert server.api_tasks()[flaky]["status"] == "PENDING"
    audit = _one_new_audit(server, audits)
    assert (audit["action"], audit["tasks"], audit["session"]) == ("retry", [flaky], "open")

    again = run_worker(server, "uiapi_actions", "Flaky", root, marker)
    assert again.returncode == 1, again.stdout + again.stderr
    assert server.detail(flaky)["status"] == "DISABLED"  # 2 failures: the first was kept
    assert [a["outcome"] for a in server.detail(flaky)["attempts"]] == ["failed", "failed"]

    audits = len(server.audits())
    answer = server.act("reenable", {"task_ids": [fine, flaky, fragile]})
    assert answer == {"changed": [flaky, fragile], "skipped": [fine]}
    for task_id in (flaky, fragile):
        detail = server.detail(task_id)
        assert (detail["status"], detail["failures"]) == ("PENDING", 0), detail
    audit = _one_new_audit(server, audits)
    assert (audit["action"], audit["tasks"], audit["session"]) == (
        "reenable",
        [flaky, fragile],
        "open",
    )
    assert server.act("reenable", {"task_ids": [flaky]}) == {"changed": [], "skipped": [flaky]}

    third = run_worker(server, "uiapi_actions", "Flaky", root, marker)
    assert third.returncode == 1, third.stdout + third.stderr
    detail = server.detail(flaky)
    assert (detail["status"], detail["failures"]) == ("FAILED", 1)  # the count was reset


def test_retry_all_failed_touches_only_what_the_filter_matches(
    start: Callable[..., UiServer], marker: str
) -> None:
    """Three tasks failed by a real worker, two of family BadA: retry-failed with that family
    makes those two PENDING and leaves BadB FAILED; a text filter then picks BadB alone; a
    filter nothing matches changes nothing. One audit line per action."""
    server = start("[scheduler]\nretry_delay = 3600\n")
    (server.directory / "uiapi_actions.py").write_text(ACTIONS, encoding="utf-8")
    root = server.directory / "out"
    ran = run_worker(server, "uiapi_actions", "AllBad", root, marker)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    ids = by_family(server, root)
    a0, a1, b = ids["BadA0"], ids["BadA1"], ids["BadB"]
    assert {server.detail(t)["status"] for t in (a0, a1, b)} == {"FAILED"}

    audits = len(server.audits())
    answer = server.act("retry-failed", {"family": "BadA", "worker": "", "q": ""})
    assert sorted(answer["changed"]) == sorted([a0, a1]) and answer["skipped"] == []
    assert {t: server.api_tasks()[t]["status"] for t in (a0, a1, b)} == {
        a0: "PENDING",
        a1: "PENDING",
        b: "FAILED",
    }
    audit = _one_new_audit(server, audits)
    assert sorted(audit["tasks"]) == sorted([a0, a1]) and audit["session"] == "open"
    assert "retry" in audit["action"] and audit["action"] != "retry"

    assert server.act("retry-failed", {"family": "BadA"}) == {"changed": [], "skipped": []}
    assert server.act("retry-failed", {"worker": "nobody"}) == {"changed": [], "skipped": []}
    audits = len(server.audits())
    assert server.act("retry-failed", {"q": "BADB_"}) == {"changed": [b], "skipped": []}
    assert _one_new_audit(server, audits)["tasks"] == [b]
    assert server.api_tasks()[b]["status"] == "PENDING"
    assert server.detail(b)["failures"] == 1


def test_with_a_token_an_action_is_audited_under_a_session_name(token_server: UiServer) -> None:
    """Signed in with the token, an action's audit line names the session by a short hash
    (the one its sign-in line named), never by the cookie's value."""
    token_server.fail("tok-worker", "tok-audit")
    cookie = token_server.login()
    wait_for(
        lambda: any(e.get("event") == "ui sign-in" for e in token_server.events()),
        30,
        "the sign-in's log line",
    )
    signed_in = [e for e in token_server.events() if e.get("event") == "ui sign-in"][-1]
    audits = len(token_server.audits())
    answer = token_server.act("retry", {"task_ids": ["tok-audit", "gone"]}, cookie=cookie)
    assert answer == {"changed": ["tok-audit"], "skipped": ["gone"]}
    audit = _one_new_audit(token_server, audits)
    assert audit["action"] == "retry" and audit["tasks"] == ["tok-audit"]
    assert re.fullmatch(r"s-[0-9a-f]{12}", audit["session"]), audit
    assert audit["session"] == signed_in["session"]
    assert cookie not in token_server.stderr_text()
    assert token_server.detail("tok-audit", cookie)["status"] == "PENDING"


# --- workers and resources -------------------------------------------------------------------


def test_the_workers_view_shows_running_tasks_and_resource_holders(
    start: Callable[..., UiServer], marker: str
) -> None:
    """While a real worker runs a task that holds one db: the worker's id, host, a recent and
    advancing last contact, and the running task; db's capacity 2, use 1 and the holder (and
    an unused resource at 0). After the task ends nothing is running or held."""
    server = start("[scheduler.resources]\ndb = 2\ngpu = 4\n")
    (server.directory / "uiapi_actions.py").write_text(ACTIONS, encoding="utf-8")
    root = server.directory / "out"
    root.mkdir()
    began = time.time()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "conveyor", "run", "uiapi_actions.Gated"),
            *("--root", str(root), "--scheduler-url", server.url, "--executor", "fork"),
        ],
        cwd=server.directory,
        env=child_env(server.directory, MARKER_VARIABLE, marker, **QUICK_WORKER),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for((root / "started").exists, 30, "the gated task to start")
        (gated,) = by_family(server, root).values()
        view = server.ui("/ui/api/workers")
        (worker,) = view["workers"]
        assert worker["worker_id"].startswith(f"{HOST}-{proc.pid}-"), worker
        assert worker["host"] == HOST
        assert worker["assistant"] is False
        assert worker["running"] == [gated]
        assert began - 1 <= worker["last_seen"] <= time.time() + 1, worker
        assert view["resources"] == [
            {"name": "db", "capacity": 2, "used": 1, "holders": [gated]},
            {"name": "gpu", "capacity": 4, "used": 0, "holders": []},
        ]
        detail = server.detail(gated)
        assert detail["resources"] == {"db": 1}
        assert (detail["status"], detail["worker"]) == ("RUNNING", worker["worker_id"])
        wait_for(
            lambda: server.ui("/ui/api/workers")["workers"][0]["last_seen"] > worker["last_seen"],
            30,
            "the worker's last contact to advance",
        )
        put(root / "gate", "open")
        out, err = proc.communicate(timeout=40)
        assert proc.returncode == 0, out + err
    finally:
        proc.kill()
        proc.wait(timeout=10)
    view = server.ui("/ui/api/workers")
    assert [w["running"] for w in view["workers"]] == [[]]
    assert [(r["name"], r["used"], r["holders"]) for r in view["resources"]] == [
        ("db", 0, []),
        ("gpu", 0, []),
    ]


# --- a store without SQL, and one without reads ------------------------------------------------


def as_json(answer: Any) -> Any:
    """A typed ``TaskReads`` answer as the UI's JSON has it (field for field)."""
    return json.loads(json.dumps(dataclasses.asdict(answer)))


def seeded_dict_store(rows: Sequence[dict[str, Any]]) -> Any:
    """The third-party ``dict`` store of tests/thirdparty-plugin (public API only, no SQL),
    in memory, holding ``rows``."""
    from conveyor_recorder_plugin.dictstore import DictStore as ThirdPartyStore

    store = ThirdPartyStore()
    store.save(rows, [])
    return store


class DictStore:
    """A state store of before ``TaskReads``: rows in a dict, and no reads."""

    settings_schema: ClassVar[dict[str, Any]] = {}

    def __init__(self, rows: Sequence[dict[str, Any]] = ()) -> None:
        self.rows = {row["task_id"]: json.loads(json.dumps(row)) for row in rows}
        self.workers: dict[str, bool] = {}
        self.saves = 0

    def load(self) -> tuple[list[dict[str, Any]], list[tuple[str, bool]]]:
        return [dict(r) for r in self.rows.values()], list(self.workers.items())

    def save(
        self,
        rows: Any,
        workers: Any,
        *,
        gone_tasks: Any = (),
        gone_workers: Any = (),
    ) -> None:
        self.saves += 1
        for row in rows:
            self.rows[row["task_id"]] = json.loads(json.dumps(row))
        self.workers.update(dict(workers))
        for task_id in gone_tasks:
            self.rows.pop(task_id, None)
        for worker_id in gone_workers:
            self.workers.pop(worker_id, None)

    def close(self) -> None:
        pass


def test_a_store_without_sql_serves_the_ui() -> None:
    """A state store that is not SQLite (the third-party ``dict`` store: TaskReads in pure
    Python): the UI reads it (through the real app on uvicorn) and sees the rows it loaded and
    every change since, and actions reach the store itself."""
    from conveyor.server.app import SchedulerService, create_app
    from conveyor.server.hosts import OwnAddress

    up = TaskRecord(
        task_id="seeded-up",
        seq=1,
        family="Up",
        module="m",
        status=TaskStatus.FAILED,
        registered=True,
        stakeholders=("w0",),
        runners=("w0",),
        explanation="old failure",
    )
    down = TaskRecord(
        task_id="seeded-down",
        seq=2,
        family="Down",
        module="m",
        deps=("seeded-up",),
        registered=True,
        stakeholders=("w0",),
        runners=("w0",),
    )
    store = seeded_dict_store([to_row(up), to_row(down)])
    assert not isinstance(store, SqliteStore)
    core = SchedulerCore(retry_delay=3600)
    rows, workers = store.load()
    core.restore([from_row(r) for r in rows], workers)
    service = SchedulerService(core, store)
    direct = service.reads.summary()
    assert direct.counts["FAILED"] == 1 and direct.counts["PENDING"] == 1
    assert direct.total == 2

    def app_for(port: int) -> Any:
        address = OwnAddress.of(LOOPBACK, port)
        return create_app(service, token="", max_request_bytes=1 << 20, address=address)

    with serve_app(app_for) as port:

        def get(path: str) -> Any:
            reply = http_request(port, "GET", path)
            assert reply.status == 200, (path, reply)
            return reply.json()

        def post(path: str, body: Any) -> Any:
            reply = http_request(
                port, "POST", path, json.dumps(body), {"Content-Type": "application/json"}
            )
            assert reply.status == 200, (path, reply)
            return reply.json()

        summary = get("/ui/api/summary")
        assert summary["counts"] == {**dict.fromkeys(STATES, 0), "FAILED": 1, "PENDING": 1}
        detail = get("/ui/api/task?id=seeded-down")["task"]
        assert detail["deps"] == [ref("seeded-up", "Up", "FAILED")]
        assert detail["blocked_by"] == [ref("seeded-up", "Up", "FAILED")]
        assert ids_of(get("/ui/api/task?id=seeded-up")["task"]["dependents"]) == ["seeded-down"]

        tasks = [{"task_id": "live-1", "family": "Live", "deps": ["seeded-down"]}]
        post("/api/v1/add_tasks", {"worker_id": "w1", "tasks": tasks})
        assert ids_of(get("/ui/api/tasks")["tasks"])[0] == "live-1"
        assert get("/ui/api/summary")["counts"]["PENDING"] == 2
        graph = get("/ui/api/graph?id=live-1")
        assert [n["id"] for n in graph["nodes"]] == ["live-1", "seeded-down", "seeded-up"]
        assert [graph["nodes"][i]["id"] for i in graph["blocking"]] == ["seeded-up"]

        answer = post("/ui/api/retry", {"task_ids": ["seeded-up", "live-1"]})
        assert answer == {"changed": ["seeded-up"], "skipped": ["live-1"]}
        stored = {row["task_id"]: row for row in store.load()[0]}
        assert stored["seeded-up"]["status"] == "PENDING"  # the store has it
        assert get("/ui/api/task?id=seeded-up")["task"]["status"] == "PENDING"  # read from it
        assert "live-1" in stored
        assert as_json(service.reads.summary()) == get("/ui/api/summary")


@pytest.mark.parametrize("store_kind", ["memory", "dict"])
def test_retry_all_failed_takes_every_match_beyond_a_page(store_kind: str) -> None:
    """More FAILED tasks than a page of the list (PAGE_MAX) under the filter, and others
    that it does not match: retry-failed changes exactly the matching ones, each once, on a
    store that lists ids in one read (``CanListIds``: memory) and on one that does not (the
    third-party ``dict`` store: the UI pages through its list)."""
    from conveyor.server.app import SchedulerService, create_app
    from conveyor.server.hosts import OwnAddress
    from conveyor.server.stores import PAGE_MAX, CanListIds, MemoryStore

    def record(i: int, family: str, status: TaskStatus) -> dict[str, Any]:
        task = TaskRecord(
            task_id=f"{family}-{i}",
            seq=i + 1,
            family=family,
            module="m",
            status=status,
            registered=True,
            stakeholders=("w0",),
            runners=("w0",),
            explanation="it broke" if status == TaskStatus.FAILED else "",
        )
        return to_row(task)

    wanted = [record(i, "Many", TaskStatus.FAILED) for i in range(PAGE_MAX + 120)]
    others = [
        *(record(i, "Other", TaskStatus.FAILED) for i in range(30)),
        *(record(i, "Many", TaskStatus.DONE) for i in range(1000, 1040)),
    ]
    rows = [*wanted, *others]
    store: Any
    if store_kind == "memory":
        store = MemoryStore()
        store.load()
        store.save(rows, [])
        assert isinstance(store, CanListIds)
    else:
        store = seeded_dict_store(rows)
        assert not isinstance(store, CanListIds)  # (the fallback: page by page)
    core = SchedulerCore(retry_delay=3600)
    loaded, workers = store.load()
    core.restore([from_row(r) for r in loaded], workers)
    service = SchedulerService(core, store)

    def app_for(port: int) -> Any:
        address = OwnAddress.of(LOOPBACK, port)
        return create_app(service, token="", max_request_bytes=1 << 20, address=address)

    try:
        with serve_app(app_for) as port:
            reply = http_request(
                port,
                "POST",
                "/ui/api/retry-failed",
                json.dumps({"family": "Many"}),
                {"Content-Type": "application/json"},
            )
            assert reply.status == 200, reply
            answer = reply.json()
            counts = store.summary().counts  # (what the store now holds)
    finally:
        store.close()
    changed = answer["changed"]
    assert len(changed) == len(set(changed)) == len(wanted), len(changed)
    assert set(changed) == {row["task_id"] for row in wanted}
    assert answer["skipped"] == []
    assert counts["FAILED"] == 30 and counts["PENDING"] == len(wanted), counts


def test_a_store_without_reads_is_refused() -> None:
    """A state store written before ``TaskReads`` (save and load only) is refused with one
    ConfigError (exit 2 at start-up) naming it and what it lacks, and it is closed; nothing
    mirrors it."""
    from conveyor.server.app import SchedulerService

    store = DictStore([])
    closed: list[bool] = []
    store.close = lambda: closed.append(True)  # type: ignore[method-assign]
    with pytest.raises(
        ConfigError,
        match=r"state store dict x\.json \(.*DictStore\) does not "
        r"implement TaskReads: it lacks summary, families, page, detail, graph, "
        r"changes_since, workers",
    ):
        SchedulerService(SchedulerCore(), store, "dict x.json")
    assert closed == [True]


def test_a_store_holding_rows_from_before_the_attempt_history_is_read() -> None:
    """A third-party store's rows saved by an older conveyor have no 'attempts' field, which
    from_row accepts (ADDED_FIELDS): the service must still start, and the UI read them."""
    from conveyor.server.app import SchedulerService

    row = to_row(TaskRecord(task_id="old", seq=1, family="Old", module="m", registered=True))
    del row["attempts"]
    store = seeded_dict_store([row])
    core = SchedulerCore()
    rows, workers = store.load()
    core.restore([from_row(r) for r in rows], workers)
    service = SchedulerService(core, store)
    assert service.reads.summary().counts["PENDING"] == 1
    detail = service.reads.detail("old")
    assert detail is not None and as_json(detail)["attempts"] == []


# --- schema migration ------------------------------------------------------------------------


def _v1_record(task_id: str, status: TaskStatus, seq: int, **fields: Any) -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        seq=seq,
        family=fields.pop("family", task_id.title()),
        module="old.mod",
        status=status,
        registered=fields.pop("registered", True),
        stakeholders=("w-old",),
        runners=("w-old",),
        **fields,
    )


def _v1_row(record: TaskRecord, drop: Sequence[str] = ("attempts",)) -> str:
    """A row as conveyor wrote it before the attempt history: to_row without 'attempts'."""
    row = to_row(record)
    for name in drop:
        del row[name]
    return json.dumps(row)


def make_v1_database(path: Path, rows: Sequence[tuple[str, Any]]) -> None:
    """A state database of schema version 1, by hand: its two tables, the rows in order."""
    db = sqlite3.connect(path)
    try:
        db.execute("CREATE TABLE tasks (task_id TEXT PRIMARY KEY, data TEXT NOT NULL)")
        db.execute("CREATE TABLE workers (worker_id TEXT PRIMARY KEY, assistant INTEGER NOT NULL)")
        db.executemany("INSERT INTO tasks VALUES (?, ?)", rows)
        db.execute("INSERT INTO workers VALUES ('w-old', 0)")
        db.execute("PRAGMA user_version = 1")
        db.commit()
    finally:
        db.close()


def _user_version(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


OLD_RECORDS = [
    _v1_record("up", TaskStatus.FAILED, 1, explanation="it broke", failures=None),
    _v1_record("side", TaskStatus.DONE, 2),
    _v1_record("mid", TaskStatus.PENDING, 3, deps=("up",)),
    _v1_record("top", TaskStatus.PENDING, 4, deps=("mid", "side")),
    _v1_record("ghost", TaskStatus.PENDING, 5, registered=False),  # only ever a dependency
]


def _old_rows() -> list[tuple[str, str]]:
    rows = []
    for n, record in enumerate(OLD_RECORDS):
        drop = ("attempts", "attempt", "reported") if n % 2 else ("attempts",)
        rows.append((record.task_id, _v1_row(record, drop)))
    return rows


def test_a_version_1_database_is_migrated_and_the_ui_reads_it(tmp_path: Path) -> None:
    """Opened by SqliteStore and loaded (its rows all read back), a version-1 database (rows
    without attempts) becomes the current version; its dependency edges are backfilled, so the UI's
    summary, list, detail (deps, dependents, blocked_by) and graph read it; opening it again
    changes nothing more."""
    path = tmp_path / "old.db"
    make_v1_database(path, _old_rows())
    store = SqliteStore(StoreContext(str(path)))
    try:
        assert _user_version(path) == 1  # (not yet)
        rows, workers = store.load()
        assert _user_version(path) == SQLITE_SCHEMA
        assert sorted(r["task_id"] for r in rows) == ["ghost", "mid", "side", "top", "up"]
        assert workers == [("w-old", False)]
        assert all(from_row(r).attempts == [] for r in rows)
        summary = as_json(store.summary())
        expected = {**dict.fromkeys(STATES, 0), "PENDING": 2, "DONE": 1, "FAILED": 1}
        assert summary["counts"] == expected and summary["total"] == 4  # not the ghost
        page = as_json(store.page(TaskFilters(), None, 50))
        assert ids_of(page["tasks"]) == ["top", "mid", "side", "up"] and page["next"] is None
        mid = as_json(store.detail("mid"))
        assert mid is not None
        assert mid["deps"] == [ref("up", "Up", "FAILED")]
        assert mid["dependents"] == [ref("top", "Top", "PENDING")]
        assert mid["dependents_total"] == 1
        assert mid["blocked_by"] == [ref("up", "Up", "FAILED")]
        assert mid["attempts"] == []
        up = as_json(store.detail("up"))
        assert up is not None and ids_of(up["dependents"]) == ["mid"]
        graph = as_json(store.graph("top", False))
        assert graph is not None
        layers, edges = _named(graph)
        assert layers == {"top": 0, "mid": 1, "side": 1, "up": 2}
        assert edges == {("top", "mid"), ("top", "side"), ("mid", "up")}
    finally:
        store.close()
    assert _user_version(path) == SQLITE_SCHEMA
    again = SqliteStore(StoreContext(str(path)))
    try:
        assert as_json(again.summary())["counts"] == summary["counts"]
        assert len(again.load()[0]) == 5
    finally:
        again.close()


def test_the_scheduler_serves_a_migrated_version_1_database(tmp_path: Path, marker: str) -> None:
    """``conveyor scheduler`` on a version-1 database starts, shows it in the UI (counts,
    dependents from the backfilled edges), records new attempts on it and keeps them."""
    server = UiServer(tmp_path, "[scheduler]\nretry_delay = 3600\n", marker)
    make_v1_database(server.state, _old_rows())
    try:
        server.start()
        summary = server.ui("/ui/api/summary")
        assert (summary["counts"]["FAILED"], summary["counts"]["PENDING"]) == (1, 2)
        assert ids_of(server.detail("up")["dependents"]) == ["mid"]
        assert server.detail("top")["blocked_by"] == [ref("up", "Up", "FAILED")]
        assert server.act("retry", {"task_ids": ["up"]})["changed"] == ["up"]
        work = server.api("get_work", {"worker_id": "w-old"})["work"]
        assert work["task_id"] == "up", work
        server.api("task_done", {"worker_id": "w-old", "task_id": "up", "attempt": work["attempt"]})
        server.kill()
        server.start()
        (attempt,) = server.detail("up")["attempts"]
        assert attempt["outcome"] == "succeeded" and attempt["worker"] == "w-old"
        assert server.detail("mid")["blocked_by"] == []
    finally:
        server.kill()
    assert _user_version(server.state) == SQLITE_SCHEMA


def _v1_with_unusable_rows(path: Path) -> None:
    """A version-1 database whose rows are the old records plus two unusable ones: text that
    is not JSON, and a row with an unknown state that depends on 'up'."""
    bogus = json.loads(_v1_row(_v1_record("bogus", TaskStatus.PENDING, 6, deps=("up",))))
    bogus["status"] = "BOGUS"
    make_v1_database(path, [*_old_rows(), ("broken", "{oops"), ("bogus", json.dumps(bogus))])


def _start_refused(directory: Path, state: Path, marker: str, *flags: str) -> Any:
    config = directory / "refused.toml"
    config.write_text("", encoding="utf-8")
    port = str(free_port())
    return subprocess.run(
        [
            *(sys.executable, "-m", "conveyor", "scheduler", "--port", port),
            *("--state-path", str(state), "--config", str(config), *flags),
        ],
        cwd=directory,
        env=child_env(directory, MARKER_VARIABLE, marker),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_version_1_database_with_unusable_rows_is_refused_or_recovered(
    tmp_path: Path, marker: str
) -> None:
    """Unusable rows in a version-1 database: without --recover the scheduler exits 2 with
    one error line naming the row and --recover; with --recover it moves them to quarantine
    and serves the rest (no dependent of 'up' left from the quarantined row)."""
    server = UiServer(tmp_path, "", marker, flags=["--recover"])
    _v1_with_unusable_rows(server.state)
    refused = _start_refused(tmp_path, server.state, marker)
    assert refused.returncode == 2, refused
    assert "Traceback" not in refused.stderr, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("conveyor: error: "), refused.stderr
    assert "2 unusable rows" in lines[0] and "--recover" in lines[0], lines[0]
    assert "'broken'" in lines[0] or "'bogus'" in lines[0], lines[0]
    try:
        server.start()
        assert "moved 2 unusable rows" in server.stderr_text()
        summary = server.ui("/ui/api/summary")
        assert summary["total"] == 4 and summary["counts"]["FAILED"] == 1
        assert ids_of(server.detail("up")["dependents"]) == ["mid"]
        assert server.request("GET", "/ui/api/task?id=bogus").status == 404
        assert sorted(server.api_tasks()) == ["mid", "side", "top", "up"]
    finally:
        server.kill()
    with contextlib.closing(sqlite3.connect(server.state)) as db:
        kept = sorted(row[0] for row in db.execute("SELECT row_key FROM quarantine"))
        edges = sorted(db.execute("SELECT task_id, dep_id FROM edges").fetchall())
    assert kept == ["bogus", "broken"]
    assert edges == [("mid", "up"), ("top", "mid"), ("top", "side")]


def test_a_refused_version_1_database_is_left_as_it_was(tmp_path: Path, marker: str) -> None:
    """The refusal says 'nothing was changed': the version-1 database (and its directory)
    must then be byte for byte as before, still version 1, so an older conveyor can open
    it again."""
    state = tmp_path / "state" / "old.db"
    state.parent.mkdir()
    _v1_with_unusable_rows(state)
    before = {p.name: p.read_bytes() for p in sorted(state.parent.iterdir())}
    refused = _start_refused(tmp_path, state, marker)
    assert refused.returncode == 2, refused
    assert "nothing was changed" in refused.stderr, refused.stderr
    after = {p.name: p.read_bytes() for p in sorted(state.parent.iterdir())}
    assert _user_version(state) == 1
    assert after == before
