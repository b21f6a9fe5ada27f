"""The scheduling policy: which registered task runs next, where, and what happens after.

Theory of operation
-------------------
Every task the scheduler knows is a :class:`TaskRecord`. A record is *ready* when it is
``PENDING``, every dependency is ``DONE`` (``unmet == 0``) and some worker may run it. Ready
records sit in one heap per worker that may run them (plus one shared heap for assistants),
ordered by (effective priority descending, registration order). Handing out work pops heaps:
O(log n). Entries are never removed from a heap in place; a popped entry that no longer matches
its record (it ran elsewhere, its priority rose, it failed) is simply dropped.

Dependencies inherit at least the priority of every dependent (propagated when it rises).
A ready task whose resources are exhausted is parked under that resource and pushed back when
a task holding the resource finishes, so a blocked task costs nothing per call. ``FAILED``
tasks wait in a heap keyed by the time they become ``PENDING`` again (``retry_delay``); a task
that failed ``retry_count`` times within ``disable_window`` is ``DISABLED`` for
``disable_persist`` seconds. A worker silent for ``worker_disconnect_delay`` loses its running
tasks (``FAILED``).

Nothing grows without bound (Luigi's pruning): ``remove_delay`` seconds after a worker was
declared gone, every task it registered that no live worker registered too, that is not
``RUNNING`` and that no remaining task depends on is removed — then its dependencies are
looked at the same way — and so is what is kept about the worker itself, unless it came back.
A worker whose run ended says so (:meth:`SchedulerCore.release`): it stops being a stakeholder
of its tasks at once, and they are looked at ``remove_delay`` later the same way, so a worker
id that lives on through many runs does not keep every task it ever ran. The removals are
reported to the state store like changes. Candidates wait in a heap keyed by when they may go,
so this costs nothing while nobody leaves.

Status moves
------------
Every change of a task's status goes through one method, ``_set_status``, which names the
move's :class:`Cause` and checks it against one table, :data:`STATUS_MOVES` (drawn in
docs/concepts.md): a ready task is handed out (``PENDING`` to ``RUNNING``) and reported done or
failed; a failure is ``FAILED``, or ``DISABLED`` after ``retry_count`` of them, and ``PENDING``
again when its time is up or an operator retries or re-enables it; a silent worker's tasks fail,
and a hand-out whose answer was lost goes back to ``PENDING``; a worker's registration sets what
it found (``DONE``, ``DISABLED``, ``UNKNOWN``, or ``PENDING`` again). What a caller may send
that makes no move (a task registered ``RUNNING``, a report of an attempt already applied) is
filtered out before; so a move missing from the table is a bug in this module, and
:class:`InvalidStatusMove` is raised before the status changes. Loading saved records
(:meth:`SchedulerCore.restore`) sets statuses without moves.

The class is thread-safe (one lock) and does no I/O; the clock is injected.
"""

from __future__ import annotations

import dataclasses
import heapq
import operator
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, overload

from ..errors import InvalidTransition, StaleReport, UnknownTask
from ..protocol import (
    MAX_BATCH,
    ROUTES,
    AttemptEnd,
    BatchMember,
    CancelAnswer,
    GetWork,
    NoteKind,
    Ok,
    PingAnswer,
    RefusedReport,
    RetrySpec,
    Route,
    StopAttempt,
    SubmitAnswer,
    TaskDone,
    TaskFailed,
    TaskInfo,
    TaskSpec,
    TaskStatus,
    Work,
    WorkAnswer,
    WorkLeft,
    make_work,
    make_work_answer,
    route_of,
)
from ..tasklike import DEFAULT_LOADER

__all__ = [
    "ATTEMPT_HISTORY",
    "CANCELLED",
    "STATUS_MOVES",
    "Attempt",
    "Cause",
    "InvalidStatusMove",
    "MoveObserver",
    "SchedulerCore",
    "StatusMove",
    "TaskRecord",
    "TaskSpec",
    "Work",
    "WorkLeft",
    "WorkerObserver",
]

PENDING, RUNNING, DONE, FAILED, DISABLED, UNKNOWN = (
    TaskStatus.PENDING,
    TaskStatus.RUNNING,
    TaskStatus.DONE,
    TaskStatus.FAILED,
    TaskStatus.DISABLED,
    TaskStatus.UNKNOWN,
)
_ASSISTANTS = "\0assistants"
_ATTEMPT_BITS = 53  # attempt ids stay exact integers in JSON (and JavaScript)
_FOR_NOW = "for now"  # _kept_by(): kept, and to be looked at again after remove_delay
_NOTHING_HELD: Mapping[str, int] = MappingProxyType({})
_PINGED = PingAnswer()
CANCELLED = "cancelled"
"""The explanation of a cancelled task (:meth:`SchedulerCore.cancel`)."""
ATTEMPT_HISTORY = 20
"""How many attempts (the latest) the scheduler keeps per task, for the UI's history."""


class Cause(Enum):
    """Why the scheduler moves a task from one status to another (see :data:`STATUS_MOVES`)."""

    REGISTERED = "registered"
    """A worker registered the task with this status (:meth:`SchedulerCore.add_tasks`): found
    complete (``DONE``), ``disabled = True`` (``DISABLED``), broken (``UNKNOWN``), or incomplete
    again (``PENDING``: a runnable task's output vanished, or a broken task is fixed)."""
    HANDED_OUT = "handed out"
    """:meth:`SchedulerCore.get_work` gave the task to a worker."""
    DEPS_YIELDED = "dependencies yielded"
    """The worker running the task registered it ``PENDING``: its ``run()`` yielded
    dependencies that are not complete, which ends the attempt."""
    RECLAIMED = "reclaimed"
    """Its worker asked for work without listing it as running: the hand-out's answer never
    arrived, and the task waits again without a failure."""
    DONE = "done"
    """:meth:`SchedulerCore.task_done`; it counts even if the scheduler took the attempt back
    meanwhile (its worker seemed gone): the work is done."""
    FAILED = "failed"
    """:meth:`SchedulerCore.task_failed` for the running attempt: ``FAILED``, or ``DISABLED``
    when the failures within ``disable_window`` reach the task's ``retry_count``."""
    FAILED_UNFENCED = "failed, no attempt named"
    """:meth:`SchedulerCore.task_failed` without an attempt id (a worker older than attempt
    ids, or the API called directly): counted whatever the task's status."""
    WORKER_GONE = "worker gone"
    """The task's worker was silent for ``worker_disconnect_delay``: a failure, counted."""
    RETRY_DUE = "retry due"
    """``retry_delay`` (after ``FAILED``) or ``disable_persist`` (after ``DISABLED``) passed."""
    RETRIED = "retried"
    """An operator retried a failed task at once (:meth:`SchedulerCore.retry_now`)."""
    REENABLED = "re-enabled"
    """An operator re-enabled a disabled task (:meth:`SchedulerCore.reenable`)."""
    SUBMITTED = "submitted"
    """Somebody submitted the task (:meth:`SchedulerCore.submit`): run it again if need be
    (its assistant re-checks ``complete()`` first)."""
    CANCELLED = "cancelled"
    """Somebody cancelled the task, or one it needs (:meth:`SchedulerCore.cancel`)."""

    __hash__ = object.__hash__  # members are singletons; identity hashing keeps the check fast


class StatusMove(NamedTuple):
    """One move the scheduler makes: a task's status from ``source`` to ``target``, and why."""

    source: TaskStatus
    target: TaskStatus
    cause: Cause


def _into(
    target: TaskStatus, cause: Cause, sources: Iterable[TaskStatus] = TaskStatus
) -> tuple[StatusMove, ...]:
    """The moves to ``target`` on ``cause`` from each of ``sources`` (default: any other)."""
    return tuple(StatusMove(source, target, cause) for source in sources if source != target)


C = Cause
STATUS_MOVES: tuple[StatusMove, ...] = (
    *_into(PENDING, C.REGISTERED, (DONE, UNKNOWN)),
    *_into(DONE, C.REGISTERED),
    *_into(DISABLED, C.REGISTERED),
    *_into(UNKNOWN, C.REGISTERED),
    StatusMove(PENDING, RUNNING, C.HANDED_OUT),
    StatusMove(RUNNING, PENDING, C.DEPS_YIELDED),
    StatusMove(RUNNING, PENDING, C.RECLAIMED),
    *_into(DONE, C.DONE),
    StatusMove(RUNNING, FAILED, C.FAILED),
    StatusMove(RUNNING, DISABLED, C.FAILED),
    *_into(FAILED, C.FAILED_UNFENCED),
    *_into(DISABLED, C.FAILED_UNFENCED),
    StatusMove(RUNNING, FAILED, C.WORKER_GONE),
    StatusMove(RUNNING, DISABLED, C.WORKER_GONE),
    StatusMove(FAILED, PENDING, C.RETRY_DUE),
    StatusMove(DISABLED, PENDING, C.RETRY_DUE),
    StatusMove(FAILED, PENDING, C.RETRIED),
    StatusMove(DISABLED, PENDING, C.REENABLED),
    *_into(PENDING, C.SUBMITTED, (DONE, FAILED, DISABLED, UNKNOWN)),
    *_into(DISABLED, C.CANCELLED, (PENDING, RUNNING, FAILED, UNKNOWN)),
)
"""Every status move the scheduler makes, and why: the one table ``_set_status`` checks.

A status set to itself is no move. ``RUNNING`` is entered only by a hand-out; every other move
out of ``RUNNING`` frees the task's worker slot and resources."""
del C

_MOVES = frozenset(STATUS_MOVES)  # (a plain (source, target, cause) tuple finds its entry)

MoveObserver = Callable[[str, StatusMove], None]
"""Called with a task id and the move it just made (:attr:`SchedulerCore.on_move`)."""

WorkerObserver = Callable[[str, str, tuple[str, ...]], None]
"""Called with a worker id, ``"new"``, ``"back"`` or ``"lost"``, and (when lost) the ids of
the tasks it was running (:attr:`SchedulerCore.on_worker`)."""


class InvalidStatusMove(InvalidTransition):
    """The scheduler was about to move a task's status in a way :data:`STATUS_MOVES` does not
    list: a bug in the policy, refused before the status changed."""

    def __init__(self, task_id: str, move: StatusMove) -> None:
        """Name the task and the move (``state`` is its source, ``event`` its cause)."""
        super().__init__(str(move.source), move.cause.value)
        self.args = (
            f"no status move from {move.source} to {move.target} on {move.cause.value!r} "
            f"(task {task_id}): not in STATUS_MOVES",
        )
        self.task_id = task_id
        self.move = move


