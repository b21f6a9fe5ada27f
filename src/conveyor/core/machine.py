"""The worker's decisions, as pure functions: facts in, what to do out.

Theory of operation
-------------------
The worker loop (``conveyor.worker.loop``) and the graph walk (``conveyor.worker.walk``) do the
I/O: they call ``complete()`` and ``requires()``, talk to the scheduler and the executors, fire
hooks. Every *decision* about what a fact means is made here, by plain functions that tests
call directly:

* :func:`registration` — how a task that is not complete is registered: external, disabled,
  held back by ``task_limit``, or to be walked further (its requirements asked for).
* :func:`on_hand_out` — what a task the scheduler hands out means in the state the worker has
  it in: start an attempt, check it again (it was complete here but reopened), adopt it (an
  assistant never walked it), or ignore it.
* :func:`on_outcome` — which trigger an attempt's outcome is, and whether a failure caused by a
  dependency that vanished at run time is rescheduled (``max_reschedules`` per dependency) or
  reported to the scheduler.

The transition each decision names is applied through :func:`conveyor.core.states.advance`,
whose table also names the event it fires.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from ..protocol import AttemptOutcome, TaskStatus
from .states import TaskState, Trigger

__all__ = [
    "HAND_OUT",
    "FailureDecision",
    "HandOut",
    "Registration",
    "on_hand_out",
    "on_outcome",
    "registration",
]


@dataclass(frozen=True, slots=True)
class Registration:
    """How to register a task found incomplete.

    ``walk`` says whether to ask for its requirements (and walk them); ``limited`` that
    ``task_limit`` held it back; ``error`` is its explanation when it will never run here.
    """

    status: TaskStatus
    runnable: bool
    walk: bool
    limited: bool = False
    error: str = ""


def registration(
    *,
    external: bool,
    disabled: bool,
    retry_external: bool,
    task_limit: int,
    scheduled: int,
    attempts: int,
    label: str,
) -> Registration:
    """The registration of an incomplete task (before its requirements are asked for).

    An external task is PENDING, runnable only with ``retry_external_tasks`` (to be checked
    again). A disabled one is DISABLED and never runs. Once ``task_limit`` tasks were scheduled
    by this worker, a task not yet attempted is registered PENDING but not runnable here.
    """
    if external:
        return _EXTERNAL_RETRIED if retry_external else _EXTERNAL
    if disabled:
        error = f"{label} is disabled (disabled = True on its class); it never runs"
        return Registration(TaskStatus.DISABLED, False, walk=False, error=error)
    if task_limit and scheduled >= task_limit and attempts == 0:
        return _LIMITED
    return _WALK


# the common answers, built once (this runs for every incomplete task of every walk)
_WALK = Registration(TaskStatus.PENDING, True, walk=True)
_LIMITED = Registration(TaskStatus.PENDING, False, walk=False, limited=True)
_EXTERNAL = Registration(TaskStatus.PENDING, False, walk=False)
_EXTERNAL_RETRIED = Registration(TaskStatus.PENDING, True, walk=False)


class HandOut(enum.Enum):
    """What to do with a task the scheduler handed out."""

    START = "start"
    RECHECK = "recheck"
    """It was complete here but another worker found it incomplete: check it again."""
    IGNORE = "ignore"
    """It is in no state to run (already running, broken): log and leave it."""
    ADOPT = "adopt"
    """This worker never saw it (an assistant): load it from ``task_modules``, read its
    requirements, and start it."""


HAND_OUT: dict[TaskState | None, HandOut] = {
    None: HandOut.ADOPT,
    TaskState.PENDING: HandOut.START,
    TaskState.FAILED: HandOut.START,
    TaskState.DONE: HandOut.RECHECK,
    TaskState.COMPLETE: HandOut.RECHECK,
}
"""The decision for a hand-out of a task in each state (None: not in this worker's graph);
every state missing here is :attr:`HandOut.IGNORE` (see :func:`on_hand_out`)."""


def on_hand_out(state: TaskState | None) -> HandOut:
    """The decision for a hand-out of a task in ``state`` (None: not in this worker's graph)."""
    return HAND_OUT.get(state, HandOut.IGNORE)


_TRIGGER_OF = {
    AttemptOutcome.SUCCEEDED: Trigger.SUCCEEDED,
    AttemptOutcome.FAILED: Trigger.FAILED,
    AttemptOutcome.TIMED_OUT: Trigger.TIMED_OUT,
    AttemptOutcome.PROCESS_DIED: Trigger.PROCESS_DIED,
    AttemptOutcome.NEEDS_DEPS: Trigger.DEPS_YIELDED,
}


@dataclass(frozen=True, slots=True)
class FailureDecision:
    """The trigger of an outcome, and for a failure whether to reschedule instead of report.

    ``reschedules`` is, for a failure, the task's updated count of reschedules per missing
    dependency (a success or new dependencies leave the counts alone: empty here).
    """

    trigger: Trigger
    reschedule: bool = False
    reschedules: Mapping[str, int] = field(default_factory=dict)


_NO_FAILURE = {
    trigger: FailureDecision(trigger, False, MappingProxyType({}))
    for trigger in (Trigger.SUCCEEDED, Trigger.DEPS_YIELDED)
}


def on_outcome(
    kind: AttemptOutcome,
    missing: Sequence[str] = (),
    reschedules: Mapping[str, int] | None = None,
    max_reschedules: int = 1,
) -> FailureDecision:
    """Decide what an attempt's outcome means.

    A failure whose dependencies ``missing`` were found incomplete just before ``run()`` is
    rescheduled (walked and registered again, not reported as a failure) while every such
    dependency has been missing at most ``max_reschedules`` times (Luigi's rule). For a
    ``run()`` that yielded dependencies, ``missing`` are those that already ran successfully
    here and are still incomplete (e.g. with ``check_complete_on_run = false``): past the same
    bound the attempt is a failure instead of another round.
    """
    trigger = _TRIGGER_OF[kind]
    if trigger is Trigger.SUCCEEDED or (trigger is Trigger.DEPS_YIELDED and not missing):
        return _NO_FAILURE[trigger]  # (the counts only matter to a failure)
    counts = dict(reschedules or {})
    if trigger is Trigger.DEPS_YIELDED or (trigger is Trigger.FAILED and missing):
        for task_id in missing:
            counts[task_id] = counts.get(task_id, 0) + 1
        within = all(counts[t] <= max_reschedules for t in missing)
        if trigger is Trigger.DEPS_YIELDED:
            # a yielded dependency that ran and is still incomplete, too often: give up
            return FailureDecision(trigger if within else Trigger.FAILED, False, counts)
        return FailureDecision(trigger, within, counts)
    return FailureDecision(trigger, False, counts)
