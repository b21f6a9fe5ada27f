"""One attempt of a task, run in the current thread: shared by every executor.

It re-checks the dependencies, runs ``run()`` (driving a generator through its dynamic
dependencies), checks completeness afterwards, calls the callbacks and turns everything into
one :class:`~conveyor.executors.base.Outcome`. Log records emitted inside carry the task id.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Generator
from contextvars import ContextVar
from functools import partial
from typing import Any

import structlog

from ..errors import TaskDefinitionError
from ..events import AttemptContext
from ..protocol import AttemptEnd, NoteKind
from ..task import (
    DynamicRequirements,
    Task,
    checked_tasks,
    found_complete,
    is_external,
    on_failure,
    on_success,
    outputs_of,
    reporting,
    requirements,
    settled,
)
from ..tasklike import TaskLike
from .base import (
    FAILED,
    NEEDS_DEPS,
    SUCCEEDED,
    AttemptRequest,
    Interrupted,
    Note,
    Outcome,
    Sink,
    Suspended,
)

_NOT_RESUMED = object()  # _drive(): the generator has not yielded yet

__all__ = ["end_attempt", "run_attempt"]


class _Failure(Exception):
    """An attempt failure with a ready explanation (no traceback needed)."""

    def __init__(self, message: str, exception_type: str, missing: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.exception_type = exception_type
        self.missing = missing


def run_attempt(
    request: AttemptRequest,
    sink: Sink,
    suspend: bool = False,
    on_run: Callable[[], None] | None = None,
    end_hooks: bool = True,
) -> Outcome:
    """Run one attempt of ``request.task`` here and return its outcome.

    With ``suspend`` (the in-process executors), a generator ``run()`` that yields incomplete
    dependencies is kept paused in the outcome instead of being closed, and an attempt whose
    request carries a suspended generator resumes it. ``on_run`` is called once the
    dependencies are checked, just before ``run()`` is called or resumed (an attempt's process
    tells its supervisor then). The plugins' ``conveyor_attempt_begin`` (``request.hooks``)
    runs first, and their ``conveyor_attempt_end`` before returning — unless ``end_hooks`` is
    False: an attempt's process calls it after sending the outcome (:func:`end_attempt`).
    """
    task = request.task
    task_id = request.task_id
    started = time.perf_counter()
    report = partial(_note, sink, task_id)  # (one object, and no closure cells in here)
    # structlog's bind_contextvars(task_id=...), by its context variable itself
    task_id_var = _TASK_ID_VAR or _task_id_var()
    token = task_id_var.set(task_id)
    outcome: Outcome | None = None
    hooks = request.hooks
    context = None
    if hooks is not None:
        context = request.context = AttemptContext(
            task_id, task.task_family, request.attempt, request.env, hooks.in_worker
        )
        hooks.begin(context)
    try:
        if isinstance(task, Task):  # what reporting() does for a conveyor Task, without a
            # context manager to make and enter: its reporter is set, and unset afterwards
            task._reporter = report
            try:
                outcome = _attempt(task, request, started, suspend, on_run)
            finally:
                task._reporter = None
        else:
            with reporting(task, report):
                outcome = _attempt(task, request, started, suspend, on_run)
        return outcome
    finally:
        if context is not None and (end_hooks or outcome is None):
            end_attempt(request, outcome)
        if request.resume is not None and (outcome is None or outcome.suspended is None):
            request.resume.close()  # not paused again: finish it now, not at garbage collection
        task_id_var.reset(token)


def _note(sink: Sink, task_id: str, kind: str, value: object) -> None:
    """Send what the task reported (``set_status_message`` and friends) to ``sink``."""
    sink(Note(task_id, NoteKind(kind), value))


_TASK_ID_VAR: ContextVar[Any] | None = None


def _task_id_var() -> ContextVar[Any]:
    """The context variable of structlog's ``task_id`` context key (what
    ``bind_contextvars(task_id=...)`` sets), found once through structlog's own API."""
    global _TASK_ID_VAR
    tokens = structlog.contextvars.bind_contextvars(task_id=None)
    var: ContextVar[Any] = tokens["task_id"].var
    structlog.contextvars.reset_contextvars(**tokens)
    _TASK_ID_VAR = var
    return var


def end_attempt(request: AttemptRequest, outcome: Outcome | None) -> None:
    """Call the plugins' ``conveyor_attempt_end`` for the attempt :func:`run_attempt` began
    (``outcome`` None: it was stopped by an interruption, reported ``interrupted``)."""
    hooks, context = request.hooks, request.context
    if hooks is not None and context is not None:
        ended = str(outcome.kind) if outcome is not None else AttemptEnd.INTERRUPTED.value
        hooks.end(context, ended)


