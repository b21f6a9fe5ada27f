"""Frozen event objects handed to the observer hooks.

Every event carries the task fields (``task_id``, ``family``, ``module``, ``params``), the
``worker_id``, a Unix ``timestamp`` and ``state``, the name of the task's state in the worker
after the transition (see :mod:`conveyor.core.states`); worker-level events have empty task
fields. Each event
class names the hook it is delivered to in its ``hook`` class variable, so dispatch is a lookup,
and adding a field later breaks no plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "AttemptContext",
    "CompleteChecked",
    "DependenciesDiscovered",
    "Event",
    "NotificationSent",
    "Params",
    "ProcessDied",
    "TaskBroken",
    "TaskFailed",
    "TaskProgress",
    "TaskStarted",
    "TaskStatusMessage",
    "TaskSucceeded",
    "TaskTimedOut",
    "TaskTrackingUrl",
    "WorkerStarted",
    "WorkerStopped",
]


class Params(dict[str, str]):
    """A task's string parameters, read-only: every method that would change it raises.

    A ``dict`` subclass, so that ``json.dumps`` and ``dataclasses.asdict`` work on events as
    before; copying returns the same object (there is nothing to protect a copy from).
    """

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if self:  # dict.__init__ on a built one would update it
            self._read_only()
        super().__init__(*args, **kwargs)

    def _read_only(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("event params are read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __copy__(self) -> Params:
        return self

    def __deepcopy__(self, memo: object) -> Params:
        return self

    def __reduce__(self) -> Any:
        return (Params, (dict(self),))


_NO_PARAMS = Params()


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Fields common to every event."""

    hook: ClassVar[str] = ""
    task_id: str = ""
    family: str = ""
    module: str = ""
    params: Mapping[str, str] = field(default_factory=lambda: _NO_PARAMS)
    """Read-only: a plugin cannot change what the worker, the scheduler or others see."""
    worker_id: str = ""
    timestamp: float = 0.0
    state: str = ""
    owner_email: tuple[str, ...] = ()
    """The task class's ``owner_email`` addresses (empty for worker-level events)."""
    host: str = ""
    """The name of the machine the worker runs on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStarted(Event):
    """A worker begins ``run()``."""

    hook: ClassVar[str] = "conveyor_worker_started"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStopped(Event):
    """A worker's ``run()`` is about to return."""

    hook: ClassVar[str] = "conveyor_worker_stopped"
    ok: bool
    summary: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteChecked(Event):
    """A task's ``complete()`` returned a bool."""

    hook: ClassVar[str] = "conveyor_task_complete_checked"
    complete: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class DependenciesDiscovered(Event):
    """Static dependencies were found, or ``run()`` yielded dependencies that are incomplete."""

    hook: ClassVar[str] = "conveyor_task_dependencies_discovered"
    dependencies: tuple[str, ...]
    dynamic: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskBroken(Event):
    """``complete()`` / ``requires()`` raised or returned garbage while scheduling."""

    hook: ClassVar[str] = "conveyor_task_broken"
    error: str
    phase: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStarted(Event):
    """The executor starts an attempt of the task."""

    hook: ClassVar[str] = "conveyor_task_started"
    executor: str
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStatusMessage(Event):
    """``set_status_message`` was called inside ``run()``."""

    hook: ClassVar[str] = "conveyor_task_status_message"
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskProgress(Event):
    """``set_progress_percentage`` was called inside ``run()``."""

    hook: ClassVar[str] = "conveyor_task_progress"
    percentage: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskTrackingUrl(Event):
    """``set_tracking_url`` was called inside ``run()``."""

    hook: ClassVar[str] = "conveyor_task_tracking_url"
    url: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSucceeded(Event):
    """``run()`` returned and (when checked) the task is complete."""

    hook: ClassVar[str] = "conveyor_task_succeeded"
    duration: float
    attempt: int = 0
    """Which of this worker's attempts of the task ended: ``TaskStarted.attempt`` of the same
    attempt (0 only in an event built outside a worker)."""
    executor: str = ""
    """The name of the executor that ran the attempt, as in its ``TaskStarted``."""
    skipped: bool = False
    """``run()`` was not called: the task (one with outputs of its own) was already complete
    when its attempt started, made by another worker or another task's ``run()`` meanwhile."""
    explanation: str = ""
    """What the task's ``on_success()`` returned, as text ("" for nothing), as Luigi's ``expl``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFailed(Event):
    """``run()`` raised, left the task incomplete, or could not start."""

    hook: ClassVar[str] = "conveyor_task_failed"
    error: str
    exception_type: str
    duration: float
    attempt: int = 0
    """Which of this worker's attempts of the task ended: ``TaskStarted.attempt`` of the same
    attempt (0 only in an event built outside a worker)."""
    executor: str = ""
    """The name of the executor that ran the attempt, as in its ``TaskStarted``."""
    interrupted: bool = False
    """The attempt was stopped by an interruption of its worker (a signal, a drain), not by
    an error of its own (``exception_type`` is then ``"Interrupted"``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskTimedOut(Event):
    """The attempt exceeded its timeout and its process tree was killed."""

    hook: ClassVar[str] = "conveyor_task_timed_out"
    timeout: float
    attempt: int = 0
    """Which of this worker's attempts of the task ended: ``TaskStarted.attempt`` of the same
    attempt (0 only in an event built outside a worker)."""
    executor: str = ""
    """The name of the executor that ran the attempt, as in its ``TaskStarted``."""
    duration: float = 0.0
    """The attempt's wall time in seconds, up to when its end was noticed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessDied(Event):
    """The attempt's process ended without reporting a result."""

    hook: ClassVar[str] = "conveyor_task_process_died"
    exitcode: int | None
    signal: int | None
    attempt: int = 0
    """Which of this worker's attempts of the task ended: ``TaskStarted.attempt`` of the same
    attempt (0 only in an event built outside a worker)."""
    executor: str = ""
    """The name of the executor that ran the attempt, as in its ``TaskStarted``."""
    duration: float = 0.0
    """The attempt's wall time in seconds, up to when its end was noticed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NotificationSent(Event):
    """The notifier dispatch tried to deliver a notification (task fields: the event's)."""

    hook: ClassVar[str] = "conveyor_notification_sent"
    notifier: str
    """The notifier's name (``email``, ``slack``, …)."""
    kind: str
    """The notification's :class:`~conveyor.protocol.NotifyKind` (``failed``, …)."""
    result: str
    """``"sent"``; ``"failed"`` (this try failed, it is tried again later); or ``"dropped"``
    (given up after its retries, or pushed out of the full queue)."""


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """An attempt as the hooks that run where it runs see it (``conveyor_attempt_begin`` /
    ``conveyor_attempt_end``): in the attempt's own process, or on the worker's thread that
    runs it under the in-process executors."""

    task_id: str
    family: str
    attempt: int
    """The worker's attempt number (``TaskStarted.attempt``)."""
    env: Mapping[str, str]
    """What the worker's ``conveyor_attempt_environment`` implementations returned for it:
    already in ``os.environ`` in an attempt's own process, only here under ``inline`` and
    ``thread`` (which must not change the worker's environment)."""
    in_worker: bool
    """True under the in-process executors (the worker's own process and plugins)."""


ALL_EVENTS: tuple[type[Event], ...] = (
    WorkerStarted,
    CompleteChecked,
    DependenciesDiscovered,
    TaskBroken,
    TaskStarted,
    TaskStatusMessage,
    TaskProgress,
    TaskTrackingUrl,
    TaskSucceeded,
    TaskFailed,
    TaskTimedOut,
    ProcessDied,
    WorkerStopped,
)


# --- the central server's events (conveyor_scheduler_*) ---------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerTaskChanged(Event):
    """The central server moved a task's status, and the change is committed.

    ``worker_id`` is the worker of the task's latest attempt (the one it is handed out to,
    or that ran it last), ``""`` if it was never handed out; not necessarily the worker whose
    call made the move.
    """

    hook: ClassVar[str] = "conveyor_scheduler_task_changed"
    old_status: str
    new_status: str
    cause: str
    """Why it moved: a :class:`conveyor.scheduler.policy.Cause` value (``"handed out"``, …)."""
    attempt: int = 0
    """The task's latest attempt id (its fencing token; 0 before its first hand-out)."""
    waited: float | None = None
    """With a hand-out (``new_status`` ``"RUNNING"``): the seconds the task waited ready
    (``PENDING`` with every dependency done) before it was handed out; None otherwise, and for
    a task that was ready before this server loaded it."""
    outcome: str = ""
    """With a move out of ``RUNNING`` that ended an attempt: how it ended, an
    :class:`~conveyor.protocol.AttemptEnd` value (``succeeded``, ``failed``, ``timed_out``,
    ``process_died``, ``interrupted``); "" for every other move (a hand-out taken back, or
    ``run()`` yielding dependencies, ends no attempt)."""
    duration: float | None = None
    """With ``outcome``: the attempt's wall time as the server saw it (hand-out to report)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerWorkerSeen(Event):
    """A worker the central server did not know (or had declared gone) called it."""

    hook: ClassVar[str] = "conveyor_scheduler_worker_seen"
    returned: bool = False
    """True if the server had declared this worker gone and it called again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerWorkerLost(Event):
    """The central server declared a worker gone: silent for ``worker_disconnect_delay``."""

    hook: ClassVar[str] = "conveyor_scheduler_worker_lost"
    running: tuple[str, ...] = ()
    """The ids of the tasks it was running (each then fails with cause ``"worker gone"``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerReportRefused(Event):
    """The central server refused a worker's report of a task (answered 409)."""

    hook: ClassVar[str] = "conveyor_scheduler_report_refused"
    route: str
    """The API call refused: ``"task_done"`` or ``"task_failed"``."""
    attempt: int
    """The attempt the report was about."""
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerUiAction(Event):
    """An operator's action in the web UI was applied and committed."""

    hook: ClassVar[str] = "conveyor_scheduler_ui_action"
    action: str
    """``"retry"``, ``"reenable"``, ``"retry all failed"`` or ``"cancel"``."""
    task_ids: tuple[str, ...]
    """The ids of the tasks it changed (the first 100; ``changed`` counts them all)."""
    changed: int
    skipped: int
    who: str
    """The UI session's name, or ``"open"`` when the server has no token."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerRequest(Event):
    """The central server answered an HTTP request (task fields empty)."""

    hook: ClassVar[str] = "conveyor_scheduler_request"
    route: str
    """The path of the route that served it, as declared (``/api/v1/get_work``,
    ``/ui/{name:str}``); ``"(unmatched)"`` for a path no route serves (404),
    ``"(refused)"`` for a request the server's guard refused itself (401, 403, 413, …) and
    ``"(preflight)"`` for an ``OPTIONS`` request, which it answers itself."""
    method: str
    """``GET``, ``POST``, … as sent; ``OTHER`` for a method outside the usual seven."""
    code: int
    """The status code answered (the guard's own refusals included)."""
    duration: float
    """Seconds from the request's arrival to the end of its answer."""


SERVER_EVENTS: tuple[type[Event], ...] = (
    SchedulerTaskChanged,
    SchedulerWorkerSeen,
    SchedulerWorkerLost,
    SchedulerReportRefused,
    SchedulerUiAction,
    SchedulerRequest,
)
"""The central server's events, delivered by its own plugin manager."""

__all__ += [
    "SchedulerReportRefused",
    "SchedulerRequest",
    "SchedulerTaskChanged",
    "SchedulerUiAction",
    "SchedulerWorkerLost",
    "SchedulerWorkerSeen",
]
