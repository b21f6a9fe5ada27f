"""The task seam (SPEC §10): ``conveyor.TaskLike``, ``conveyor.TaskPolicy`` and task loaders
found by entry point (group ``conveyor.task_loaders``; conveyor's own is ``"conveyor"``); the
public task API that replaced the private members the worker and executors used; and no import
circle between ``task``, ``parameters`` and ``util``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest
from stevedore import DriverManager

import conveyor
from conveyor.backends import installed_names, load_task_loader
from conveyor.errors import BackendNotFound, TaskLoadError
from conveyor.loaders import task_loader
from conveyor.task import ConveyorLoader, outputs_of, reporting
from conveyor.tasklike import DEFAULT_LOADER, LOADER_GROUP


class Daily(conveyor.Task):
    day = conveyor.DateParameter()
    region = conveyor.Parameter(default="us")
    priority = 7
    worker_timeout = 30.0
    resources = {"db": 1}
    retry_count = 2
    owner_email = "ops@example.com"

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(f"/nonexistent/{self.day}-{self.region}")


class Foreign:
    """A task of another framework: no conveyor base class, only TaskLike's members."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def task_id(self) -> str:
        return f"Foreign_{self.name}"

    @property
    def task_family(self) -> str:
        return "Foreign"

    @property
    def task_module(self) -> str:
        return __name__

    @property
    def task_params(self) -> Mapping[str, str]:
        return {"name": self.name}

    def task_policy(self) -> conveyor.TaskPolicy:
        return conveyor.TaskPolicy(priority=3, loader="foreign")

    def complete(self) -> bool:
        return False

    def requires(self) -> Any:
        return []

    def run(self) -> None:
        return None


def test_a_class_of_another_framework_is_task_like() -> None:
    """A plain class with TaskLike's members passes ``isinstance(x, conveyor.TaskLike)``; one
    missing ``task_policy`` does not."""

    class NoPolicy:
        task_id = task_family = task_module = "x"
        task_params: Mapping[str, str] = {}

        def complete(self) -> bool:
            return True

        def requires(self) -> Any:
            return []

        def run(self) -> None:
            return None

    assert isinstance(Foreign("a"), conveyor.TaskLike)
    assert Foreign("a").task_policy().loader == "foreign"
    assert not isinstance(NoPolicy(), conveyor.TaskLike)


def test_a_conveyor_task_is_task_like_and_keeps_its_attributes() -> None:
    """``conveyor.Task`` satisfies TaskLike; its documented attributes are still there."""
    task = Daily(day="2026-01-02")
    assert isinstance(task, conveyor.TaskLike)
    assert (task.task_family, task.task_module) == ("Daily", __name__)
    assert dict(task.task_params) == {"day": "2026-01-02", "region": "us"}
    assert task.task_params == task.to_str_params()
    with pytest.raises(TypeError):
        task.task_params["day"] = "2026-01-03"  # type: ignore[index]
    assert (task.worker_timeout, task.priority, task.owner_email) == (30.0, 7, "ops@example.com")


def test_the_policy_of_a_conveyor_task_comes_from_its_attributes() -> None:
    """``task_policy()`` gathers timeout, priority, resources, retries, owners, disabled,
    external and the loader; labels are empty for now."""
    policy = Daily(day="2026-01-02").task_policy()
    assert policy == conveyor.TaskPolicy(
        timeout=30.0,
        priority=7,
        resources={"db": 1},
        retry_count=2,
        owners=("ops@example.com",),
        labels=(),
        disabled=False,
        external=False,
        loader="conveyor",
    )

    class Elsewhere(conveyor.ExternalTask):
        owner_email = ["a@example.com", "b@example.com"]
        disabled = True

    other = Elsewhere().task_policy()
    assert (other.external, other.disabled) == (True, True)
    assert other.owners == ("a@example.com", "b@example.com")
    assert (other.timeout, other.retry_count, dict(other.resources)) == (None, None, {})


