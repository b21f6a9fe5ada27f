"""A conformance check for executors: built-in and third-party alike.

``check_executor(MyExecutor)`` drives an executor through the protocol of
:mod:`conveyor.executors.base` with real tasks (defined in an importable module, so executors
that start fresh interpreters can load them) and raises ``AssertionError`` naming the first
broken promise. It returns the names of the scenarios it ran::

    from conveyor.testing import check_executor

    def test_my_executor_conforms(tmp_path):
        check_executor(MyExecutor, workdir=tmp_path)
"""

from __future__ import annotations

import queue
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..executors.base import (
    FAILED,
    NEEDS_DEPS,
    SUCCEEDED,
    TIMED_OUT,
    AttemptRequest,
    Executor,
    ExecutorContext,
    Message,
    Note,
    Outcome,
)
from ..executors.proctree import MARK_VARIABLE
from ..settings import schema_of, validate_backend_settings
from ..task import Task
from . import conformance_tasks as ct

__all__ = ["ATTEMPT_MARK", "check_executor"]

ATTEMPT_MARK = MARK_VARIABLE
"""The environment variable every attempt process of conveyor's process executors carries
(and what the task starts inherits): a test looking for left-behind processes finds them by it."""

_WAIT = 30.0  # seconds any single attempt may take before the check gives up


class _Inbox:
    """Collects messages from any thread, in order."""

    def __init__(self) -> None:
        self.messages: queue.SimpleQueue[Message] = queue.SimpleQueue()

    def __call__(self, message: Message) -> None:
        self.messages.put(message)

    def until_outcome(self) -> tuple[list[Note], Outcome]:
        notes: list[Note] = []
        deadline = time.monotonic() + _WAIT
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no outcome within {_WAIT:g} s"
            message = self.messages.get(timeout=remaining)
            if isinstance(message, Outcome):
                return notes, message
            notes.append(message)


_INBOXES: list[_Inbox] = []


def _attempt(executor: Executor, task: Task, timeout: float = 0.0) -> tuple[list[Note], Outcome]:
    inbox = _Inbox()
    _INBOXES.append(inbox)
    executor.start(AttemptRequest(task, task.task_id, 1, timeout), inbox)
    notes, outcome = inbox.until_outcome()
    assert outcome.task_id == task.task_id, f"outcome for {outcome.task_id}, not {task.task_id}"
    return notes, outcome


def _no_second_outcome() -> None:
    """After close(), no attempt may have produced anything more."""
    for inbox in _INBOXES:
        assert inbox.messages.empty(), "an attempt reported after its outcome"


def _success(executor: Executor, work: Path) -> None:
    task = ct.Writes(path=str(work / "writes.txt"))
    notes, outcome = _attempt(executor, task)
    assert outcome.kind == SUCCEEDED, f"expected succeeded, got {outcome.kind}: {outcome.error}"
    assert task.complete(), "run() did not take effect (its output is missing)"
    assert [(n.kind, n.value) for n in notes] == [
        ("status_message", "writing"),
        ("progress", 50.0),
        ("tracking_url", "http://example.invalid/t"),
    ], f"notes arrived as {notes!r}"


def _failure(executor: Executor, work: Path) -> None:
    _, outcome = _attempt(executor, ct.Raises(path=str(work / "never.txt")))
    assert outcome.kind == FAILED, f"expected failed, got {outcome.kind}"
    assert outcome.exception_type == "ValueError", outcome.exception_type
    assert "conformance failure" in outcome.error, outcome.error


def _incomplete(executor: Executor, work: Path) -> None:
    _, outcome = _attempt(executor, ct.ForgetsOutput(path=str(work / "forgotten.txt")))
    assert outcome.kind == FAILED, f"a run() that leaves no output must fail, got {outcome.kind}"


def _dynamic(executor: Executor, work: Path) -> None:
    parent = ct.YieldsDependency(path=str(work / "parent.txt"))
    _, outcome = _attempt(executor, parent)
    assert outcome.kind == NEEDS_DEPS, f"expected needs_deps, got {outcome.kind}: {outcome.error}"
    assert [t.task_id for t in outcome.new_deps] == [
        ct.Writes(path=str(work / "parent.txt.dep")).task_id
    ], outcome.new_deps


def _timeout(executor: Executor, work: Path) -> None:
    started = time.monotonic()
    _, outcome = _attempt(executor, ct.Sleeps(path=str(work / "sleeps.txt")), timeout=1.0)
    assert outcome.kind == TIMED_OUT, f"expected timed_out, got {outcome.kind}"
    elapsed = time.monotonic() - started
    assert elapsed < _WAIT, f"the timeout took {elapsed:.1f} s to be enforced"


def check_executor(
    executor_cls: Callable[[ExecutorContext], Any], *, workdir: Path | str | None = None
) -> list[str]:
    """Run every scenario against a fresh executor; return the names of those that ran.

    The timeout scenario runs only when the executor declares ``can_kill = True``.
    """
    work = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="conformance"))
    schema = schema_of(executor_cls)
    settings = validate_backend_settings("executors", "conformance", {}, schema)
    executor: Executor = executor_cls(ExecutorContext(workers=2, kill_grace=1.0, settings=settings))
    assert isinstance(executor.name, str) and executor.name, "an executor needs a name"
    assert isinstance(executor.can_kill, bool), "can_kill must be a bool"
    scenarios = [_success, _failure, _incomplete, _dynamic]
    if executor.can_kill:
        scenarios.append(_timeout)
    _INBOXES.clear()
    try:
        for scenario in scenarios:
            scenario(executor, work)
    finally:
        executor.close()
    _no_second_outcome()
    return [s.__name__.lstrip("_") for s in scenarios]
