"""Tests for conveyor.util: @inherits, @requires and clone(), with Luigi's semantics."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor import util
from conveyor.task import load_task_class


class UhUpstream(conveyor.Task):
    """The task the others inherit from: a required date, a default, an insignificant knob."""

    day = conveyor.DateParameter()
    region = conveyor.Parameter(default="eu")
    verbose = conveyor.BoolParameter(default=False, significant=False)


class UhOther(conveyor.Task):
    """A second parent: one parameter of its own, one shared with UhUpstream."""

    batch = conveyor.IntParameter(default=10)
    region = conveyor.Parameter(default="us")


@util.inherits(UhUpstream)
class UhChild(conveyor.Task):
    """Inherits UhUpstream's parameters and declares one of its own."""

    limit = conveyor.IntParameter(default=5)


@util.inherits(UhUpstream)
class UhOverrides(conveyor.Task):
    """Declares its own ``region`` (another default, insignificant): it must win."""

    region = conveyor.Parameter(default="apac", significant=False)


@util.requires(UhUpstream)
class UhNeedsOne(conveyor.Task):
    """requires() is UhUpstream built from self."""

    limit = conveyor.IntParameter(default=5)


@util.requires(UhUpstream, UhOther)
class UhNeedsTwo(conveyor.Task):
    """requires() is [UhUpstream, UhOther] built from self."""


@util.requires(left=UhUpstream, right=UhOther)
class UhNeedsNamed(conveyor.Task):
    """requires() is {"left": UhUpstream, "right": UhOther} built from self."""


class UhGrandChild(UhChild):
    """A plain subclass of a decorated class."""

    extra = conveyor.Parameter(default="x")


def _by_method(task: conveyor.Task, cls: Any = None, **overrides: Any) -> conveyor.Task:
    """``task.clone(...)``; skips the test while Task has no clone() method."""
    if not hasattr(conveyor.Task, "clone"):
        pytest.skip("Task.clone() is not there yet")
    return task.clone(cls, **overrides)  # type: ignore[attr-defined, no-any-return]


def _by_function(task: conveyor.Task, cls: Any = None, **overrides: Any) -> conveyor.Task:
    """``conveyor.util.clone(task, ...)``."""
    return util.clone(task, cls, **overrides)


CLONES = pytest.mark.parametrize("clone", [_by_function, _by_method], ids=["function", "method"])
CloneFn = Callable[..., conveyor.Task]


# --- inherits --------------------------------------------------------------------------------


def test_inherits_copies_the_parameter_objects_first_in_order() -> None:
    """The parents' parameters come first (as inherited ones do), then the class's own; they
    are the same Parameter objects, so defaults and significance are kept."""
    params = dict(UhChild.parameters())
    assert list(params) == ["day", "region", "verbose", "limit"]
    upstream = dict(UhUpstream.parameters())
    for name in ("day", "region", "verbose"):
        assert params[name] is upstream[name]
    task = UhChild("2026-01-02")  # positionally: the first inherited parameter
    assert task.param_kwargs == {
        "day": datetime.date(2026, 1, 2),
        "region": "eu",
        "verbose": False,
        "limit": 5,
    }


def test_inherited_parameters_are_required_and_defaulted_as_upstream() -> None:
    """A required upstream parameter stays required; its defaults apply."""
    with pytest.raises(conveyor.ParameterError, match="missing required parameter 'day'"):
        UhChild()
    assert UhChild(day="2026-01-02").region == "eu"


def test_inherited_significance_is_kept_in_the_task_id() -> None:
    """Tasks differing only in an insignificant inherited parameter have one id; a
    significant inherited parameter changes it."""
    base = UhChild(day="2026-01-02")
    assert UhChild(day="2026-01-02", verbose=True).task_id == base.task_id
    assert UhChild(day="2026-01-02", region="us").task_id != base.task_id
    assert "verbose" not in repr(UhChild(day="2026-01-02", verbose=True))