@dataclass(slots=True)
class Attempt:
    """One hand-out of a task: when it started and ended, how, and on which worker."""

    attempt: int
    started: float
    worker: str
    ended: float | None = None
    outcome: AttemptEnd | None = None
    """None while it runs."""


def _members(groups: dict[str, set[str]], key: str) -> set[str]:
    """The set ``groups[key]``, created empty on first use."""
    members = groups.get(key)
    if members is None:
        members = groups[key] = set()
    return members


@dataclass(slots=True, eq=False)
class TaskRecord:
    """The scheduler's record of one task."""

    task_id: str
    seq: int
    family: str = ""
    module: str = ""
    params: Mapping[str, str] = field(default_factory=dict)
    loader: str = DEFAULT_LOADER
    """The task loader that rebuilds the task (``TaskSpec.loader``)."""
    status: TaskStatus = PENDING
    deps: Sequence[str] = ()
    """Dependency ids in order: a tuple, or a list once loaded or once a registration merged
    more in (which then only ever grows at its end: a store follows it, see
    :func:`~conveyor.scheduler.persist.to_row`)."""
    dependents: set[str] = field(default_factory=set)
    unmet: int = 0
    own_priority: int = 0
    priority: int = 0
    resources: Mapping[str, int] = field(default_factory=dict)
    stakeholders: tuple[str, ...] = ()
    """Workers that registered the task (a tuple: few, and cheap for the garbage collector)."""
    runners: tuple[str, ...] = ()
    """Workers that may run it."""
    worker: str | None = None
    retry_count: int | None = None
    retry: RetrySpec | None = None
    """The task's own retry schedule (:attr:`TaskSpec.retry`); None: the scheduler's."""
    labels: tuple[str, ...] = ()
    """What a worker must offer to be handed it (:attr:`TaskSpec.labels`)."""
    waiting: str = ""
    """Why it is ready but not handed out: no live worker has its labels ("" otherwise)."""
    failures: deque[float] | None = None  # allocated on the first failure
    wake_at: float = 0.0
    explanation: str = ""
    status_message: str = ""
    progress: float | None = None
    tracking_url: str = ""
    registered: bool = False
    held: Mapping[str, int] = field(default_factory=lambda: _NOTHING_HELD)
    """Resources taken while RUNNING."""
    dep_index: set[str] | None = None  # deps as a set, built when a registration merges
    attempt: int = 0
    """The id of the latest hand-out (a fencing token): it grows with every hand-out."""
    reported: int = 0
    """The attempt whose report was last applied (a report sent again is not applied twice)."""
    attempts: list[Attempt] | None = None
    """The latest :data:`ATTEMPT_HISTORY` hand-outs, oldest first (allocated on the first)."""
    batch_key: str = ""
    """Which pending tasks may share an attempt with it (:attr:`TaskSpec.batch`; "": none)."""
    batch_max: int = 0
    """The most members of its batches (0: no limit)."""
    batch: tuple[str, ...] = ()
    """The members of the batch its latest attempt ran in, itself first (): not a batch)."""
    submitted_by: str = ""
    """Who submitted it (:meth:`SchedulerCore.submit`), as the server recorded them ("": nobody):
    queued for the assistants even when no worker registered it."""
    cancelled: bool = False
    """``DISABLED`` by :meth:`SchedulerCore.cancel` (until it leaves ``DISABLED``): the late
    report of its stopped attempt leaves it so."""
    ready_at: float = 0.0
    """When it last became ready (``PENDING``, every dependency done, a worker to run it):
    :attr:`clock` time; 0 while it is not, and -1 when it was ready before the state was
    loaded (see :meth:`SchedulerCore.waited`)."""


_PERSISTED_FIELDS = (
    "family",
    "module",
    "params",
    "loader",
    "status",
    "deps",
    "own_priority",
    "priority",
    "resources",
    "worker",
    "retry_count",
    "retry",
    "labels",
    "waiting",
    "failures",
    "wake_at",
    "explanation",
    "status_message",
    "progress",
    "tracking_url",
    "registered",
    "attempt",
    "reported",
    "attempts",
    "batch_key",
    "batch_max",
    "batch",
    "submitted_by",
    "cancelled",
)
_PERSISTED = operator.attrgetter(*_PERSISTED_FIELDS)
"""What a store keeps of a record (every field :func:`~conveyor.scheduler.persist.to_row`
writes, a test checks) but its id, its number, its stakeholders and its runners: a
registration that leaves all of this as it was changes at most those two (see
:meth:`SchedulerCore.take_changes_apart`). A list changed in place (``deps``, ``attempts``)
compares equal to itself: whatever changes one in place marks the record changed itself."""

_Entry = tuple[int, int, str]
_NO_LABELS: frozenset[str] = frozenset()
_GATHER_PASSES = 64  # entries of a batch key's ready set one gathering may pass over
_READY_BEFORE = -1.0  # TaskRecord.ready_at of a task already ready when the state was loaded
_CONVEYOR_ONLY = (DEFAULT_LOADER,)


def _unwalked(rec: TaskRecord) -> bool:
    """Whether ``rec`` was submitted and no worker has registered it yet: its graph is
    unknown, it is ready for the assistants, and its hand-out says walk it
    (:attr:`Work.walk`)."""
    return bool(rec.submitted_by) and not rec.stakeholders


def _assistants_key(loader: str, labels: tuple[str, ...] = ()) -> str:
    """The key of the assistants' heap of tasks rebuilt by ``loader`` that need ``labels``
    (worker ids never start with NUL, so no worker's heap shares it; labels are printable)."""
    key = _ASSISTANTS if loader == DEFAULT_LOADER else f"{_ASSISTANTS}\0{loader}"
    return key if not labels else key + "\x01" + "\x01".join(labels)


