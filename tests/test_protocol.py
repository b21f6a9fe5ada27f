"""The worker ⇄ scheduler vocabulary and its codec (conveyor.protocol): plain function calls."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
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


def test_a_status_and_its_text_are_one_dictionary_key() -> None:
    """TaskStatus hashes as str does (a C call on the hot path): each name is its value, so a
    status and its text are the same key either way round."""
    for status in TaskStatus:
        assert status.name == status.value and hash(status) == hash(status.value)
        assert {status: 1}[status.value] == 1 and {status.value: 1}[status] == 1


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
        "runnable", "retry_count", "explanation", "loader", "retry", "labels", "batch",
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
            HttpTransport(config).call(p.GetWork("w"))
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


# --- identifiers, integral numbers, annotate's kinds (issue 20, items 2 and 9) ---------------


@pytest.mark.parametrize(
    ("cls", "data", "field", "message"),
    [
        (p.Ping, {"worker_id": ""}, "worker_id", "expected a non-empty string"),
        (p.Ping, {"worker_id": "x" * 1001}, "worker_id", "at most 1000 characters, got 1001"),
        (p.Ping, {"worker_id": "a\nb"}, "worker_id", "no control characters, got '\\n' at"),
        (p.Ping, {"worker_id": "c1\x85"}, "worker_id", "no control characters"),
        (p.Ping, {"worker_id": "\ud800"}, "worker_id", "a lone surrogate at position 0"),
        (p.Statuses, {"task_ids": ["a", ""]}, "task_ids[1]", "non-empty"),
        (p.GetWork, {"worker_id": "w", "running": ["\x7f"]}, "running[0]", "control"),
        (p.Release, {"worker_id": "w", "task_ids": ["a\tb"]}, "task_ids[0]", "control"),
        (
            p.AddTasks,
            {"worker_id": "w", "tasks": [{"task_id": "t", "params": {"": "v"}}]},
            "tasks[0].params",
            "key '': expected a non-empty string",
        ),
        (
            p.AddTasks,
            {"worker_id": "w", "tasks": [{"task_id": "t", "resources": {"a\nb": 1}}]},
            "tasks[0].resources",
            "control",
        ),
        (
            p.AddTasks,
            {"worker_id": "w", "tasks": [{"task_id": "t", "family": "F\x00"}]},
            "tasks[0].family",
            "control",
        ),
        (p.TaskSpec, {"task_id": "t", "priority": 1.5}, "priority", "an integer, got float"),
        (p.TaskDone, {"worker_id": "w", "task_id": "t", "attempt": -1.0}, "attempt", ">= 0"),
        (
            p.Annotate,
            {"task_id": "t", "kind": "progress", "value": 100.5},
            "value",
            "a number from 0 to 100, got 100.5 (for kind progress)",
        ),
        (p.Annotate, {"task_id": "t", "kind": "progress", "value": True}, "value", "number"),
    ],
)
def test_identifiers_and_numbers_outside_the_rules_are_refused(
    cls: type[Any], data: Any, field: str, message: str
) -> None:
    """Empty, over-long or control-character identifiers (values, list items, mapping keys)
    and numbers outside their ranges raise FieldError naming the field and the rule."""
    with pytest.raises(FieldError) as caught:
        decode(cls, data)
    assert caught.value.field == field
    assert message in str(caught.value)


def test_what_the_rules_allow_is_accepted() -> None:
    """Identifiers of 1 to 1000 characters of any printable or non-ASCII text, an empty family
    or module, parameter values with newlines, and integral floats for integers (as ints)."""
    assert p.IDENTIFIER_MAX_LENGTH == 1000  # (test_edge_validation.py's LIMIT)
    longest = "é" * p.IDENTIFIER_MAX_LENGTH
    assert decode(p.Ping, {"worker_id": longest}).worker_id == longest
    assert decode(p.Ping, {"worker_id": "a b\u2028😀"}).worker_id == "a b\u2028😀"
    spec = decode(
        TaskSpec,
        {
            "task_id": "t",
            "family": "",
            "module": "",
            "params": {"p": "line 1\nline 2"},
            "priority": 50194.0,
            "resources": {"db": 2.0},
            "retry_count": 3.0,
        },
    )
    assert (spec.priority, spec.resources["db"], spec.retry_count) == (50194, 2, 3)
    assert all(type(v) is int for v in (spec.priority, spec.resources["db"], spec.retry_count))
    assert decode(p.TaskDone, {"worker_id": "w", "task_id": "t", "attempt": -0.0}).attempt == 0


def test_annotate_made_in_python_follows_the_same_rules() -> None:
    """Annotate(...) checks its value against its kind as decode does (the transport builds
    it from a task's set_progress)."""
    assert p.Annotate("t", p.NoteKind.PROGRESS, 10**2).value == 100
    with pytest.raises(FieldError, match="from 0 to 100"):
        p.Annotate("t", p.NoteKind.PROGRESS, 10**400)
    with pytest.raises(FieldError, match="a string, got int"):
        p.Annotate("t", p.NoteKind.TRACKING_URL, 3)


def test_the_schema_publishes_the_identifier_rules_and_annotate_kinds() -> None:
    """The JSON Schema says minLength, maxLength and pattern for identifiers (propertyNames
    for parameter and resource names), and Annotate is a oneOf by kind; in /openapi.json
    its branches are components named by a discriminator mapping."""
    from conveyor.server.schema import openapi_document

    spec = p.json_schema(TaskSpec)["properties"]
    assert spec["task_id"]["minLength"] == 1
    assert spec["task_id"]["maxLength"] == p.IDENTIFIER_MAX_LENGTH
    assert "pattern" in spec["task_id"] and "minLength" not in spec["family"]
    assert spec["deps"]["items"]["minLength"] == 1
    assert spec["params"]["propertyNames"]["minLength"] == 1
    assert spec["resources"]["propertyNames"]["maxLength"] == p.IDENTIFIER_MAX_LENGTH
    assert spec["priority"] == {"type": "integer"}
    branches = p.json_schema(p.Annotate)["oneOf"]
    kinds = {b["properties"]["kind"]["enum"][0]: b["properties"]["value"] for b in branches}
    assert kinds == {
        "progress": {"type": "number", "minimum": 0, "maximum": 100},
        "status_message": {"type": "string"},
        "tracking_url": {"type": "string"},
    }
    document = openapi_document()
    body = document["paths"]["/api/v1/annotate"]["post"]["requestBody"]
    annotate = body["content"]["application/json"]["schema"]
    mapping = annotate["discriminator"]["mapping"]
    assert annotate["discriminator"]["propertyName"] == "kind"
    assert sorted(mapping) == ["progress", "status_message", "tracking_url"]
    prefix = "#/components/schemas/"
    for kind, ref in mapping.items():
        component = document["components"]["schemas"][ref.removeprefix(prefix)]
        assert component["properties"]["kind"]["enum"] == [kind]
    assert [b["$ref"] for b in annotate["oneOf"]] == list(mapping.values())


def _bodies() -> Any:
    """A hypothesis strategy maker: ``body(cls)`` gives request bodies of ``cls``, mostly
    well-typed (so that one rule at a time decides), now and then a value of any type."""
    st = pytest.importorskip("hypothesis.strategies")
    import dataclasses

    odd = st.sampled_from(
        ["", "a\nb", "\n", "ab\n", "\x00", "\x7f", "\x85", "é😀", "x" * 1000, "y" * 1001]
    )  # ("\n" and "ab\n": "$" in a pattern matches before a final newline in Python's re)
    fine = st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=5)
    # (no lone surrogates: the server's JSON parser refuses them before decode)
    text = st.integers(0, 3).flatmap(lambda i: (fine, fine, st.text(max_size=5), odd)[i])
    numbers = (
        st.integers(-5, 200)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.sampled_from([50194.0, -0.0, 0.5, -1, 100, 100.5, 1e300, 10**400])
    )
    scalar = text | numbers | st.booleans() | st.none()
    kinds = st.sampled_from([*p.NoteKind, "colour"])
    by_name: dict[str, Any] = {
        "assistant": st.booleans(),
        "runnable": st.booleans(),
        "running": st.none() | st.lists(text, max_size=3),
        "task_ids": st.lists(text, max_size=3),
        "deps": st.lists(text, max_size=3),
        "params": st.dictionaries(text, text, max_size=2),
        "resources": st.dictionaries(text, numbers, max_size=2),
        "kind": kinds,
        "status": st.sampled_from([*TaskStatus]),
        "outcome": st.sampled_from([*p.AttemptEnd]),
        "value": numbers | text,
        "attempt": numbers,
        "priority": numbers,
        "retry_count": st.none() | numbers,
    }

    def mostly(usual: Any, rare: Any) -> Any:
        """``usual`` nine times in ten, else ``rare`` (st.one_of would make them even)."""
        return st.integers(0, 9).flatmap(lambda i: rare if i == 9 else usual)

    def body(cls: type[Any]) -> Any:
        """Mostly well-typed bodies (so that one rule at a time decides), now and then a
        value of any type."""
        if cls is p.AddTasks:
            by_name["tasks"] = st.lists(body(TaskSpec), max_size=2)
        if cls is p.GetWork:
            by_name["done"] = st.lists(body(p.TaskDone), max_size=3)
            by_name["failed"] = st.lists(body(p.TaskFailed), max_size=2)
        fields = dataclasses.fields(cls)
        value = {f.name: mostly(by_name.get(f.name, text), scalar) for f in fields}
        missing = dataclasses.MISSING
        required = [f.name for f in fields if f.default is missing and f.default_factory is missing]
        return st.fixed_dictionaries(
            {name: value[name] for name in required},
            optional={name: value[name] for name in value if name not in required},
        )

    return body