def test_a_parameter_the_class_declares_is_not_overridden() -> None:
    """The class's own ``region`` (default apac, insignificant) wins over the inherited one."""
    params = dict(UhOverrides.parameters())
    assert params["region"] is vars(UhOverrides)["region"]
    task = UhOverrides(day="2026-01-02")
    assert task.region == "apac"
    assert UhOverrides(day="2026-01-02", region="eu").task_id == task.task_id


def test_inherits_several_classes_first_one_wins_a_shared_name() -> None:
    """With several parents every parameter is copied once, the first parent's when shared."""

    @util.inherits(UhUpstream, UhOther)
    class UhBoth(conveyor.Task):
        """Both parents."""

    params = dict(UhBoth.parameters())
    assert list(params) == ["day", "region", "verbose", "batch"]
    assert params["region"] is dict(UhUpstream.parameters())["region"]
    assert UhBoth(day="2026-01-02").region == "eu"


def test_a_subclass_of_a_decorated_class_keeps_its_parameters() -> None:
    """Subclassing a decorated class sees the copied parameters, in the same order."""
    assert [n for n, _ in UhGrandChild.parameters()] == [
        "day",
        "region",
        "verbose",
        "limit",
        "extra",
    ]
    assert UhGrandChild(day="2026-01-02").extra == "x"


def test_decorated_class_round_trips_and_is_found_by_the_registry() -> None:
    """String form round trip and load_task_class work for a decorated class."""
    task = UhChild(day="2026-01-02", region="us", limit=7)
    assert UhChild.from_str_params(task.to_str_params()) == task
    assert load_task_class(__name__, "UhChild") is UhChild
    assert task.to_str_params() == {
        "day": "2026-01-02",
        "region": "us",
        "verbose": "false",
        "limit": "7",
    }


def test_inherits_adds_clone_parent_and_clone_parents() -> None:
    """As in Luigi: clone_parent() builds the first parent, clone_parents() all of them."""

    @util.inherits(UhUpstream, UhOther)
    class UhBoth(conveyor.Task):
        """Both parents."""

    task = UhBoth(day="2026-01-02", region="us", batch=3)
    parent = task.clone_parent()  # type: ignore[attr-defined]
    assert parent == UhUpstream(day="2026-01-02", region="us")
    assert task.clone_parents(region="jp") == [  # type: ignore[attr-defined]
        UhUpstream(day="2026-01-02", region="jp"),
        UhOther(batch=3, region="jp"),
    ]
    with pytest.raises(conveyor.ParameterError, match="no inherited class has a parameter"):
        task.clone_parents(regoin="jp")  # type: ignore[attr-defined]


def test_inherits_refuses_what_is_not_a_task_class() -> None:
    """No class, both kinds of argument, or a non-Task are TypeErrors."""
    with pytest.raises(TypeError, match="at least one task class"):
        util.inherits()
    with pytest.raises(TypeError, match="not both"):
        util.inherits(UhUpstream, other=UhOther)
    with pytest.raises(TypeError, match="needs a Task class"):
        util.inherits(dict)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a Task class"):
        util.requires(UhUpstream)(dict)  # type: ignore[type-var]


# --- requires --------------------------------------------------------------------------------


def test_requires_one_class_returns_that_task_built_from_self() -> None:
    """requires() is the one parent built from self's values (not a list)."""
    task = UhNeedsOne(day="2026-01-02", region="us", verbose=True, limit=1)
    required = task.requires()
    assert isinstance(required, UhUpstream)
    assert required.param_kwargs == {
        "day": datetime.date(2026, 1, 2),
        "region": "us",
        "verbose": True,
    }
    assert required.task_id == UhUpstream(day="2026-01-02", region="us").task_id
    assert task.deps() == [required]


def test_requires_several_classes_returns_a_list() -> None:
    """With two parents requires() is a list in the order given; shared values flow to both."""
    task = UhNeedsTwo(day="2026-01-02", region="us", batch=4)
    assert task.requires() == [
        UhUpstream(day="2026-01-02", region="us"),
        UhOther(batch=4, region="us"),
    ]


def test_requires_named_classes_returns_a_dict() -> None:
    """Parents given by keyword make requires() a dict (and input() follows it)."""
    task = UhNeedsNamed(day="2026-01-02")
    assert task.requires() == {
        "left": UhUpstream(day="2026-01-02"),
        "right": UhOther(region="eu"),
    }
    assert not hasattr(task, "clone_parent")
    assert set(task.clone_parents()) == {"left", "right"}  # type: ignore[attr-defined]


