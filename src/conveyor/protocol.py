"""The vocabulary that crosses the worker ⇄ scheduler boundary, and its one JSON codec.

Theory of operation
-------------------
Everything a worker says to a scheduler, and everything a scheduler answers, is one of the
frozen dataclasses below; task statuses, attempt outcomes and note kinds are ``StrEnum``\\ s, so
that each concept has one name everywhere (the in-process scheduler, the ``http`` transport,
the server, the state store, ``RunResult.states`` and the hook events).

:func:`encode` turns such a value into plain JSON data and :func:`decode` turns JSON data back
into the value, checking every field against the dataclass's type annotations; a value that
does not fit raises :class:`FieldError` naming the field (``tasks[3].priority``) and what was
expected. :func:`json_schema` describes the same types for ``/openapi.json``. Nothing is
hand-written per field, so the server's validation, the transport's parsing of answers and the
published schema cannot drift apart. This module imports nothing else of conveyor's.

Rules beyond a field's type are field metadata read by both: ``minimum``/``maximum`` for
numbers, ``choices`` for enums, a :class:`TextRule` for strings (``text``; ``keys`` for the keys
of a mapping) and :func:`_variants` for a field whose type depends on another field's value
(``Annotate.value`` on ``kind``). Every identifier a request carries (task and worker ids,
dependency ids, families, modules, parameter and resource names) follows :data:`IDENTIFIER`
or :data:`NAME`, so whatever :func:`decode` lets into the scheduler is something its state
store can write and read back. As in JSON Schema, an integer is any number without a
fractional part: ``50194.0`` decodes as the int ``50194``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .tasklike import DEFAULT_LOADER

__all__ = [
    "DROPPABLE",
    "IDENTIFIER",
    "IDENTIFIER_MAX_LENGTH",
    "MAX_BATCH",
    "NAME",
    "REGISTRATION_STATUSES",
    "ROUTES",
    "AddTasks",
    "Annotate",
    "AttemptEnd",
    "AttemptOutcome",
    "BatchMember",
    "BatchSpec",
    "Cancel",
    "CancelAnswer",
    "Explanation",
    "ExplanationAnswer",
    "FieldError",
    "GetWork",
    "NoteKind",
    "NotifyKind",
    "Ok",
    "Ping",
    "PingAnswer",
    "RefusedReport",
    "Release",
    "RetrySpec",
    "Route",
    "Statuses",
    "StatusesAnswer",
    "StopAttempt",
    "Submit",
    "SubmitAnswer",
    "TaskDone",
    "TaskFailed",
    "TaskFailedAnswer",
    "TaskInfo",
    "TaskList",
    "TaskSpec",
    "TaskStatus",
    "TextRule",
    "Work",
    "WorkAnswer",
    "WorkLeft",
    "WorkLeftRequest",
    "decode",
    "encode",
    "encode_request",
    "json_schema",
    "route_of",
]

T = TypeVar("T")


class TaskStatus(enum.StrEnum):
    """A task's state as the scheduler keeps it and ``RunResult.states`` reports it."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    DISABLED = "DISABLED"
    UNKNOWN = "UNKNOWN"  # a task whose complete()/requires() was broken while scheduling

    # str's own hash, in C (Enum's calls hash(self._name_) in Python): the same value, since
    # every name is its value, so a status and its text stay one dictionary key
    __hash__ = str.__hash__


REGISTRATION_STATUSES = (
    TaskStatus.PENDING,
    TaskStatus.DONE,
    TaskStatus.DISABLED,
    TaskStatus.UNKNOWN,
)
"""What a worker may register a task as; RUNNING and FAILED only come from the scheduler."""


class AttemptOutcome(enum.StrEnum):
    """How one attempt ended (an interrupted attempt is FAILED, exception type Interrupted)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    PROCESS_DIED = "process_died"
    NEEDS_DEPS = "needs_deps"


class AttemptEnd(enum.StrEnum):
    """How an attempt ended, as the scheduler's attempt history keeps it (see docs/ui.md)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    PROCESS_DIED = "process_died"
    INTERRUPTED = "interrupted"


class NoteKind(enum.StrEnum):
    """What ``run()`` may publish while it runs."""

    STATUS_MESSAGE = "status_message"
    PROGRESS = "progress"
    TRACKING_URL = "tracking_url"


class NotifyKind(enum.StrEnum):
    """What a notification is about: the ``[notifiers] on`` choices, and ``aggregate`` for a
    burst of them sent as one message (``Message.kind``)."""

    FAILED = "failed"
    TIMED_OUT = "timed_out"
    PROCESS_DIED = "process_died"
    BROKEN = "broken"
    SUCCEEDED = "succeeded"
    RUN_FINISHED = "run_finished"
    AGGREGATE = "aggregate"


