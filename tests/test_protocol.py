"""The worker ⇄ scheduler vocabulary and its codec (conveyor.protocol): plain function calls."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conveyor import protocol as p
from conveyor.protocol import FieldError, TaskSpec, TaskStatus, decode, encode


def test_every_route_round_trips_through_json() -> None:
    """A request and an answer of every route survive encode → JSON → decode unchanged."""
    spec = TaskSpec(
        "t1", "Fam", "mod", {"a": "1"}, TaskStatus.DONE, ("d",), 3, {"db": 1}, False, 2, "why"
    )
    work = p.Work("t1", "Fam", "mod", {"a": "1"})
    values: list[Any] = [
        p.AddTasks("w", (spec, TaskSpec("t2")), True),
        p.GetWork("w", True, ("t1",)),
        p.GetWork("w"),
        p.WorkLeftRequest("w"),
        p.TaskDone("w", "t1"),
        p.TaskFailed("w", "t1", "boom"),
        p.Annotate("t1", p.NoteKind.PROGRESS, 50),
        p.Annotate("t1", p.NoteKind.STATUS_MESSAGE, "half"),
        p.Ping("w"),
        p.Statuses(("t1", "t2")),
        p.Explanation("t1"),
        p.Ok(),
        p.WorkAnswer(work),
        p.WorkAnswer(None),
        p.WorkLeft(1, 2, 3),
        p.TaskFailedAnswer(TaskStatus.DISABLED),
        p.StatusesAnswer({"t1": TaskStatus.RUNNING}),
        p.ExplanationAnswer(""),
        p.TaskList(
            (p.TaskInfo("t1", "Fam", {}, TaskStatus.FAILED, None, 0, ("d",), "", None, "", "x"),)
        ),
    ]
    for value in values:
        again = decode(type(value), json.loads(json.dumps(encode(value))))
        assert again == value, value
        assert type(again) is type(value)


def test_statuses_decode_to_the_enum() -> None:
    """A decoded status is a TaskStatus member (one name per concept), equal to its string."""
    answer = decode(p.StatusesAnswer, {"statuses": {"a": "DONE"}})
    assert answer.statuses["a"] is TaskStatus.DONE
    assert answer.statuses["a"] == "DONE"


@pytest.mark.parametrize(
    ("cls", "data", "field", "message"),
    [
        (p.Ping, [], "body", "expected a JSON object"),
        (p.Ping, {}, "worker_id", "missing required field"),
        (p.Ping, {"worker_id": 5}, "worker_id", "expected a string, got int"),
        (p.Ping, {"worker_id": "w", "x": 1}, "x", "unknown field; expected one of worker_id"),
        (p.GetWork, {"worker_id": "w", "assistant": "yes"}, "assistant", "true or false"),
        (p.AddTasks, {"worker_id": "w", "tasks": {}}, "tasks", "expected a list of an object"),
        (p.AddTasks, {"worker_id": "w", "tasks": ["t"]}, "tasks[0]", "expected a JSON object"),
        (
            p.AddTasks,
            {"worker_id": "w", "tasks": [{"task_id": "a"}, {"task_id": "b", "priority": True}]},
            "tasks[1].priority",
            "expected an integer, got bool",
        ),
        (
            p.AddTasks,
            {"worker_id": "w", "tasks": [{"task_id": "t", "status": "RUNNING"}]},
            "tasks[0].status",
            "expected one of PENDING, DONE, DISABLED, UNKNOWN",
        ),
        (
            p.AddTasks,
            {"worker_id": "w", "tasks": [{"task_id": "t", "resources": {"db": -1}}]},
            "tasks[0].resources.db",
            "expected an integer >= 0",
        ),
        (p.Annotate, {"task_id": "t", "kind": "colour", "value": "x"}, "kind", "one of"),
        (
            p.Annotate,
            {"task_id": "t", "kind": "progress", "value": 10**400},
            "value",
            "from 0 to 100",
        ),
        (p.Annotate, {"task_id": "t", "kind": "tracking_url", "value": 3}, "value", "a string"),
        (p.WorkAnswer, {"work": "lots"}, "work", "expected an object or null"),
        (p.WorkAnswer, {"work": {"task_id": 5}}, "work", "expected an object or null"),
        (p.WorkAnswer, {}, "work", "missing required field"),
        (p.StatusesAnswer, {"statuses": {"a": "MAYBE"}}, "statuses.a", "expected one of"),
    ],
)
def test_bad_data_is_a_field_error_naming_the_field(
    cls: type[Any], data: Any, field: str, message: str
) -> None:
    """Data that does not fit raises FieldError whose field and message say where and what."""
    with pytest.raises(FieldError) as caught:
        decode(cls, data)
    assert caught.value.field == field
    assert message in str(caught.value)


def test_json_schema_matches_what_decode_accepts() -> None:
    """The published schema of a registration names the same fields, required ones and enum."""
    schema = p.json_schema(TaskSpec)
    assert schema["required"] == ["task_id"]
    assert set(schema["properties"]) == {
        "task_id", "family", "module", "params", "status", "deps", "priority", "resources",
        "runnable", "retry_count", "explanation",
    }  # fmt: skip
    assert schema["properties"]["status"]["enum"] == ["PENDING", "DONE", "DISABLED", "UNKNOWN"]
    assert schema["properties"]["resources"]["additionalProperties"]["minimum"] == 0
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        ({"work": "lots"}, "work"),
        ({"work": {"task_id": 5}}, "work"),
        ([], "body"),
        ({}, "work"),
    ],
)
def test_http_transport_reports_a_wrong_shaped_answer_instead_of_crashing(
    answer: Any, field: str
) -> None:
    """A scheduler answering get_work with data that does not fit the protocol makes the http
    transport retry (like a 5xx), then raise SchedulerUnavailable naming the route and the
    field, never a TypeError."""
    import http.server
    import threading

    import conveyor
    from conveyor.errors import SchedulerUnavailable
    from conveyor.transports.http import HttpTransport

    body = json.dumps(answer).encode()
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            asked.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        config = conveyor.Config().with_overrides(scheduler_url=url)
        config = config.with_section("scheduler", rpc_retries=3, rpc_retry_wait=0.01)
        with pytest.raises(SchedulerUnavailable) as caught:
            HttpTransport(config).get_work("w")
    finally:
        server.shutdown()
        server.server_close()
    assert "get_work" in str(caught.value)
    assert f"{field}:" in str(caught.value)
    assert asked == ["/api/v1/get_work"] * 3  # retried like a transient error


def test_answers_from_a_newer_server_may_carry_unknown_fields() -> None:
    """An unknown field is refused in a request (strict) but ignored in an answer."""
    with pytest.raises(FieldError):
        decode(p.Ok, {"ok": True, "server_time": 1})
    assert decode(p.Ok, {"ok": True, "server_time": 1}, strict=False) == p.Ok()
    work = decode(
        p.WorkAnswer, {"work": {**encode(p.Work("t", "F", "m", {})), "x": 1}}, strict=False
    )
    assert work.work == p.Work("t", "F", "m", {})


def test_event_params_cannot_be_changed_even_through_init() -> None:
    """Every mutating path of the read-only params raises, __init__ included."""
    from conveyor.events import Params

    params = Params({"a": "1"})
    for change in (
        lambda: params.__setitem__("a", "2"),
        lambda: params.update(a="2"),
        lambda: params.__init__(a="2"),  # type: ignore[misc]
        lambda: params.pop("a"),
        lambda: params.clear(),
    ):
        with pytest.raises(TypeError):
            change()
    assert params == {"a": "1"}
    assert json.loads(json.dumps(params)) == {"a": "1"}