def _attempt(
    task: TaskLike,
    request: AttemptRequest,
    started: float,
    suspend: bool,
    on_run: Callable[[], None] | None,
) -> Outcome:
    task_id = request.task_id
    resume = request.resume
    try:
        own = task if isinstance(task, Task) else None  # conveyor's: no helper in between
        # (a resumed run() is no external's)
        external = resume is None and (own.is_external() if own is not None else is_external(task))
        if resume is None and found_complete(task, external):
            return Outcome(task_id, SUCCEEDED, _since(started), found_complete=True)
        deps = request.deps
        if deps is None or deps:  # (none to check: a task known to need nothing)
            _check_dependencies(task, deps)
        if on_run is not None:
            on_run()
        if resume is not None:
            new_deps, paused = _drive(task, resume.generator, suspend, resume.yielded)
        else:
            result = None if external else task.run()  # (an external has no run())
            new_deps, paused = ((), None) if result is None else _drive(task, result, suspend)
        if new_deps:
            return Outcome(
                task_id, NEEDS_DEPS, _since(started), new_deps=new_deps, suspended=paused
            )
        must_check = request.check_complete or external
        # another framework's complete() is its own: always worth asking
        if must_check and (own is None or own.has_own_completion()) and not task.complete():
            raise _Failure(
                f"{task!r}: run() returned but the task is not complete "
                "(an output is missing or complete() returned False)",
                "IncompleteAfterRun",
            )
        explanation = own.on_success() if own is not None else on_success(task)
    except _Failure as failure:
        return Outcome(
            task_id,
            FAILED,
            _since(started),
            error=str(failure),
            exception_type=failure.exception_type,
            missing=failure.missing,
        )
    except _PASS_THROUGH:
        raise
    except BaseException as exc:  # SystemExit and other BaseExceptions fail this task only
        return Outcome(
            task_id,
            FAILED,
            _since(started),
            error=_explain(task, exc),
            exception_type=type(exc).__name__,
            not_retried=_not_retried(task, exc),
        )
    done = "" if explanation is None else str(explanation)
    return Outcome(task_id, SUCCEEDED, time.perf_counter() - started, explanation=done)


# Ctrl+C in an embedding program, and the worker's own interruption of an inline attempt, stop
# the worker rather than the task; every other BaseException (SystemExit included) is the task's.
_PASS_THROUGH = (KeyboardInterrupt, Interrupted)


def _check_dependencies(task: TaskLike, deps: tuple[TaskLike, ...] | None) -> None:
    missing = [dep for dep in (requirements(task) if deps is None else deps) if not dep.complete()]
    if missing:
        names = ", ".join(repr(dep) for dep in missing)
        raise _Failure(
            f"{task!r}: unfulfilled dependencies at run time: {names}",
            "UnfulfilledDependency",
            tuple(dep.task_id for dep in missing),
        )


def _drive(
    task: TaskLike, result: Any, suspend: bool, resumed_at: Any = _NOT_RESUMED
) -> tuple[tuple[TaskLike, ...], Suspended | None]:
    """Run a generator ``run()`` through its yields; return incomplete yielded tasks, if any.

    ``resumed_at`` is what a suspended generator last yielded: those dependencies are checked
    again and their outputs sent in. With ``suspend``, a generator stopped at incomplete
    dependencies is returned paused; otherwise it is closed.
    """
    if not isinstance(result, Generator):
        return (), None
    yielded = resumed_at
    value: Any = None
    try:
        while True:
            if yielded is not _NOT_RESUMED:
                incomplete = _incomplete(task, yielded)
                if incomplete:
                    if suspend:
                        return incomplete, Suspended(result, yielded)
                    result.close()
                    return incomplete, None
                value = outputs_of(yielded)
            yielded = settled(result.send(value))  # (a generator in it is looked at twice)
    except StopIteration:
        return (), None


def _incomplete(task: TaskLike, yielded: Any) -> tuple[TaskLike, ...]:
    """The yielded tasks that are not complete (none when a DynamicRequirements' own check
    says they all are)."""
    if isinstance(yielded, DynamicRequirements):
        deps = checked_tasks(task, yielded.requirements, "run() yield")
        done = yielded.complete()
        if done is not True and done is not False:
            raise TaskDefinitionError(
                f"{task!r}: the custom_complete of a yielded DynamicRequirements returned "
                f"{done!r} ({type(done).__name__}); expected bool",
                task_id=task.task_id,
            )
        if done:
            return ()
    else:
        deps = checked_tasks(task, yielded, "run() yield")
    return tuple(dep for dep in deps if not dep.complete())


def _not_retried(task: TaskLike, exc: BaseException) -> str:
    """Why the task's ``retry_policy`` does not retry a failure raising ``exc`` ("": retry)."""
    try:
        retry = task.task_policy().retry_policy
    except Exception:  # (a policy that cannot be read was reported when it was registered)
        return ""
    return "" if retry is None else retry.not_retried(exc)


def _explain(task: TaskLike, exc: BaseException) -> str:
    text = traceback.format_exc()
    try:
        custom = on_failure(task, exc)
    except Exception:
        return text + "\non_failure() raised too:\n" + traceback.format_exc()
    return str(custom) if custom else text


def _since(started: float) -> float:
    return time.perf_counter() - started