class FieldError(ValueError):
    """A value does not fit the protocol: ``field`` names where, the message what was expected."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _choices(*values: enum.StrEnum) -> dict[str, Any]:
    """Field metadata restricting an enum field to some of its members."""
    return {"choices": tuple(values)}


_NON_NEGATIVE = {"minimum": 0}
MAX_BATCH = 1000
"""The most hand-outs one ``get_work`` may ask for (:attr:`GetWork.max_tasks`)."""

IDENTIFIER_MAX_LENGTH = 1000
"""The most characters an identifier may have: five times the 200 of Luigi's own task history
(``task_id VARCHAR(200)``), and far above what conveyor makes (task ids of at most 128
characters; Luigi-style ids are the family and 60 more)."""

# C0 controls, DEL and C1 controls: what the published pattern refuses (ECMA-262 syntax, which
# Python's re reads too). Lone surrogates are refused by decode as well, but left out of the
# pattern: a JSON Schema validator working on UTF-16 would read them as every character
# outside the BMP. They cannot reach decode from the server anyway (its JSON parser refuses
# them with a 400). The end is "no character follows", not "$": Python's "$" also matches
# before a final newline, so a validator using Python's re accepted "\n" with "$".
_NO_CONTROL_PATTERN = r"^[^\u0000-\u001f\u007f-\u009f]*(?![\s\S])"
_UNWANTED = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class TextRule:
    """What a string field accepts beyond being a string: ``min_length`` to ``max_length``
    characters, none of them a control character (C0, DEL, C1) or a lone surrogate.

    Used as field metadata (``{"text": rule}``, or ``{"keys": rule}`` for a mapping's keys):
    :func:`decode` enforces it, :func:`json_schema` publishes it as ``minLength``,
    ``maxLength`` and ``pattern`` (``propertyNames`` for keys).
    """

    min_length: int = 1
    max_length: int = IDENTIFIER_MAX_LENGTH

    def problem(self, value: str) -> str:
        """What is wrong with ``value``, as "expected ..., got ..." ("" if nothing)."""
        size = len(value)
        if size < self.min_length:
            if size == 0:
                return "expected a non-empty string"
            return f"expected at least {self.min_length} characters, got {size}"
        if size > self.max_length:
            return f"expected at most {self.max_length} characters, got {size}"
        if not value.isprintable():  # (a fast path: printable text has no control character)
            bad = _UNWANTED.search(value)
            if bad is not None:
                char, where = bad.group(), bad.start()
                if char >= "\ud800":
                    return f"expected valid Unicode, got a lone surrogate at position {where}"
                return f"expected no control characters, got {char!r} at position {where}"
        return ""

    def schema(self) -> dict[str, Any]:
        """The rule in JSON Schema's words."""
        schema: dict[str, Any] = {"maxLength": self.max_length, "pattern": _NO_CONTROL_PATTERN}
        if self.min_length:
            schema["minLength"] = self.min_length
        return schema


IDENTIFIER = TextRule()
"""Task ids, worker ids, dependency ids, parameter and resource names: 1 to
:data:`IDENTIFIER_MAX_LENGTH` characters without control characters."""

NAME = TextRule(min_length=0)
"""A task's family and module: like :data:`IDENTIFIER`, but may be empty (not said)."""

_ID = {"text": IDENTIFIER}  # (on a list, the rule applies to each item)
_NAMED = {"text": NAME}
_PARAMS = {"keys": IDENTIFIER}  # parameter values are free text (a list as JSON, several lines)


@dataclass(frozen=True, slots=True)
class _Variants:
    """Field metadata: the field's type and rules depend on the value of field ``on``."""

    on: str
    cases: Mapping[Any, tuple[Any, Mapping[str, Any]]]
    """Each value of ``on`` -> the field's annotation and metadata for it."""


def _variants(on: str, cases: Mapping[Any, tuple[Any, Mapping[str, Any]]]) -> dict[str, Any]:
    """Field metadata making the field's type depend on the value of field ``on``; published
    as a ``oneOf`` with a discriminator on ``on``."""
    return {"variants": _Variants(on, cases)}


# --- values -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetrySpec:
    """A task's own retry schedule, as a worker registers it (the numbers of its
    ``retry_policy``, :class:`conveyor.RetryPolicy`; never its exception classes).

    Each field None means the scheduler's setting (``[scheduler] retry_delay``,
    ``retry_backoff``, ``retry_max_delay``, ``retry_jitter``): the n-th failure within
    ``disable_window`` waits ``delay * backoff**(n-1)``, moved by up to ``jitter`` of itself
    either way, never longer than ``max_delay``. The policy's ``count`` travels as
    :attr:`TaskSpec.retry_count`, which a scheduler predating this value understands too.
    """

    delay: float | None = field(default=None, metadata=_NON_NEGATIVE)
    backoff: float | None = field(default=None, metadata={"minimum": 1})
    max_delay: float | None = field(default=None, metadata=_NON_NEGATIVE)
    jitter: float | None = field(default=None, metadata={"minimum": 0, "maximum": 1})


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """How a batchable task may share an attempt (Luigi's ``batch_method``): pending tasks
    with equal ``key`` (their family and the values of their parameters that are not batched)
    may be handed to one worker as one batch of at most ``max_size`` members (0: no limit)."""

    key: str = field(metadata=_ID)
    max_size: int = field(default=0, metadata=_NON_NEGATIVE)


@dataclass(frozen=True, slots=True)
class BatchMember:
    """One member of a batch hand-out (:attr:`Work.batch`): its id and string params."""

    task_id: str = field(metadata=_ID)
    params: Mapping[str, str] = field(default_factory=dict, metadata=_PARAMS)


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What a worker registers about one task (strings, numbers, lists; never a live task)."""

    task_id: str = field(metadata=_ID)
    family: str = field(default="", metadata=_NAMED)
    module: str = field(default="", metadata=_NAMED)
    params: Mapping[str, str] = field(default_factory=dict, metadata=_PARAMS)
    status: TaskStatus = field(
        default=TaskStatus.PENDING, metadata=_choices(*REGISTRATION_STATUSES)
    )
    deps: tuple[str, ...] = field(default=(), metadata=_ID)
    priority: int = 0
    resources: Mapping[str, int] = field(
        default_factory=dict, metadata={**_NON_NEGATIVE, "keys": IDENTIFIER}
    )
    runnable: bool = True
    retry_count: int | None = None
    explanation: str = ""
    loader: str = field(default=DEFAULT_LOADER, metadata=_ID)
    """The :class:`~conveyor.TaskLoader` that rebuilds the task from module, family and params
    (``"conveyor"`` for conveyor's own task classes; ``"luigi"`` for a ``luigi.Task``)."""
    retry: RetrySpec | None = None
    """The task's own retry schedule (its ``retry_policy``); None: the scheduler's. Sent only
    by a task that has one (left out at its default, a registration reads as before)."""
    labels: tuple[str, ...] = field(default=(), metadata=_ID)
    """What a worker must offer (its ``[worker] labels``, :attr:`GetWork.labels`) to be
    handed the task; () for any worker. Left out at its default, a registration reads as
    before; a server that predates it refuses a labelled task (422) rather than hand it to
    any worker."""
    batch: BatchSpec | None = None
    """Set for a task with a batched parameter (a ``batch_method``): which pending tasks may
    share its attempt. None (left out): a registration reads as before; a server that
    predates it refuses a batchable task (422)."""


@dataclass(frozen=True, slots=True)
class Work:
    """A task handed to a worker: enough to rebuild it (module, family, string params).

    ``attempt`` identifies this hand-out (a fencing token: it grows with every hand-out of the
    task, and reports name it); ``lease`` is how long, in seconds, the scheduler keeps the
    attempt for a worker it does not hear from (its ``worker_disconnect_delay``). A worker out
    of touch for most of the lease stops the attempt. 0 means not given (an older scheduler).
    """

    task_id: str
    family: str
    module: str
    params: Mapping[str, str]
    attempt: int = field(default=0, metadata=_NON_NEGATIVE)
    lease: float = field(default=0.0, metadata=_NON_NEGATIVE)
    loader: str = field(default=DEFAULT_LOADER, metadata=_ID)
    """The task loader that rebuilds it, as registered (:attr:`TaskSpec.loader`)."""
    batch: tuple[BatchMember, ...] = ()
    """A batch hand-out (only to a worker that asked with :attr:`GetWork.batches`): every
    member, this task first, all RUNNING under this one ``attempt``. The worker runs one task
    made of them (each batched parameter combined by its ``batch_method``) and reports each
    member with this attempt. () : a single task, as before."""
    walk: bool = False
    """A submitted task whose graph no worker has walked yet (:class:`Submit`): the assistant
    walks it (``complete()``, ``requires()``), registers what it needs, and runs it when it is
    handed out again. False (left out): run it."""


@dataclass(frozen=True, slots=True)
class WorkLeft:
    """What remains for a worker when no task is ready for it.

    ``last_scheduled`` counts the pending tasks this worker was the latest to register (Luigi's
    ``n_pending_last_scheduled``, read by its ``[worker] count_last_scheduled``)."""

    pending: int
    unique_pending: int
    running_elsewhere: int
    last_scheduled: int = 0


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """One entry of the scheduler's task list (``GET /api/v1/tasks``, see docs/server.md)."""

    task_id: str
    family: str
    params: Mapping[str, str]
    status: TaskStatus
    worker: str | None
    priority: int
    dependencies: tuple[str, ...]
    status_message: str
    progress: float | None
    tracking_url: str
    explanation: str = ""
    waiting: str = ""
    """Why a ready ``PENDING`` task is not handed out ("" otherwise): no live worker has
    its labels."""
    submitted_by: str = ""
    """Who submitted it (:class:`Submit`), as the server recorded them; "" if nobody did."""


# --- requests and answers of the worker-facing routes ----------------------------------------


@dataclass(frozen=True, slots=True)
class AddTasks:
    """Register or update tasks for a worker."""

    worker_id: str = field(metadata=_ID)
    tasks: tuple[TaskSpec, ...]
    assistant: bool = False


@dataclass(frozen=True, slots=True)
class GetWork:
    """Ask for the best runnable task; ``running`` lists what the worker runs now.

    ``loaders`` names the task loaders an assistant can rebuild tasks with: it is handed only
    tasks another worker registered with one of them (None, or left out: conveyor's own only,
    what an assistant of an older release can build; an empty list: none). A worker that is
    not an assistant is handed only tasks it registered itself, so its ``loaders`` are not
    looked at. A server that predates the field refuses it (422): the ``http`` transport then
    asks again without it (:data:`DROPPABLE`), which is right, since such a server holds only
    conveyor's tasks.

    ``max_tasks`` (1 or more) asks for a batch: up to that many hand-outs, one in
    :attr:`WorkAnswer.work` and the rest in :attr:`WorkAnswer.more`, and the answer says
    ``batched``. 0 (left out) is the single hand-out of older workers. A server that predates
    the field refuses it (422) and is then asked without it. ``done`` and ``failed`` carry the
    reports of attempts that ended since the worker's last call (each as its own route would
    take it, of the same worker): the scheduler applies them first, in that order, and commits
    them with the hand-outs in one transaction before it answers. A worker sends them only to
    a scheduler whose answer said ``batched``. A stale report among them, or one of another
    worker, does not refuse the request: it is left out and named in :attr:`WorkAnswer.refused`.
    """

    worker_id: str = field(metadata=_ID)
    assistant: bool = False
    running: tuple[str, ...] | None = field(default=None, metadata=_ID)
    loaders: tuple[str, ...] | None = field(default=None, metadata={**_ID, "droppable": True})
    max_tasks: int = field(
        default=0, metadata={**_NON_NEGATIVE, "maximum": MAX_BATCH, "droppable": True}
    )
    done: tuple[TaskDone, ...] = ()
    failed: tuple[TaskFailed, ...] = ()
    labels: tuple[str, ...] | None = field(default=None, metadata={**_ID, "droppable": True})
    """What the worker offers (its ``[worker] labels``): it is handed only tasks whose
    :attr:`TaskSpec.labels` are all among them. None (left out): as given before, or none."""
    batches: bool = field(default=False, metadata={"droppable": True})
    """The worker runs batch hand-outs (:attr:`Work.batch`); False (left out): it is handed
    each task alone. A server that predates it refuses it (422): asked again without."""


@dataclass(frozen=True, slots=True)
class WorkLeftRequest:
    """Ask what may still run for a worker."""

    worker_id: str = field(metadata=_ID)


@dataclass(frozen=True, slots=True)
class TaskDone:
    """Report a successful attempt; ``attempt`` is its :attr:`Work.attempt` (0: not known).

    A report is applied once: sent again (its answer was lost), it is acknowledged without
    being applied again; about an attempt no longer current, it is refused (HTTP 409).
    """

    worker_id: str = field(metadata=_ID)
    task_id: str = field(metadata=_ID)
    attempt: int = field(default=0, metadata=_NON_NEGATIVE)
    explanation: str = field(default="", metadata={"droppable": True})
    """What the task's ``on_success()`` returned, kept as its explanation ("" for nothing); a
    server that predates the field refuses it (422), and the ``http`` transport then reports
    the success without it (:data:`DROPPABLE`)."""


@dataclass(frozen=True, slots=True)
class TaskFailed:
    """Report a failed attempt with its explanation (``attempt`` as in :class:`TaskDone`) and
    how it ended (``outcome``, kept in the task's attempt history; ``failed`` if not said)."""

    worker_id: str = field(metadata=_ID)
    task_id: str = field(metadata=_ID)
    explanation: str
    attempt: int = field(default=0, metadata=_NON_NEGATIVE)
    outcome: AttemptEnd = field(
        default=AttemptEnd.FAILED,
        metadata=_choices(
            AttemptEnd.FAILED,
            AttemptEnd.TIMED_OUT,
            AttemptEnd.PROCESS_DIED,
            AttemptEnd.INTERRUPTED,
        ),
    )
    not_retried: str = field(default="", metadata={"droppable": True})
    """Why the task's ``retry_policy`` does not retry this failure ("": retry it as usual),
    e.g. ``ValueError is not in retry_on (KeyError, OSError)``: the scheduler then disables
    the task at once, with this reason after the explanation. A server that predates the field
    refuses it (422), and the ``http`` transport then reports the failure without it
    (:data:`DROPPABLE`): retried as before."""


@dataclass(frozen=True, slots=True)
class Annotate:
    """Store a status message, progress percentage (0 to 100) or tracking URL."""

    task_id: str = field(metadata=_ID)
    kind: NoteKind
    value: str | float = field(
        metadata=_variants(
            "kind",
            {
                NoteKind.STATUS_MESSAGE: (str, {}),
                NoteKind.PROGRESS: (float, {"minimum": 0, "maximum": 100}),
                NoteKind.TRACKING_URL: (str, {}),
            },
        )
    )

    def __post_init__(self) -> None:
        """A progress is a number from 0 to 100; the other kinds are text (the rule
        :func:`decode` applies and ``/openapi.json`` publishes, checked here for values made
        in Python too)."""
        _check_variants(self)


@dataclass(frozen=True, slots=True)
class Ping:
    """Keep a worker alive."""

    worker_id: str = field(metadata=_ID)


@dataclass(frozen=True, slots=True)
class Release:
    """A worker's run ended: it no longer needs the tasks ``task_ids`` it registered (finished
    ones may be pruned ``remove_delay`` later while the worker id lives on). ``task_ids`` None
    (or left out) means every task the worker id registered, as before the field existed: a
    worker id shared by runs at the same time names its run's tasks. Sent by newer workers
    only."""

    worker_id: str = field(metadata=_ID)
    task_ids: tuple[str, ...] | None = field(default=None, metadata=_ID)


@dataclass(frozen=True, slots=True)
class Statuses:
    """Ask for the status of some tasks."""

    task_ids: tuple[str, ...] = field(metadata=_ID)


@dataclass(frozen=True, slots=True)
class Explanation:
    """Ask for a task's stored failure explanation."""

    task_id: str = field(metadata=_ID)


@dataclass(frozen=True, slots=True)
class Ok:
    """The answer of a call that only changes state."""

    ok: bool = True


@dataclass(frozen=True, slots=True)
class StopAttempt:
    """An attempt its worker is to stop (the task was cancelled, :class:`Cancel`), as a
    SIGTERM would stop it, reporting it failed (interrupted)."""

    task_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class PingAnswer:
    """The answer to :class:`Ping`: ``stop`` lists the attempts of this worker that were
    cancelled and are still running (an older server answers only ``ok``)."""

    ok: bool = True
    stop: tuple[StopAttempt, ...] = ()


@dataclass(frozen=True, slots=True)
class Submit:
    """``POST /api/v1/submit``: register ``task`` (not its graph: its ``deps`` are not looked
    at) as runnable by the scheduler's assistants (``conveyor worker``), which walk its graph
    and run it. A task the scheduler knows already keeps its dependencies; one that is
    ``DONE``, ``FAILED``, ``DISABLED`` or ``UNKNOWN`` becomes ``PENDING`` again (its
    assistant re-checks ``complete()`` first). ``by`` is who submits, as the caller says;
    the server records it with how the caller was let in (the token, a UI session)."""

    task: TaskSpec
    by: str = ""


@dataclass(frozen=True, slots=True)
class SubmitAnswer:
    """The answer to :class:`Submit`: the task's id and status now."""

    task_id: str
    status: TaskStatus


@dataclass(frozen=True, slots=True)
class Cancel:
    """``POST /api/v1/cancel``: the task (with ``downstream``, every task that needs it,
    directly or not) becomes ``DISABLED`` with the explanation "cancelled"; a running attempt
    is stopped through its worker, which learns it from the answer to its next ping or
    ``get_work``. ``DONE`` tasks stay ``DONE``. ``by`` as in :class:`Submit`."""

    task_id: str = field(metadata=_ID)
    downstream: bool = False
    by: str = ""


@dataclass(frozen=True, slots=True)
class CancelAnswer:
    """The answer to :class:`Cancel`: the tasks it disabled (``cancelled``), the running ones
    among them whose workers are told to stop them (``stopping``), and those it left as they
    were (``kept``: ``DONE``)."""

    cancelled: tuple[str, ...]
    stopping: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RefusedReport:
    """A report carried by :class:`GetWork` that the scheduler refused as stale (what its own
    route would have answered with HTTP 409): the task was handed out again since."""

    route: str
    task_id: str
    attempt: int
    error: str


@dataclass(frozen=True, slots=True)
class WorkAnswer:
    """The answer to :class:`GetWork`: a task, or None when nothing is ready.

    To a batch request (``max_tasks`` given) the answer is ``batched``: ``more`` holds the
    hand-outs after the first, and ``refused`` the carried reports refused as stale. An older
    scheduler's answer has none of these (``batched`` false): a worker then sends its reports
    by their own routes."""

    work: Work | None
    more: tuple[Work, ...] = ()
    batched: bool = False
    refused: tuple[RefusedReport, ...] = ()
    stop: tuple[StopAttempt, ...] = ()
    """The attempts of this worker that were cancelled and are still running (as in
    :class:`PingAnswer`)."""


@dataclass(frozen=True, slots=True)
class TaskFailedAnswer:
    """The answer to :class:`TaskFailed`: the task's status afterwards."""

    status: TaskStatus


@dataclass(frozen=True, slots=True)
class StatusesAnswer:
    """The answer to :class:`Statuses` (unknown ids are left out)."""

    statuses: Mapping[str, TaskStatus]


@dataclass(frozen=True, slots=True)
class ExplanationAnswer:
    """The answer to :class:`Explanation` ('' when there is none)."""

    explanation: str


@dataclass(frozen=True, slots=True)
class TaskList:
    """The answer of ``GET /api/v1/tasks``."""

    tasks: tuple[TaskInfo, ...]


# --- building the values of the in-process hot path ---------------------------------------------
# A frozen dataclass's generated __init__ writes each field by object.__setattr__ (a look-up per
# field); these builders write the slots directly, through each field's slot descriptor, about
# twice as fast. The value built is the same: frozen, equal and hashed as ``cls(...)`` makes
# it. Each takes every field positionally, in declaration order (a field added to the class
# makes its builder fail loudly until it is added here too: see tests/test_hot_path_*).


def _slot_setters(cls: type) -> tuple[typing.Callable[[Any, Any], None], ...]:
    """The ``__set__`` of each field's slot descriptor of ``cls``, in declaration order."""
    return tuple(getattr(cls, f.name).__set__ for f in dataclasses.fields(cls))


_TASK_SPEC_SLOTS = _slot_setters(TaskSpec)
_WORK_SLOTS = _slot_setters(Work)
_WORK_ANSWER_SLOTS = _slot_setters(WorkAnswer)
_new = object.__new__


def make_task_spec(
    task_id: str,
    family: str,
    module: str,
    params: Mapping[str, str],
    status: TaskStatus,
    deps: tuple[str, ...],
    priority: int,
    resources: Mapping[str, int],
    runnable: bool,
    retry_count: int | None,
    explanation: str,
    loader: str,
    retry: RetrySpec | None,
    labels: tuple[str, ...],
    batch: BatchSpec | None,
) -> TaskSpec:
    """``TaskSpec(...)`` of every field, in order, built directly (a worker's walk makes one
    per task)."""
    (
        set_task_id,
        set_family,
        set_module,
        set_params,
        set_status,
        set_deps,
        set_priority,
        set_resources,
        set_runnable,
        set_retry_count,
        set_explanation,
        set_loader,
        set_retry,
        set_labels,
        set_batch,
    ) = _TASK_SPEC_SLOTS
    spec: TaskSpec = _new(TaskSpec)
    set_task_id(spec, task_id)
    set_family(spec, family)
    set_module(spec, module)
    set_params(spec, params)
    set_status(spec, status)
    set_deps(spec, deps)
    set_priority(spec, priority)
    set_resources(spec, resources)
    set_runnable(spec, runnable)
    set_retry_count(spec, retry_count)
    set_explanation(spec, explanation)
    set_loader(spec, loader)
    set_retry(spec, retry)
    set_labels(spec, labels)
    set_batch(spec, batch)
    return spec


def make_work(
    task_id: str,
    family: str,
    module: str,
    params: Mapping[str, str],
    attempt: int,
    lease: float,
    loader: str,
    batch: tuple[BatchMember, ...],
    walk: bool,
) -> Work:
    """``Work(...)`` of every field, in order, built directly (the in-process scheduler hands
    one out per task)."""
    (
        set_task_id,
        set_family,
        set_module,
        set_params,
        set_attempt,
        set_lease,
        set_loader,
        set_batch,
        set_walk,
    ) = _WORK_SLOTS
    work: Work = _new(Work)
    set_task_id(work, task_id)
    set_family(work, family)
    set_module(work, module)
    set_params(work, params)
    set_attempt(work, attempt)
    set_lease(work, lease)
    set_loader(work, loader)
    set_batch(work, batch)
    set_walk(work, walk)
    return work


def make_work_answer(
    work: Work | None,
    more: tuple[Work, ...],
    batched: bool,
    refused: tuple[RefusedReport, ...],
    stop: tuple[StopAttempt, ...],
) -> WorkAnswer:
    """``WorkAnswer(...)`` of every field, in order, built directly (one per ``get_work``)."""
    set_work, set_more, set_batched, set_refused, set_stop = _WORK_ANSWER_SLOTS
    answer: WorkAnswer = _new(WorkAnswer)
    set_work(answer, work)
    set_more(answer, more)
    set_batched(answer, batched)
    set_refused(answer, refused)
    set_stop(answer, stop)
    return answer


@dataclass(frozen=True, slots=True)
class Route:
    """A worker-facing ``POST /api/v1/<name>`` route: its request and its answer.

    ``name`` is also the name of the method that serves it wherever calls are methods (the
    in-process scheduler's :meth:`~conveyor.scheduler.policy.SchedulerCore.call` and
    :class:`conveyor.transports.base.MethodTransport` dispatch by it); ``query`` marks a route
    that only asks (the server answers it from what is stored while its state store refuses
    writes).
    """

    name: str
    request: type[Any]
    answer: type[Any]
    query: bool = False

    def arguments(self, request: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``request``'s fields as the arguments of the route's method: the required fields
        positionally, in the order the request declares them, then every defaulted field whose
        value is not its default, by keyword. A method written before a defaulted field existed
        is therefore called as it was, as long as the field is left at its default: the rule of
        :func:`encode_request`, for calls that are methods."""
        required, defaulted = _call_plan(self.request)
        args = tuple(getattr(request, name) for name in required)
        kwargs = {}
        for name, default in defaulted:
            value = getattr(request, name)
            if not _is_default(value, default):
                kwargs[name] = value
        return args, kwargs

    def answer_of(self, result: Any) -> Any:
        """The route's answer from what its method returned: ``Ok()`` for a route answered
        :class:`Ok` (the method returns nothing), the result itself if it is the answer type
        already (:class:`WorkLeft`), else the answer type holding it (``WorkAnswer(work)``)."""
        answer = self.answer
        if answer is Ok:
            return _OK
        if isinstance(result, answer):
            return result
        if answer is PingAnswer:  # (a subclass's ping of the time when it was answered Ok,
            # which returns None or Ok(): nothing to stop)
            return _PING_OK
        return answer(result)


ROUTES: dict[str, Route] = {
    route.name: route
    for route in (
        Route("add_tasks", AddTasks, Ok),
        Route("get_work", GetWork, WorkAnswer),
        Route("work_left", WorkLeftRequest, WorkLeft, query=True),
        Route("task_done", TaskDone, Ok),
        Route("task_failed", TaskFailed, TaskFailedAnswer),
        Route("annotate", Annotate, Ok),
        Route("ping", Ping, PingAnswer),
        Route("statuses", Statuses, StatusesAnswer, query=True),
        Route("explanation", Explanation, ExplanationAnswer, query=True),
        Route("release", Release, Ok),
        Route("submit", Submit, SubmitAnswer),
        Route("cancel", Cancel, CancelAnswer),
    )
}
"""Every request a worker sends a scheduler, by route name: the one registry the in-process
scheduler's dispatcher, the server's routes, ``/openapi.json`` and the ``http`` transport are
built from."""

_OK = Ok()
_PING_OK = PingAnswer()
_ROUTE_OF: dict[type[Any], Route] = {route.request: route for route in ROUTES.values()}

DROPPABLE: Mapping[type[Any], frozenset[str]] = {
    route.request: frozenset(
        f.name for f in dataclasses.fields(route.request) if f.metadata.get("droppable")
    )
    for route in ROUTES.values()
}
"""The fields of each request that a server predating them may refuse (HTTP 422 naming the
field) without harm: the request is then sent again with the field at its default. Every other
field refused is an error (a task's ``loader`` above all: a server that cannot keep it must
not take the task)."""


def route_of(request: Any) -> Route:
    """The route of a request value (``route_of(Ping("w")).name == "ping"``); TypeError
    naming what was given if it is not one of :data:`ROUTES`' requests."""
    route = _ROUTE_OF.get(type(request))
    if route is None:
        names = ", ".join(r.request.__name__ for r in ROUTES.values())
        raise TypeError(
            f"expected a request of conveyor.protocol.ROUTES ({names}), "
            f"got {type(request).__name__}"
        )
    return route


def encode_request(request: Any) -> dict[str, Any]:
    """A request as JSON data without the fields (at any depth) that equal their default.

    The wire's compatibility rule: a field added to a request later has a default, and a
    request that leaves it at its default encodes exactly as before the field existed, so an
    older server (whose :func:`decode` refuses unknown fields) takes it; a newer server fills
    in the default of a field an older worker does not send. Answers are encoded whole by
    :func:`encode`, and decoded by clients ignoring fields they do not know.
    """
    encoded: dict[str, Any] = _lean_encoder_of(type(request))(request)
    return encoded


_REQUIRED = object()  # (the "default" of a field without one: equal to no value)


def _is_default(value: Any, default: Any) -> bool:
    """Whether ``value`` is the field default ``default``: of the same type (``True`` is not a
    default ``1``), except that a default member of an enum is also the plain value equal to
    it (``"failed"`` for ``AttemptEnd.FAILED``: what the field is set from)."""
    return (
        default is not _REQUIRED
        and value == default
        and (type(value) is type(default) or isinstance(default, enum.Enum))
    )


def _defaults(cls: type[Any]) -> list[tuple[str, Any]]:
    """Each field of dataclass ``cls`` with its default (``_REQUIRED`` if it has none)."""
    out = []
    for f in _fields(cls):
        if f.default is not dataclasses.MISSING:
            out.append((f.name, f.default))
        elif f.default_factory is not dataclasses.MISSING:
            out.append((f.name, f.default_factory()))
        else:
            out.append((f.name, _REQUIRED))
    return out


_CALL_PLANS: dict[type[Any], tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]] = {}


def _call_plan(cls: type[Any]) -> tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]:
    """The required field names of request ``cls``, and its defaulted fields with their
    defaults; worked out once per class."""
    found = _CALL_PLANS.get(cls)
    if found is None:
        fields = _defaults(cls)
        required = tuple(name for name, default in fields if default is _REQUIRED)
        defaulted = tuple((name, d) for name, d in fields if d is not _REQUIRED)
        found = _CALL_PLANS[cls] = (required, defaulted)
    return found


_LEAN: dict[type[Any], _Convert] = {}


def _lean_encoder_of(cls: type[Any]) -> _Convert:
    """A function encoding instances of dataclass ``cls`` without their default-valued
    fields (nested dataclasses likewise), built once from its annotations."""
    found = _LEAN.get(cls)
    if found is not None:
        return found
    hints = _hints(cls)
    steps = [(name, default, _lean_converter(hints[name])) for name, default in _defaults(cls)]

    def encode_one(value: Any) -> dict[str, Any]:
        out = {}
        for name, default, convert in steps:  # (the test of _is_default, inlined: hot path)
            item = getattr(value, name)
            if (
                default is not _REQUIRED
                and item == default
                and (type(item) is type(default) or isinstance(default, enum.Enum))
            ):
                continue
            out[name] = item if convert is None else convert(item)
        return out

    _LEAN[cls] = encode_one
    return encode_one


def _lean_converter(hint: Any) -> _Convert | None:
    """How :func:`encode_request` encodes a field of type ``hint``: as :func:`encode` does,
    except that dataclasses in it leave their default-valued fields out."""
    if dataclasses.is_dataclass(hint):
        return _lean_encoder_of(hint)  # type: ignore[arg-type]
    if typing.get_origin(hint) is tuple and dataclasses.is_dataclass(typing.get_args(hint)[0]):
        each = _lean_encoder_of(typing.get_args(hint)[0])
        return lambda v: [each(i) for i in v]
    if any(dataclasses.is_dataclass(a) for a in typing.get_args(hint)):
        return _lean_any
    return _converter(hint)


def _lean_any(value: Any) -> Any:
    """:func:`encode` with the dataclasses in ``value`` encoded by :func:`encode_request`."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _lean_encoder_of(type(value))(value)
    return encode(value)


# --- the codec ----------------------------------------------------------------------------------


def encode(value: Any) -> Any:
    """A protocol value as plain JSON data (dicts, lists, strings, numbers, None)."""
    encoder = _ENCODERS.get(type(value))
    if encoder is not None:
        return encoder(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _encoder_of(type(value))(value)
    if isinstance(value, enum.StrEnum):
        return str(value)
    if isinstance(value, tuple | list):
        return [encode(item) for item in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    return value


_Convert = typing.Callable[[Any], Any]
_ENCODERS: dict[type[Any], _Convert] = {}


def _encoder_of(cls: type[Any]) -> _Convert:
    """A function encoding instances of dataclass ``cls``, built once from its annotations."""
    found = _ENCODERS.get(cls)
    if found is not None:
        return found
    hints = _hints(cls)
    converters = [(f.name, _converter(hints[f.name])) for f in _fields(cls)]

    def encode_one(value: Any) -> dict[str, Any]:
        out = {}
        for name, convert in converters:
            item = getattr(value, name)
            out[name] = item if convert is None else convert(item)
        return out

    _ENCODERS[cls] = encode_one
    return encode_one


def _converter(hint: Any) -> _Convert | None:
    """How to encode a value of type ``hint`` (None: it is JSON already)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [_converter(o) for o in typing.get_args(hint) if o is not type(None)]
        if all(option is None for option in options):
            return None
        return encode  # mixed unions are rare: the generic path
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return str
    if dataclasses.is_dataclass(hint):
        return _encoder_of(hint)  # type: ignore[arg-type]
    if origin is tuple:
        each = _converter(typing.get_args(hint)[0])
        if each is None:
            return list
        return lambda v: [each(i) for i in v]
    if origin is Mapping:
        value = _converter(typing.get_args(hint)[1])
        if value is None:
            return dict
        return lambda v: {str(k): value(i) for k, i in v.items()}
    return None


def decode(cls: type[T], data: Any, where: str = "", *, strict: bool = True) -> T:
    """``data`` (parsed JSON) as a ``cls``; FieldError naming the field if it does not fit.

    Fields with a default may be left out. Unknown fields are refused when ``strict`` (a
    request the server receives) and ignored otherwise (an answer from a newer server).
    """
    if type(data) is dict:  # the common case first: every field as expected (else below)
        fast = _FAST.get((cls, strict), _UNMADE)
        if fast is _UNMADE:
            fast = _FAST[cls, strict] = _fast_decoder(cls, strict)
        if fast is not None:
            found = fast(data)
            if found is not _NO:
                return found  # type: ignore[no-any-return]
    elif not isinstance(data, dict):
        raise FieldError(where or "body", "expected a JSON object")
    plan = _plan(cls)
    values: dict[str, Any] = {}
    for name, hint, meta, variants, required in plan:
        path = f"{where}.{name}" if where else name
        if name not in data:
            if required:
                raise FieldError(path, "missing required field")
            continue
        if variants is None:
            values[name] = _value(hint, data[name], path, meta, strict)
        else:  # (the field it depends on comes first, and is decoded already)
            chosen = values.get(variants.on, _default_of(cls, variants.on))
            values[name] = _variant(variants, chosen, data[name], path, strict)
    names = [step[0] for step in plan]
    unknown = sorted(set(data) - set(names)) if strict and len(data) > len(values) else ()
    if unknown:
        path = f"{where}.{unknown[0]}" if where else unknown[0]
        raise FieldError(path, "unknown field; expected one of " + ", ".join(names))
    try:
        return cls(**values)
    except FieldError as exc:  # a cross-field check in __post_init__
        path = f"{where}.{exc.field}" if where else exc.field
        raise FieldError(path, str(exc).split(": ", 1)[-1]) from None


_NO: Any = object()  # (a fast decoder's "not the common case: ask decode")
_UNMADE: Any = object()
_Fast = typing.Callable[[Any], Any]
_FAST: dict[tuple[type[Any], bool], _Fast | None] = {}


def _fast_decoder(
    cls: type[Any], strict: bool, building: frozenset[type[Any]] = frozenset()
) -> _Fast | None:
    """A decoder of ``cls`` for the common case, made once per class: a dict whose every field
    is of the expected JSON type and within its rules decodes to the same value
    :func:`decode` makes, and anything else (a missing, unknown or odd field, a value
    :func:`decode` would convert, check further or refuse, a cross-field check that fails) is
    :data:`_NO`, for :func:`decode` to read again and explain. None for a class with a field
    it does not cover (variants, unions of several types, a class within itself)."""
    if cls in building:  # (a class that holds itself: decode's general path reads it)
        return None
    building |= {cls}
    steps = []
    for name, hint, meta, variants, required in _plan(cls):
        convert = None if variants is not None else _fast_value(hint, meta, strict, building)
        if convert is None:
            return None
        steps.append((name, convert, required))
    names = frozenset(name for name, _, _ in steps)
    missing = _UNMADE
    direct = _direct_fields(cls)
    if direct is not None:
        return _fast_direct(cls, strict, names, steps, direct)

    def fast(data: dict[str, Any]) -> Any:
        if strict and not names.issuperset(data):
            return _NO
        values = {}
        for name, convert, required in steps:
            value = data.get(name, missing)
            if value is missing:
                if required:
                    return _NO
                continue
            value = convert(value)
            if value is _NO:
                return _NO
            values[name] = value
        try:
            return cls(**values)
        except FieldError:  # (decode says which field, with its path)
            return _NO

    return fast


_Direct = tuple[typing.Callable[[Any, Any], None], Any, typing.Callable[[], Any] | None]


def _direct_fields(cls: type[Any]) -> tuple[_Direct, ...] | None:
    """For a dataclass of this module whose ``__init__`` only stores its arguments in slots
    (the one dataclasses made, every field taken by it and kept in a slot, no
    ``__post_init__``): each field's slot setter and its default, or its default factory (in
    :func:`_fields`' order), so that a fast decoder stores the values itself instead of
    calling ``__init__`` with keywords, which costs a frozen dataclass of 15 fields some 4 µs.
    None for any other class (another module's may have an ``__init__`` of its own)."""
    init = getattr(cls.__init__, "__code__", None)  # (dataclasses' own is not in this file)
    if cls.__module__ != __name__ or hasattr(cls, "__post_init__") or init is None:
        return None
    if not cls.__dataclass_params__.init or init.co_filename == __file__:
        return None
    fields = _fields(cls)
    slot = types.MemberDescriptorType
    if any(not f.init or type(getattr(cls, f.name, None)) is not slot for f in fields):
        return None
    return tuple(
        (
            getattr(cls, f.name).__set__,
            f.default,
            None if f.default_factory is dataclasses.MISSING else f.default_factory,
        )
        for f in fields
    )


def _fast_direct(
    cls: type[Any],
    strict: bool,
    names: frozenset[str],
    steps: Sequence[tuple[str, _Fast, bool]],
    direct: tuple[_Direct, ...],
) -> _Fast:
    """:func:`_fast_decoder`'s decoder for a class :func:`_direct_fields` covers: the same
    values, stored in a new instance's slots as its ``__init__`` would store them."""
    plan = tuple((*step, *how) for step, how in zip(steps, direct, strict=True))
    new = object.__new__
    missing = _UNMADE

    def fast(data: dict[str, Any]) -> Any:
        if strict and not names.issuperset(data):
            return _NO
        made = new(cls)
        for name, convert, required, store, default, factory in plan:
            value = data.get(name, missing)
            if value is missing:
                if required:
                    return _NO
                store(made, default if factory is None else factory())
                continue
            value = convert(value)
            if value is _NO:
                return _NO
            store(made, value)
        return made

    return fast


def _fast_value(
    hint: Any, meta: Mapping[str, Any], strict: bool, building: frozenset[type[Any]]
) -> _Fast | None:
    """What :func:`_fast_decoder` does with a value of annotation ``hint``: the value, or
    :data:`_NO` when it is not the common case (None: not covered); ``building``: the classes
    whose decoders are being made."""
    kind = _kind_of(hint)
    if kind == _ANY:
        return lambda v: v
    if kind == _UNION:
        options = [o for o in typing.get_args(hint) if o is not type(None)]
        inner = _fast_value(options[0], meta, strict, building) if len(options) == 1 else None
        if inner is None:
            return None
        return lambda v: None if v is None else inner(v)
    if kind == _ENUM:
        allowed = frozenset(meta.get("choices") or _members(hint))
        return lambda v: hint(v) if type(v) is str and v in allowed else _NO
    if kind == _DATACLASS:
        nested = _fast_decoder(hint, strict, building)
        if nested is None:
            return None
        return lambda v: nested(v) if type(v) is dict else _NO
    if kind == _TUPLE:
        item = _fast_value(typing.get_args(hint)[0], meta, strict, building)
        if item is None:
            return None

        def items(v: Any) -> Any:
            if type(v) is not list:
                return _NO
            made = []
            for i in v:
                i = item(i)
                if i is _NO:
                    return _NO
                made.append(i)
            return tuple(made)

        return items
    if kind == _MAPPING:
        value = _fast_value(typing.get_args(hint)[1], meta, strict, building)
        keys: TextRule | None = meta.get("keys")
        if value is None:
            return None

        def mapping(v: Any) -> Any:
            if type(v) is not dict:
                return _NO
            made = {}
            for k, i in v.items():
                if type(k) is not str or (keys is not None and keys.problem(k)):
                    return _NO
                i = value(i)
                if i is _NO:
                    return _NO
                made[k] = i
            return made

        return mapping
    return _fast_scalar(hint, meta)


def _fast_scalar(hint: Any, meta: Mapping[str, Any]) -> _Fast | None:
    """:func:`_fast_value` for a scalar: exactly the values :func:`_scalar` accepts as they
    are, without converting or explaining."""
    if hint is str:
        rule: TextRule | None = meta.get("text")
        if rule is None:
            return lambda v: v if type(v) is str else _NO
        shortest, longest = max(rule.min_length, 0), rule.max_length
        return lambda v: (
            v if type(v) is str and shortest <= len(v) <= longest and v.isprintable() else _NO
        )
    low, high = meta.get("minimum"), meta.get("maximum")
    if hint is bool:
        return lambda v: v if type(v) is bool else _NO
    if hint is int:
        if low is None and high is None:
            return lambda v: v if type(v) is int else _NO
        return lambda v: v if type(v) is int and _within(v, low, high) else _NO
    if hint is float:
        return lambda v: (
            v
            if (type(v) is int or (type(v) is float and math.isfinite(v))) and _within(v, low, high)
            else _NO
        )
    return None


def _within(value: float, low: float | None, high: float | None) -> bool:
    return (low is None or value >= low) and (high is None or value <= high)


_Step = tuple[str, Any, Mapping[str, Any], "_Variants | None", bool]
_PLANS: dict[type[Any], tuple[_Step, ...]] = {}


def _plan(cls: type[Any]) -> tuple[_Step, ...]:
    """How :func:`decode` reads each field of dataclass ``cls``: its name, annotation,
    metadata, variants (or None) and whether it is required; worked out once per class."""
    found = _PLANS.get(cls)
    if found is None:
        hints = _hints(cls)
        missing = dataclasses.MISSING
        found = _PLANS[cls] = tuple(
            (
                f.name,
                hints[f.name],
                f.metadata,
                f.metadata.get("variants"),
                f.default is missing and f.default_factory is missing,
            )
            for f in _fields(cls)
        )
    return found


def _default_of(cls: type[Any], name: str) -> Any:
    for f in _fields(cls):
        if f.name == name:
            return None if f.default is dataclasses.MISSING else f.default
    return None


def _variant(variants: _Variants, chosen: Any, data: Any, path: str, strict: bool) -> Any:
    """``data`` decoded as the case ``chosen`` of ``variants`` says."""
    case = variants.cases.get(chosen)
    if case is None:
        raise FieldError(path, f"no value is allowed for {variants.on} {chosen!r}")
    hint, meta = case
    try:
        return _value(hint, data, path, meta, strict)
    except FieldError as exc:
        message = str(exc).split(": ", 1)[-1]
        raise FieldError(exc.field, f"{message} (for {variants.on} {chosen})") from None


def _check_variants(value: Any) -> None:
    """FieldError if a field of the dataclass ``value`` with variants does not fit the case
    its deciding field chooses (what :func:`decode` checks, for values made in Python)."""
    for f in _fields(type(value)):
        variants = f.metadata.get("variants")
        if variants is not None:
            _variant(variants, getattr(value, variants.on), getattr(value, f.name), f.name, True)


_UNION, _ANY, _ENUM, _DATACLASS, _TUPLE, _MAPPING, _SCALAR = range(7)
_KINDS: dict[Any, int] = {}


def _kind_of(hint: Any) -> int:
    """What sort of annotation ``hint`` is, for :func:`_value` (worked out once per hint: the
    typing introspection costs more than the decoding itself)."""
    kind = _KINDS.get(hint)
    if kind is None:
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType):
            kind = _UNION
        elif hint is Any:
            kind = _ANY
        elif isinstance(hint, type) and issubclass(hint, enum.StrEnum):
            kind = _ENUM
        elif dataclasses.is_dataclass(hint):
            kind = _DATACLASS
        elif origin is tuple:
            kind = _TUPLE
        elif origin is Mapping:
            kind = _MAPPING
        else:
            kind = _SCALAR
        _KINDS[hint] = kind
    return kind


def _value(hint: Any, data: Any, path: str, meta: Mapping[str, Any], strict: bool) -> Any:
    kind = _kind_of(hint)
    if kind == _SCALAR:
        return _scalar(hint, data, path, meta)
    if kind == _UNION:
        return _union(typing.get_args(hint), data, path, meta, strict)
    if kind == _ANY:
        return data
    if kind == _ENUM:
        allowed = meta.get("choices") or _members(hint)
        if not isinstance(data, str) or data not in allowed:
            raise FieldError(path, "expected one of " + ", ".join(map(str, allowed)))
        return hint(data)
    if kind == _DATACLASS:
        return decode(hint, data, path, strict=strict)
    if kind == _TUPLE:
        item = typing.get_args(hint)[0]
        if not isinstance(data, list):
            raise FieldError(path, f"expected a list of {_describe(item)}")
        return tuple(_value(item, v, f"{path}[{i}]", meta, strict) for i, v in enumerate(data))
    if kind == _MAPPING:
        item = typing.get_args(hint)[1]
        if not isinstance(data, dict):
            raise FieldError(path, f"expected an object of {_describe(item, meta)}")
        keys: TextRule | None = meta.get("keys")
        if keys is not None:
            for key in data:
                problem = keys.problem(key)
                if problem:
                    raise FieldError(path, f"key {_shown(key)}: {problem}")
        return {str(k): _value(item, v, f"{path}.{k}", meta, strict) for k, v in data.items()}
    return _scalar(hint, data, path, meta)


