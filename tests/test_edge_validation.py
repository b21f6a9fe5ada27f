"""What the central scheduler accepts at its edge (issue 20, items 2 and 9).

Every identifier a request carries must be one the state store can load back: one request
(``ping {"worker_id": ""}``) used to be acknowledged, stored, and then refused at the next start
(exit 2 until ``--recover``). And ``/openapi.json`` must describe what the validator does:
integral numbers are integers, ``annotate.value``'s type depends on ``kind``. The tests use a
real ``conveyor scheduler`` subprocess on loopback (token set, SQLite state file), a real
SQLite store in-process for the property test, and schemathesis against the live server.
"""

from __future__ import annotations

import json
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conveyor.protocol import AddTasks, FieldError, Ping, decode
from conveyor.testing.processes import Reply, SchedulerProcess, child_env, kill_marked

TOKEN = "edge-token"
MARKER = "EDGETEST_MARKER"  # not CONVEYOR_*: those are configuration overrides
LIMIT = 1000  # conveyor.protocol.IDENTIFIER_MAX_LENGTH (test_protocol.py checks they agree)
BAD_IDS = ["", "a\nb", "x" * (LIMIT + 1), "nul\x00", "tab\t", "del\x7f", "c1\x85"]
"""Identifiers every route refuses: empty, too long, with a C0, DEL or C1 control character."""
ID = "<ID>"  # where a case's body puts the identifier under test (a value or a key)

# (route, body with ID somewhere, the field the 422 must name, whether "" is acceptable there)
CASES: list[tuple[str, Any, str, bool]] = [
    ("ping", {"worker_id": ID}, "worker_id", False),
    ("work_left", {"worker_id": ID}, "worker_id", False),
    ("get_work", {"worker_id": ID}, "worker_id", False),
    ("get_work", {"worker_id": "w", "running": ["t", ID]}, "running[1]", False),
    ("add_tasks", {"worker_id": ID, "tasks": []}, "worker_id", False),
    ("add_tasks", {"worker_id": "w", "tasks": [{"task_id": ID}]}, "tasks[0].task_id", False),
    (
        "add_tasks",
        {"worker_id": "w", "tasks": [{"task_id": "t", "deps": ["d", ID]}]},
        "tasks[0].deps[1]",
        False,
    ),
    (
        "add_tasks",
        {"worker_id": "w", "tasks": [{"task_id": "t", "family": ID}]},
        "tasks[0].family",
        True,
    ),
    (
        "add_tasks",
        {"worker_id": "w", "tasks": [{"task_id": "t", "module": ID}]},
        "tasks[0].module",
        True,
    ),
    (
        "add_tasks",
        {"worker_id": "w", "tasks": [{"task_id": "t", "params": {ID: "v"}}]},
        "tasks[0].params",
        False,
    ),
    (
        "add_tasks",
        {"worker_id": "w", "tasks": [{"task_id": "t", "resources": {ID: 1}}]},
        "tasks[0].resources",
        False,
    ),
    ("task_done", {"worker_id": ID, "task_id": "t"}, "worker_id", False),
    ("task_done", {"worker_id": "w", "task_id": ID}, "task_id", False),
    ("task_failed", {"worker_id": ID, "task_id": "t", "explanation": "e"}, "worker_id", False),
    ("task_failed", {"worker_id": "w", "task_id": ID, "explanation": "e"}, "task_id", False),
    ("annotate", {"task_id": ID, "kind": "status_message", "value": "v"}, "task_id", False),
    ("release", {"worker_id": ID}, "worker_id", False),
    ("release", {"worker_id": "w", "task_ids": [ID]}, "task_ids[0]", False),
    ("statuses", {"task_ids": ["t", ID]}, "task_ids[1]", False),
    ("explanation", {"task_id": ID}, "task_id", False),
]


def with_id(template: Any, identifier: str) -> Any:
    """``template`` with every ``ID`` (a value or a key) replaced by ``identifier``."""
    if template == ID:
        return identifier
    if isinstance(template, dict):
        return {with_id(k, identifier): with_id(v, identifier) for k, v in template.items()}
    if isinstance(template, list):
        return [with_id(v, identifier) for v in template]
    return template