class SchedulerCore:
    """The scheduling policy over :class:`TaskRecord`s; see the module docstring."""

    def __init__(
        self,
        *,
        retry_delay: float = 900.0,
        retry_count: int = 3,
        retry_backoff: float = 1.0,
        retry_max_delay: float = 86400.0,
        retry_jitter: float = 0.0,
        disable_window: float = 3600.0,
        disable_persist: float = 86400.0,
        worker_disconnect_delay: float = 60.0,
        remove_delay: float = 600.0,
        resources: Mapping[str, int] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Create an empty scheduler with the given policy settings."""
        self.remove_delay = remove_delay
        self.retry_delay = retry_delay
        self.retry_count = retry_count
        self.retry_backoff = retry_backoff
        """The n-th retry within ``disable_window`` waits ``retry_delay * retry_backoff**(n-1)``."""
        self.retry_max_delay = retry_max_delay
        """No retry waits longer than this (jitter included)."""
        self.retry_jitter = retry_jitter
        """A retry's delay is moved by up to this fraction of it, either way, at random (so that
        tasks that failed together are not all retried at once)."""
        self.jitter: Callable[[], float] = random.Random().random
        """Uniform in [0, 1): where in ``± retry_jitter`` a delay lands (a test may fix it)."""
        self.disable_window = disable_window
        self.disable_persist = disable_persist
        self.worker_disconnect_delay = worker_disconnect_delay
        self.capacity: dict[str, int] = dict(resources or {})
        self.clock = clock
        self._lock = threading.RLock()
        self._dirty: set[str] | None = None  # changed task ids, when persistence is on
        self.stale_reports = 0  # reports refused because their attempt was not the latest
        self.keep_history = False
        """Whether to keep each task's :attr:`TaskRecord.attempts` (the central server does,
        for its UI; the in-process scheduler has nobody to show them to)."""
        self.frozen = False
        """While true, time alone changes nothing (no retries woken, no worker declared gone,
        nothing pruned): the server sets it while its state store refuses writes, so that
        its reads answer what is stored and nobody is timed out for calls it refused."""
        self.on_move: MoveObserver | None = None
        """Called with the task id and the :class:`StatusMove` after every status move, under
        the scheduler's lock (it must not call the scheduler); None: nobody is told."""
        self.on_worker: WorkerObserver | None = None
        """Called, under the scheduler's lock like :attr:`on_move`, when a worker it did not
        know (``"new"``) or had declared gone (``"back"``) calls, and when it declares one gone
        (``"lost"``, before the moves of its running tasks); None: nobody is told."""
        # attempt ids are random: unique across restarts and re-created records alike, which
        # a counter per record (or per process) would not be
        self._attempt_ids = random.Random()
        # worker id -> {task id: attempt} it is to stop (cancelled); kept across a reload of
        # the state (a rollback), and dropped once its worker reports the attempt, stops
        # listing it as running, or is forgotten
        self._stops: dict[str, dict[str, int]] = {}
        self._clear()

    def _clear(self) -> None:
        """Forget every task and worker (the settings and counters stay)."""
        self._tasks: dict[str, TaskRecord] = {}
        self._seq = 0
        self._heaps: dict[str, list[_Entry]] = {}
        self._parked: dict[str, list[tuple[_Entry, str]]] = {}
        self._used: dict[str, int] = {}
        self._wakeups: list[tuple[float, str]] = []
        self._workers: dict[str, float] = {}
        self._worker_labels: dict[str, frozenset[str]] = {}  # what each worker offers
        self._labelled: set[str] = set()  # ids of the tasks that have labels
        self._label_sets: set[tuple[str, ...]] = {()}  # the distinct labels of tasks
        self._assistants: set[str] = set()
        self._by_worker: dict[str, set[str]] = {}
        self._running_on: dict[str, set[str]] = {}  # worker id -> ids of its RUNNING tasks
        self._batch_ready: dict[str, dict[str, None]] = {}  # batch key -> ids offered ready
        self._next_prune = 0.0
        if self._dirty is not None:
            self._dirty = set()
        self._dirty_workers: set[str] = set()
        # ids of the tasks whose stakeholders or runners, and nothing else, changed since the
        # store last took the changes (see take_changes_apart)
        self._interest: set[str] = set()
        self._removals: list[tuple[float, str]] = []  # (when, task id) to consider removing
        self._departures: list[tuple[float, str]] = []  # (when, worker id) to forget
        self._departed: dict[str, float] = {}  # worker id -> when it was declared gone
        self._removed: set[str] = set()  # task ids removed, not yet taken by the store
        self._removed_workers: set[str] = set()

    # --- the transport protocol -----------------------------------------------------------

    def call(self, request: Any) -> Any:
        """The answer to ``request``, one of the requests of
        :data:`conveyor.protocol.ROUTES`: the one dispatcher of the worker-facing calls, for the
        in-process scheduler and the central server alike.

        The route's method of this scheduler (``add_tasks`` for :class:`AddTasks`, ...; a
        subclass's override too) is called with the request's fields, positionally in the
        order the request declares them (each method's parameters are in that order), and its
        result made the route's answer (:meth:`~conveyor.protocol.Route.answer_of`). Those
        named methods are the in-process convenience API, and every route has one (checked on
        import). What a method raises (:class:`~conveyor.errors.StaleReport`) is raised.
        """
        if type(request) is GetWork and _own_get_work(self):
            if request.done or request.failed:  # (never sent to it: its answers are not
                # batched; refused rather than acknowledged without being applied)
                raise TypeError("this scheduler's get_work does not take carried reports")
            # a subclass's own get_work may predate batches, labels and batch tasks: it is
            # asked for one task with the fields it had (its answer is not batched, so
            # nothing is ever carried to it)
            request = GetWork(
                request.worker_id, request.assistant, request.running, request.loaders
            )
        # (route_of: TypeError naming what was given, if it is not a request)
        handler = _DISPATCH.get(type(request)) or _DISPATCH[route_of(request).request]
        name, fields, answer, own = handler
        method = getattr(self, name)
        if getattr(type(self), name) is own:  # conveyor's method: every field, in order
            return answer(method(*fields(request)))
        # a subclass's override may predate a defaulted field: given only when not default
        args, kwargs = route_of(request).arguments(request)
        return answer(method(*args, **kwargs))

    # --- registration ---------------------------------------------------------------------

    def add_tasks(self, worker_id: str, specs: Iterable[TaskSpec], assistant: bool = False) -> None:
        """Register (or update) tasks on behalf of ``worker_id``."""
        with self._lock:
            self._seen(worker_id, assistant)
            alone = (worker_id,)  # (one tuple shared by the records it is alone in: see _add)
            for spec in specs:
                self._add(worker_id, spec, alone)

    def _add(self, worker_id: str, spec: TaskSpec, alone: tuple[str, ...] = ()) -> None:
        """Register ``spec`` for ``worker_id``. ``alone`` is ``(worker_id,)``, made once per
        registration: the stakeholders and runners of a record it is the first to register
        (a tuple is immutable, so sharing one costs nothing but saves one per record)."""
        task_id = spec.task_id
        if not alone:
            alone = (worker_id,)
        rec = self._record(task_id)
        first = not rec.registered
        dirty = self._dirty
        if dirty is None or first or task_id in dirty:
            if dirty is not None:  # (_touch, without the call)
                dirty.add(task_id)
            self._register(worker_id, spec, alone, rec, first)
            return
        # registered before: what a store keeps of it may not change, or only its
        # stakeholders and runners (another worker registering the same graph)
        before, interest = _PERSISTED(rec), (rec.stakeholders, rec.runners)
        try:
            self._register(worker_id, spec, alone, rec, first)
        finally:
            if task_id not in dirty:
                # (its first runner changes what the UI shows: nobody could run it, which
                # blocked its dependents; so the row is written whole, its change number too)
                if _PERSISTED(rec) != before or (rec.runners and not interest[1]):
                    dirty.add(task_id)
                elif (rec.stakeholders, rec.runners) != interest:
                    self._interest.add(task_id)

    def _register(
        self, worker_id: str, spec: TaskSpec, alone: tuple[str, ...], rec: TaskRecord, first: bool
    ) -> None:
        """:meth:`_add`'s changes to ``rec`` (``first``: registered for the first time)."""
        task_id = spec.task_id
        rec.registered = True
        if spec.family:
            rec.family, rec.module, rec.params = spec.family, spec.module, spec.params
            rec.loader = spec.loader
        if worker_id not in rec.stakeholders:
            rec.stakeholders = (*rec.stakeholders, worker_id) if rec.stakeholders else alone
        mine = self._by_worker.get(worker_id)  # (_members, without the call)
        if mine is None:
            mine = self._by_worker[worker_id] = set()
        mine.add(task_id)
        if spec.runnable and worker_id not in rec.runners:
            rec.runners = (*rec.runners, worker_id) if rec.runners else alone
        if spec.retry_count is not None:
            rec.retry_count = spec.retry_count
        if spec.runnable:  # (the registration of a worker that would run it: its class's)
            rec.retry = spec.retry
            batch = spec.batch
            rec.batch_key, rec.batch_max = ("", 0) if batch is None else (batch.key, batch.max_size)
        labels = tuple(sorted(set(spec.labels))) if spec.labels else ()
        if labels != rec.labels and (first or spec.family):
            rec.labels = labels
            if labels:
                self._labelled.add(rec.task_id)
                self._label_sets.add(rec.labels)
            else:
                self._labelled.discard(rec.task_id)
            if not first:  # queued for other workers (and assistants) under the old labels
                self._offer(rec)
                self._update_waiting(rec)
        rec.resources = spec.resources
        added: tuple[str, ...] = ()
        deps = spec.deps
        if (deps or rec.deps) and (first or deps or spec.status == PENDING):
            added = self._set_deps(rec, deps, merge=not first)  # (none either side: a no-op)
        # (else _apply_status does nothing: _set_status returns at once for an equal status)
        if spec.status != rec.status or spec.explanation:
            self._apply_status(rec, spec, worker_id)
        if spec.priority > rec.own_priority:
            rec.own_priority = spec.priority
        # (else _raise_priority has nothing to raise: priorities never fall)
        if added or rec.own_priority > rec.priority:
            self._raise_priority(rec, rec.own_priority, added)
        self._offer(rec, only=worker_id)

    def _apply_status(self, rec: TaskRecord, spec: TaskSpec, worker_id: str) -> None:
        status = spec.status
        if status in (RUNNING, FAILED):
            return  # only get_work starts a task and only task_failed fails one
        if rec.cancelled and status != DONE:
            return  # a cancel stands until a submit or a re-enable (a success counts)
        if status == PENDING and rec.status in (RUNNING, DISABLED, FAILED):
            if rec.status == RUNNING and rec.worker == worker_id:
                self._set_status(rec, PENDING, Cause.DEPS_YIELDED)  # the attempt ended
            return
        if status == PENDING and rec.status == DONE and not spec.runnable:
            return  # an external task seen incomplete does not undo a success
        self._set_status(rec, status, Cause.REGISTERED)
        if spec.explanation:
            self._touch(rec)
            rec.explanation = spec.explanation  # (after the move, which clears an old one)

    def peek(self, task_id: str) -> TaskRecord | None:
        """The record of ``task_id`` (None if unknown), without the lock: for an observer
        called under it (:attr:`on_move`), which must only read it."""
        return self._tasks.get(task_id)

    def _record(self, task_id: str) -> TaskRecord:
        rec = self._tasks.get(task_id)
        if rec is None:
            self._seq += 1
            rec = TaskRecord(task_id=task_id, seq=self._seq)
            self._tasks[task_id] = rec
        return rec

    def _set_deps(self, rec: TaskRecord, deps: Sequence[str], merge: bool) -> tuple[str, ...]:
        """Set (or, with ``merge``, extend) ``rec``'s dependencies; return the ones new to it.

        Merging costs O(len(deps)), not O(all of rec's dependencies): a run() that yields its
        dependencies in many small batches re-registers its task once per batch.
        """
        if merge and rec.deps:
            index = rec.dep_index
            if index is None:
                index = rec.dep_index = set(rec.deps)
            added = tuple(d for d in dict.fromkeys(deps) if d not in index)
            if not added:
                return ()
            self._touch(rec)
            index.update(added)
            deps = rec.deps
            if not isinstance(deps, list):  # a list once merged: appends stay O(len(added))
                deps = rec.deps = list(deps)
            deps.extend(added)
            for dep_id in added:
                dep = self._record(dep_id)
                dep.dependents.add(rec.task_id)
                if dep.status != DONE:
                    rec.unmet += 1
                    rec.ready_at = 0.0  # (not ready any more: it waits again from scratch)
            return added
        new = tuple(dict.fromkeys(deps))
        if new == tuple(rec.deps):
            return ()
        self._touch(rec)
        for dep_id in rec.deps:
            self._tasks[dep_id].dependents.discard(rec.task_id)
        rec.deps = new
        rec.dep_index = None
        unmet = 0
        for dep_id in new:
            dep = self._record(dep_id)
            dep.dependents.add(rec.task_id)
            if dep.status != DONE:
                unmet += 1
        rec.unmet = unmet
        if unmet:
            rec.ready_at = 0.0
        return new

    def _raise_priority(
        self, rec: TaskRecord, priority: int, new_deps: Sequence[str] | None = None
    ) -> None:
        """Give ``rec`` at least ``priority`` and every dependency at least its dependent's.

        Dependencies already have at least ``rec``'s priority (the invariant), so when it does
        not rise only ``new_deps`` (default: all) need looking at.
        """
        rose = priority > rec.priority
        if rose:
            rec.priority = priority
            self._touch(rec)
            self._offer(rec)
        first = rec.deps if rose or new_deps is None else new_deps
        if not first:
            return
        stack: list[tuple[TaskRecord, Sequence[str]]] = [(rec, first)]
        while stack:
            current, deps = stack.pop()
            for dep_id in deps:
                dep = self._tasks[dep_id]
                if dep.priority < current.priority:
                    dep.priority = current.priority
                    self._touch(dep)
                    self._offer(dep)
                    stack.append((dep, dep.deps))

    # --- status changes -------------------------------------------------------------------

    def _set_status(self, rec: TaskRecord, status: TaskStatus, cause: Cause) -> None:
        """Move ``rec`` to ``status`` because of ``cause``: the one place a status changes.

        InvalidStatusMove, and nothing changed, if :data:`STATUS_MOVES` does not list the move.
        """
        old = rec.status
        if old == status:
            return
        if (old, status, cause) not in _MOVES:
            raise InvalidStatusMove(rec.task_id, StatusMove(old, status, cause))
        if self._dirty is not None:  # (_touch, without the call)
            self._dirty.add(rec.task_id)
        rec.status = status
        if old == DISABLED:
            rec.cancelled = False
        if old == PENDING and rec.batch_key:
            self._unready(rec.task_id, rec.batch_key)  # (not ready while not PENDING)
        if old == RUNNING:
            self._release(rec)  # leaving RUNNING, however: free its worker slot and resources
            history = rec.attempts
            if history and history[-1].ended is None:
                # no result (taken back unanswered, or it yielded new dependencies): the
                # hand-out that continues it is the attempt the history shows
                history.pop()
        if old == DONE:
            for dep_id in rec.dependents:
                dependent = self._tasks[dep_id]
                dependent.unmet += 1
                dependent.ready_at = 0.0
        elif status == DONE:
            for dep_id in rec.dependents:
                dependent = self._tasks[dep_id]
                dependent.unmet -= 1
                self._offer(dependent)
        if status == DONE or old == DONE:
            rec.explanation = ""  # (a failure's, or a success's text, is about the old status)
        if status == PENDING or rec.waiting:  # (otherwise _offer has nothing to do)
            self._offer(rec)
        if self.on_move is not None:
            self.on_move(rec.task_id, StatusMove(old, status, cause))
        if status != PENDING:
            rec.ready_at = 0.0  # (after the move's observer, which reads how long it waited)

    def _offer(self, rec: TaskRecord, only: str | None = None) -> None:
        """Push ``rec`` onto the heaps of the workers that may run it, if it is ready.

        ``only`` limits the push to one worker (a worker registering a task that is already
        queued for the others). Duplicate entries are harmless: a popped entry whose record
        is no longer ready is dropped.
        """
        if rec.status != PENDING or rec.unmet > 0 or not (rec.runners or _unwalked(rec)):
            if rec.waiting:
                self._update_waiting(rec)  # (not ready: nothing to wait for)
            if rec.status == PENDING:
                rec.ready_at = 0.0  # (pending, not ready: a wait starts when it is; one that
                # leaves PENDING is reset after its move's observer has read it)
            return
        if not rec.ready_at:
            rec.ready_at = self.clock()
        if rec.labels:
            self._update_waiting(rec)
        if rec.batch_key:  # (an ordered set per key: who may join a batch of its family)
            ready = self._batch_ready.get(rec.batch_key)
            if ready is None:
                ready = self._batch_ready[rec.batch_key] = {}
            ready[rec.task_id] = None
        entry = (-rec.priority, rec.seq, rec.task_id)
        if only is None:
            targets: Iterable[str] = rec.runners
        else:
            targets = (only,) if only in rec.runners else ()
        heaps = self._heaps
        for worker_id in targets:
            heap = heaps.get(worker_id)
            if heap is None:
                heap = heaps[worker_id] = []
            heapq.heappush(heap, entry)
        if self._assistants:
            key = _assistants_key(rec.loader, rec.labels)
            heap = heaps.get(key)
            if heap is None:
                heap = heaps[key] = []
            heapq.heappush(heap, entry)
            if len(heap) > 2 * len(self._tasks) + 1024:
                self._compact(key, heap)

    def _compact(self, key: str, heap: list[_Entry]) -> None:
        """Keep only the entries of ``heap`` (the assistants' heap ``key``) whose task is ready
        now, one each: a loader's heap that no assistant pops (none has that loader) would
        otherwise grow with every offer. O(n), at most once per n offers."""
        tasks = self._tasks
        kept: dict[str, _Entry] = {}
        for entry in heap:
            rec = tasks.get(entry[2])
            if (
                rec is not None
                and rec.status == PENDING
                and not rec.unmet
                and -entry[0] == rec.priority
                and _assistants_key(rec.loader, rec.labels) == key
            ):
                kept[rec.task_id] = entry
        heap[:] = kept.values()
        heapq.heapify(heap)

    # --- handing out work -----------------------------------------------------------------

    @overload
    def get_work(
        self,
        worker_id: str,
        assistant: bool = False,
        running: Collection[str] | None = None,
        loaders: Collection[str] | None = None,
        max_tasks: Literal[0] = 0,
        done: Sequence[TaskDone] = (),
        failed: Sequence[TaskFailed] = (),
        labels: Collection[str] | None = None,
        batches: bool = False,
    ) -> Work | None: ...

    @overload
    def get_work(
        self,
        worker_id: str,
        assistant: bool = False,
        running: Collection[str] | None = None,
        loaders: Collection[str] | None = None,
        max_tasks: int = 0,
        done: Sequence[TaskDone] = (),
        failed: Sequence[TaskFailed] = (),
        labels: Collection[str] | None = None,
        batches: bool = False,
    ) -> Work | WorkAnswer | None: ...

    def get_work(
        self,
        worker_id: str,
        assistant: bool = False,
        running: Collection[str] | None = None,
        loaders: Collection[str] | None = None,
        max_tasks: int = 0,
        done: Sequence[TaskDone] = (),
        failed: Sequence[TaskFailed] = (),
        labels: Collection[str] | None = None,
        batches: bool = False,
    ) -> Work | WorkAnswer | None:
        """Hand the best ready task to ``worker_id`` (marking it RUNNING), or None.

        When ``running`` is given, tasks recorded as running on this worker but missing from it
        (a hand-out whose answer never arrived) go back to PENDING, without a failure. An
        assistant is handed another worker's task only if its loader is one of ``loaders``
        (None: conveyor's own only); see :class:`~conveyor.protocol.GetWork`. ``labels`` are
        what the worker offers (None: as told before, or none): a task with labels is handed
        only to a worker that has them all. ``batches``: the worker runs batch hand-outs, so a
        task with a batch key is handed out with the other ready tasks of its key
        (:attr:`Work.batch`, see :meth:`_gather`).

        A batch (``max_tasks`` of 1 or more) is answered a :class:`WorkAnswer`: the carried
        reports ``done`` and ``failed`` applied first, as :meth:`task_done` and
        :meth:`task_failed` apply them (a stale one, or one of another worker, is named in the
        answer's ``refused`` instead of refusing the call), then up to ``max_tasks``
        hand-outs, best first. All of it under the scheduler's lock, so a server commits it as
        one transaction.
        """
        with self._lock:
            refused: list[RefusedReport] = []
            reports: tuple[TaskDone | TaskFailed, ...] = (*done, *failed) if done or failed else ()
            for report in reports:
                if report.worker_id != worker_id:
                    why = (
                        f"a report carried by get_work must be of the asking worker {worker_id}, "
                        f"not of {report.worker_id}"
                    )
                    route = route_of(report).name
                    refused.append(RefusedReport(route, report.task_id, report.attempt, why))
                    continue
                try:
                    self.call(report)
                except StaleReport as exc:
                    route = route_of(report).name
                    refused.append(RefusedReport(route, report.task_id, report.attempt, str(exc)))
            now = self._seen(worker_id, assistant)
            if labels is not None:
                known = self._worker_labels.get(worker_id)  # (as told before: nothing to learn)
                if (
                    known is None
                    or len(known) != len(labels)
                    or (labels and not known.issuperset(labels))
                ):
                    self._learn_labels(worker_id, labels)
            self._wake(now)
            if running is not None:
                if self._running_on.get(worker_id):
                    self._reclaim(worker_id, set(running))
                if self._stops:
                    self._stops_running(worker_id, running)
            work = self._hand_out(worker_id, assistant, loaders, batches)
            if not max_tasks:
                return work
            more: tuple[Work, ...] = ()
            if work is not None and max_tasks > 1:
                taken_more: list[Work] = []
                while len(taken_more) < max_tasks - 1:
                    taken = self._hand_out(worker_id, assistant, loaders, batches)
                    if taken is None:
                        break
                    taken_more.append(taken)
                more = tuple(taken_more)
            stops = self._stops_for(worker_id) if self._stops else ()
            return make_work_answer(work, more, True, tuple(refused) if refused else (), stops)

    def _learn_labels(self, worker_id: str, labels: Collection[str]) -> None:
        """Keep what ``worker_id`` offers; when it changed, its own labelled tasks are queued
        for it again, and whether they (all of them, for an assistant) wait is looked at."""
        known = self._worker_labels.get(worker_id)
        if known is not None and len(known) == len(labels) and known.issuperset(labels):
            return  # (as told before: the usual case, without making a set)
        offered = self._worker_labels[worker_id] = frozenset(labels)
        if offered == known:
            return
        if not self._labelled:
            return
        mine = [t for t in self._by_worker.get(worker_id, ()) if t in self._labelled]
        heap = self._heaps.get(worker_id)
        for task_id in mine:
            rec = self._tasks[task_id]
            if rec.status == PENDING and not rec.unmet and worker_id in rec.runners:
                if heap is None:
                    heap = self._heaps[worker_id] = []
                heapq.heappush(heap, (-rec.priority, rec.seq, task_id))
        self._refresh_waiting(self._labelled if worker_id in self._assistants else mine)

    def _refresh_waiting(self, task_ids: Iterable[str]) -> None:
        """Say again, for each of these tasks with labels, whether a live worker can take it."""
        tasks = self._tasks
        for task_id in list(task_ids):
            rec = tasks.get(task_id)
            if rec is not None and rec.labels:
                self._update_waiting(rec)

    def _update_waiting(self, rec: TaskRecord) -> None:
        """Set :attr:`TaskRecord.waiting` of a task with labels: why it is ready and yet no
        live worker can be handed it ("" when one can, or when it is not ready)."""
        text = ""
        if (
            rec.labels
            and rec.status == PENDING
            and not rec.unmet
            and (rec.runners or _unwalked(rec))
        ):
            workers, offered, stakeholders = self._workers, self._worker_labels, rec.stakeholders
            able = any(
                w in workers
                # (a worker that has not said its labels yet, one of an older release or
                # one seen before a restart, is not taken to lack them)
                and (w not in offered or offered[w].issuperset(rec.labels))
                for w in (*(r for r in rec.runners if r in stakeholders), *self._assistants)
            )
            if not able:
                text = f"waiting for a worker with the labels {', '.join(rec.labels)}"
                text += ": no live worker that may run it has them"
        if rec.waiting != text:
            self._touch(rec)
            rec.waiting = text

    def _hand_out(
        self,
        worker_id: str,
        assistant: bool,
        loaders: Collection[str] | None,
        batches: bool = False,
    ) -> Work | None:
        """The best ready task for ``worker_id`` (its own first, then, for an assistant,
        another worker's of one of ``loaders``), taken; None if there is none. With
        ``batches``, a task with a batch key comes with the others of its key (:meth:`_gather`)."""
        work = None
        heap = self._heaps.get(worker_id)  # (its own heap: _pop, without the call)
        while heap:
            work = self._pop_top(worker_id, heap, worker_id)
            if work is not None:
                break
        if work is None and assistant:
            accepted = _CONVEYOR_ONLY if loaders is None else loaders
            work = self._pop_for_assistant(worker_id, accepted)
        if work is not None and batches and self._batch_ready:  # (none ready: none to gather)
            rec = self._tasks[work.task_id]
            if rec.batch_key:
                return self._gather(rec, work, worker_id, assistant)
        return work

    def _gather(self, rec: TaskRecord, work: Work, worker_id: str, assistant: bool) -> Work:
        """``work`` (of ``rec``, just taken) made a batch: up to ``rec.batch_max - 1`` other
        ready tasks of its batch key that ``worker_id`` may run, taken under the same attempt
        id, each member within the resources left. It looks at no more than
        ``_GATHER_PASSES`` entries beyond four per member wanted (others' tasks of the key stay
        in the set for them), and drops the stale entries it meets."""
        ready = self._batch_ready.get(rec.batch_key)
        if not ready:
            return work
        limit = rec.batch_max or len(ready) + 1
        offered = self._worker_labels.get(worker_id, _NO_LABELS)
        taken: list[TaskRecord] = []
        stale: list[str] = []
        extra: dict[str, int] = {}  # what the members taken so far hold of each resource
        passes = _GATHER_PASSES + 4 * min(limit, MAX_BATCH)  # (entries looked at, at most)
        for task_id in ready:
            if len(taken) + 1 >= limit:
                break
            passes -= 1
            if passes < 0:
                break  # (a bounded look: the rest of the set is others' or blocked)
            other = self._tasks.get(task_id)
            if (
                other is None
                or other.status != PENDING
                or other.unmet
                or not other.runners
                or other.batch_key != rec.batch_key
            ):
                stale.append(task_id)  # (no longer ready: offered again when it is)
                continue
            own = worker_id in other.runners and worker_id in other.stakeholders
            if not own and not (assistant and other.loader == rec.loader):
                continue  # another worker's: it stays for that one
            if other.labels and not offered.issuperset(other.labels):
                continue
            if any(
                self._used.get(name, 0) + extra.get(name, 0) + amount > self.capacity.get(name, 1)
                for name, amount in other.resources.items()
            ):
                continue  # (members hold their resources too: within the capacity)
            for name, amount in other.resources.items():
                extra[name] = extra.get(name, 0) + amount
            taken.append(other)
        for task_id in stale:
            del ready[task_id]
        if not taken:
            if not ready:
                del self._batch_ready[rec.batch_key]
            return work
        for other in taken:
            self._take(other, worker_id, rec.attempt)
        members = (rec, *taken)
        ids = tuple(member.task_id for member in members)
        for member in members:
            member.batch = ids
        batch = tuple(BatchMember(member.task_id, member.params) for member in members)
        return dataclasses.replace(work, batch=batch)

    def _unready(self, task_id: str, batch_key: str) -> None:
        """Take ``task_id`` out of the ready set of ``batch_key`` (and the set, once empty)."""
        ready = self._batch_ready.get(batch_key)
        if ready is not None:
            ready.pop(task_id, None)
            if not ready:
                del self._batch_ready[batch_key]

    def _reclaim(self, worker_id: str, running: set[str]) -> None:
        for task_id in list(self._running_on.get(worker_id, ())):
            if task_id not in running:
                self._set_status(self._tasks[task_id], PENDING, Cause.RECLAIMED)

    def _pop(self, key: str, worker_id: str) -> Work | None:
        """The best ready task of the heap ``key`` (a worker's, or an assistants' heap)."""
        heap = self._heaps.get(key)
        while heap:
            work = self._pop_top(key, heap, worker_id)
            if work is not None:
                return work
        return None

    def _pop_for_assistant(self, worker_id: str, loaders: Collection[str]) -> Work | None:
        """The best ready task among the assistants' heaps of ``loaders`` (one heap per task
        loader, so a task no loader of this assistant rebuilds is never even looked at)."""
        if len(loaders) <= 1 and len(self._label_sets) == 1:  # (no task has labels)
            return self._pop(_assistants_key(next(iter(loaders))), worker_id) if loaders else None
        offered = self._worker_labels.get(worker_id, _NO_LABELS)
        keys = [
            _assistants_key(loader, labels)
            for loader in loaders
            for labels in self._label_sets
            if offered.issuperset(labels)
        ]
        heaps = self._heaps
        while True:
            tops = [(heap[0], key) for key in keys if (heap := heaps.get(key))]
            if not tops:
                return None
            key = min(tops)[1]
            work = self._pop_top(key, heaps[key], worker_id)
            if work is not None:
                return work

    def _pop_top(self, key: str, heap: list[_Entry], worker_id: str) -> Work | None:
        """Take the top entry of ``heap`` (the heap ``key``): the Work if its task is ready for
        ``worker_id``, else None (the entry is dropped as stale, or parked on a resource)."""
        entry = heapq.heappop(heap)
        rec = self._tasks.get(entry[2])
        if rec is None or rec.status != PENDING or rec.unmet or -entry[0] != rec.priority:
            return None
        if key[0] == "\0":  # an assistants' heap: only tasks of the heap's loader
            if key != _assistants_key(rec.loader, rec.labels):
                return None  # (registered again with another loader: queued there too)
        elif worker_id not in rec.stakeholders:
            return None  # released by this worker since it was queued for it
        elif rec.labels and not self._worker_labels.get(worker_id, _NO_LABELS).issuperset(
            rec.labels
        ):
            return None  # this worker lacks its labels: it waits for another
        if rec.resources:
            blocked = self._blocking_resource(rec)
            if blocked is not None:
                heapq.heappush(self._parked.setdefault(blocked, []), (entry, key))
                return None
        self._take(rec, worker_id)
        # (every field in order, built without the generated __init__: see make_work)
        return make_work(
            rec.task_id,
            rec.family,
            rec.module,
            rec.params,
            rec.attempt,
            self.worker_disconnect_delay,
            rec.loader,
            (),
            bool(rec.submitted_by) and _unwalked(rec),
        )

    def _blocking_resource(self, rec: TaskRecord) -> str | None:
        for name, amount in rec.resources.items():
            if self._used.get(name, 0) + amount > self.capacity.get(name, 1):
                return name
        return None

    def _take(self, rec: TaskRecord, worker_id: str, attempt: int = 0) -> None:
        """Hand ``rec`` to ``worker_id``: RUNNING under a new attempt id (``attempt``: the one
        of the batch it joins)."""
        held = rec.held = rec.resources
        if held:
            used = self._used
            for name, amount in held.items():
                used[name] = used.get(name, 0) + amount
        rec.worker = worker_id
        rec.attempt = attempt or self._attempt_ids.getrandbits(_ATTEMPT_BITS) or 1
        rec.batch = ()
        if self.keep_history:
            history = rec.attempts
            if history is None:
                history = rec.attempts = []
            elif len(history) >= ATTEMPT_HISTORY:
                del history[0]
            history.append(Attempt(rec.attempt, self.clock(), worker_id))
        running = self._running_on.get(worker_id)  # (_members, without the call)
        if running is None:
            running = self._running_on[worker_id] = set()
        running.add(rec.task_id)
        if rec.status_message or rec.progress is not None or rec.tracking_url:
            rec.status_message, rec.progress, rec.tracking_url = "", None, ""
        self._set_status(rec, RUNNING, Cause.HANDED_OUT)

    def _release(self, rec: TaskRecord) -> None:
        if rec.worker is not None:
            running = self._running_on.get(rec.worker)
            if running is not None:
                running.discard(rec.task_id)
        rec.worker = None
        held, rec.held = rec.held, _NOTHING_HELD
        for name, amount in held.items():
            self._used[name] -= amount
            self._unpark(name, amount)

    def _unpark(self, name: str, freed: int) -> None:
        """Give the best ``freed`` tasks parked on resource ``name`` another chance.

        Only as many as the freed capacity could admit go back to their heaps (stale entries
        are dropped on the way), so a long queue behind a resource costs O(log n) per task.
        """
        parked = self._parked.get(name)
        offered: set[str] = set()
        while parked and freed > 0:
            entry, _key = heapq.heappop(parked)
            rec = self._tasks.get(entry[2])
            if rec is None:
                continue  # removed since
            ready = rec.status == PENDING and not rec.unmet and -entry[0] == rec.priority
            if ready and rec.task_id not in offered:
                offered.add(rec.task_id)
                self._offer(rec)  # to every worker that may run it, not only the one that parked it
                freed -= rec.resources.get(name, 1) or 1

    # --- persistence (used by the central server) -----------------------------------------

    def _touch(self, rec: TaskRecord) -> None:
        if self._dirty is not None:
            self._dirty.add(rec.task_id)

    def track_changes(self) -> None:
        """Start recording which tasks and workers change (see :meth:`take_changes`)."""
        self._dirty = set()

    def take_changes(self) -> tuple[list[TaskRecord], list[tuple[str, bool]]]:
        """The records and ``(worker_id, assistant)`` pairs changed since the last call."""
        with self._lock:
            if self._interest and self._dirty is not None:  # (changed too, for this store)
                tasks = self._tasks
                self._dirty.update(t for t in self._interest if t in tasks)
            self._interest = set()
            if self._removed and self._dirty:  # (removed, then known again and changed: its
                # row is written, not deleted; one known again only as a dependency nobody
                # registered yet is not written, so its old row is deleted)
                self._removed.difference_update(self._dirty)
            records = [self._tasks[t] for t in self._dirty or ()]
            workers = [(w, w in self._assistants) for w in self._dirty_workers]
            self._dirty = set() if self._dirty is not None else None
            self._dirty_workers = set()
            return records, workers

    def take_changes_apart(
        self,
    ) -> tuple[
        list[TaskRecord], list[tuple[str, bool]], list[tuple[str, tuple[str, ...], tuple[str, ...]]]
    ]:
        """:meth:`take_changes`, with apart the ``(task_id, stakeholders, runners)`` of each
        task whose stakeholders or runners, and nothing else, changed: a worker's
        registration of a task another registered, or its release of it. Their records are
        not among the changed ones; for a store that can set those two in a stored row
        without writing the rest (:class:`~conveyor.server.stores.CanSaveStakeholders`),
        where writing a row costs some 20 µs and every worker of a graph registers all of it,
        and releases all of it when its run ends."""
        with self._lock:
            interest, self._interest = self._interest, set()
            tasks, dirty = self._tasks, self._dirty or ()
            apart = [
                (t, rec.stakeholders, rec.runners)
                for t in interest
                if t not in dirty and (rec := tasks.get(t)) is not None
            ]
            records, workers = self.take_changes()
            return records, workers, apart

    def take_removals(self) -> tuple[list[str], list[str]]:
        """The task ids and worker ids removed since the last call (persistence on)."""
        with self._lock:
            removed = sorted(self._removed), sorted(self._removed_workers)
            self._removed, self._removed_workers = set(), set()
            return removed

    def restore(self, records: Iterable[TaskRecord], workers: Iterable[tuple[str, bool]]) -> None:
        """Load persisted records and workers into an empty scheduler.

        Derived state is rebuilt: dependents, unmet counts, resource use, ready heaps and
        retry clocks. Known workers count as just seen, so a running task stays with its worker
        unless that worker stays silent for ``worker_disconnect_delay``.
        """
        with self._lock:
            now = self.clock()
            tasks, seq = self._tasks, self._seq
            for rec in records:
                tasks[rec.task_id] = rec
                if rec.seq > seq:
                    seq = rec.seq
                if rec.labels:
                    self._labelled.add(rec.task_id)
                    self._label_sets.add(rec.labels)
            self._seq = seq
            for worker_id, assistant in workers:
                self._workers[worker_id] = now
                if assistant:
                    self._assistants.add(worker_id)
            for rec in list(tasks.values()):
                self._rebuild(rec)
            for rec in tasks.values():
                # (how long a ready one has waited is not stored)
                rec.ready_at = _READY_BEFORE if rec.status == PENDING else 0.0
                self._offer(rec)

    def reload(self, records: Iterable[TaskRecord], workers: Iterable[tuple[str, bool]]) -> None:
        """Replace every task and worker with ``records`` and ``workers``, as :meth:`restore`
        does on an empty scheduler: what changed since they were saved, and was not taken
        by the store, is dropped (the server's rollback of a commit that failed)."""
        with self._lock:
            self._clear()
            self.restore(records, workers)

    def _rebuild(self, rec: TaskRecord) -> None:
        task_id, tasks, unmet = rec.task_id, self._tasks, 0
        for dep_id in rec.deps:
            dep = tasks.get(dep_id)
            if dep is None:  # (a dependency no worker registered: known from here on)
                dep = self._record(dep_id)
            dep.dependents.add(task_id)
            if dep.status != DONE:
                unmet += 1
        rec.unmet = unmet
        for worker_id in rec.stakeholders:
            _members(self._by_worker, worker_id).add(task_id)
        if rec.registered and not rec.stakeholders:  # released by every worker before a
            # restart: nothing else would make it a candidate for removal again
            heapq.heappush(self._removals, (self.clock() + self.remove_delay, rec.task_id))
        if rec.status == RUNNING:
            rec.held = rec.resources
            for name, amount in rec.held.items():
                self._used[name] = self._used.get(name, 0) + amount
            if rec.worker is not None:
                self._running_on.setdefault(rec.worker, set()).add(rec.task_id)
        if rec.status in (FAILED, DISABLED) and rec.wake_at:
            heapq.heappush(self._wakeups, (rec.wake_at, rec.task_id))

    # --- results --------------------------------------------------------------------------

    def task_done(
        self, worker_id: str, task_id: str, attempt: int = 0, explanation: str = ""
    ) -> None:
        """Record that ``worker_id`` finished ``task_id`` successfully.

        ``attempt`` (a :attr:`Work.attempt`; 0 = not known) makes the report idempotent and
        fenced: a report of an attempt already applied is acknowledged and not applied again,
        and one about an attempt the task was handed out again since raises StaleReport and
        changes nothing. A success of the latest attempt counts even if the scheduler took the
        task back meanwhile (its worker seemed gone): the work is done. ``explanation`` (what
        the task's ``on_success()`` returned) is kept as the done task's explanation.
        """
        with self._lock:
            self._seen(worker_id)
            if self._stops:
                self._stop_done(worker_id, task_id, attempt)
            rec = self._tasks.get(task_id)
            if rec is None:
                return
            if attempt and attempt == rec.attempt and attempt != rec.reported:
                if self._dirty is not None:  # (_fresh's usual case, without the call)
                    self._dirty.add(task_id)
                rec.reported = attempt
            elif not self._fresh(rec, attempt, worker_id):
                return
            rec.failures = None
            if rec.attempts and (attempt or rec.status == RUNNING):
                _end_attempt(rec, attempt, AttemptEnd.SUCCEEDED, self.clock())
            self._set_status(rec, DONE, Cause.DONE)
            if rec.explanation != explanation:
                self._touch(rec)
                rec.explanation = explanation  # (after the move, which clears a failure's)

    def task_failed(
        self,
        worker_id: str,
        task_id: str,
        explanation: str,
        attempt: int = 0,
        outcome: AttemptEnd = AttemptEnd.FAILED,
        not_retried: str = "",
    ) -> TaskStatus:
        """Record a failed attempt; return the new status (``FAILED`` or ``DISABLED``).

        ``attempt`` as for :meth:`task_done`; the failure of an attempt the scheduler already
        took back (and counted as failed, or reclaimed) is acknowledged without counting again.
        ``outcome`` (failed, timed out, process died, interrupted) goes into the history.
        ``not_retried`` (the task's ``retry_on`` excludes this failure) disables the task at
        once, the reason appended to its explanation.
        """
        with self._lock:
            now = self._seen(worker_id)
            if self._stops:
                self._stop_done(worker_id, task_id, attempt)
            rec = self._tasks.get(task_id)
            if rec is None:
                return UNKNOWN
            if not self._fresh(rec, attempt, worker_id):
                return rec.status
            if attempt and rec.status != RUNNING:
                # taken back already (its worker seemed gone) and counted then: now that its
                # report came after all, the history and explanation say what really happened
                _end_attempt(rec, attempt, AttemptEnd(outcome), now)
                if rec.status in (FAILED, DISABLED) and not rec.cancelled:
                    rec.explanation = explanation
                return rec.status
            if rec.cancelled:  # (an unfenced failure: the cancel stands)
                return rec.status
            cause = Cause.FAILED if attempt else Cause.FAILED_UNFENCED
            if not_retried:
                explanation = f"{explanation.rstrip()}\nnot retried: {not_retried}"
            return self._fail(rec, explanation, now, AttemptEnd(outcome), cause, not_retried)

    def _fresh(self, rec: TaskRecord, attempt: int, worker_id: str) -> bool:
        """True if a report of ``attempt`` is to be applied (and note it applied); False for
        one already applied; StaleReport for an attempt that is not the latest."""
        if not attempt:
            return True  # a caller that does not say: as before attempt ids
        if attempt == rec.reported:
            return False
        if attempt != rec.attempt:
            self.stale_reports += 1
            raise StaleReport(
                f"the report of attempt {attempt} of task {rec.task_id} by worker {worker_id} "
                f"was refused: the task was handed out again since (attempt {rec.attempt}"
                + (f", to worker {rec.worker})" if rec.worker else ")")
            )
        self._touch(rec)
        rec.reported = attempt
        return True

    def _fail(
        self,
        rec: TaskRecord,
        explanation: str,
        now: float,
        outcome: AttemptEnd,
        cause: Cause,
        not_retried: str = "",
    ) -> TaskStatus:
        """Count a failure of ``rec``: ``FAILED`` until its retry is due, or ``DISABLED`` when
        the failures within ``disable_window`` reach its count, or at once when ``not_retried``
        (its ``retry_on`` excludes the failure)."""
        self._touch(rec)
        if rec.status == RUNNING:
            _end_attempt(rec, rec.attempt, outcome, now)
        rec.explanation = explanation
        failures = rec.failures = rec.failures or deque()
        failures.append(now)
        while failures and failures[0] < now - self.disable_window:
            failures.popleft()
        limit = rec.retry_count if rec.retry_count is not None else self.retry_count
        if not_retried or (limit > 0 and len(failures) >= limit):
            failures.clear()
            self._set_status(rec, DISABLED, cause)
            self._schedule_wake(rec, now + self.disable_persist)
        else:
            self._set_status(rec, FAILED, cause)
            self._schedule_wake(rec, now + self.retry_wait(len(failures), rec.retry))
        return rec.status

    def retry_wait(self, failures: int, retry: RetrySpec | None = None) -> float:
        """How long a task waits FAILED after its ``failures``-th failure within
        ``disable_window`` (1, 2, …): ``retry_delay * retry_backoff**(failures - 1)``, moved by
        up to ``retry_jitter`` of itself either way, and never more than ``retry_max_delay``.
        A task's own ``retry`` (:class:`~conveyor.protocol.RetrySpec`) replaces each setting
        it gives."""
        delay, backoff = self.retry_delay, self.retry_backoff
        most, jitter = self.retry_max_delay, self.retry_jitter
        if retry is not None:
            delay = delay if retry.delay is None else retry.delay
            backoff = backoff if retry.backoff is None else retry.backoff
            most = most if retry.max_delay is None else retry.max_delay
            jitter = jitter if retry.jitter is None else retry.jitter
        if backoff != 1.0 and failures > 1:
            try:
                delay *= backoff ** (failures - 1)
            except OverflowError:
                delay = most
        if jitter:
            delay *= 1.0 + jitter * (2.0 * self.jitter() - 1.0)
        return max(0.0, min(delay, most))

    def _schedule_wake(self, rec: TaskRecord, when: float) -> None:
        rec.wake_at = when
        heapq.heappush(self._wakeups, (when, rec.task_id))

    def _wake(self, now: float) -> None:
        if self.frozen:
            return
        while self._wakeups and self._wakeups[0][0] <= now:
            when, task_id = heapq.heappop(self._wakeups)
            rec = self._tasks.get(task_id)  # (None: removed since)
            if rec is not None and rec.wake_at == when and rec.status in (FAILED, DISABLED):
                self._set_status(rec, PENDING, Cause.RETRY_DUE)
        if now >= self._next_prune:
            self._next_prune = now + min(1.0, self.worker_disconnect_delay)
            self._prune_workers(now)
            self._prune_tasks(now)

    def _prune_workers(self, now: float) -> None:
        silent = [
            w for w, seen in self._workers.items() if seen < now - self.worker_disconnect_delay
        ]
        gone_assistants = {w for w in silent if w in self._assistants}
        for worker_id in silent:
            del self._workers[worker_id]
            if self.on_worker is not None:
                running = tuple(sorted(self._running_on.get(worker_id, ())))
                self.on_worker(worker_id, "lost", running)
            self._assistants.discard(worker_id)
            self._worker_labels.pop(worker_id, None)
            for task_id in list(self._running_on.get(worker_id, ())):
                rec = self._tasks[task_id]
                why = f"worker {worker_id} stopped responding"
                self._fail(rec, why, now, AttemptEnd.PROCESS_DIED, Cause.WORKER_GONE)
            self._departed[worker_id] = now
            later = now + self.remove_delay
            heapq.heappush(self._departures, (later, worker_id))
            for task_id in self._by_worker.get(worker_id, ()):
                heapq.heappush(self._removals, (later, task_id))
        if silent and self._labelled:
            if any(w in gone_assistants for w in silent):
                self._refresh_waiting(self._labelled)
            else:
                self._refresh_waiting(
                    t for w in silent for t in self._by_worker.get(w, ()) if t in self._labelled
                )

    def _prune_tasks(self, now: float) -> None:
        """Remove the candidates whose time has come and that nobody needs any more."""
        removals = self._removals
        while removals and removals[0][0] <= now:
            _, task_id = heapq.heappop(removals)
            rec = self._tasks.get(task_id)
            if rec is None:
                continue
            keep = self._kept_by(rec, now)
            if not keep:
                self._remove(rec, now)
            elif keep == _FOR_NOW:  # nothing else will bring it back here: look again later
                # (a second at least: with remove_delay 0 it would come up again at once)
                heapq.heappush(removals, (now + max(self.remove_delay, 1.0), task_id))
        departures = self._departures
        while departures and departures[0][0] <= now:
            when, worker_id = heapq.heappop(departures)
            departed = self._departed.get(worker_id)
            if departed is not None and departed + self.remove_delay <= when:
                # gone since this departure (not back, nor gone again later)
                del self._departed[worker_id]
                self._by_worker.pop(worker_id, None)
                self._running_on.pop(worker_id, None)
                self._heaps.pop(worker_id, None)
                self._stops.pop(worker_id, None)
                if self._dirty is not None:
                    self._removed_workers.add(worker_id)

    def _kept_by(self, rec: TaskRecord, now: float) -> str:
        """Why ``rec`` must stay ('' if nothing): a live or recently gone worker registered
        it, or a task depends on it (each brings it back here when that ends), or it is
        running, or live assistants may still run it (:data:`_FOR_NOW`)."""
        departed = self._departed
        for worker_id in rec.stakeholders:
            if worker_id in self._workers:
                return "registered"
            gone = departed.get(worker_id)
            if gone is not None and now < gone + self.remove_delay:
                return "registered"
        if rec.dependents:
            return "needed"
        if _unwalked(rec) and rec.status == PENDING:  # (submitted: assistants will come)
            return _FOR_NOW
        if rec.status == RUNNING or (self._assistants and rec.status in (PENDING, FAILED)):
            return _FOR_NOW
        return ""

    def _remove(self, rec: TaskRecord, now: float) -> None:
        task_id = rec.task_id
        del self._tasks[task_id]
        self._labelled.discard(task_id)
        if rec.batch_key:
            self._unready(task_id, rec.batch_key)
        if self._dirty is not None:
            self._dirty.discard(task_id)
            self._removed.add(task_id)
        for worker_id in rec.stakeholders:
            mine = self._by_worker.get(worker_id)
            if mine is not None:
                mine.discard(task_id)
        for dep_id in rec.deps:  # a dependency nobody depends on any more may go now
            dep = self._tasks.get(dep_id)
            if dep is not None:
                dep.dependents.discard(task_id)
                if not dep.dependents:
                    heapq.heappush(self._removals, (now, dep_id))

    # --- annotations ----------------------------------------------------------------------

    def annotate(self, task_id: str, kind: NoteKind, value: Any) -> None:
        """Store a status message, progress or tracking URL reported from inside run()."""
        with self._lock:
            rec = self._tasks.get(task_id)
            if rec is None:
                return
            self._touch(rec)
            if kind == NoteKind.STATUS_MESSAGE:
                rec.status_message = str(value)
            elif kind == NoteKind.PROGRESS:
                rec.progress = float(value)
            elif kind == NoteKind.TRACKING_URL:
                rec.tracking_url = str(value)

    # --- operator actions (the web UI) ---------------------------------------------------

    def retry_now(self, task_ids: Iterable[str]) -> list[str]:
        """Make each ``FAILED`` task ``PENDING`` at once, its failure count kept; return the
        ids that changed (the others were not FAILED)."""
        return self._wake_now(task_ids, FAILED, Cause.RETRIED)

    def reenable(self, task_ids: Iterable[str]) -> list[str]:
        """Make each ``DISABLED`` task ``PENDING`` with its failure count reset; return the
        ids that changed."""
        return self._wake_now(task_ids, DISABLED, Cause.REENABLED)

    def _wake_now(self, task_ids: Iterable[str], status: TaskStatus, cause: Cause) -> list[str]:
        """Make each of ``task_ids`` that is ``status`` PENDING at once, because of ``cause``
        (a re-enabled task's failure count starts again)."""
        with self._lock:
            changed = []
            for task_id in dict.fromkeys(task_ids):
                rec = self._tasks.get(task_id)
                if rec is None or rec.status != status:
                    continue
                if cause is Cause.REENABLED:
                    rec.failures = None
                rec.wake_at = 0.0  # (its entry in the wake-up heap no longer matches)
                self._set_status(rec, PENDING, cause)
                changed.append(task_id)
            return changed

    def resource_list(self) -> list[dict[str, Any]]:
        """Each resource with its capacity, use and the running tasks holding it."""
        with self._lock:
            holders: dict[str, list[str]] = {}
            for running in self._running_on.values():
                for task_id in running:
                    for name in self._tasks[task_id].held:
                        holders.setdefault(name, []).append(task_id)
            names = sorted(set(self.capacity) | set(self._used) | set(holders))
            return [
                {
                    "name": name,
                    "capacity": self.capacity.get(name, 1),
                    "used": self._used.get(name, 0),
                    "holders": sorted(holders.get(name, ())),
                }
                for name in names
            ]

    # --- liveness and queries -------------------------------------------------------------

    def ping(self, worker_id: str) -> PingAnswer:
        """Record that ``worker_id`` is alive; the answer lists its cancelled attempts that
        still run (:meth:`cancel`)."""
        with self._lock:
            self._seen(worker_id)
            return PingAnswer(stop=self._stops_for(worker_id)) if self._stops else _PINGED

    def _stops_for(self, worker_id: str) -> tuple[StopAttempt, ...]:
        """The cancelled attempts ``worker_id`` is to stop. An attempt the scheduler has
        running on that worker after all (the cancel was rolled back with a failed commit)
        is not one of them."""
        mine = self._stops.get(worker_id)
        if not mine:
            return ()
        tasks = self._tasks
        for task_id, attempt in list(mine.items()):
            rec = tasks.get(task_id)
            if (
                rec is not None
                and rec.status == RUNNING
                and rec.worker == worker_id
                and rec.attempt == attempt
            ):
                del mine[task_id]
        if not mine:
            del self._stops[worker_id]
            return ()
        return tuple(StopAttempt(task_id, attempt) for task_id, attempt in mine.items())

    def _stop_done(self, worker_id: str, task_id: str, attempt: int) -> None:
        """``worker_id`` reported ``attempt`` of ``task_id`` (applied or stale): no need to
        tell it to stop that attempt any more."""
        mine = self._stops.get(worker_id)
        if mine and mine.get(task_id) == attempt:
            del mine[task_id]
            if not mine:
                del self._stops[worker_id]

    def _stops_running(self, worker_id: str, running: Collection[str]) -> None:
        """Forget the stops of attempts ``worker_id`` no longer runs (its ``running`` list)."""
        mine = self._stops.get(worker_id)
        if mine:
            for task_id in [t for t in mine if t not in running]:
                del mine[task_id]
            if not mine:
                del self._stops[worker_id]

    # --- control for embedders and operators ----------------------------------------------

    def submit(self, task: TaskSpec, by: str = "") -> SubmitAnswer:
        """Register ``task`` (not its graph: ``task.deps`` are not looked at) as runnable by
        the assistants, submitted by ``by``; see :class:`~conveyor.protocol.Submit`.

        A task new here (or known only as another's dependency) takes the spec's identity,
        labels, resources and retry settings, and has no dependencies until an assistant walks
        it (:attr:`Work.walk`); one already registered keeps what its workers said, except a
        broken (``UNKNOWN``) one, which is walked afresh by an assistant. ``DONE``,
        ``FAILED``, ``DISABLED`` or ``UNKNOWN`` becomes ``PENDING`` (a disabled task's failures
        forgotten, as :meth:`reenable` does); ``PENDING`` and ``RUNNING`` stay.
        """
        with self._lock:
            rec = self._record(task.task_id)
            self._touch(rec)
            if not rec.registered:
                rec.registered = True
                rec.family, rec.module, rec.params = task.family, task.module, task.params
                rec.loader = task.loader
                rec.resources = task.resources
                rec.retry_count, rec.retry = task.retry_count, task.retry
                labels = tuple(sorted(set(task.labels)))
                if labels:
                    rec.labels = labels
                    self._labelled.add(rec.task_id)
                    self._label_sets.add(labels)
            rec.submitted_by = by or "anonymous"
            if rec.status == UNKNOWN and rec.stakeholders:  # broken when it was walked: an
                # assistant walks it afresh (its hand-out says walk), whoever walked it then
                for worker_id in rec.stakeholders:
                    mine = self._by_worker.get(worker_id)
                    if mine is not None:
                        mine.discard(rec.task_id)
                rec.stakeholders = ()
            if rec.status in (DONE, FAILED, DISABLED, UNKNOWN):
                if rec.status == DISABLED:
                    rec.failures = None
                rec.wake_at = 0.0  # (its entry in the wake-up heap no longer matches)
                self._set_status(rec, PENDING, Cause.SUBMITTED)
            rec.own_priority = max(rec.own_priority, task.priority)
            self._raise_priority(rec, rec.own_priority)
            self._offer(rec)
            if rec.labels:
                self._update_waiting(rec)
            return SubmitAnswer(rec.task_id, rec.status)

    def cancel(self, task_id: str, downstream: bool = False, by: str = "") -> CancelAnswer:
        """Disable ``task_id`` (with ``downstream``, every task that needs it, directly or
        not) with the explanation "cancelled"; see :class:`~conveyor.protocol.Cancel`.

        A running attempt ends at once here (its resources and slot freed, its history entry
        ``interrupted``) and its worker is told to stop it (:meth:`ping`, ``get_work``); its
        late failure report leaves the task cancelled, while a success that came first counts
        (the work is done). A cancelled task stays ``DISABLED`` (it is not enabled again by
        time) until it is re-enabled or submitted. ``DONE`` tasks are kept as they are.
        :class:`~conveyor.errors.UnknownTask` if the scheduler does not know ``task_id``.
        """
        with self._lock:
            start = self._tasks.get(task_id)
            if start is None or not start.registered:
                raise UnknownTask(task_id)
            now = self.clock()
            order = [start]
            if downstream:
                seen = {task_id}
                for rec in order:  # (grows while it is walked: breadth first)
                    for dependent in sorted(rec.dependents):
                        if dependent not in seen:
                            seen.add(dependent)
                            order.append(self._tasks[dependent])
            cancelled: list[str] = []
            stopping: list[str] = []
            kept: list[str] = []
            for rec in order:
                if rec.status == DONE:
                    kept.append(rec.task_id)
                    continue
                if rec.status == RUNNING and rec.worker is not None:
                    mine = self._stops.get(rec.worker)
                    if mine is None:
                        mine = self._stops[rec.worker] = {}
                    mine[rec.task_id] = rec.attempt
                    stopping.append(rec.task_id)
                    _end_attempt(rec, rec.attempt, AttemptEnd.INTERRUPTED, now)
                rec.wake_at = 0.0  # (never enabled again by time)
                self._set_status(rec, DISABLED, Cause.CANCELLED)
                self._touch(rec)
                rec.explanation = CANCELLED
                rec.cancelled = True
                cancelled.append(rec.task_id)
                if not rec.stakeholders:  # (submitted, never walked: nobody else brings it
                    # to be looked at for removal)
                    heapq.heappush(self._removals, (now + self.remove_delay, rec.task_id))
            return CancelAnswer(tuple(cancelled), tuple(stopping), tuple(kept))

    def release(self, worker_id: str, task_ids: Iterable[str] | None = None) -> None:
        """``worker_id``'s run ended: it no longer needs the tasks ``task_ids`` it registered
        (None: every task the worker id registered, what a worker older than ``task_ids``
        asks).

        The worker stops being a stakeholder of each of them, so a task nobody else registered
        is looked at ``remove_delay`` later and removed like a gone worker's (unless it runs, a
        kept task depends on it, or a live assistant may run it). It stays among their runners,
        as a gone worker does, so what blocks a task still reads the same; its queued entries
        for them go stale (a worker is handed only what it is a stakeholder of) and registering
        again queues them afresh. Only the named tasks are released, so runs sharing one worker
        id at the same time keep the others: what they still need stays queued and kept. The
        worker itself stays known and alive. Releasing twice, a task the worker did not
        register or one unknown here changes nothing.
        """
        with self._lock:
            now = self._seen(worker_id)
            mine = self._by_worker.get(worker_id)
            if not mine:
                return
            if task_ids is None:
                released: Iterable[str] = list(mine)
            else:
                released = [t for t in dict.fromkeys(task_ids) if t in mine]
            later = now + self.remove_delay
            for task_id in released:
                mine.discard(task_id)
                rec = self._tasks.get(task_id)
                if rec is None or worker_id not in rec.stakeholders:
                    continue
                if self._dirty is not None:  # (stored apart: see take_changes_apart)
                    self._interest.add(task_id)
                rec.stakeholders = tuple(w for w in rec.stakeholders if w != worker_id)
                heapq.heappush(self._removals, (later, task_id))
                if rec.labels:
                    self._update_waiting(rec)
            if not mine:
                del self._by_worker[worker_id]

    def _seen(self, worker_id: str, assistant: bool = False) -> float:
        now = self.clock()
        workers = self._workers
        if worker_id not in workers:
            if self._dirty is not None:
                self._dirty_workers.add(worker_id)
                self._removed_workers.discard(worker_id)
            if self.on_worker is not None:
                self.on_worker(worker_id, "back" if worker_id in self._departed else "new", ())
        workers[worker_id] = now
        if self._departed:
            self._departed.pop(worker_id, None)  # (back before it was forgotten)
        if assistant and worker_id not in self._assistants:
            self._dirty_workers.add(worker_id)
            self._assistants.add(worker_id)
            for rec in self._tasks.values():
                self._offer(rec, only=_ASSISTANTS)
        return now

    def work_left(self, worker_id: str) -> WorkLeft:
        """Count this worker's tasks that may still run: pending here or running elsewhere.

        A pending task counts only if it can still make progress: it (or a retry of it) may be
        handed out, and no dependency is stuck (DISABLED, broken, or pending with nobody able
        to run it, like missing external data).
        """
        with self._lock:
            self._wake(self.clock())
            pending = unique = elsewhere = last = 0
            memo: dict[str, bool] = {}
            for task_id in self._by_worker.get(worker_id, ()):
                rec = self._tasks[task_id]
                if rec.status == RUNNING and rec.worker != worker_id:
                    elsewhere += 1
                elif rec.status in (PENDING, FAILED) and self._can_progress(rec, memo):
                    pending += 1
                    unique += rec.stakeholders == (worker_id,)
                    last += rec.stakeholders[-1] == worker_id  # (in registration order)
            return WorkLeft(pending, unique, elsewhere, last)

    def _can_progress(self, start: TaskRecord, memo: dict[str, bool]) -> bool:
        """True if ``start`` may still run (iterative post-order search, memoised)."""
        visiting: set[str] = set()  # on the current path: a cycle counts as no obstacle
        stack: list[tuple[TaskRecord, bool]] = [(start, False)]
        while stack:
            rec, expanded = stack.pop()
            if rec.task_id in memo:
                continue
            if rec.status in (DONE, RUNNING):
                memo[rec.task_id] = True
                continue
            if rec.status in (DISABLED, UNKNOWN) or not rec.runners:
                memo[rec.task_id] = False
                continue
            deps = [self._tasks[d] for d in rec.deps]
            todo = [d for d in deps if d.task_id not in memo and d.task_id not in visiting]
            if todo and not expanded:
                visiting.add(rec.task_id)
                stack.append((rec, True))
                stack.extend((d, False) for d in todo)
                continue
            visiting.discard(rec.task_id)
            memo[rec.task_id] = all(memo.get(d.task_id, True) for d in deps)
        return memo[start.task_id]

    def statuses(self, task_ids: Iterable[str]) -> dict[str, TaskStatus]:
        """The status of each known task id."""
        with self._lock:
            self._wake(self.clock())
            return {t: self._tasks[t].status for t in task_ids if t in self._tasks}

    def explanation(self, task_id: str) -> str:
        """The stored failure explanation of a task ('' if none)."""
        with self._lock:
            rec = self._tasks.get(task_id)
            return rec.explanation if rec else ""

    def task_list(self) -> list[TaskInfo]:
        """Every registered task (the entries of the server's ``GET /api/v1/tasks``)."""
        with self._lock:
            self._wake(self.clock())
            return [_describe(rec) for rec in self._tasks.values() if rec.registered]

    def waited(self, rec: TaskRecord) -> float | None:
        """How long ``rec`` has been ready (seconds), or None if it is not (or became ready
        before this process knew it); read by a move's observer on a hand-out."""
        return max(0.0, self.clock() - rec.ready_at) if rec.ready_at > 0 else None

    def worker_count(self) -> int:
        """How many workers are known (heard from, not declared gone)."""
        with self._lock:
            return len(self._workers)

    def worker_list(self) -> list[dict[str, Any]]:
        """Every known worker: when it was last seen, its host (from a default worker id,
        ``host-pid-n``; "" otherwise) and the tasks it runs."""
        with self._lock:
            return [
                {
                    "worker_id": w,
                    "last_seen": seen,
                    "assistant": w in self._assistants,
                    "host": _host_of(w),
                    "running": sorted(self._running_on.get(w, ())),
                }
                for w, seen in self._workers.items()
            ]


