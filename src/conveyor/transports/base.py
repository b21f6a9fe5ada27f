"""The scheduler transport protocol: every call a worker makes to its scheduler.

The in-process :class:`conveyor.Scheduler` satisfies it directly; the ``http`` transport
(next) speaks the same calls to a central server. Arguments and results are plain values
(strings, numbers, the values of :mod:`conveyor.protocol`), never live task objects.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..config import Config, SchedulerSettings
from ..protocol import AttemptEnd, NoteKind, TaskInfo, TaskSpec, TaskStatus, Work, WorkLeft

__all__ = ["CanRelease", "SchedulerTransport", "TransportContext", "release_takes_task_ids"]


@dataclass(frozen=True, slots=True)
class TransportContext:
    """What a transport is built with (``cls(context)``): the worker's ``[scheduler]`` settings
    and the transport's own ``[schedulers.<name>]`` table, validated against its
    ``settings_schema``."""

    scheduler: SchedulerSettings
    settings: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, config: Config) -> TransportContext:
        """The context of a transport built by hand from ``config`` (no own settings)."""
        return cls(config.scheduler)


@runtime_checkable
class SchedulerTransport(Protocol):
    """What a worker needs from a scheduler.

    The entry point in ``conveyor.schedulers`` names a callable (a class, or a function) that
    the worker calls once with a :class:`TransportContext`; it returns the transport.
    """

    def add_tasks(self, worker_id: str, specs: Iterable[TaskSpec], assistant: bool = False) -> None:
        """Register or update tasks for a worker."""

    def get_work(
        self, worker_id: str, assistant: bool = False, running: Collection[str] | None = None
    ) -> Work | None:
        """Hand out the best runnable task, marking it running, or None.

        ``running`` lists what the worker is running; a task the scheduler believes this worker
        runs but it does not (a hand-out whose answer was lost) becomes pending again.
        """

    def work_left(self, worker_id: str) -> WorkLeft:
        """Count what may still run for this worker."""

    def task_done(self, worker_id: str, task_id: str, attempt: int = 0) -> None:
        """Report a successful attempt (``attempt``: its ``Work.attempt``).

        Applied once however often it is sent; raises
        :class:`~conveyor.errors.StaleReport` for an attempt that is no longer the task's
        latest (nothing changes then).
        """

    def task_failed(
        self,
        worker_id: str,
        task_id: str,
        explanation: str,
        attempt: int = 0,
        outcome: AttemptEnd = AttemptEnd.FAILED,
    ) -> TaskStatus:
        """Report a failed attempt; returns the new status (``attempt`` as for task_done).

        ``outcome`` says how it ended (failed, timed out, process died, interrupted), for the
        scheduler's attempt history. A transport written before it existed may leave it out:
        the worker then calls without it.
        """

    def annotate(self, task_id: str, kind: NoteKind, value: Any) -> None:
        """Store a status message, progress or tracking URL."""

    def ping(self, worker_id: str) -> None:
        """Keep the worker alive."""

    def statuses(self, task_ids: Iterable[str]) -> dict[str, TaskStatus]:
        """Current status of each given task id."""

    def explanation(self, task_id: str) -> str:
        """The stored failure explanation of a task."""

    def task_list(self) -> list[TaskInfo]:
        """Every registered task: the entries of the server's ``GET /api/v1/tasks``."""


@runtime_checkable
class CanRelease(Protocol):
    """A transport that can tell the scheduler a worker's run ended (optional: a transport
    without ``release`` still satisfies :class:`SchedulerTransport`; the worker then simply
    does not release, and the scheduler prunes the tasks once the worker is gone)."""

    def release(self, worker_id: str, task_ids: Iterable[str] | None = None) -> None:
        """The run of ``worker_id`` ended: it no longer needs the tasks ``task_ids`` it
        registered (None: every task the worker id registered), so finished ones may be pruned
        ``remove_delay`` later while the worker id lives on. The worker names its own graph's
        tasks, so runs sharing a worker id release only their own; it calls a ``release``
        without a ``task_ids`` parameter with the worker id alone. Best effort: the worker
        logs a failure and carries on."""


def release_takes_task_ids(transport: CanRelease) -> bool:
    """Whether ``transport.release`` accepts the keyword ``task_ids`` (one written before it
    did is called with the worker id alone)."""
    try:
        parameters = inspect.signature(transport.release).parameters
    except (TypeError, ValueError):
        return True
    return "task_ids" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
