"""The worker's state machine, as one transition table.

Theory of operation
-------------------
The worker tracks every task of its graph in a :class:`TaskState`. Things that happen to a task
are :class:`Trigger` values; each trigger names the one event it fires (:data:`EVENT_OF`, and
so exactly one hook: ``Trigger.hook``), so "every transition fires a hook" is a property of
these tables, checked by a meta-test.
:func:`advance` is the only way to move: it returns the new state or raises
:class:`~conveyor.errors.InvalidTransition` and changes nothing. This module does no I/O; the
worker loop (``conveyor.worker.loop``) does the I/O and builds the hook events.

A task is ``NEW`` when discovered, is checked (``COMPLETE`` or ``CHECKED``), has its
requirements evaluated and is registered (``PENDING``), is handed out and runs (``RUNNING``),
and ends ``DONE`` or ``FAILED``; a ``run()`` that yields incomplete dependencies goes back to
``PENDING``. A task handed out to an assistant that never walked it is *adopted*: ``NEW`` to
``PENDING`` when its requirements are read (the scheduler found it incomplete, not this worker).
Anything that goes wrong while scheduling makes it ``UNKNOWN`` (the status it is registered
with; the trigger and hook are *broken*). A task is checked again (from ``COMPLETE``, ``DONE``,
``FAILED`` or ``PENDING``) when it is re-added after a dependency vanished at run time or when
an external task is re-checked.
"""

from __future__ import annotations

from enum import Enum

from .. import events as ev
from ..errors import InvalidTransition

__all__ = [
    "EVENT_OF",
    "HOOK_OF",
    "RECHECKABLE",
    "TRANSITIONS",
    "TaskState",
    "Trigger",
    "advance",
    "mermaid_diagram",
]


class TaskState(Enum):
    """Where a task stands from the worker's point of view."""

    NEW = "NEW"
    CHECKED = "CHECKED"
    COMPLETE = "COMPLETE"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"  # broken while scheduling: registered UNKNOWN, never runs

    __hash__ = object.__hash__  # members are singletons; identity hashing keeps advance() fast


class Trigger(Enum):
    """Something that happened to a task; ``hook`` is the hook it is delivered to."""

    CHECKED_COMPLETE = "checked_complete"
    CHECKED_INCOMPLETE = "checked_incomplete"
    DEPS_FOUND = "deps_found"
    DEPS_YIELDED = "deps_yielded"
    ADOPTED = "adopted"
    """An assistant was handed a task it never walked and read its requirements."""
    BROKEN = "broken"
    STARTED = "started"
    STATUS_MESSAGE = "status_message"
    PROGRESS = "progress"
    TRACKING_URL = "tracking_url"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    PROCESS_DIED = "process_died"

    __hash__ = object.__hash__  # members are singletons; identity hashing keeps advance() fast

    @property
    def hook(self) -> str:
        """The name of the hook this trigger is delivered to."""
        return HOOK_OF[self]


EVENT_OF: dict[Trigger, type[ev.Event]] = {
    Trigger.CHECKED_COMPLETE: ev.CompleteChecked,
    Trigger.CHECKED_INCOMPLETE: ev.CompleteChecked,
    Trigger.DEPS_FOUND: ev.DependenciesDiscovered,
    Trigger.DEPS_YIELDED: ev.DependenciesDiscovered,
    Trigger.ADOPTED: ev.DependenciesDiscovered,
    Trigger.BROKEN: ev.TaskBroken,
    Trigger.STARTED: ev.TaskStarted,
    Trigger.STATUS_MESSAGE: ev.TaskStatusMessage,
    Trigger.PROGRESS: ev.TaskProgress,
    Trigger.TRACKING_URL: ev.TaskTrackingUrl,
    Trigger.SUCCEEDED: ev.TaskSucceeded,
    Trigger.FAILED: ev.TaskFailed,
    Trigger.TIMED_OUT: ev.TaskTimedOut,
    Trigger.PROCESS_DIED: ev.ProcessDied,
}
"""The one table of which event (and so which hook) each trigger fires."""

HOOK_OF: dict[Trigger, str] = {trigger: cls.hook for trigger, cls in EVENT_OF.items()}


S, T = TaskState, Trigger
RECHECKABLE = (S.COMPLETE, S.DONE, S.FAILED, S.PENDING)  # a tuple: the table keeps its order
"""States from which a task may be checked again (re-added, or a dependency vanished)."""

TRANSITIONS: dict[tuple[TaskState, Trigger], TaskState] = {
    (S.NEW, T.CHECKED_COMPLETE): S.COMPLETE,
    (S.NEW, T.CHECKED_INCOMPLETE): S.CHECKED,
    (S.NEW, T.BROKEN): S.UNKNOWN,
    (S.CHECKED, T.DEPS_FOUND): S.PENDING,
    (S.CHECKED, T.BROKEN): S.UNKNOWN,
    (S.PENDING, T.STARTED): S.RUNNING,
    (S.NEW, T.ADOPTED): S.PENDING,
    **{(state, T.BROKEN): S.UNKNOWN for state in RECHECKABLE},
    (S.FAILED, T.STARTED): S.RUNNING,
    (S.RUNNING, T.STATUS_MESSAGE): S.RUNNING,
    (S.RUNNING, T.PROGRESS): S.RUNNING,
    (S.RUNNING, T.TRACKING_URL): S.RUNNING,
    (S.RUNNING, T.SUCCEEDED): S.DONE,
    (S.RUNNING, T.FAILED): S.FAILED,
    (S.RUNNING, T.TIMED_OUT): S.FAILED,
    (S.RUNNING, T.PROCESS_DIED): S.FAILED,
    (S.RUNNING, T.DEPS_YIELDED): S.PENDING,
    **{(state, T.CHECKED_COMPLETE): S.COMPLETE for state in RECHECKABLE},
    **{(state, T.CHECKED_INCOMPLETE): S.CHECKED for state in RECHECKABLE if state != S.PENDING},
    (S.PENDING, T.CHECKED_INCOMPLETE): S.PENDING,
}


def advance(state: TaskState, trigger: Trigger) -> TaskState:
    """Return the state after ``trigger``; raise InvalidTransition if the table forbids it."""
    try:
        return TRANSITIONS[(state, trigger)]
    except KeyError:
        raise InvalidTransition(state.name, trigger.name) from None


def mermaid_diagram() -> str:
    """The transition table as a Mermaid state diagram (used to generate docs/concepts.md)."""
    lines = ["stateDiagram-v2", "    [*] --> NEW"]
    for (source, trigger), target in TRANSITIONS.items():
        lines.append(f"    {source.name} --> {target.name}: {trigger.name.lower()}")
    lines.extend(["    DONE --> [*]", "    COMPLETE --> [*]", "    UNKNOWN --> [*]"])
    return "\n".join(lines)