def bad_ids(empty_ok: bool) -> list[str]:
    """The identifiers a case's field must refuse."""
    return [i for i in BAD_IDS if i or not empty_ok]


class Server(SchedulerProcess):
    """A ``conveyor scheduler`` subprocess with a token; restartable on its state file."""

    token = TOKEN

    def post(self, route: str, body: Any) -> Reply:
        """POST ``body`` as JSON to ``/api/v1/<route>`` with the token."""
        return self.request("POST", f"/api/v1/{route}", body)

    def listed(self) -> tuple[Any, Any]:
        """The task list and the worker list, as the server answers them."""
        tasks = self.request("GET", "/api/v1/tasks")
        workers = self.request("GET", "/api/v1/workers")
        assert tasks.status == 200 and workers.status == 200, (tasks, workers)
        return tasks.json()["tasks"], workers.json()["workers"]

    def stop(self) -> None:
        """Stop the server as an operator would (SIGTERM), and reap it."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except Exception:
            self.kill()
            raise

    def restart(self) -> None:
        """Stop the server and start it again on the same port and state file; an
        AssertionError with its output if it does not come up (exit 2: refused state)."""
        self.stop()
        self.start()
        health = self.request("GET", "/health")
        assert health.status == 200 and health.json()["status"] == "ok", health


def make_server(directory: Path, marker: str) -> Server:
    """A started server in ``directory`` (its config, state file and output there)."""
    config = directory / "server.toml"
    config.write_text(f'[server]\ntoken = "{TOKEN}"\n', encoding="utf-8")
    server = Server(directory, config, child_env(directory, MARKER, marker))
    server.start()
    return server


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the request-level tests of this module."""
    marker = uuid.uuid4().hex
    server = make_server(tmp_path_factory.mktemp("edge"), marker)
    try:
        yield server
    finally:
        server.kill()
        kill_marked(MARKER, marker)


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Server]:
    """A server of this test alone (it will be stopped and restarted)."""
    marker = uuid.uuid4().hex
    server = make_server(tmp_path, marker)
    try:
        yield server
    finally:
        server.kill()
        kill_marked(MARKER, marker)


# --- item 2: identifiers ---------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("route", "template", "field", "empty_ok"),
    CASES,
    ids=[f"{route}-{field}" for route, _, field, _ in CASES],
)
def test_a_bad_identifier_is_refused_422_naming_the_field_and_nothing_is_stored(
    shared: Server, route: str, template: Any, field: str, empty_ok: bool
) -> None:
    """Every route refuses an empty, over-long or control-character identifier with a 422
    whose JSON names the field, and the server's tasks and workers stay as they were."""
    before = shared.listed()
    for identifier in bad_ids(empty_ok):
        reply = shared.post(route, with_id(template, identifier))
        assert reply.status == 422, (route, identifier, reply)
        assert reply.json()["field"] == field, (identifier, reply.json())
        assert field in reply.error()
    assert shared.listed() == before


@pytest.mark.timeout(90)
def test_a_server_fed_bad_identifiers_starts_again_on_its_state_file(fresh: Server) -> None:
    """After every bad identifier of every route (all refused) and the longest, most unusual
    identifiers that are fine (accepted), the server stops and starts again on the same state
    file, instead of refusing it (exit 2), and serves what was accepted."""
    for route, template, field, empty_ok in CASES:
        for identifier in bad_ids(empty_ok):
            reply = fresh.post(route, with_id(template, identifier))
            assert reply.status == 422, (route, field, identifier, reply)
    longest = ("wörker 😀 \u2028" * LIMIT)[:LIMIT]  # non-ASCII, spaces, a line separator
    task = ("täsk-" * LIMIT)[:LIMIT]
    assert fresh.post("ping", {"worker_id": longest}).status == 200
    spec = {"task_id": task, "family": "", "module": "", "deps": ["dep"], "params": {"p": "\n"}}
    assert fresh.post("add_tasks", {"worker_id": longest, "tasks": [spec]}).status == 200
    fresh.restart()
    tasks, workers = fresh.listed()
    assert [t["task_id"] for t in tasks] == [task]  # (the task list shows registered tasks)
    assert [w["worker_id"] for w in workers] == [longest]


