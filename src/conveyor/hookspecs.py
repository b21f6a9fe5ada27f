"""Every hook conveyor fires, with when it fires and what it receives.

All hooks are *observers*: they receive one frozen ``event`` (see :mod:`conveyor.events`) and
their return value is ignored. They run in the worker's process, on the worker's loop thread,
in the order of the worker's transitions; events from child processes are forwarded first.
conveyor calls each implementation separately: one that raises is logged with its plugin's name
and does not stop the other implementations, the task or the worker.

Implement a hook with the marker ``conveyor.hookimpl``::

    import conveyor

    class MyPlugin:
        @conveyor.hookimpl
        def conveyor_task_failed(self, event: conveyor.events.TaskFailed) -> None:
            ...

Rules every plugin can rely on:

* every attempt that starts (``conveyor_task_started``) ends with exactly one of
  ``succeeded`` / ``failed`` / ``timed_out`` / ``process_died``, or with
  ``conveyor_task_dependencies_discovered(dynamic=True)`` when ``run()`` yielded incomplete
  dependencies;
* ``conveyor_worker_started`` is the first event of a ``Worker.run()`` and
  ``conveyor_worker_stopped`` the last.
"""

from __future__ import annotations

import pluggy

from . import events as ev

PROJECT = "conveyor"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

# --- worker lifecycle -------------------------------------------------------------------------


@hookspec
def conveyor_worker_started(event: ev.WorkerStarted) -> None:
    """A worker begins ``run()``.

    Fires once per ``Worker.run()`` call, before any task is asked for. The task fields of the
    event are ``""`` and ``{}``; ``worker_id`` names the worker.
    """


@hookspec
def conveyor_worker_stopped(event: ev.WorkerStopped) -> None:
    """A worker's ``run()`` is about to return.

    ``ok`` is what ``run()`` returns (True iff everything this worker ran succeeded) and
    ``summary`` the execution summary text. Fires after every attempt's outcome hook.
    """


# --- scheduling (graph walk) ------------------------------------------------------------------


@hookspec
def conveyor_task_complete_checked(event: ev.CompleteChecked) -> None:
    """A task's ``complete()`` returned a real bool (``event.complete``).

    Fires during the graph walk for every task reached (the walk does not descend below a
    complete task), and again when an external task is re-checked.
    """


@hookspec
def conveyor_task_dependencies_discovered(event: ev.DependenciesDiscovered) -> None:
    """A task's dependencies are known.

    With ``dynamic=False``: ``requires()`` was evaluated during the graph walk of an incomplete
    task; ``dependencies`` are their task ids (possibly empty). With ``dynamic=True``: ``run()``
    yielded tasks that are not all complete; the attempt ends here, the worker schedules them
    and runs the task again later from the top.
    """


@hookspec
def conveyor_task_broken(event: ev.TaskBroken) -> None:
    """``complete()`` or ``requires()`` raised or returned garbage while scheduling.

    ``phase`` is ``"complete"`` or ``"requires"``; ``error`` the traceback or explanation
    (a dependency cycle is reported here with phase ``"requires"``). The task's state is
    ``UNKNOWN``; its dependents stay pending; other branches of the graph still run.
    """


# --- attempts ---------------------------------------------------------------------------------


@hookspec
def conveyor_task_started(event: ev.TaskStarted) -> None:
    """The executor starts an attempt.

    ``executor`` names the executor that actually runs it; ``attempt`` counts this worker's
    runs of this task (1, 2, …; re-runs after dynamic dependencies included).
    """


@hookspec
def conveyor_task_status_message(event: ev.TaskStatusMessage) -> None:
    """``self.set_status_message(text)`` was called inside ``run()``; ``message`` is the text."""


@hookspec
def conveyor_task_progress(event: ev.TaskProgress) -> None:
    """``self.set_progress_percentage(p)`` was called inside ``run()``; ``percentage`` is p."""


@hookspec
def conveyor_task_tracking_url(event: ev.TaskTrackingUrl) -> None:
    """``self.set_tracking_url(url)`` was called inside ``run()``; ``url`` is the URL."""


@hookspec
def conveyor_task_succeeded(event: ev.TaskSucceeded) -> None:
    """``run()`` returned and, when checked, the task is complete.

    ``duration`` is the attempt's wall time in seconds. Fires after ``on_success()``.
    """


@hookspec
def conveyor_task_failed(event: ev.TaskFailed) -> None:
    """The attempt failed: ``run()`` raised, left the task incomplete, a dependency was missing
    at run time, or the attempt could not be started.

    ``error`` is the failure explanation (what ``on_failure`` returned, else the traceback);
    ``exception_type`` the exception's class name; ``duration`` the attempt's wall time.
    """


@hookspec
def conveyor_task_timed_out(event: ev.TaskTimedOut) -> None:
    """The attempt exceeded ``timeout`` seconds and its whole process tree was killed."""


@hookspec
def conveyor_task_process_died(event: ev.ProcessDied) -> None:
    """The attempt's process ended without reporting a result.

    ``exitcode`` is its exit status, or ``signal`` the signal number that ended it.
    """
