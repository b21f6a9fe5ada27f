"""The scheduler transport as requests in, answers out (SPEC §10): one ``call(request)``, one
dispatcher in the scheduler built from ``protocol.ROUTES``, an outbox of request values, a
wire encoding that leaves defaulted fields out, and the adapter for method-style transports."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

import conveyor
from conveyor import protocol as p
from conveyor.config import SchedulerSettings
from conveyor.errors import SchedulerUnavailable, StaleReport
from conveyor.protocol import ROUTES, TaskSpec, TaskStatus, decode, encode_request, route_of
from conveyor.testing import FakeClock
from conveyor.transports.base import MethodTransport, SchedulerTransport, as_transport
from conveyor.worker.outbox import Outbox

SRC = Path(conveyor.__file__).parent


class Touch(conveyor.Task):
    """Writes one file; complete once it exists."""

    path = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.path)

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("x")


class Joined(conveyor.Task):
    """Needs two Touch tasks; writes one file of its own."""

    root = conveyor.Parameter()

    def requires(self) -> list[Touch]:
        return [Touch(path=f"{self.root}/a"), Touch(path=f"{self.root}/b")]

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(f"{self.root}/joined")

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("joined")


class CallOnly:
    """A third-party transport with nothing but ``call``: each request goes through the JSON
    wire form (encoded as the http transport does, decoded as the server does) to a scheduler
    of its own, and its answer comes back the same way."""

    def __init__(self) -> None:
        self.scheduler = conveyor.Scheduler()
        self.sent: list[str] = []
        self.carried: list[str] = []  # the reports get_work carried, by route

    def call(self, request: Any) -> Any:
        route = route_of(request)
        self.sent.append(route.name)
        if isinstance(request, p.GetWork):
            self.carried += ["task_done"] * len(request.done)
            self.carried += ["task_failed"] * len(request.failed)
        wire = json.loads(json.dumps(encode_request(request)))
        answer = self.scheduler.call(decode(route.request, wire))
        return decode(route.answer, json.loads(json.dumps(p.encode(answer))), strict=False)


def test_a_transport_with_only_call_runs_a_real_build(tmp_path: Path) -> None:
    """A worker given a transport that implements only ``call`` registers, runs and reports
    a three-task graph through it, and ends the run with a release."""
    transport = CallOnly()
    config = conveyor.Config().with_overrides(executor="inline", log_level="warning")
    with conveyor.Worker(transport, config=config) as worker:
        assert worker.add(Joined(root=str(tmp_path)))
        assert worker.run() is True
    assert (tmp_path / "joined").read_text() == "joined"
    assert worker.report is not None and worker.report.ok
    assert transport.sent[0] == "add_tasks"
    # each success rides with the next get_work (the scheduler's answers say batched)
    assert transport.sent.count("get_work") >= 3 and transport.sent.count("task_done") == 0
    assert transport.carried == ["task_done"] * 3
    assert {"statuses", "release"} <= set(transport.sent)
    statuses = transport.scheduler.statuses([Joined(root=str(tmp_path)).task_id])
    assert statuses == {Joined(root=str(tmp_path)).task_id: TaskStatus.DONE}


def test_the_scheduler_has_a_method_for_every_route_and_answers_its_type() -> None:
    """``Scheduler.call`` dispatches every request of ROUTES to the method of its name and
    answers the type the route names."""
    scheduler = conveyor.Scheduler()
    assert isinstance(scheduler, SchedulerTransport)
    requests = [
        p.Ping("w"),
        p.AddTasks("w", (TaskSpec("a"), TaskSpec("b", deps=("a",)))),
        p.GetWork("w"),
        p.WorkLeftRequest("w"),
        p.Annotate("a", p.NoteKind.PROGRESS, 10.0),
        p.TaskFailed("w", "a", "boom", 0, p.AttemptEnd.TIMED_OUT),
        p.TaskDone("w", "b"),
        p.Statuses(("a", "b", "nope")),
        p.Explanation("a"),
        p.Release("w", ("a",)),
        p.Submit(TaskSpec("s")),
        p.Cancel("s"),
    ]
    assert {type(r) for r in requests} == {route.request for route in ROUTES.values()}
    answers = {route_of(r).name: scheduler.call(r) for r in requests}
    for name, answer in answers.items():
        assert isinstance(answer, ROUTES[name].answer), (name, answer)
    assert answers["get_work"].work.task_id == "a"
    assert answers["task_failed"].status == TaskStatus.FAILED
    assert answers["statuses"].statuses == {"a": TaskStatus.FAILED, "b": TaskStatus.DONE}
    assert answers["explanation"].explanation == "boom"


def test_a_subclass_override_of_a_named_method_serves_its_route() -> None:
    """The named methods are what ``call`` runs: a subclass that overrides one is called."""
    seen: list[str] = []

    class Counting(conveyor.Scheduler):
        def ping(self, worker_id: str) -> None:
            seen.append(worker_id)
            super().ping(worker_id)

    assert Counting().call(p.Ping("w1")) == p.PingAnswer()
    assert seen == ["w1"]


def test_a_stale_report_is_raised_by_call() -> None:
    """``call`` raises what the method raises: a report of an attempt never handed out is a
    StaleReport."""
    scheduler = conveyor.Scheduler()
    scheduler.call(p.AddTasks("w", (TaskSpec("a"),)))
    work = scheduler.call(p.GetWork("w")).work
    with pytest.raises(StaleReport):
        scheduler.call(p.TaskDone("w", "a", work.attempt + 1))


def test_call_refuses_what_is_not_a_request() -> None:
    """A value that is not a request of ROUTES is a TypeError naming it and the requests."""
    with pytest.raises(TypeError, match=r"expected a request of .*AddTasks.*, got TaskSpec"):
        conveyor.Scheduler().call(TaskSpec("a"))


# --- the wire ------------------------------------------------------------------------------------


def test_the_request_encoding_leaves_defaulted_fields_out() -> None:
    """A TaskFailed with the default outcome has no "outcome" key, an AddTasks no default
    field of its specs, a Release without task ids just the worker id; a field that is not at
    its default is there."""
    assert encode_request(p.TaskFailed("w", "t", "boom")) == {
        "worker_id": "w",
        "task_id": "t",
        "explanation": "boom",
    }
    timed_out = encode_request(p.TaskFailed("w", "t", "slow", 3, p.AttemptEnd.TIMED_OUT))
    assert timed_out["outcome"] == "timed_out" and timed_out["attempt"] == 3
    added = encode_request(p.AddTasks("w", (TaskSpec("a"), TaskSpec("b", priority=2))))
    assert added == {"worker_id": "w", "tasks": [{"task_id": "a"}, {"task_id": "b", "priority": 2}]}
    assert encode_request(p.Release("w")) == {"worker_id": "w"}
    assert encode_request(p.GetWork("w", running=())) == {"worker_id": "w", "running": []}


def test_every_request_round_trips_without_its_defaults() -> None:
    """What ``encode_request`` leaves out, ``decode`` (the server's, strict) fills back in:
    each request, at its defaults and with every field set, decodes to itself."""
    spec = TaskSpec("t", "F", "m", {"a": "1"}, TaskStatus.DONE, ("d",), 3, {"db": 1}, False, 2)
    values = [
        p.AddTasks("w", (spec, TaskSpec("t2"))),
        p.AddTasks("w", (), True),
        p.GetWork("w"),
        p.GetWork("w", True, ("t",)),
        p.WorkLeftRequest("w"),
        p.TaskDone("w", "t"),
        p.TaskDone("w", "t", 7),
        p.TaskFailed("w", "t", "x"),
        p.TaskFailed("w", "t", "x", 7, p.AttemptEnd.INTERRUPTED),
        p.Annotate("t", p.NoteKind.TRACKING_URL, "http://x.invalid"),
        p.Ping("w"),
        p.Statuses(("t",)),
        p.Explanation("t"),
        p.Release("w"),
        p.Release("w", ("t",)),
    ]
    for value in values:
        wire = json.loads(json.dumps(encode_request(value)))
        assert decode(type(value), wire) == value, value


def test_a_method_is_called_without_the_fields_left_at_their_default() -> None:
    """``Route.arguments``: required fields positionally, defaulted ones by keyword only when
    set, so a method older than a defaulted field is called as before."""
    route = ROUTES["task_failed"]
    assert route.arguments(p.TaskFailed("w", "t", "x")) == (("w", "t", "x"), {})
    set_ = p.TaskFailed("w", "t", "x", 2, p.AttemptEnd.TIMED_OUT)
    assert route.arguments(set_) == (("w", "t", "x"), {"attempt": 2, "outcome": "timed_out"})
    assert ROUTES["release"].arguments(p.Release("w")) == (("w",), {})


def test_an_enum_default_given_as_its_plain_value_is_left_out() -> None:
    """``outcome="failed"`` (the plain text of the default AttemptEnd.FAILED) is the default:
    left out of the wire form and of a method's keywords, as the enum member is; a plain value
    equal to a non-enum default of another type still counts (``True`` is not ``1``)."""
    plain = p.TaskFailed("w", "t", "x", 2, "failed")  # type: ignore[arg-type]
    assert "outcome" not in encode_request(plain)
    assert ROUTES["task_failed"].arguments(plain) == (("w", "t", "x"), {"attempt": 2})
    assert encode_request(p.TaskFailed("w", "t", "x", False))["attempt"] is False


# --- the adapter for method-style transports -------------------------------------------------


_UNSET: Any = object()


class OldStyle:
    """A transport of the earlier protocol: named methods, no ``call``; ``task_failed`` from
    before ``outcome`` existed. Each call is recorded."""

    def __init__(self) -> None:
        self.scheduler = conveyor.Scheduler()
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        if name == "call" or name not in ROUTES:
            raise AttributeError(name)
        method = getattr(self.scheduler, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return method(*args, **kwargs)

        return recorded

    def task_failed(self, worker_id: str, task_id: str, explanation: str, attempt: int = 0) -> Any:
        self.calls.append(("task_failed", (worker_id, task_id, explanation), {"attempt": attempt}))
        return self.scheduler.task_failed(worker_id, task_id, explanation, attempt)

    def get_work(
        self, worker_id: str, assistant: Any = _UNSET, running: Any = _UNSET, loaders: Any = _UNSET
    ) -> Any:  # (from before batches: one task per call, results by their own routes)
        named = (("assistant", assistant), ("running", running), ("loaders", loaders))
        given = {name: value for name, value in named if value is not _UNSET}
        self.calls.append(("get_work", (worker_id,), given))
        return self.scheduler.get_work(worker_id, **given)


def test_a_method_style_transport_is_wrapped_with_a_warning() -> None:
    """An object without ``call`` is used through MethodTransport (a DeprecationWarning says
    so); one with ``call`` is used as it is."""
    scheduler = conveyor.Scheduler()
    assert as_transport(scheduler) is scheduler

    class Legacy(OldStyle):
        """Another class: the warning is given once per class."""

    with pytest.warns(DeprecationWarning, match=r"Legacy has no call\(\) method"):
        wrapped = as_transport(Legacy())
    assert isinstance(wrapped, MethodTransport)
    assert wrapped.call(p.Ping("w")) == p.PingAnswer()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (its own test checks it)
def test_a_method_style_transport_runs_a_build(tmp_path: Path) -> None:
    """A worker runs a graph through a method-style transport: each method is called with the
    request's fields (the defaulted ones only when set), answers wrapped as the routes say."""
    transport = OldStyle()
    config = conveyor.Config().with_overrides(executor="inline", log_level="warning")
    with conveyor.Worker(transport, config=config, worker_id="old") as worker:
        assert worker.add(Joined(root=str(tmp_path)))
        assert worker.run() is True
    names = [name for name, _, _ in transport.calls]
    assert names[0] == "add_tasks" and names.count("task_done") == 3
    (_, args, kwargs) = next(c for c in transport.calls if c[0] == "get_work")
    assert args == ("old",) and set(kwargs) <= {"running"}, (args, kwargs)
    (_, args, kwargs) = next(c for c in transport.calls if c[0] == "task_done")
    assert args[0] == "old" and set(kwargs) == {"attempt"}  # (the hand-out's attempt id)
    assert (tmp_path / "joined").exists()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_method_style_transport_gets_a_failure_without_outcome(tmp_path: Path) -> None:
    """A plain failure reaches a task_failed written before ``outcome``: the field is at its
    default, so it is not passed."""

    class Broken(conveyor.Task):
        """Fails once run."""

        def run(self) -> None:
            raise RuntimeError("broken on purpose")

    transport = OldStyle()
    config = conveyor.Config().with_overrides(executor="inline", log_level="critical")
    config = config.with_section("scheduler", retry_count=1)
    with conveyor.Worker(transport, config=config) as worker:
        assert worker.add(Broken())
        assert worker.run() is False
    [(_, args, _)] = [c for c in transport.calls if c[0] == "task_failed"]
    assert args[1] == Broken().task_id and "broken on purpose" in args[2]


class Sleeper(conveyor.Task):
    """Never finishes in time: its worker stops it after a second."""

    worker_timeout = 1

    def complete(self) -> bool:
        return False

    def run(self) -> None:
        time.sleep(60)  # (not a synchronisation: the timeout ends it)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_method_style_transport_gets_a_timeout_as_a_plain_failure(tmp_path: Path) -> None:
    """A timed-out attempt is reported to a task_failed written before ``outcome``: the call
    with ``outcome`` raises TypeError, so it is made again without it (the attempt id kept);
    the run ends with the failure instead of the TypeError."""
    transport = OldStyle()
    config = conveyor.Config().with_overrides(
        executor="fork", log_level="critical", kill_grace=1, install_signal_handlers=False
    )
    config = config.with_section("scheduler", retry_count=1)
    with (
        structlog.testing.capture_logs() as logs,
        conveyor.Worker(transport, config=config) as worker,
    ):
        assert worker.add(Sleeper())
        assert worker.run() is False
    [(_, args, kwargs)] = [c for c in transport.calls if c[0] == "task_failed"]
    assert args[1] == Sleeper().task_id and kwargs["attempt"] >= 1, (args, kwargs)
    assert transport.scheduler.statuses([Sleeper().task_id]) == {
        Sleeper().task_id: TaskStatus.FAILED
    }
    [warned] = [e for e in logs if e.get("method") == "task_failed"]
    assert warned["field"] == "outcome" and warned["log_level"] == "warning"


class Rejecting:
    """A method-style ``task_failed`` and ``release`` from before their newest fields (real
    old signatures: Python itself refuses an unknown keyword); every call made is recorded."""

    def __init__(self) -> None:
        self.tries: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def task_failed(self, worker_id: str, task_id: str, explanation: str, attempt: int = 0) -> str:
        self.tries.append(("task_failed", (worker_id, task_id, explanation), {"attempt": attempt}))
        return TaskStatus.FAILED

    def release(self, worker_id: str) -> None:
        self.tries.append(("release", (worker_id,), {}))


def test_the_adapter_drops_the_newest_field_a_method_rejects_and_remembers_it() -> None:
    """On a TypeError the newest passed field is dropped and the call made again; that route
    is then called without it at once, and the older fields it takes are still passed."""
    target = Rejecting()
    transport = MethodTransport(target)
    timed_out = p.TaskFailed("w", "t", "slow", 3, p.AttemptEnd.TIMED_OUT)
    assert transport.call(timed_out) == p.TaskFailedAnswer(TaskStatus.FAILED)
    assert transport.call(timed_out) == p.TaskFailedAnswer(TaskStatus.FAILED)
    assert target.tries == [("task_failed", ("w", "t", "slow"), {"attempt": 3})] * 2
    assert transport._untaken == {"task_failed": {"outcome"}}  # remembered: one refusal only
    target.tries.clear()
    assert transport.call(p.Release("w", ("t",))) == p.Ok()
    assert transport.call(p.Release("w", ("t",))) == p.Ok()
    assert target.tries == [("release", ("w",), {}), ("release", ("w",), {})]


def test_a_type_error_inside_a_method_is_raised_and_attempt_is_never_dropped() -> None:
    """A TypeError raised by a method's own body is not taken for a refused field: raised at
    once, the method called once, nothing dropped; a method refusing ``attempt`` is refused."""

    class Buggy:
        calls = 0

        def task_failed(self, *args: Any, **kwargs: Any) -> str:
            Buggy.calls += 1
            raise TypeError("a bug inside task_failed")

    buggy = MethodTransport(Buggy())
    timed_out = p.TaskFailed("w", "t", "slow", 3, p.AttemptEnd.TIMED_OUT)
    with pytest.raises(TypeError, match="a bug inside"):
        buggy.call(timed_out)
    assert (Buggy.calls, buggy._untaken) == (1, {})

    class Unfenced:
        def task_failed(self, worker_id: str, task_id: str, explanation: str) -> str:
            return TaskStatus.FAILED

    unfenced = MethodTransport(Unfenced())
    with pytest.raises(TypeError, match="attempt"):
        unfenced.call(p.TaskFailed("w", "t", "boom", 3))
    assert unfenced._untaken == {}


def test_a_type_error_with_nothing_left_to_drop_is_raised() -> None:
    """A TypeError from a call passing only required fields is the method's own: raised."""

    class Bad:
        def ping(self, worker_id: str) -> None:
            raise TypeError("a bug in ping")

    with pytest.raises(TypeError, match="a bug in ping"):
        MethodTransport(Bad()).call(p.Ping("w"))


# --- the outbox -----------------------------------------------------------------------------------


class Outage:
    """A transport that is unreachable until ``up`` is set; what it delivered, in order."""

    def __init__(self) -> None:
        self.up = False
        self.delivered: list[Any] = []

    def call(self, request: Any) -> Any:
        if not self.up:
            raise SchedulerUnavailable("down")
        self.delivered.append(request)
        return route_of(request).answer_of(TaskStatus.FAILED)


def test_the_outbox_queues_request_values_and_names_their_tasks() -> None:
    """During an outage the outbox keeps the request values in order; the unreported tasks are
    the ``task_id`` of its TaskDone and TaskFailed values (not of registrations); once the
    scheduler is back they are delivered in the order they were sent."""
    clock = FakeClock()
    transport = Outage()
    settings = SchedulerSettings(rpc_retry_wait=1.0, rpc_retry_max_wait=1.0)
    outbox = Outbox(transport, settings, clock.monotonic, rand=lambda: 1.0)
    sent = [
        p.TaskDone("w", "done-1", 3),
        p.AddTasks("w", (TaskSpec("registered"),)),
        p.TaskFailed("w", "failed-1", "boom", 4, p.AttemptEnd.TIMED_OUT),
    ]
    for request in sent:
        outbox.send(request)
    assert outbox.pending and outbox.unreported() == {"done-1", "failed-1"}
    transport.up = True
    clock.advance(outbox.seconds_to_retry())
    assert outbox.flush() is True
    assert transport.delivered == sent and outbox.unreported() == set()


class Buggy:
    """A transport with a bug: every call raises ValueError."""

    def call(self, request: Any) -> Any:
        raise ValueError("a bug in the transport")


def test_the_outbox_raises_a_transport_bug_and_logs_which_report() -> None:
    """An error that is neither a refusal nor an outage is not taken for an outage (nothing
    queued): it is logged with the report it failed on, and raised."""
    outbox = Outbox(Buggy(), SchedulerSettings(), FakeClock().monotonic)
    with structlog.testing.capture_logs() as logs, pytest.raises(ValueError, match="a bug"):
        outbox.send(p.TaskDone("w", "done-1", 1))
    assert not outbox.pending
    [logged] = [e for e in logs if e["log_level"] == "error"]
    assert logged["request"] == "TaskDone" and logged["task_id"] == "done-1"
    assert logged["transport"].endswith("Buggy")


# --- what is gone --------------------------------------------------------------------------------


@pytest.mark.parametrize("package", ["worker", "transports"])
def test_no_signature_sniffing_or_error_text_matching_in(package: str) -> None:
    """Neither the worker nor the transports inspect signatures or look for words in an
    error's text to decide what to send."""
    for path in sorted((SRC / package).glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "inspect.signature" not in text, path
        assert not re.search(r"""["'][a-z_ ]+["'] (not )?in str\(exc\)""", text), path


def test_each_scheduler_method_takes_its_requests_fields_in_order() -> None:
    """The dispatcher passes a request's fields positionally: each route's method of the
    scheduler has parameters of those names (``specs`` for ``tasks``, its historic name), in
    the order the request declares them, with the same defaults."""
    import dataclasses
    import inspect

    from conveyor.scheduler.policy import SchedulerCore

    for name, route in ROUTES.items():
        params = list(inspect.signature(getattr(SchedulerCore, name)).parameters.values())[1:]
        fields = dataclasses.fields(route.request)
        names = [{"specs": "tasks"}.get(param.name, param.name) for param in params]
        assert names == [f.name for f in fields], name
        for param, f in zip(params, fields, strict=True):
            default = f.default if f.default is not dataclasses.MISSING else param.empty
            assert param.default == default, (name, f.name)