def _union(
    options: tuple[Any, ...], data: Any, path: str, meta: Mapping[str, Any], strict: bool
) -> Any:
    if data is None and type(None) in options:
        return None
    choices = [option for option in options if option is not type(None)]
    for option in choices:
        try:
            return _value(option, data, path, meta, strict)
        except FieldError as exc:
            if len(choices) == 1 and exc.field.startswith(f"{path}["):
                raise  # an item of a list: say which (``running[3]``) and why
            continue
    raise FieldError(path, "expected " + " or ".join(_describe(o) for o in options))


_SCALARS: dict[Any, typing.Callable[[Any], bool]] = {
    str: lambda v: isinstance(v, str),
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    # (not math.isfinite(v) for an int: 10**400 would overflow the float it makes)
    float: lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and math.isfinite(v))
    ),
}


def _scalar(hint: Any, data: Any, path: str, meta: Mapping[str, Any]) -> Any:
    if hint is str and isinstance(data, str):  # the most common case, first
        rule: TextRule | None = meta.get("text")
        if rule is not None and not (
            rule.min_length <= len(data) <= rule.max_length and data.isprintable()
        ):
            problem = rule.problem(data)  # (printable text of a good length is fine)
            if problem:
                raise FieldError(path, problem)
        return data
    if hint is int and type(data) is float and data.is_integer():
        data = int(data)  # JSON Schema's integer is any number without a fraction: 50194.0
    if not _SCALARS[hint](data):
        raise FieldError(path, f"expected {_describe(hint, meta)}, got {type(data).__name__}")
    if ("minimum" in meta and data < meta["minimum"]) or (
        "maximum" in meta and data > meta["maximum"]
    ):
        raise FieldError(path, f"expected {_describe(hint, meta)}, got {_shown(data)}")
    return data


def _shown(value: Any) -> str:
    """``repr(value)``, cut short: a message quotes what it refuses, not all of it."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(hint: Any, meta: Mapping[str, Any] | None = None) -> str:
    if hint is type(None):
        return "null"
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return "one of " + ", ".join(hint)
    if dataclasses.is_dataclass(hint):
        return "an object"
    base = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}
    text = base.get(hint, "a value")
    if meta and "minimum" in meta and "maximum" in meta:
        text = f"{text} from {meta['minimum']} to {meta['maximum']}"
    elif meta and "minimum" in meta:
        text = f"{text} >= {meta['minimum']}"
    elif meta and "maximum" in meta:
        text = f"{text} <= {meta['maximum']}"
    return text


def json_schema(
    hint: Any,
    meta: Mapping[str, Any] | None = None,
    *,
    components: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON Schema of a protocol type (a dataclass, or a field's annotation).

    A dataclass with a field whose type depends on another field (:func:`_variants`) is a
    ``oneOf``, one object schema per value of the deciding field. Given ``components`` (an
    OpenAPI document's ``components/schemas``), those schemas are put there and the ``oneOf``
    refers to them, with a ``discriminator`` mapping each value to its schema; without, they
    are written inline (plain JSON Schema).
    """
    meta = meta or {}
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        return {"anyOf": [json_schema(o, meta, components=components) for o in options]}
    if hint is type(None):
        return {"type": "null"}
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return {"type": "string", "enum": [str(v) for v in meta.get("choices") or hint]}
    if dataclasses.is_dataclass(hint):
        return _object_schema(hint, components)  # type: ignore[arg-type]
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return {"type": "array", "items": json_schema(item, meta, components=components)}
    if origin is Mapping:
        item = typing.get_args(hint)[1]
        schema = {
            "type": "object",
            "additionalProperties": json_schema(item, meta, components=components),
        }
        keys: TextRule | None = meta.get("keys")
        if keys is not None:
            schema["propertyNames"] = {"type": "string", **keys.schema()}
        return schema
    kinds = {str: "string", bool: "boolean", int: "integer", float: "number"}
    schema = {"type": kinds.get(hint, "string")}
    for keyword in ("minimum", "maximum"):
        if keyword in meta:
            schema[keyword] = meta[keyword]
    rule: TextRule | None = meta.get("text")
    if rule is not None and hint is str:
        schema.update(rule.schema())
    return schema


