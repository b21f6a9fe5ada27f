"""The executor protocol and the value objects that cross it.

An executor receives an :class:`AttemptRequest` and reports through a ``sink`` callable:
zero or more :class:`Note` messages (status message, progress, tracking URL) and then exactly
one :class:`Outcome`. ``sink`` may be called from any thread; the worker turns every message
into hooks and scheduler updates on its own loop thread, in order.

These messages are values: build new ones (``dataclasses.replace``) rather than changing
them. They are plain slotted dataclasses, not frozen ones, because a few are made for every
attempt and a frozen dataclass's ``__init__`` costs about six times as much. The hook events
the worker builds from them are frozen (see docs/hooks.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from ..clock import SYSTEM, Clock
from ..protocol import AttemptOutcome, NoteKind
from ..tasklike import TaskLike

if TYPE_CHECKING:
    from ..events import AttemptContext
    from ..plugins import AttemptHooks
    from ..settings import Field

__all__ = [
    "MEMORY_REASON",
    "AttemptRequest",
    "Executor",
    "ExecutorContext",
    "Interrupted",
    "Message",
    "Note",
    "Outcome",
    "Sink",
    "StopsOneAttempt",
    "Suspended",
    "complete_executor",
]

SUCCEEDED, FAILED, TIMED_OUT, PROCESS_DIED, NEEDS_DEPS = (
    AttemptOutcome.SUCCEEDED,
    AttemptOutcome.FAILED,
    AttemptOutcome.TIMED_OUT,
    AttemptOutcome.PROCESS_DIED,
    AttemptOutcome.NEEDS_DEPS,
)


MEMORY_REASON = "exceeded memory limit "
"""How the error of an attempt killed for its memory starts ("exceeded memory limit 2 GiB
(peak 2.1 GiB)"; the process executors' supervisor writes it)."""


@dataclass(slots=True, eq=False)
class Suspended:
    """A generator ``run()`` paused at a yield whose dependencies were not yet complete.

    Only the in-process executors (``inline``, ``thread``) keep one: the next attempt resumes it,
    sending the outputs of ``yielded``, instead of calling ``run()`` again from the top (see
    docs/tasks.md). It never crosses a process boundary.
    """

    generator: Generator[Any, Any, Any]
    yielded: Any

    def close(self) -> None:
        """Finish the generator (its ``finally`` blocks run) when it will not be resumed."""
        with contextlib.suppress(Exception):
            self.generator.close()


@dataclass(slots=True)
class AttemptRequest:
    """One attempt to run a task (``resume``: a suspended run() to continue, in-process only)."""

    task: TaskLike
    """The task (a :class:`conveyor.Task` or any other :class:`~conveyor.TaskLike`)."""
    task_id: str
    attempt: int
    timeout: float = 0.0
    check_complete: bool = True
    deps: tuple[TaskLike, ...] | None = None
    """The task's requirements when the worker already has them (saves calling requires()
    again); None means the executor calls ``requires()`` (:func:`conveyor.task.requirements`)."""
    resume: Suspended | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables for the attempt's process (``conveyor_attempt_environment``'s answers)."""
    plugins: tuple[str, ...] = ()
    """The plugins that take part in the attempt where it runs (their entry-point names)."""
    hooks: AttemptHooks | None = None
    """Those plugins' attempt hooks, as registered in the worker: the in-process executors
    call them on the thread that runs the attempt (a process executor loads its own)."""
    context: AttemptContext | None = None
    """The attempt as those hooks were told of it (set when ``begin`` is called)."""
    memory_limit: int = 0
    """The most memory, in bytes, the attempt's process tree may hold (0: no limit); the
    process executors watch it (the task's ``memory_limit``, else ``[worker] memory_limit``)."""


@dataclass(slots=True)
class Note:
    """Something ``run()`` published: kind is status_message, progress or tracking_url."""

    task_id: str
    kind: NoteKind
    value: Any


@dataclass(slots=True)
class Outcome:
    """How an attempt ended.

    ``kind`` is succeeded, failed, timed_out, process_died or needs_deps. ``new_deps`` holds the
    tasks ``run()`` yielded (needs_deps); ``missing`` the ids of dependencies found incomplete
    just before ``run()`` (a failed attempt that the worker may reschedule).
    """

    task_id: str
    kind: AttemptOutcome
    duration: float = 0.0
    error: str = ""
    exception_type: str = ""
    new_deps: tuple[TaskLike, ...] = ()
    missing: tuple[str, ...] = ()
    timeout: float = 0.0
    exitcode: int | None = None
    signal: int | None = None
    suspended: Suspended | None = None
    """With needs_deps from an in-process executor: the paused run(), to resume later."""
    found_complete: bool = False
    """With succeeded: ``run()`` was not called, because the task, which has outputs of its own,
    was already complete when the attempt started (another worker, or another task's
    ``run()``, made its outputs after this worker registered it)."""
    before_run: str = ""
    """With timed_out: what the attempt's process was still doing when its time ran out, if
    ``run()`` had not started yet (``interpreter start-up``, ``process start-up``, ``checking
    its dependencies``); "" once ``run()`` had started, or when that is unknown."""
    interrupted: bool = False
    """With failed: the attempt was stopped by an interruption of the worker (a signal, a
    drain), not by an error of its own (its ``exception_type`` is then ``Interrupted``)."""
    load_error: bool = False
    """With failed: the task could not be rebuilt where the attempt was to run (its module or
    class not found, or its rebuilt id different); ``run()`` was never called."""
    explanation: str = ""
    """With succeeded: what ``on_success()`` returned, as text ("" for nothing)."""
    not_retried: str = ""
    """With failed: why the task's ``retry_policy`` does not retry it (its exception is not in
    ``retry_on``: decided where the exception was raised); "" to retry it as usual."""


Message = Note | Outcome
Sink = Callable[[Message], None]


@dataclass(frozen=True, slots=True)
class ExecutorContext:
    """What an executor is built with: slot count, kill grace and its own settings table."""

    workers: int = 1
    kill_grace: float = 5.0
    settings: Mapping[str, Any] = field(default_factory=dict)
    log_level: str = "info"
    log_format: str = "json"
    clock: Clock = SYSTEM
    """The time an executor's deadlines are measured in: the worker passes its own clock
    (see :mod:`conveyor.executors.deadline`)."""


@runtime_checkable
class Executor(Protocol):
    """Runs attempts; see the module docstring for the reporting contract.

    A worker builds the configured one as ``cls(ExecutorContext)``, with ``context.settings``
    validated against ``settings_schema`` (an embedder may pass a ready one instead).
    Executors written before ``interrupt``, ``active`` and ``settings_schema`` were part of the
    protocol still load: :func:`complete_executor` gives them the defaults (no interruption,
    never active, no settings).
    """

    name: ClassVar[str]
    can_kill: ClassVar[bool]
    settings_schema: ClassVar[Mapping[str, Field]]
    active: bool
    """True while an attempt runs on the calling thread (``inline``): the worker then
    interrupts it by raising :class:`Interrupted` there."""

    def start(self, request: AttemptRequest, sink: Sink) -> None:
        """Begin the attempt; report notes and then exactly one Outcome through ``sink``."""

    def interrupt(self, reason: str, hard: bool = False) -> None:
        """Stop running attempts (SIGTERM to their trees, SIGKILL after the grace, at once if
        ``hard``) and report them failed with exception type ``Interrupted``."""

    def close(self) -> None:
        """Wait for running attempts and release resources."""


@runtime_checkable
class StopsOneAttempt(Protocol):
    """An executor that can stop one attempt (of a task cancelled on the scheduler) while the
    others run on: the process executors. Optional: the worker asks every executor for it,
    and one without it lets a cancelled attempt run to its end."""

    def stop_attempt(self, task_id: str, reason: str) -> bool:
        """Stop the running attempt of ``task_id`` as :meth:`Executor.interrupt` would (its
        process tree TERM, then KILL after the grace) and report it failed with exception
        type ``Interrupted`` and the error ``interrupted by <reason>``; False if no attempt
        of it runs here."""


class _Completed:
    """An executor written to the first protocol, given the members it lacks."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.can_kill = inner.can_kill
        from ..settings import schema_of  # only for executors of the first protocol

        self.settings_schema = schema_of(inner)

    @property
    def active(self) -> bool:
        return bool(getattr(self.inner, "active", False))

    def start(self, request: AttemptRequest, sink: Sink) -> None:
        self.inner.start(request, sink)

    def interrupt(self, reason: str, hard: bool = False) -> None:
        stop = getattr(self.inner, "interrupt", None)
        if stop is not None:
            stop(reason, hard)

    def close(self) -> None:
        self.inner.close()


def complete_executor(executor: Any) -> Executor:
    """``executor`` itself if it has every member of :class:`Executor`, else a wrapper that
    supplies the optional ones (the one place the worker tolerates an older executor)."""
    if all(hasattr(executor, m) for m in ("active", "interrupt", "settings_schema")):
        return executor  # type: ignore[no-any-return]
    return _Completed(executor)  # type: ignore[return-value]


class Interrupted(BaseException):
    """Raised inside an inline attempt when the worker gets SIGTERM or SIGINT.

    A BaseException so that the task's own ``except Exception`` cannot swallow it.
    """

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"interrupted by {signal_name}")
        self.signal_name = signal_name