@pytest.mark.timeout(60)
def test_integral_numbers_are_integers_and_fractions_are_not(fresh: Server) -> None:
    """An integer field takes 50194.0 (JSON Schema's integer) as 50194, and refuses 1.5 and
    true with a 422 naming the field."""
    spec = {"task_id": "t", "family": "F", "priority": 50194.0, "resources": {"db": 2.0}}
    assert fresh.post("add_tasks", {"worker_id": "w", "tasks": [spec]}).status == 200
    [listed] = fresh.listed()[0]
    assert listed["priority"] == 50194 and isinstance(listed["priority"], int)
    for wrong in (1.5, True, "3"):
        bad = {**spec, "priority": wrong}
        reply = fresh.post("add_tasks", {"worker_id": "w", "tasks": [bad]})
        assert reply.status == 422, (wrong, reply)
        assert reply.json()["field"] == "tasks[0].priority"
    reply = fresh.post("task_done", {"worker_id": "w", "task_id": "t", "attempt": 0.5})
    assert reply.status == 422 and reply.json()["field"] == "attempt"


@pytest.mark.timeout(30)
def test_a_worker_id_the_protocol_refuses_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Worker(worker_id=...)`` with an id a scheduler would refuse (a newline, too long) is a
    ConfigError naming worker_id when the worker is made, not a 422 in the middle of a run."""
    import conveyor

    monkeypatch.chdir(tmp_path)
    for worker_id in ("host\nname", "w" * (LIMIT + 1)):
        with pytest.raises(conveyor.ConfigError) as caught:
            conveyor.Worker(worker_id=worker_id)
        assert "worker_id" in str(caught.value)
        assert caught.value.key == "worker_id"
    with conveyor.Worker(worker_id="ok worker ü") as worker:
        assert worker.id == "ok worker ü"


# --- whatever the edge accepts, a restart loads ----------------------------------------------

_ODD = ["", "a\nb", "\x00", "\x7f", "\x85", " ", "é😀", "\u2028", "x" * LIMIT, "y" * (LIMIT + 1)]
_TEXT = st.text(max_size=6) | st.sampled_from(_ODD)  # (st.text makes no lone surrogates:
_NUMBER = (  # the server's JSON parser refuses them with a 400 before decode sees them)
    st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([50194.0, 2.0, 1.5, -0.0, 10**30, 1e300])
)
_TASK = st.fixed_dictionaries(
    {"task_id": _TEXT},
    optional={
        "family": _TEXT,
        "module": _TEXT,
        "params": st.dictionaries(_TEXT, _TEXT, max_size=3),
        "status": st.sampled_from(["PENDING", "DONE", "DISABLED", "UNKNOWN", "RUNNING"]),
        "deps": st.lists(_TEXT, max_size=3),
        "priority": _NUMBER,
        "resources": st.dictionaries(_TEXT, _NUMBER, max_size=2),
        "runnable": st.booleans(),
        "retry_count": st.none() | _NUMBER,
        "explanation": _TEXT,
    },
)
_ADD = st.fixed_dictionaries(
    {"worker_id": _TEXT, "tasks": st.lists(_TASK, max_size=3)},
    optional={"assistant": st.booleans()},
)
_PING = st.fixed_dictionaries({"worker_id": _TEXT})


def _edge(cls: type[Any], body: Any) -> Any:
    """``body`` as the server's edge takes it (its JSON parser, then decode), or None if the
    server would refuse it (400 or 422)."""
    from conveyor.server.app import load_json

    try:
        return decode(cls, load_json(json.dumps(body).encode()))
    except (FieldError, ValueError):
        return None


def _serve_and_restart(requests: list[Any]) -> None:
    """Apply the decoded ``requests`` as the server does (each committed to a SQLite state
    file), then load that file as a restart does; AssertionError if anything is refused."""
    from conveyor.scheduler.persist import from_row
    from conveyor.scheduler.policy import SchedulerCore
    from conveyor.server.app import SchedulerService
    from conveyor.server.stores import SqliteStore, StoreContext

    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "state.db")
        store = SqliteStore(StoreContext(path))
        core = SchedulerCore()
        service = SchedulerService(core, store)
        workers, tasks = set(), set()
        for request in requests:
            if isinstance(request, AddTasks):
                service.call(core.add_tasks, request.worker_id, request.tasks, request.assistant)
                service.call(core.get_work, request.worker_id, request.assistant, None)
                tasks |= {t.task_id for t in request.tasks}
                tasks |= {d for t in request.tasks for d in t.deps}
            else:
                service.call(core.ping, request.worker_id)
            workers.add(request.worker_id)
        store.close()
        again = SqliteStore(StoreContext(path))
        try:
            rows, loaded = again.load()  # CorruptState if a row cannot be read back
            restored = SchedulerCore()
            restored.restore([from_row(row) for row in rows], loaded)
        finally:
            again.close()
        assert {w for w, _ in loaded} == workers
        # (a dependency nobody registered is not stored: restore() makes it again)
        assert set(restored.statuses(tasks)) == tasks


@pytest.mark.timeout(120)
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(add=_ADD, ping=_PING)
@example(add={"worker_id": "", "tasks": []}, ping={"worker_id": ""})  # issue 20, item 2
@example(
    add={"worker_id": "w", "tasks": [{"task_id": "t", "deps": ["a"]}]}, ping={"worker_id": "w"}
)
@example(
    add={"worker_id": "w", "tasks": [{"task_id": "t", "deps": ["a\nb"], "priority": 7.0}]},
    ping={"worker_id": "x" * (LIMIT + 1)},
)
def test_whatever_the_edge_accepts_a_restart_loads_back(add: Any, ping: Any) -> None:
    """Any add_tasks and ping body the server's edge accepts, applied and committed to an
    SQLite state file as the server does, is loaded back by the next start: no row is
    refused, and every worker and task is there."""
    requests = [r for r in (_edge(AddTasks, add), _edge(Ping, ping)) if r is not None]
    _serve_and_restart(requests)


# --- item 9: /openapi.json and the validator agree (schemathesis) ----------------------------

_RESENDING_CHECKS = (
    "ignored_auth",
    "use_after_free",
    "ensure_resource_availability",
    "missing_required_header",
    "unsupported_method",
)
"""Checks that send more requests per case: auth and methods are tested in
test_server_api.py, and the time goes to more generated bodies instead."""


@pytest.mark.timeout(120)
def test_schemathesis_finds_no_disagreement_between_openapi_and_the_server(
    fresh: Server,
) -> None:
    """Schemathesis, reading the live server's /openapi.json, sends schema-valid bodies (which
    must be accepted) and schema-invalid ones (which must be refused with a 4xx) to every
    operation: no 5xx, every answer's status, content type and body as documented. The server
    then starts again on the state file all that left (not exit 2)."""
    schemathesis = pytest.importorskip("schemathesis")
    generation = schemathesis.GenerationMode
    config = schemathesis.Config.from_dict(
        {
            "base-url": fresh.url,
            "checks": {name: {"enabled": False} for name in _RESENDING_CHECKS},
        }
    )
    schema = schemathesis.openapi.from_url(f"{fresh.url}/openapi.json", config=config)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    sent: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        # 25 bodies per operation, 15 valid and 10 not; an operation without a body has
        # nothing to make invalid
        modes = [(generation.POSITIVE, 15), (generation.NEGATIVE, 10)]
        if operation.method.upper() != "POST":
            modes = modes[:1]
        for mode, count in modes:
            run_cases(operation.as_strategy(generation_mode=mode), count, auth, sent)
    assert len(sent) > 200, len(sent)  # (each operation was exercised)
    fresh.restart()
    assert fresh.request("GET", "/api/v1/tasks").status == 200


def run_cases(strategy: Any, count: int, auth: dict[str, str], sent: list[str]) -> None:
    """Send ``count`` cases of ``strategy`` (derandomized: the same cases every run) and
    validate each answer with schemathesis's enabled checks; raise the first failure."""
    from hypothesis import Phase

    @settings(
        max_examples=count,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # (no shrinking: the failure is reported whole)
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def send(case: Any) -> None:
        response = case.call(headers=auth, timeout=15)
        sent.append(case.operation.label)
        case.validate_response(response, headers=auth)

    send()