def test_tasks_share_a_policy_only_when_its_inputs_are_the_same() -> None:
    """Policies are shared between tasks with equal inputs (a cost saving of the walk), never
    between tasks whose priority, resources or owners differ, even when equal in value."""

    class Ranked(conveyor.Task):
        rank = conveyor.IntParameter()
        resources = {"db": 1}

        @property
        def priority(self) -> int:  # type: ignore[override]
            return self.rank

    first, again, other = Ranked(rank=1), Ranked(rank=1), Ranked(rank=2)
    assert first.task_policy() is again.task_policy()
    assert (first.task_policy().priority, other.task_policy().priority) == (1, 2)
    own = Ranked(rank=1)
    own.resources = {"db": 1}  # type: ignore[misc]  # equal, another mapping
    assert own.task_policy().resources is own.resources
    assert first.task_policy().resources is Ranked.resources


def test_the_default_loader_is_found_by_name_through_stevedore() -> None:
    """``conveyor`` is registered in ``conveyor.task_loaders``; stevedore loads it by name,
    and it rebuilds a task from module, family and string params."""
    assert LOADER_GROUP == "conveyor.task_loaders"
    assert DEFAULT_LOADER in installed_names(LOADER_GROUP)
    manager: DriverManager[Any] = DriverManager(LOADER_GROUP, DEFAULT_LOADER)
    assert manager.driver is ConveyorLoader
    loader = load_task_loader(DEFAULT_LOADER)
    assert isinstance(loader, conveyor.TaskLoader)
    original = Daily(day="2026-01-02", region="eu")
    rebuilt = loader.load(original.task_module, original.task_family, original.task_params)
    assert rebuilt == original and rebuilt is not original
    assert isinstance(rebuilt, Daily)


def test_a_loader_names_what_it_cannot_load() -> None:
    """An unknown family is a TaskLoadError listing the module's families; an unknown
    loader a BackendNotFound naming the group."""
    with pytest.raises(TaskLoadError, match=r"has no task family 'Nope'.*Daily"):
        load_task_loader(DEFAULT_LOADER).load(__name__, "Nope", {})
    with pytest.raises(BackendNotFound, match=r"conveyor\.task_loaders"):
        load_task_loader("no-such-loader")


def test_an_attempts_process_finds_the_default_loader_without_stevedore() -> None:
    """``loaders.task_loader`` gives conveyor's loader without scanning entry points (a fresh
    interpreter does not import stevedore for it) and any other name through them."""
    assert isinstance(task_loader(DEFAULT_LOADER), ConveyorLoader)
    with pytest.raises(BackendNotFound, match=r"conveyor\.task_loaders"):
        task_loader("no-such-loader")
    code = (
        "import sys\n"
        "from conveyor.loaders import task_loader\n"
        "task = task_loader('conveyor').load('conveyor.task', 'ExternalTask', {})\n"
        "print(type(task).__name__, 'stevedore' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.split() == ["ExternalTask", "False"], done.stderr


def test_reporting_and_outputs_of_are_the_public_task_api() -> None:
    """``reporting(task, report)`` routes a task's status calls within the block only;
    ``outputs_of`` maps tasks to their outputs in the same nesting."""
    task = Daily(day="2026-01-02")
    notes: list[tuple[str, object]] = []
    with reporting(task, lambda kind, value: notes.append((kind, value))):
        task.set_status_message("half way")
        task.set_progress_percentage(50)
    task.set_status_message("after the block")  # goes nowhere
    assert notes == [("status_message", "half way"), ("progress", 50.0)]
    with reporting(Foreign("a"), lambda kind, value: notes.append((kind, value))):
        pass  # not a conveyor.Task: nothing to route, no error
    outputs = outputs_of({"a": [task], "b": None})
    assert outputs["a"][0].path == task.output().path and outputs["b"] is None


def test_task_parameters_and_util_import_without_a_circle() -> None:
    """In a fresh interpreter, each of the three modules imports on its own, and
    ``conveyor.parameters`` imports neither ``conveyor.task`` nor ``conveyor.util``."""
    code = (
        "import sys, conveyor.parameters\n"
        "assert 'conveyor.task' not in sys.modules and 'conveyor.util' not in sys.modules\n"
        "import conveyor.util, conveyor.task\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr
