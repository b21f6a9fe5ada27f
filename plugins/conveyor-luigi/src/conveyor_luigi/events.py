"""Luigi's worker-side events, fired from conveyor's hooks (the ``luigi-events`` plugin).

Luigi's worker fires ``DEPENDENCY_DISCOVERED``, ``DEPENDENCY_MISSING``, ``DEPENDENCY_PRESENT``
and ``BROKEN_TASK`` while it walks the graph, and ``TIMEOUT`` and ``PROCESS_FAILURE`` when it
ends a task's process. conveyor's worker reports the same moments through its hooks, with a
task id instead of the task object: :class:`LuigiEvents` finds the Luigi task again in
:data:`KNOWN` (every adapter made in this process registers itself there) and fires the Luigi
event on it, with the arguments Luigi's worker gives. Events of tasks that are not Luigi's are
ignored. A worker built while ``luigi`` is not imported (no Luigi task can exist in the process
yet) is left at once (``conveyor_configure`` returns False), unless it is an assistant, which
may be handed Luigi tasks later: the worker then builds none of these events, which would cost
each of its tasks about a sixth more. This module never imports ``luigi`` itself.

The events of an attempt (``START``, ``PROCESSING_TIME``, ``SUCCESS``, ``FAILURE``) are fired
by the adapter where the attempt runs, as Luigi fires them in its task's process.
"""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any

import conveyor
from conveyor import events as ev
from conveyor.config import Config

if TYPE_CHECKING:
    from .adapter import LuigiTask

__all__ = ["KNOWN", "LuigiEvents"]

# Luigi's event names (the values of ``luigi.Event``'s attributes; this module does not import
# luigi)
DEPENDENCY_DISCOVERED = "event.core.dependency.discovered"
DEPENDENCY_MISSING = "event.core.dependency.missing"
DEPENDENCY_PRESENT = "event.core.dependency.present"
BROKEN_TASK = "event.core.task.broken"
TIMEOUT = "event.core.timeout"
PROCESS_FAILURE = "event.core.process_failure"

KNOWN: weakref.WeakValueDictionary[str, LuigiTask] = weakref.WeakValueDictionary()
"""The adapters made in this process, by task id (held as long as conveyor holds them: its
worker keeps the tasks of its graph)."""


def _fire(task_id: str, event: str, *args: Any) -> None:
    """Fire Luigi's ``event`` on the Luigi task of ``task_id`` with the task and ``args``."""
    adapter = KNOWN.get(task_id)
    if adapter is not None:
        adapter.fire(event, *args)


class LuigiEvents:
    """A conveyor hook plugin firing Luigi's worker-side events on Luigi tasks."""

    @conveyor.hookimpl
    def conveyor_configure(self, config: Config) -> bool | None:
        """False (leave the worker) when ``luigi`` is not imported and the worker is not an
        assistant: no Luigi task exists in the process, and the task modules of a run are
        imported before its worker is built (``conveyor run``, a program that imports its
        tasks first); an assistant imports the tasks it is handed later, so it keeps the
        plugin."""
        if "luigi" in sys.modules or config.worker.assistant:
            return None
        return False

    @conveyor.hookimpl
    def conveyor_task_complete_checked(self, event: ev.CompleteChecked) -> None:
        """A complete task is ``DEPENDENCY_PRESENT``; an incomplete external one is
        ``DEPENDENCY_MISSING`` (as Luigi's worker says when it adds them)."""
        adapter = KNOWN.get(event.task_id)
        if adapter is None:
            return
        if event.complete:
            adapter.fire(DEPENDENCY_PRESENT)
        elif adapter.task_policy().external:
            adapter.fire(DEPENDENCY_MISSING)

    @conveyor.hookimpl
    def conveyor_task_dependencies_discovered(self, event: ev.DependenciesDiscovered) -> None:
        """``DEPENDENCY_DISCOVERED(task, dependency)`` for each static dependency that is a Luigi
        task (Luigi fires none for what ``run()`` yields)."""
        if event.dynamic:
            return
        adapter = KNOWN.get(event.task_id)
        if adapter is None:
            return
        for dep_id in event.dependencies:
            dep = KNOWN.get(dep_id)
            if dep is not None:
                adapter.fire(DEPENDENCY_DISCOVERED, dep.luigi_task)

    @conveyor.hookimpl
    def conveyor_task_broken(self, event: ev.TaskBroken) -> None:
        """``complete()`` that raised is ``DEPENDENCY_MISSING``, ``requires()`` that raised is
        ``BROKEN_TASK(task, exception)``, as in Luigi's worker."""
        adapter = KNOWN.get(event.task_id)
        if adapter is None:
            return
        exception = adapter.broken_by(event.error)  # taken: the adapter forgets it
        if event.phase == "complete":
            adapter.fire(DEPENDENCY_MISSING)
        else:
            adapter.fire(BROKEN_TASK, exception)

    @conveyor.hookimpl
    def conveyor_task_timed_out(self, event: ev.TaskTimedOut) -> None:
        """``TIMEOUT(task, message)`` with Luigi's message, which names the task's own
        ``worker_timeout`` as Luigi formats it (``{}``: ``10``, ``2.5``), else the worker's
        timeout that applied (a whole number of seconds without ``.0``, as Luigi's integer
        ``[worker] timeout``)."""
        adapter = KNOWN.get(event.task_id)
        if adapter is None:
            return
        own = getattr(adapter.luigi_task, "worker_timeout", None)
        if own:
            seconds: object = own
        elif float(event.timeout).is_integer():
            seconds = int(event.timeout)
        else:
            seconds = event.timeout
        adapter.fire(
            TIMEOUT, f"Task {event.task_id} timed out after {seconds} seconds and was terminated."
        )

    @conveyor.hookimpl
    def conveyor_task_process_died(self, event: ev.ProcessDied) -> None:
        """``PROCESS_FAILURE(task, message)`` with Luigi's message: a process killed by signal
        N has exit code -N there (``multiprocessing``'s ``exitcode``)."""
        code = -event.signal if event.signal is not None else event.exitcode
        message = f"Task {event.task_id} died unexpectedly with exit code {code}"
        _fire(event.task_id, PROCESS_FAILURE, message)