def test_requires_chain_builds_through_the_worker(tmp_path: Path) -> None:
    """A chain written with @requires runs end to end: each step gets the upstream's values
    and reads its output."""
    result = conveyor.build(UhReport(day="2026-03-04", root=str(tmp_path)))
    assert result.ok, result.summary
    assert (tmp_path / "report-2026-03-04.txt").read_text() == "report of extract 2026-03-04\n"
    assert sorted(t.task_family for t in result.tasks.values()) == ["UhExtract", "UhReport"]


class UhExtract(conveyor.Task):
    """Writes a file named after its day under root."""

    day = conveyor.DateParameter()
    root = conveyor.PathParameter(significant=False)

    def output(self) -> conveyor.LocalTarget:
        """root/extract-<day>.txt"""
        return conveyor.LocalTarget(self.root / f"extract-{self.day}.txt")

    def run(self) -> None:
        """Write the day."""
        with self.output().open("w") as out:
            out.write(f"extract {self.day}\n")


@util.requires(UhExtract)
class UhReport(conveyor.Task):
    """Reads the extract of the same day (parameters by @requires)."""

    def output(self) -> conveyor.LocalTarget:
        """root/report-<day>.txt"""
        return conveyor.LocalTarget(self.root / f"report-{self.day}.txt")

    def run(self) -> None:
        """Copy the extract with a prefix."""
        with self.input().open("r") as src, self.output().open("w") as out:
            out.write(f"report of {src.read()}")


# --- clone -----------------------------------------------------------------------------------


@CLONES
def test_clone_same_class_with_overrides(clone: CloneFn) -> None:
    """clone() without a class copies every value and applies the overrides."""
    task = UhChild(day="2026-01-02", region="us", verbose=True, limit=7)
    copy = clone(task, limit=8)
    assert type(copy) is UhChild
    assert copy.param_kwargs == {**task.param_kwargs, "limit": 8}
    assert clone(task) == task
    assert clone(task).param_kwargs["verbose"] is True  # insignificant values are copied too


@CLONES
def test_clone_other_class_takes_the_common_parameters(clone: CloneFn) -> None:
    """Only the parameters the target class has are passed; the rest take its defaults."""
    task = UhChild(day="2026-01-02", region="us", limit=7)
    other = clone(task, UhOther)
    assert isinstance(other, UhOther)
    assert other.param_kwargs == {"batch": 10, "region": "us"}
    up = clone(task, UhUpstream, day=datetime.date(2026, 1, 3))
    assert up.task_id == UhUpstream(day="2026-01-03", region="us").task_id


@CLONES
def test_clone_refuses_an_override_the_class_does_not_have(clone: CloneFn) -> None:
    """A misspelt override is an error naming it (Luigi would ignore it silently)."""
    task = UhChild(day="2026-01-02")
    with pytest.raises(conveyor.ParameterError, match="UhOther has no parameter 'limti'"):
        clone(task, UhOther, limti=3)


@CLONES
def test_clone_an_override_is_normalised_like_any_value(clone: CloneFn) -> None:
    """An override in string form is parsed; a bad one names the task and the parameter."""
    task = UhChild(day="2026-01-02")
    assert clone(task, day="2026-02-01").param_kwargs["day"] == datetime.date(2026, 2, 1)
    with pytest.raises(conveyor.ParameterError, match="UhChild: parameter 'limit'"):
        clone(task, limit="many")


def test_clone_method_and_function_agree() -> None:
    """Task.clone() (once there) gives the same task as conveyor.util.clone()."""
    task = UhChild(day="2026-01-02", region="us")
    assert _by_method(task, UhUpstream, region="jp") == util.clone(task, UhUpstream, region="jp")


def test_common_params_is_the_shared_values() -> None:
    """common_params() is Luigi's helper: the values of the parameters both have."""
    task = UhChild(day="2026-01-02", region="us")
    assert util.common_params(task, UhOther) == {"region": "us"}