def _object_schema(cls: type[Any], components: dict[str, Any] | None) -> dict[str, Any]:
    fields = _fields(cls)
    hints = _hints(cls)
    properties = {
        f.name: json_schema(hints[f.name], f.metadata, components=components) for f in fields
    }
    schema = {
        "type": "object",
        "properties": properties,
        "required": [
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ],
        "additionalProperties": False,
    }
    variants = [(f.name, f.metadata["variants"]) for f in fields if "variants" in f.metadata]
    if not variants:
        return schema
    [(name, chooser)] = variants  # (one such field per dataclass is all the protocol needs)
    cases: dict[str, dict[str, Any]] = {}
    for chosen, (hint, meta) in chooser.cases.items():
        branch = {
            **properties,
            chooser.on: {"type": "string", "enum": [str(chosen)]},
            name: json_schema(hint, meta, components=components),
        }
        cases[str(chosen)] = {**schema, "properties": branch}
    if components is None:
        return {"oneOf": list(cases.values())}
    mapping = {}
    for chosen, branch in cases.items():
        component = cls.__name__ + "".join(word.capitalize() for word in chosen.split("_"))
        components[component] = branch
        mapping[chosen] = f"#/components/schemas/{component}"
    return {
        "oneOf": [{"$ref": ref} for ref in mapping.values()],
        "discriminator": {"propertyName": chooser.on, "mapping": mapping},
    }