def test_the_published_schema_accepts_exactly_what_decode_accepts() -> None:
    """For bodies of every route made of valid and invalid parts alike, a JSON Schema
    validator of the published schema and decode agree on every one (integral floats,
    identifier rules, annotate's kinds included)."""
    jsonschema = pytest.importorskip("jsonschema")
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    body = _bodies()

    validators = {
        name: jsonschema.Draft202012Validator(p.json_schema(route.request))
        for name, route in p.ROUTES.items()
    }

    @hypothesis.settings(
        max_examples=400, deadline=None, database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )  # fmt: skip
    @hypothesis.given(st.sampled_from(sorted(p.ROUTES)).flatmap(
        lambda name: st.tuples(st.just(name), body(p.ROUTES[name].request))
    ))  # fmt: skip
    def agree(case: tuple[str, Any]) -> None:
        name, data = case
        try:
            decode(p.ROUTES[name].request, data)
            accepted = True
        except FieldError:
            accepted = False
        assert validators[name].is_valid(data) == accepted, (name, data)

    agree()


class _NoFastDecoders(dict[Any, Any]):
    """In place of ``protocol._FAST``: no class has a fast decoder (decode's general path)."""

    def get(self, key: Any, default: Any = None) -> Any:
        return None


def _typed(value: Any) -> Any:
    """``value`` with the type of each of its parts, so that equal means decoded alike (a
    dataclass's ``==`` takes 1 for 1.0, True for 1 and an enum for its text)."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (type(value), tuple((f.name, _typed(getattr(value, f.name))) for f in fields))
    if isinstance(value, dict):
        return (type(value), tuple((_typed(k), _typed(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value), tuple(_typed(v) for v in value))
    return (type(value), value)


def _outcome(cls: type[Any], data: Any, strict: bool) -> Any:
    """What decode makes of ``data`` (typed), or the FieldError's field and message."""
    try:
        return ("value", _typed(decode(cls, data, strict=strict)))
    except FieldError as exc:
        return ("error", exc.field, str(exc))


