"""The values the in-process hot path builds more cheaply (issue 25: ``bench_graph --warm``).

``make_task_spec``, ``make_work`` and ``make_work_answer`` write a frozen dataclass's slots
directly instead of through its generated ``__init__``: what they build must be the very value
the constructor builds (frozen, equal, hashed alike), for every field, in declaration order. A
task's parameters given as the one type a plain ``Parameter`` or ``IntParameter`` keeps as is
skip ``normalize()``: the task must be the same as one built through it. The scheduler shares
one ``(worker_id,)`` tuple among the records a registration is alone in. An event some plugin
wants is built by writing its slots too: it must be the event its constructor builds.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

import conveyor
from conveyor import events as ev
from conveyor import protocol as p
from conveyor.core.states import EVENT_OF, TaskState, Trigger
from conveyor.plugins import HookRelay
from conveyor.protocol import TaskStatus
from conveyor.scheduler import Scheduler
from conveyor.task import _passed_as_is
from conveyor.testing import FakeClock
from conveyor.worker.graph import Node
from conveyor.worker.transitions import Transitions

pytestmark = pytest.mark.timeout(60)

_BUILDERS = [
    (p.TaskSpec, p.make_task_spec),
    (p.Work, p.make_work),
    (p.WorkAnswer, p.make_work_answer),
]


def _sample(cls: type) -> tuple[Any, ...]:
    """A value for every field of ``cls``, none of them its default (so that a builder that
    left a field at its default, or swapped two, would build another value)."""
    work = p.Work("w1", "Fam", "mod", {"a": "1"}, 7, 30.0, "luigi")
    samples: dict[str, Any] = {
        "task_id": "t1",
        "family": "Fam",
        "module": "pkg.mod",
        "params": {"a": "1"},
        "status": TaskStatus.DONE,
        "deps": ("d1", "d2"),
        "priority": 5,
        "resources": {"db": 2},
        "runnable": False,
        "retry_count": 3,
        "explanation": "why",
        "loader": "luigi",
        "retry": p.RetrySpec(delay=1.0),
        "labels": ("gpu",),
        "batch": p.BatchSpec("key", 4),
        "attempt": 42,
        "lease": 12.5,
        "walk": True,
        "work": work,
        "more": (work,),
        "batched": True,
        "refused": (p.RefusedReport("task_done", "t0", 1, "stale"),),
        "stop": (p.StopAttempt("t2", 9),),
    }
    if cls is p.Work:  # (a Work's batch is of members, not a BatchSpec)
        samples["batch"] = (p.BatchMember("t1", {"a": "1"}),)
    return tuple(samples[f.name] for f in dataclasses.fields(cls))


@pytest.mark.parametrize(("cls", "make"), _BUILDERS, ids=lambda x: getattr(x, "__name__", ""))
def test_builder_takes_every_field_in_declaration_order(cls: type, make: Any) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    assert list(inspect.signature(make).parameters) == names


@pytest.mark.parametrize(("cls", "make"), _BUILDERS, ids=lambda x: getattr(x, "__name__", ""))
def test_builder_makes_the_constructors_value(cls: type, make: Any) -> None:
    values = _sample(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    built, expected = make(*values), cls(*values)
    assert type(built) is cls
    assert built == expected
    assert [getattr(built, f.name) for f in dataclasses.fields(cls)] == list(values)
    assert repr(built) == repr(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, names[0], values[1])
    # (hashed alike: with the mappings made hashable, which a real value's never are)
    frozen = [tuple(v.items()) if isinstance(v, dict) else v for v in values]
    if cls is p.WorkAnswer:
        frozen[:2] = [None, ()]  # (a Work holds a dict)
    if cls is p.Work:
        frozen[names.index("batch")] = ()  # (so does a BatchMember)
    assert hash(make(*frozen)) == hash(cls(*frozen))


def test_built_values_encode_and_decode_as_the_constructors() -> None:
    spec = p.make_task_spec(*_sample(p.TaskSpec))
    assert p.encode(spec) == p.encode(p.TaskSpec(*_sample(p.TaskSpec)))
    assert p.decode(p.TaskSpec, p.encode(spec)) == spec
    work = p.make_work(*_sample(p.Work))
    assert p.decode(p.Work, p.encode(work)) == work


def test_a_builder_given_too_few_values_fails() -> None:
    with pytest.raises(TypeError):
        p.make_work("t1", "Fam", "mod", {})  # type: ignore[call-arg]


class _Padded(conveyor.Parameter[str]):
    """A string parameter of its own class, which normalizes what it is given."""

    def parse(self, text: str) -> str:
        return text.strip().upper()


class Plain(conveyor.Task):
    """Parameters of every kind the binding treats apart."""

    name = conveyor.Parameter()
    count = conveyor.IntParameter()
    padded = _Padded()
    ratio = conveyor.FloatParameter(default=0.5)


def test_only_plain_parameter_classes_pass_values_as_is() -> None:
    assert _passed_as_is(conveyor.Parameter()) is str
    assert _passed_as_is(conveyor.IntParameter()) is int
    assert _passed_as_is(_Padded()) is None
    assert _passed_as_is(conveyor.FloatParameter()) is None
    assert _passed_as_is(conveyor.BoolParameter()) is None


def test_values_passed_as_is_bind_as_their_string_forms_do() -> None:
    typed = Plain(name="a", count=3, padded=" x ")
    from_strings = Plain.from_str_params({"name": "a", "count": "3", "padded": " x "})
    assert typed.task_id == from_strings.task_id
    assert (
        typed.param_kwargs
        == from_strings.param_kwargs
        == {
            "name": "a",
            "count": 3,
            "padded": "X",  # (its own parse() ran)
            "ratio": 0.5,
        }
    )
    assert dict(typed.task_params) == {"name": "a", "count": "3", "padded": "X", "ratio": "0.5"}
    assert (typed.name, typed.count, typed.padded, typed.ratio) == ("a", 3, "X", 0.5)
    assert isinstance(Plain.name, conveyor.Parameter)  # (the class keeps its Parameter)


class Memoized(conveyor.Task):
    """Only plain parameters: its bindings are memoized (``_memoizable``)."""

    name = conveyor.Parameter()
    count = conveyor.IntParameter()


def test_a_memoized_binding_is_the_same_whichever_form_made_it_first() -> None:
    assert Memoized._memoizable
    first = Memoized(name="m", count=7)
    again = Memoized(name="m", count=7)
    from_strings = Memoized.from_str_params({"name": "m", "count": "7"})
    assert first.task_id == again.task_id == from_strings.task_id
    assert again.param_kwargs == from_strings.param_kwargs == {"name": "m", "count": 7}
    assert dict(from_strings.task_params) == {"name": "m", "count": "7"}
    assert type(from_strings.param_kwargs["count"]) is int


def test_values_not_of_the_plain_type_still_go_through_normalize() -> None:
    assert Plain(name="a", count=3.0, padded="y").count == 3  # (a float without a fraction)
    with pytest.raises(conveyor.ParameterError, match="count"):
        Plain(name="a", count=True, padded="y")  # (a bool is never an int)
    with pytest.raises(conveyor.ParameterError, match="name"):
        Plain(name=5, count=1, padded="y")


def _registered(scheduler: Scheduler, *specs: p.TaskSpec, worker: str = "w1") -> None:
    scheduler.add_tasks(worker, list(specs))


def test_records_alone_with_their_worker_share_one_tuple_and_others_join_it() -> None:
    scheduler = Scheduler(conveyor.Config())
    _registered(scheduler, p.TaskSpec("a"), p.TaskSpec("b"), p.TaskSpec("c", runnable=False))
    a, b, c = (scheduler.peek(t) for t in "abc")
    assert a is not None and b is not None and c is not None
    assert a.stakeholders == a.runners == b.stakeholders == ("w1",)
    assert (c.stakeholders, c.runners) == (("w1",), ())
    _registered(scheduler, p.TaskSpec("b"), worker="w2")
    joined = {t: (r.stakeholders, r.runners) for t in "ab" if (r := scheduler.peek(t))}
    assert joined == {
        "a": (("w1",), ("w1",)),  # (the shared tuple unchanged)
        "b": (("w1", "w2"), ("w1", "w2")),
    }
    work = scheduler.get_work("w2")
    assert work is not None and work.task_id == "b"
    assert work == p.Work("b", "", "", {}, work.attempt, work.lease, "conveyor")
    scheduler.task_done("w2", "b", work.attempt)
    assert scheduler.statuses(["a", "b", "c"]) == {
        "a": TaskStatus.PENDING,
        "b": TaskStatus.DONE,
        "c": TaskStatus.PENDING,
    }


def _sample_fields(cls: type, every: bool) -> dict[str, Any]:
    """Values for ``cls``'s own fields: all of them (``every``), or only those without a
    default. Each is of its field's type, and none is the field's default."""
    by_type: dict[str, Any] = {
        "bool": True,
        "int": 4,
        "float": 2.5,
        "str": "text",
        "tuple[str, ...]": ("d1", "d2"),
        "int | None": 3,
        "float | None": 1.5,
        "str | None": "text",
    }
    common = {f.name for f in dataclasses.fields(ev.Event)}
    return {
        f.name: by_type[str(f.type)]
        for f in dataclasses.fields(cls)
        if f.name not in common and (every or f.default is dataclasses.MISSING)
    }


@pytest.mark.parametrize("trigger", list(EVENT_OF), ids=lambda t: t.name)
@pytest.mark.parametrize("every", [True, False], ids=["every field", "required fields"])
def test_an_event_built_directly_is_the_constructors(trigger: Trigger, every: bool) -> None:
    cls = EVENT_OF[trigger]
    clock = FakeClock()
    transit = Transitions("w-1", HookRelay(), clock, "host-1")
    task = Memoized(name="ev", count=1)
    node = Node(task, task.task_id, task.task_params, state=TaskState.RUNNING)
    fields = _sample_fields(cls, every)
    event = transit.event(node, cls, **fields)
    expected = cls(
        task_id=task.task_id,
        family="Memoized",
        module=__name__,
        params=task.task_params,
        worker_id="w-1",
        timestamp=clock.time(),
        state="RUNNING",
        owner_email=(),
        host="host-1",
        **fields,
    )
    assert type(event) is cls
    assert event == expected
    assert repr(event) == repr(expected)
    assert event.params is task.task_params  # (the task's read-only params, as given)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.task_id = "other"  # type: ignore[misc]


def test_an_event_given_wrong_fields_fails_as_its_constructor_does() -> None:
    transit = Transitions("w-1", HookRelay(), FakeClock(), "host-1")
    task = Memoized(name="ev", count=2)
    node = Node(task, task.task_id, task.task_params)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nonsense'"):
        transit.event(node, ev.TaskStarted, executor="inline", attempt=1, nonsense=1)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'attempt'"):
        transit.event(node, ev.TaskStarted, executor="inline")