_MEMBERS: dict[type[Any], tuple[Any, ...]] = {}


def _members(enum_cls: type[enum.StrEnum]) -> tuple[Any, ...]:
    found = _MEMBERS.get(enum_cls)
    if found is None:
        found = _MEMBERS[enum_cls] = tuple(enum_cls)
    return found


_FIELDS: dict[type[Any], tuple[dataclasses.Field[Any], ...]] = {}
_HINTS: dict[type[Any], dict[str, Any]] = {}


def _fields(cls: type[Any]) -> tuple[dataclasses.Field[Any], ...]:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = dataclasses.fields(cls)
    return found


def _hints(cls: type[Any]) -> dict[str, Any]:
    found = _HINTS.get(cls)
    if found is None:
        found = _HINTS[cls] = typing.get_type_hints(cls)
    return found


# --- the read model of state stores ---------------------------------------------------------------
# What ``conveyor.server.stores.TaskReads`` answers: the web UI's JSON is these values, field for
# field (:func:`encode`). Statuses are ``TaskStatus`` values; parameters are shown with
# secret-named ones hidden; texts with their secrets hidden.

__all__ += [
    "Changes",
    "GraphNode",
    "StoredWorker",
    "TaskDetail",
    "TaskEntry",
    "TaskFilters",
    "TaskGraph",
    "TaskPage",
    "TaskRef",
    "TaskSummary",
]


@dataclass(frozen=True, slots=True)
class TaskFilters:
    """The task list's filters; empty means any. ``text`` matches case-insensitively within
    the task id or one public parameter as ``name=value`` (secret-named ones are not
    searched); ``worker`` is the worker running the task, else the last to run it."""

    state: str = ""
    family: str = ""
    worker: str = ""
    text: str = ""


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """The count of registered tasks in each of the six states, their total, and the number
    of the latest change saved."""

    counts: Mapping[str, int]
    total: int
    seq: int


@dataclass(frozen=True, slots=True)
class TaskEntry:
    """One line of the task list."""

    task_id: str
    family: str
    params: Mapping[str, str]
    status: TaskStatus
    worker: str | None
    """Running it, else the last to run it (None: nobody yet)."""
    priority: int
    status_message: str
    reason: str
    """Why a FAILED, DISABLED or UNKNOWN task is so, in one line ("" otherwise)."""
    progress: float | None
    changed: float
    """When the task's row was last saved (seconds since the epoch)."""
    seq: int
    """The task's change number: the list is ordered by it, newest first."""


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of the task list, newest change first, and the cursor of the next page
    (None on the last): pass it back as ``cursor`` to get the tasks changed before."""

    tasks: tuple[TaskEntry, ...]
    next: int | None


@dataclass(frozen=True, slots=True)
class TaskRef:
    """A task named in another's detail: id, family and status (UNKNOWN and "" for a task
    the store does not have)."""

    task_id: str
    family: str
    status: TaskStatus


@dataclass(frozen=True, slots=True)
class TaskDetail:
    """Everything the task detail shows."""

    task_id: str
    family: str
    module: str
    params: Mapping[str, str]
    status: TaskStatus
    worker: str | None
    priority: int
    resources: Mapping[str, Any]
    deps: tuple[TaskRef, ...]
    dependents: tuple[TaskRef, ...]
    """At most ``DEPENDENTS_SHOWN`` of them; ``dependents_total`` counts them all."""
    dependents_total: int
    status_message: str
    progress: float | None
    tracking_url: str
    explanation: str
    failures: int
    retry_count: int
    attempts: tuple[Mapping[str, Any], ...]
    attempts_kept: int
    blocked_by: tuple[TaskRef, ...]
    """What keeps it from running: upstream tasks FAILED, DISABLED or UNKNOWN, or PENDING
    with nobody able to run them, reached through tasks that are not DONE."""
    changed: float
    next_retry: float | None = None
    """When (epoch seconds) a ``FAILED`` task is retried, or a ``DISABLED`` one enabled again
    (``disable_persist`` after it was disabled); None for any other status."""
    labels: tuple[str, ...] = ()
    """What a worker must offer to be handed it (:attr:`TaskSpec.labels`)."""
    waiting: str = ""
    """Why a ready ``PENDING`` task is not handed out: no live worker has its labels ("" when
    one has, or for any other status)."""
    batch: tuple[str, ...] = ()
    """The ids of the members of the batch its latest attempt ran in, itself among them
    (() when that attempt was not a batch; see :attr:`Work.batch`)."""
    submitted_by: str = ""
    """Who submitted it (:class:`Submit`), as the server recorded them; "" if nobody did."""


@dataclass(frozen=True, slots=True)
class GraphNode:
    """A task of a graph answer: ``layer`` 0 is the task asked about, 1, 2, … its
    dependencies outward, -1, -2, … its dependents."""

    id: str
    family: str
    status: TaskStatus
    layer: int


@dataclass(frozen=True, slots=True)
class TaskGraph:
    """The graph around one task (``nodes[root]``), nearest first, at most ``cap`` nodes
    (``truncated`` when there were more); ``edges`` are (task, dependency) node indices;
    ``blocking`` the nodes keeping the root from running and ``path`` every node on a path
    from the root to one of them."""

    root: int
    nodes: tuple[GraphNode, ...]
    edges: tuple[tuple[int, int], ...]
    truncated: bool
    cap: int
    blocking: tuple[int, ...]
    path: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Changes:
    """The number of the latest change saved (it grows with every save, removals included,
    and never goes back), and the ids of the tasks saved after the change asked about,
    oldest first, as many as asked for (``more``: there are others)."""

    seq: int
    task_ids: tuple[str, ...] = ()
    more: bool = False


@dataclass(frozen=True, slots=True)
class StoredWorker:
    """A worker as the state store holds it."""

    worker_id: str
    assistant: bool


# --- attempts as data ---------------------------------------------------------------------------
# What crosses from a worker to the process that runs one attempt (an :class:`AttemptSpec`), and
# what comes back (:data:`AttemptMessage` values), in the codec above. On a pipe or a remote
# runner's stdout each message is one JSON line: the message's fields and ``"message"``, its
# kind (:func:`encode_attempt_message`). ``python -m conveyor.attempt`` speaks exactly this.

__all__ += [
    "ATTEMPT_MESSAGES",
    "AttemptMessage",
    "AttemptMessageKind",
    "AttemptSpec",
    "AttemptStage",
    "DependencyRef",
    "Died",
    "Failed",
    "FailureCause",
    "NeedsDependencies",
    "Note",
    "Stage",
    "Succeeded",
    "TimedOut",
    "attempt_message_kind",
    "decode_attempt_message",
    "encode_attempt_message",
]


@dataclass(frozen=True, slots=True)
class DependencyRef:
    """A dependency named by what rebuilds it in another process: module, family, params."""

    module: str = field(metadata=_NAMED)
    family: str = field(metadata=_NAMED)
    params: Mapping[str, str] = field(default_factory=dict, metadata=_PARAMS)


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    """One attempt of one task, as it travels to the process (or machine) that runs it.

    The task is named by ``module``, ``family`` and string ``params`` (never a pickle) and
    rebuilt there; its rebuilt id must be ``task_id``. ``timeout`` (seconds, 0: none) and
    ``kill_grace`` are enforced by the supervisor of ``python -m conveyor.attempt``.
    ``check_complete``: skip ``run()`` for a task already complete. ``deps``: the requirements
    the worker already knows (so ``requires()`` is not called again; None: call it).
    ``task_defaults`` / ``task_default_sources`` / ``task_id_style``: the worker's ``[tasks.*]``
    tables and ``[worker] task_id_style`` in force, for the tasks made there. ``loader``: the
    :class:`~conveyor.TaskLoader` (entry point of ``conveyor.task_loaders``) that rebuilds the
    task and its ``deps`` there, the task class's ``task_loader``. ``env`` and ``plugins``:
    what the worker's plugins add to the attempt where it runs (see the fields).
    """

    module: str = field(metadata=_NAMED)
    family: str = field(metadata=_NAMED)
    task_id: str = field(metadata=_ID)
    params: Mapping[str, str] = field(default_factory=dict, metadata=_PARAMS)
    attempt: int = field(default=0, metadata=_NON_NEGATIVE)
    timeout: float = field(default=0.0, metadata=_NON_NEGATIVE)
    check_complete: bool = True
    deps: tuple[DependencyRef, ...] | None = None
    task_defaults: Mapping[str, Any] = field(default_factory=dict)
    task_default_sources: Mapping[str, str] = field(default_factory=dict)
    task_id_style: str = "conveyor"
    kill_grace: float = field(default=5.0, metadata=_NON_NEGATIVE)
    log_level: str = "info"
    log_format: str = "json"
    loader: str = field(default="conveyor", metadata={"text": IDENTIFIER})
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables added to the environment of the attempt's process before its task is rebuilt
    (what the worker's ``conveyor_attempt_environment`` plugins answered: ``TRACEPARENT``…)."""
    plugins: tuple[str, ...] = ()
    """The ``conveyor.plugins`` entry points (names) whose ``conveyor_attempt_begin`` /
    ``conveyor_attempt_end`` run in the attempt's process; only installed ones are loaded."""
    memory_limit: int = field(default=0, metadata=_NON_NEGATIVE)
    """The most memory, in bytes, the attempt's process tree may hold (0: no limit): a runner
    of specs (``python -m conveyor.attempt``, which the Dask plugin starts) watches it as the
    ``subprocess`` executor does."""