def _handler(
    route: Route,
) -> tuple[str, Callable[[Any], tuple[Any, ...]], Callable[[Any], Any], Any]:
    """How :meth:`SchedulerCore.call` serves ``route``: the name of its method, a function
    giving a request's field values in order, one making the method's result the answer, and
    the method itself (a subclass overriding it is called by :meth:`Route.arguments` instead;
    worked out once: the dispatcher is on every call's path)."""
    own = getattr(SchedulerCore, route.name, None)
    if not callable(own):  # (a route without its method)
        raise ImportError(f"SchedulerCore has no method {route.name}() for its route")
    names = [f.name for f in dataclasses.fields(route.request)]
    fields = operator.attrgetter(*names)
    values = fields if len(names) > 1 else lambda request: (fields(request),)
    ok = route.answer is Ok
    answer: Callable[[Any], Any] = (lambda _: _OK) if ok else route.answer_of
    return route.name, values, answer, own


_OK = Ok()
_DISPATCH = {route.request: _handler(route) for route in ROUTES.values()}
"""The one dispatcher's table: each request type of :data:`~conveyor.protocol.ROUTES` ->
how :meth:`SchedulerCore.call` serves it."""


def _own_get_work(scheduler: SchedulerCore) -> bool:
    """Whether ``scheduler``'s class has a ``get_work`` of its own (True: it may predate
    batches, see :meth:`SchedulerCore.call`)."""
    return type(scheduler).get_work is not SchedulerCore.get_work


def _host_of(worker_id: str) -> str:
    """The host of a worker id made by conveyor (``host-pid-n``), else ""."""
    parts = worker_id.rsplit("-", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return parts[0]
    return ""


def _end_attempt(rec: TaskRecord, attempt: int, outcome: AttemptEnd, now: float) -> None:
    """Note in ``rec``'s history how the hand-out ``attempt`` (0: the latest) ended.

    A success reported after the scheduler took the attempt back (its worker seemed gone)
    corrects the outcome recorded then; its end time stays.
    """
    for entry in reversed(rec.attempts or ()):
        if attempt in (0, entry.attempt):
            if entry.ended is None:
                entry.ended = now
            entry.outcome = outcome
            return


def _describe(rec: TaskRecord) -> TaskInfo:
    return TaskInfo(
        task_id=rec.task_id,
        family=rec.family,
        params=dict(rec.params),
        status=rec.status,
        worker=rec.worker,
        priority=rec.priority,
        dependencies=tuple(rec.deps),
        status_message=rec.status_message,
        progress=rec.progress,
        tracking_url=rec.tracking_url,
        explanation=rec.explanation,
        waiting=rec.waiting,
        submitted_by=rec.submitted_by,
    )