def _general(cls: type[Any], data: Any, strict: bool) -> Any:
    """:func:`_outcome` of decode's general path alone."""
    fast, p._FAST = p._FAST, _NoFastDecoders()
    try:
        return _outcome(cls, data, strict)
    finally:
        p._FAST = fast


def test_the_fast_decoders_decode_exactly_as_the_general_path() -> None:
    """decode's fast path (a decoder per class for the common case) gives, for bodies of every
    route valid and invalid alike (nested reports too), the value the general path gives,
    type for type, or the same FieldError with the same field and message; in strict and
    lenient modes. The fast path itself decodes a good share of them."""
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    body = _bodies()
    seen = {"value": 0, "error": 0, "fast": 0}

    @hypothesis.settings(
        max_examples=800, deadline=None, database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )  # fmt: skip
    @hypothesis.given(
        st.sampled_from(sorted(p.ROUTES)).flatmap(
            lambda name: st.tuples(st.just(name), body(p.ROUTES[name].request))
        ),
        st.booleans(),
    )
    def agree(case: tuple[str, Any], strict: bool) -> None:
        name, data = case
        cls = p.ROUTES[name].request
        fast = _outcome(cls, data, strict)
        assert fast == _general(cls, data, strict), (name, data)
        seen[fast[0]] += 1
        decoder = p._FAST.get((cls, strict))
        seen["fast"] += decoder is not None and decoder(data) is not p._NO

    agree()
    assert seen["value"] > 50 and seen["error"] > 50 and seen["fast"] > 50, seen


