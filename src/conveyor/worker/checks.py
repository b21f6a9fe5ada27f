"""complete() checks for the graph walk: sequential, or concurrent with a deadline.

A check yields ``(task, complete, error)``: ``error`` is "" when ``complete()`` returned a real
bool, else the explanation (it raised, returned something else, or did not return in time).

A plain :class:`~conveyor.task.WrapperTask` (one that keeps the inherited ``complete()``) is
checked through its requirements instead, each answer vetted: when one of them raises or
returns something that is not a bool, the wrapper counts as incomplete (not broken), so that
the walk goes down to that requirement and names *it* as broken, while the wrappers above it
stay pending because of it.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator

from ..errors import ConveyorError
from ..task import WrapperTask, requirements
from ..tasklike import TaskLike

__all__ = ["CheckResult", "ParallelChecks", "SequentialChecks", "check_complete"]

CheckResult = tuple[TaskLike, bool, str]


def check_complete(task: TaskLike) -> CheckResult:
    """Call ``task.complete()`` and vet its answer."""
    if isinstance(task, WrapperTask) and _plain_wrapper(task):
        return task, _wrapper_complete(task), ""
    try:
        value = task.complete()
    except ConveyorError as exc:  # conveyor's own errors say what is wrong: no traceback
        return task, False, f"{task!r}.complete() raised {type(exc).__name__}: {exc}"
    except Exception:
        return task, False, f"{task!r}.complete() raised:\n{traceback.format_exc()}"
    if type(value) is not bool:
        return (
            task,
            False,
            f"{task!r}.complete() returned {value!r} ({type(value).__name__}); "
            "expected a bool (True or False)",
        )
    return task, value, ""


def _plain_wrapper(task: TaskLike) -> bool:
    """A conveyor :class:`~conveyor.task.WrapperTask` keeping the inherited ``complete()``
    (the rule is conveyor's: another framework's task is checked by its own complete())."""
    return isinstance(task, WrapperTask) and type(task).complete is WrapperTask.complete


def _wrapper_complete(root: TaskLike) -> bool:
    """What ``WrapperTask.complete()`` answers, but False (descend and find out) where it
    would raise, or would take a requirement's non-bool answer for a bool: the walk then
    checks each requirement itself and reports the one that is broken.

    Nested plain wrappers are looked through the same way, depth first and each task once; a
    wrapper met again on the current path is a cycle, answered False so that the walk goes
    down and its cycle search reports it.
    """
    done: set[str] = set()
    on_path = {root.task_id}
    try:
        stack: list[tuple[TaskLike, Iterator[TaskLike]]] = [(root, iter(requirements(root)))]
    except Exception:  # the walk calls requires() again and reports it
        return False
    while stack:
        task, deps = stack[-1]
        dep = next(deps, None)
        if dep is None:
            stack.pop()
            on_path.discard(task.task_id)
            done.add(task.task_id)
            continue
        dep_id = dep.task_id
        if dep_id in on_path:
            return False
        if dep_id in done:
            continue
        try:
            if _plain_wrapper(dep):
                stack.append((dep, iter(requirements(dep))))  # in requires() order, as all() would
                on_path.add(dep_id)
                continue
            value = dep.complete()
        except Exception:  # the walk calls it again below this wrapper and reports it there
            return False
        if value is not True:  # False, or not a bool at all
            return False
        done.add(dep_id)
    return True


class SequentialChecks:
    """Checks each task as it is submitted, in the caller's thread (depth-first order)."""

    def __init__(self) -> None:
        """Start with nothing outstanding."""
        self.results: deque[CheckResult] = deque()
        """The results not taken yet, oldest first (:meth:`next` takes the last): the walk
        reads it directly, for :meth:`outstanding` and :meth:`next` without the calls."""

    def submit(self, task: TaskLike) -> None:
        """Check ``task`` now."""
        self.results.append(check_complete(task))

    def outstanding(self) -> bool:
        """True while results are waiting to be taken."""
        return bool(self.results)

    def next(self) -> CheckResult:
        """The most recent unconsumed result."""
        return self.results.pop()

    def close(self) -> None:
        """Nothing to release."""


class ParallelChecks:
    """Checks tasks on daemon threads; a check past ``timeout`` seconds is reported as hung.

    Daemon threads are used on purpose: a hung ``complete()`` must not keep the process alive.
    """

    def __init__(self, threads: int, timeout: float) -> None:
        """Start ``threads`` checker threads; ``timeout`` 0 means wait forever."""
        self._timeout = timeout
        self._jobs: queue.SimpleQueue[TaskLike | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[CheckResult] = queue.SimpleQueue()
        self._inflight: dict[str, tuple[TaskLike, float]] = {}
        # each thread runs in a copy of the caller's context: a complete() that makes tasks
        # makes them with the [tasks.*] defaults of the worker walking (a ContextVar)
        self._threads = [
            threading.Thread(
                target=contextvars.copy_context().run,
                args=(self._serve,),
                name="conveyor-check",
                daemon=True,
            )
            for _ in range(max(1, threads))
        ]
        for thread in self._threads:
            thread.start()

    def _serve(self) -> None:
        while (task := self._jobs.get()) is not None:
            self._results.put(check_complete(task))

    def submit(self, task: TaskLike) -> None:
        """Queue a check of ``task``."""
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else float("inf")
        self._inflight[task.task_id] = (task, deadline)
        self._jobs.put(task)

    def outstanding(self) -> bool:
        """True while a submitted check has not been taken."""
        return bool(self._inflight)

    def next(self) -> CheckResult:
        """Wait for the next result, or the first check that ran out of time."""
        while True:
            deadline = min(d for _, d in self._inflight.values())
            wait = None if deadline == float("inf") else max(0.0, deadline - time.monotonic())
            try:
                task, complete, error = self._results.get(timeout=wait)
            except queue.Empty:
                return self._expire_first()
            if self._inflight.pop(task.task_id, None) is not None:
                return task, complete, error

    def _expire_first(self) -> CheckResult:
        task_id = min(self._inflight, key=lambda t: self._inflight[t][1])
        task, _ = self._inflight.pop(task_id)
        return (
            task,
            False,
            f"{task!r}.complete() did not return within {self._timeout:g} s "
            "([worker] complete_check_timeout); expected it to return a bool",
        )

    def close(self) -> None:
        """Stop the idle threads (a hung one is abandoned; it is a daemon)."""
        for _ in self._threads:
            self._jobs.put(None)
