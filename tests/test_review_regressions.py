"""Regressions found in code review: resource accounting, parked tasks, BaseException in threads."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import conveyor
from conveyor.scheduler.policy import SchedulerCore, TaskSpec
from conveyor.testing import FakeClock


def test_a_done_registration_by_another_worker_does_not_leak_a_resource() -> None:
    """A second worker reporting a running task DONE frees exactly what the runner holds."""
    core = SchedulerCore(clock=FakeClock(), resources={"db": 1})
    core.add_tasks("a", [TaskSpec("T", resources={"db": 1}), TaskSpec("U", resources={"db": 1})])
    assert core.get_work("a") is not None  # T runs on a and holds db
    core.add_tasks("b", [TaskSpec("T", status="DONE")])  # b finds T's output already there
    core.task_done("a", "T")
    work = core.get_work("a")
    assert work is not None and work.task_id == "U"  # db is free again


def test_a_task_freed_from_a_resource_is_offered_to_every_worker() -> None:
    """When a resource frees, a parked task can go to any worker that may run it."""
    core = SchedulerCore(clock=FakeClock(), resources={"db": 1})
    core.add_tasks("a", [TaskSpec("V", resources={"db": 1}), TaskSpec("T", resources={"db": 1})])
    core.add_tasks("b", [TaskSpec("T", resources={"db": 1})])
    assert core.get_work("a").task_id == "V"  # type: ignore[union-attr]
    assert core.get_work("b") is None  # T parked: db is held by V
    core.task_done("a", "V")
    work = core.get_work("b")
    assert work is not None and work.task_id == "T"


def test_registrations_cannot_claim_running_or_failed() -> None:
    """RUNNING/FAILED in a registration are ignored: only get_work and task_failed set them."""
    core = SchedulerCore(clock=FakeClock(), resources={"gpu": 1})
    core.add_tasks("a", [TaskSpec("T", status="RUNNING", resources={"gpu": 1})])
    assert core.statuses(["T"]) == {"T": "PENDING"}
    assert core.get_work("a") is not None
    core.task_done("a", "T")  # no KeyError, no negative use
    assert core.statuses(["T"]) == {"T": "DONE"}


class RvExits(conveyor.Task):
    """Calls sys.exit() inside run()."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "never"))

    def run(self) -> None:
        sys.exit(3)


@pytest.mark.timeout(30)
def test_sys_exit_in_a_thread_attempt_fails_the_task_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BaseException from run() under the thread executor is a failure, not a lost outcome."""
    monkeypatch.chdir(tmp_path)
    task = RvExits(root=str(tmp_path))
    result = conveyor.build(task, executor="thread", workers=2)
    assert result.states[task.task_id] == "FAILED"
    assert "SystemExit" in result.errors[task.task_id]