def test_the_fast_decoders_take_full_bodies_and_answers() -> None:
    """Bodies and answers with every field set (a registration of a task with retry, batch and
    labels; a get_work with reports; a hand-out) go through the fast path, and decode as the
    general path does, type for type; a class that holds itself is left to the general path."""
    spec = TaskSpec(
        "t1", "Fam", "mod", {"a": "1"}, TaskStatus.DONE, ("d",), 3, {"db": 1}, True, 2, "why",
        "conveyor", p.RetrySpec(1.0, 2.0, 60.0, 0.1), ("gpu",), p.BatchSpec("k", 5),
    )  # fmt: skip
    values: list[Any] = [
        p.AddTasks("w", (spec, TaskSpec("t2")), True),
        p.GetWork("w", True, ("t1",), ("conveyor",), 4, (p.TaskDone("w", "t1", 7, "ok"),)),
        p.WorkAnswer(p.Work("t1", "Fam", "mod", {"a": "1"}, 7, 60.0), batched=True),
        p.StatusesAnswer({"t1": TaskStatus.RUNNING}),
    ]
    for value in values:
        data = json.loads(json.dumps(encode(value)))
        for strict in (True, False):
            assert _outcome(type(value), data, strict) == _general(type(value), data, strict)
            decoder = p._FAST[type(value), strict]
            assert decoder is not None and decoder(data) is not p._NO, value
            assert _typed(decoder(data)) == _typed(value)

    done = {"worker_id": "w", "task_id": "t"}
    odd = [  # (what JSON allows and the rules turn away, or decode converts)
        (p.TaskDone, {**done, "attempt": value}) for value in (True, 3.0, -1, 2**70, "3", None)
    ] + [
        (p.GetWork, {"worker_id": "w", "max_tasks": 10**6}),
        (p.GetWork, {"worker_id": "w", "running": ["a\nb"]}),
        (p.GetWork, {"worker_id": "", "done": [done]}),
        (p.StatusesAnswer, {"statuses": {"t": "done"}}),
        (p.WorkAnswer, {"work": {"task_id": "t", "lease": 1}}),  # (an int for a float: kept)
        (p.WorkAnswer, {"work": {"task_id": "t", "lease": float("inf")}}),
        (p.AddTasks, {"worker_id": "w", "tasks": [{"task_id": "t", "resources": {"": 1}}]}),
        (p.AddTasks, {"worker_id": "w", "tasks": [{"task_id": "t", "priority": False}]}),
    ]
    for cls, data in odd:
        for strict in (True, False):
            assert _outcome(cls, data, strict) == _general(cls, data, strict), (cls, data)

    tree = {"name": "a", "children": [{"name": "b"}]}
    assert decode(_Node, tree) == _Node("a", (_Node("b"),))
    assert p._FAST[_Node, True] is None


def test_a_fast_decoder_stores_what_the_class_init_would() -> None:
    """The fast decoders of conveyor's own slotted classes store the fields themselves instead
    of calling ``__init__``: a field left out gets its default, and a default factory's value
    is made anew for each decoded value, never shared; a class of another module, whose
    ``__init__`` may do more, is still built by its ``__init__``."""
    first, second = (decode(TaskSpec, {"task_id": t}) for t in ("a", "b"))
    assert first == TaskSpec("a") and second == TaskSpec("b")
    assert first.params == {} and first.params is not second.params
    assert first.resources is not second.resources
    assert p._direct_fields(TaskSpec) is not None
    built: list[str] = []

    @dataclass(frozen=True, slots=True)
    class Counted:
        name: str = "x"

        def __init__(self, name: str = "x") -> None:
            built.append(name)
            object.__setattr__(self, "name", name)

    assert p._direct_fields(Counted) is None
    assert decode(Counted, {"name": "y"}) == Counted("y")
    assert built == ["y", "y"]  # (decode's, then the comparison's)
    # (nor one of this module's with an __init__ of its own, were one written there)
    Counted.__module__ = p.__name__
    Counted.__init__.__code__ = Counted.__init__.__code__.replace(co_filename=p.__file__)
    p._FAST.pop((Counted, True), None)
    assert p._direct_fields(Counted) is None
    assert decode(Counted, {"name": "z"}).name == "z" and built[-1] == "z"


@dataclass(frozen=True)
class _Node:
    """A class that holds itself."""

    name: str
    children: tuple[_Node, ...] = ()


@dataclass(frozen=True)
class _Coded:
    """A class whose text fields need at least three characters (names, and keys)."""

    code: str = field(default="abc", metadata={"text": p.TextRule(min_length=3)})
    named: Mapping[str, int] = field(default_factory=dict, metadata={"keys": p.TextRule(3)})


@pytest.mark.parametrize("strict", [True, False])
def test_a_text_rule_longer_than_one_character_holds_on_every_path(strict: bool) -> None:
    """A ``TextRule`` with ``min_length`` over 1 turns away shorter text on the fast path and
    the general one alike, with the same message; text long enough is kept."""
    for data in ({"code": "ab"}, {"code": "a"}, {"named": {"ab": 1}}):
        outcome = _outcome(_Coded, data, strict)
        assert outcome[0] == "error" and "at least 3 characters, got" in outcome[2], data
        assert _general(_Coded, data, strict) == outcome
    assert decode(_Coded, {"code": "abcd", "named": {"xyz": 1}}) == _Coded("abcd", {"xyz": 1})