class AttemptStage(enum.StrEnum):
    """How far an attempt's process has got, as it tells its supervisor."""

    LOADED = "loaded"
    """The task is rebuilt (its module imported); its dependencies are checked next."""
    RUNNING = "running"
    """``run()`` is about to be called."""


class FailureCause(enum.StrEnum):
    """Why a :class:`Failed` attempt failed (a field to test, never an exception's name)."""

    ERROR = "error"
    """The task raised, its dependencies were incomplete, or its outputs were missing."""
    TASK_LOAD = "task_load"
    """The task could not be rebuilt where the attempt runs (module, class or id)."""
    INTERRUPTED = "interrupted"
    """The attempt was stopped by an interruption of its worker or runner."""


class AttemptMessageKind(enum.StrEnum):
    """The ``"message"`` discriminator of one attempt message on the wire."""

    STAGE = "stage"
    NOTE = "note"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    DIED = "died"
    NEEDS_DEPENDENCIES = "needs_dependencies"


@dataclass(frozen=True, slots=True)
class Stage:
    """The attempt's process reached ``stage`` (its supervisor uses it to explain a timeout)."""

    stage: AttemptStage


@dataclass(frozen=True, slots=True)
class Note:
    """Something ``run()`` published: a status message, a progress (0 to 100) or a URL."""

    kind: NoteKind
    value: str | float = field(
        metadata=_variants(
            "kind",
            {
                NoteKind.STATUS_MESSAGE: (str, {}),
                NoteKind.PROGRESS: (float, {"minimum": 0, "maximum": 100}),
                NoteKind.TRACKING_URL: (str, {}),
            },
        )
    )

    def __post_init__(self) -> None:
        """The value fits its kind (as for :class:`Annotate`)."""
        _check_variants(self)


@dataclass(frozen=True, slots=True)
class Succeeded:
    """``run()`` returned and the outputs exist; ``found_complete``: ``run()`` was not called,
    the task being complete already."""

    duration: float = field(default=0.0, metadata=_NON_NEGATIVE)
    found_complete: bool = False
    explanation: str = ""
    """What ``on_success()`` returned, as text ("" for nothing)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The attempt failed: ``error`` explains, ``exception_type`` names the exception's class
    (for people: code tests ``cause``), ``missing`` the ids of incomplete dependencies."""

    duration: float = field(default=0.0, metadata=_NON_NEGATIVE)
    error: str = ""
    exception_type: str = ""
    cause: FailureCause = FailureCause.ERROR
    missing: tuple[str, ...] = ()
    not_retried: str = ""
    """Why the task's ``retry_policy`` does not retry this failure ("": it may be retried):
    its exception is not in ``retry_on`` (decided where the exception was raised)."""


@dataclass(frozen=True, slots=True)
class TimedOut:
    """The attempt's ``timeout`` ran out and its process tree was killed; ``before_run`` is
    what it was still doing if ``run()`` had not started ("" once it had)."""

    duration: float = field(default=0.0, metadata=_NON_NEGATIVE)
    timeout: float = field(default=0.0, metadata=_NON_NEGATIVE)
    error: str = ""
    before_run: str = ""


@dataclass(frozen=True, slots=True)
class Died:
    """The attempt's process ended without reporting a result (``exitcode`` or ``signal``)."""

    duration: float = field(default=0.0, metadata=_NON_NEGATIVE)
    error: str = ""
    exitcode: int | None = None
    signal: int | None = None


@dataclass(frozen=True, slots=True)
class NeedsDependencies:
    """``run()`` yielded tasks that are not complete: run ``new_deps``, then the task again."""

    duration: float = field(default=0.0, metadata=_NON_NEGATIVE)
    new_deps: tuple[DependencyRef, ...] = ()


AttemptMessage = Stage | Note | Succeeded | Failed | TimedOut | Died | NeedsDependencies
"""Everything an attempt's process reports: stages and notes while it runs, then one end."""

ATTEMPT_MESSAGES: Mapping[AttemptMessageKind, type[Any]] = {
    AttemptMessageKind.STAGE: Stage,
    AttemptMessageKind.NOTE: Note,
    AttemptMessageKind.SUCCEEDED: Succeeded,
    AttemptMessageKind.FAILED: Failed,
    AttemptMessageKind.TIMED_OUT: TimedOut,
    AttemptMessageKind.DIED: Died,
    AttemptMessageKind.NEEDS_DEPENDENCIES: NeedsDependencies,
}
"""Each message kind and its class (the one table both directions use)."""
_KIND_OF: Mapping[type[Any], AttemptMessageKind] = {c: k for k, c in ATTEMPT_MESSAGES.items()}


def attempt_message_kind(message: AttemptMessage) -> AttemptMessageKind:
    """The kind of ``message`` (its ``"message"`` on the wire)."""
    kind: AttemptMessageKind = _KIND_OF[type(message)]
    return kind


def encode_attempt_message(message: AttemptMessage) -> dict[str, Any]:
    """``message`` as JSON data: its fields and its kind under ``"message"``."""
    return {"message": str(_KIND_OF[type(message)]), **encode(message)}


def decode_attempt_message(data: Any) -> AttemptMessage:
    """The message JSON data ``data`` holds; FieldError if it is not one (fields unknown to
    this version are ignored, so a newer runner's messages still read)."""
    if not isinstance(data, dict):
        raise FieldError("message", "expected a JSON object")
    kind = data.get("message")
    cls = ATTEMPT_MESSAGES.get(kind) if isinstance(kind, str) else None  # type: ignore[call-overload]
    if cls is None:
        raise FieldError("message", "expected one of " + ", ".join(AttemptMessageKind))
    body = {k: v for k, v in data.items() if k != "message"}
    message: AttemptMessage = decode(cls, body, strict=False)
    return message
