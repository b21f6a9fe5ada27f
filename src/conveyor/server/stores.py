"""What a state store of the central scheduler is (entry points in ``conveyor.state_stores``;
the built-in ``memory`` and ``sqlite`` live in :mod:`.sqlite`): :class:`StateStore` (the writes)
and :class:`TaskReads` (what the web UI reads, as typed values of :mod:`conveyor.protocol`),
and the functions that compute what the UI shows of a stored row, for every store alike.

A store saves rows (see :mod:`conveyor.scheduler.persist`) and loads them at start-up. ``save``
returns only once the rows are committed, so the server acknowledges nothing it could lose to
``kill -9``. The web UI reads the store itself, never a copy, and never a database connection.

Unusable state is refused, not served. A file that is not a conveyor state database (another
application's tables, or ours with other columns) is refused when the store is opened, before
anything is written to it. Rows that cannot be read back as records make ``load()`` raise
:class:`CorruptState` listing each as a :class:`BadRow`, again having changed nothing; a store
that can hold such rows also implements :class:`CanQuarantine`, which moves them aside (the
SQLite store: into its ``quarantine`` table, raw data and reason kept) so that the next
``load()`` returns the rest. Whether that happens is the server's decision
(``[server] on_corrupt_state``), not the store's.

A store checks each row it loads with :func:`from_row` (re-exported here from
:mod:`conveyor.scheduler.persist`, with :class:`RowError`, which it raises for a row that is not
a task record), so that a third-party store needs nothing but this module. A store may write a
row compact (:func:`compact_row`: the fields at their default left out, and a field it keeps
elsewhere, such as ``deps`` in an edges table; :func:`stored_json` is its JSON) and gives it
back whole (:func:`full_row`):
``load()`` returns, and the functions below read, whole rows. A row's ``deps`` may be the
record's own list (see :func:`~conveyor.scheduler.persist.to_row`): read it while saving,
keep nothing of it.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from ..errors import ConfigError, StateStoreError
from ..protocol import (
    Changes,
    GraphNode,
    StoredWorker,
    TaskDetail,
    TaskEntry,
    TaskFilters,
    TaskGraph,
    TaskInfo,
    TaskPage,
    TaskRef,
    TaskStatus,
    TaskSummary,
)
from ..reasons import failure_reason
from ..scheduler.persist import (
    RowError,
    compact_row,
    from_row,
    from_stored,
    full_row,
    read_row,
    stored_json,
    workers_json,
)
from ..scheduler.policy import ATTEMPT_HISTORY, TaskRecord
from ..secrets import REDACTED, hide_secret_params, is_secret_name
from ..settings import Field

if TYPE_CHECKING:
    from .sqlite import MemoryStore, SqliteStore

__all__ = [
    "DEPENDENTS_SHOWN",
    "GRAPH_CAP",
    "PAGE_MAX",
    "BadRow",
    "CanCompact",
    "CanLead",
    "CanListIds",
    "CanProbe",
    "CanQuarantine",
    "CanSaveStakeholders",
    "CorruptState",
    "Deposed",
    "GraphWalk",
    "Lease",
    "MemoryStore",
    "RowError",
    "SqliteStore",
    "StateStore",
    "StoreContext",
    "TaskReads",
    "TaskRecord",
    "Unstored",
    "UnusableRow",
    "blocked_by",
    "compact_row",
    "from_row",
    "from_stored",
    "full_row",
    "graph_answer",
    "graph_layers",
    "list_entry",
    "list_worker",
    "matches",
    "public_params",
    "read_row",
    "search_text",
    "shown_row",
    "status_of",
    "stored_entry",
    "stored_info",
    "stored_json",
    "task_detail",
    "task_info",
    "walk_graph",
    "workers_json",
]

Rows = list[dict[str, Any]]
Workers = list[tuple[str, bool]]

GRAPH_CAP = 10_000
"""The most nodes a graph answer of the web UI holds (the nearest to its task first)."""
PAGE_MAX = 500
"""The largest page of the task list the web UI asks for."""
DEPENDENTS_SHOWN = 500
"""The most dependents a task's detail lists (their total is given too)."""


def __getattr__(name: str) -> Any:
    """The built-in stores, which live in :mod:`.sqlite` (imported when first named, as the
    ``conveyor.state_stores`` entry points ``memory`` and ``sqlite`` do)."""
    if name in ("SqliteStore", "MemoryStore"):
        from . import sqlite

        return getattr(sqlite, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class StoreContext:
    """What a state store is built with (``cls(context)``): ``[server] state_path`` and the
    store's own ``[state_stores.<name>]`` table, validated against its ``settings_schema``."""

    state_path: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)
    holder: str = ""
    """Who opens the store (``http://127.0.0.1:8082``), for the error a second opener gets
    from a store that allows one holder at a time."""


@dataclass(frozen=True, slots=True)
class BadRow:
    """A stored row that cannot be read back: where it is, and what is wrong with it."""

    key: Any
    """The store's own handle on the row, for :meth:`CanQuarantine.quarantine`."""
    where: str
    """The row as a message names it: ``task row 3 (task_id 'a')``."""
    reason: str
    """What is wrong, naming the field and what was expected."""


class CorruptState(ConfigError):
    """``load()`` found rows it cannot return; nothing was changed. ``bad`` lists them all."""

    def __init__(self, location: str, bad: Sequence[BadRow]) -> None:
        """``location`` names the state (``state database 'x.db'``); ``bad`` is not empty."""
        first = bad[0]
        count = "1 unusable row" if len(bad) == 1 else f"{len(bad)} unusable rows, the first"
        super().__init__(
            f"{location} holds {count}: {first.where}: {first.reason}", source=location
        )
        self.location = location
        self.bad = tuple(bad)


class Unstored(Exception):
    """A state change refused because the state store cannot store it now (the server
    answers 503 with ``Retry-After``); nothing was changed."""


class Deposed(Exception):
    """A save refused because another server took the lease since this one's term began
    (:class:`CanLead`): nothing of it was written, and this server is no longer the leader."""


@dataclass(frozen=True, slots=True)
class Lease:
    """Who leads the servers sharing a store (:meth:`CanLead.lead`'s answer)."""

    term: int
    """The current term: one more each time the lease changes hands (0: never taken)."""
    holder: str
    """The public URL of the server holding a live lease ("" when none does)."""
    held: bool
    """Whether the asking server holds it now (and its saves carry ``term``)."""
    expires_in: float
    """Seconds until the lease runs out unless renewed, by the store's clock (0 if none)."""


class StateStore(Protocol):
    """What the server needs from a store; built once as ``cls(StoreContext)``.
    ``conveyor.testing.stores.check_state_store`` is its conformance check."""

    settings_schema: ClassVar[dict[str, Field]]

    def load(self) -> tuple[Rows, Workers]:
        """Every saved task row and ``(worker_id, assistant)`` pair.

        Raises :class:`CorruptState` (having changed nothing) if some rows cannot be read back
        as what :meth:`save` was given: each row returned passes
        :func:`~conveyor.scheduler.persist.from_row`.
        """

    def save(
        self,
        rows: Iterable[dict[str, Any]],
        workers: Iterable[tuple[str, bool]],
        *,
        gone_tasks: Collection[str] = (),
        gone_workers: Collection[str] = (),
    ) -> None:
        """Upsert rows and workers and delete the rows of ``gone_tasks`` and ``gone_workers``
        (pruned by the scheduler, ``remove_delay``); return once all of it is durable."""

    def close(self) -> None:
        """Release the store."""


@runtime_checkable
class TaskReads(Protocol):
    """What the web UI and ``GET /api/v1/tasks`` read, from what the store holds (every
    committed save), as typed
    values of :mod:`conveyor.protocol`; every state store implements it (the server refuses
    to start with one that does not). A read must not hold up :meth:`StateStore.save` nor
    take the scheduler's lock, and must not list every task to answer where it can help it.
    Tasks saved with ``registered`` false are not in the list, counts nor families.

    :func:`list_entry`, :func:`task_detail`, :func:`task_info`, :func:`blocked_by`,
    :func:`graph_answer`, :func:`matches` and :func:`list_worker` compute what the UI shows
    of a row: a store answers with them (the built-in ones do), so that every store shows the
    same; a store holding its rows in memory walks a graph with :func:`walk_graph`.
    ``conveyor.testing.check_state_store`` checks the reads too.
    """

    def summary(self) -> TaskSummary:
        """The count of registered tasks per state (all six, 0 included)."""

    def families(self) -> tuple[str, ...]:
        """Every family of a registered task, sorted ("" left out)."""

    def page(self, filters: TaskFilters, cursor: int | None, limit: int) -> TaskPage:
        """The registered tasks ``filters`` match (:func:`matches`) whose change number is
        below ``cursor`` (None: any), newest change first, at most ``limit``; ``next`` is the
        last one's change number when there may be more, else None."""

    def detail(self, task_id: str) -> TaskDetail | None:
        """The task's detail (:func:`task_detail`), or None if the store has no such row."""

    def graph(self, task_id: str, downstream: bool, cap: int = GRAPH_CAP) -> TaskGraph | None:
        """Breadth-first from the task along its dependencies (and with ``downstream`` its
        dependents too), at most ``cap`` nodes, nearest first; None for an unknown task."""

    def changes_since(self, seq: int, limit: int = PAGE_MAX) -> Changes:
        """The latest change number, and the ids of the tasks whose change number is above
        ``seq``, oldest first, at most ``limit`` (0: only the number, cheaply)."""

    def workers(self) -> tuple[StoredWorker, ...]:
        """Every stored worker."""

    def task_infos(self) -> tuple[TaskInfo, ...]:
        """Every registered task as ``GET /api/v1/tasks`` lists it (:func:`task_info`:
        parameters unredacted, the route is behind the token), oldest change first."""


@runtime_checkable
class CanListIds(Protocol):
    """A store that can list the ids of every task a filter matches in one read (optional:
    without it, the web UI's *Retry all failed* pages through :meth:`TaskReads.page`)."""

    def task_ids(self, filters: TaskFilters) -> tuple[str, ...]:
        """The id of every registered task ``filters`` match (:func:`matches`), as one
        consistent read of the committed state (a task saved meanwhile is listed as it was or
        as it is, never skipped for having moved), newest change first as :meth:`page`."""


@runtime_checkable
class CanLead(Protocol):
    """A store several servers share, one of them leading (docs/server.md, "Running several
    schedulers"). Leadership is a lease in the store with a term that only
    grows; a server that does not hold it is a standby and writes nothing.

    The server calls :meth:`lead` every third of ``[server] leader_lease`` (and a standby
    when the lease it saw runs out), loads the state after it took the lease, never before,
    then arms the term (:meth:`fence`). From then on each :meth:`StateStore.save` carries that
    term, checked in the transaction it commits: a save after another server took the lease
    raises :class:`Deposed` and writes nothing, so a leader paused or cut off past its lease
    can never commit again. A store that was never asked for the lease saves unfenced.
    """

    def lead(self, holder: str, lease: float) -> Lease:
        """Renew the lease if ``holder`` holds it under this store's term, or take it (a new
        term, one more than any before) if nobody holds a live one; in both cases for
        ``lease`` seconds from now by the store's clock. Otherwise change nothing. Answer who
        holds it now; raise if the store cannot be reached."""

    def fence(self, term: int) -> None:
        """Carry ``term`` in every save from now on; 0: refuse every save (:class:`Deposed`).
        Taking the lease does not arm its term: the server calls this under its lock once it
        loaded the state after taking it, and with 0 when it stands down, so a call that began
        under an older term can never commit under a newer one."""

    def resign(self) -> None:
        """Give the lease up now if this store holds it (a clean stop: a standby takes over
        at its next look instead of when the lease runs out); saves are refused after it."""


@runtime_checkable
class CanQuarantine(Protocol):
    """A store that can set aside the rows its ``load()`` reported in :class:`CorruptState`."""

    def quarantine(self, bad: Sequence[BadRow]) -> str:
        """Move ``bad`` out of the state, keeping their raw data and reasons (never deleting
        them), in one committed transaction; return where they went, for the operator."""


@runtime_checkable
class CanProbe(Protocol):
    """A store that can tell whether a write would be made durable now."""

    def probe(self) -> None:
        """Commit a write that changes nothing, raising what :meth:`StateStore.save` would
        raise now; the server calls it while it refuses changes, to know when to resume."""


@runtime_checkable
class CanCompact(Protocol):
    """A store whose files keep their high-water size unless space is given back."""

    def compact(self) -> int:
        """Give back a bounded amount of freed space (short enough not to hold up a save);
        the number of pages given back. The server calls it every second."""


@runtime_checkable
class CanSaveStakeholders(Protocol):
    """A store that can set the stakeholders and runners of a stored row without writing the
    rest of it (optional: without it, whole rows are saved). Every worker of a graph registers
    all of it, and releases all of it when its run ends; from the second worker on, that
    changes only those two fields of each task, and a whole row costs some 20 µs to write."""

    def save_stakeholders(
        self,
        rows: Iterable[dict[str, Any]],
        workers: Iterable[tuple[str, bool]],
        stakeholders: Sequence[tuple[str, Sequence[str], Sequence[str]]],
        *,
        gone_tasks: Collection[str] = (),
        gone_workers: Collection[str] = (),
    ) -> None:
        """:meth:`StateStore.save`, and in the same transaction, for each ``(task_id,
        stakeholders, runners)`` of ``stakeholders`` (each task once, none among ``rows``),
        the stored row of the task given those two fields, as :func:`to_row` would write
        them, and otherwise left as it is. A task with no stored row is skipped. A store that
        can lead (:class:`CanLead`) checks its term here as in ``save``."""


# --- what the web UI shows of a row: one place, for every store -----------------------------------

_STUCK = frozenset({TaskStatus.FAILED, TaskStatus.DISABLED, TaskStatus.UNKNOWN})
_STATUSES = {str(s): s for s in TaskStatus}


def status_of(value: object) -> TaskStatus:
    """A stored status as a :class:`TaskStatus`, for a reader: another value (a column
    edited behind the server's back; the next start reports its row) reads as UNKNOWN. A
    dict lookup: calling ``TaskStatus`` costs about a microsecond, and a graph answer has
    10,000 nodes."""
    found = _STATUSES.get(value)  # type: ignore[call-overload]  # (any value: None if not one)
    return found if found is not None else TaskStatus.UNKNOWN


def list_worker(row: Mapping[str, Any]) -> str | None:
    """The worker running the task of ``row``, else the last to run it (None: nobody)."""
    attempts = row.get("attempts") or ()
    worker: str | None = row["worker"] or (attempts[-1]["worker"] if attempts else None)
    return worker


_secret_name = functools.lru_cache(maxsize=4096)(is_secret_name)
""":func:`~conveyor.secrets.is_secret_name`, remembered: a store asks it of every parameter of
every row it writes, and a family's parameter names are few."""


def search_text(row: Mapping[str, Any]) -> str:
    """The lower-case text the list's ``text`` filter searches: the id and each public
    parameter as ``name=value`` (secret-named ones left out), one a line."""
    public = (f"{k}={v}" for k, v in row["params"].items() if not _secret_name(k))
    return "\n".join((row["task_id"], *public)).lower()


def matches(row: Mapping[str, Any], filters: TaskFilters) -> bool:
    """Whether the task of ``row`` is in the list under ``filters`` (registered tasks only)."""
    if not row["registered"]:
        return False
    return (
        (not filters.state or str(row["status"]) == filters.state)
        and (not filters.family or row["family"] == filters.family)
        and (not filters.worker or list_worker(row) == filters.worker)
        and (not filters.text or filters.text.lower() in search_text(row))
    )


def public_params(params: Mapping[str, str]) -> dict[str, str]:
    """``params`` with the values of secret-named ones hidden."""
    return {k: REDACTED if is_secret_name(k) and v else v for k, v in params.items()}


def _reason(row: Mapping[str, Any]) -> str:
    """Why a FAILED, DISABLED or UNKNOWN task is so, in one line ("" for another state, or
    without an explanation), secrets hidden; for a ready PENDING task no live worker can
    take, why it waits."""
    if row["status"] == TaskStatus.PENDING:
        return row.get("waiting") or ""
    explanation = row["explanation"]
    if not explanation or row["status"] not in _STUCK:
        return ""
    return failure_reason(explanation, row["params"])


class UnusableRow(StateStoreError):
    """A stored task row that a reader (the web UI, ``GET /api/v1/tasks``) cannot show: one
    edited behind the server's back after it started, since a start checks every row. The
    server's own state is not affected; the row is written anew at the task's next change,
    and a restart reports it (``--recover`` moves it aside). Answered 500 with the message."""


def shown_row(task_id: object, data: object, deps: list[str] | None = None) -> dict[str, Any]:
    """The whole row stored as JSON text ``data`` under ``task_id``, with ``deps`` (kept apart
    by the store; None or empty: none there) standing for its dependencies, for a reader:
    checked as a load checks it (:func:`read_row`), so that what a page shows is a task
    record, never a value that breaks it. UnusableRow naming the task and what is wrong."""
    try:
        if not isinstance(data, str):
            raise RowError(f"data is {type(data).__name__}; expected JSON text", "data")
        stored, _ = read_row(task_id, data, deps or None, edged=True)
    except RowError as exc:
        raise UnusableRow(
            f"the stored row of task {task_id!r} is unusable: {_problem(exc)}; the scheduler's"
            " own state is not affected: the row is written anew at the task's next change,"
            " and a restart with --recover moves it aside"
        ) from None
    return full_row(stored, deps=deps) if deps else full_row(stored)


def _problem(exc: RowError) -> str:
    """What is wrong with a row, for the UI, the API and the log: without the value that a
    RowError about a field's value quotes (:attr:`RowError.expected`), which may hold a
    secret parameter's value or a text that the UI shows redacted."""
    if exc.expected:
        return f"field {exc.field!r} is not what a task row holds; expected {exc.expected}"
    return str(exc)


def _unknown(task_id: object, family: object) -> dict[str, Any]:
    """The fields a task list's entry for an unusable row shares with the API's: an UNKNOWN
    task with the row's id as text (one edited into another type shows as that value) and
    its family column where that is text, nothing else of it."""
    return {
        "task_id": task_id if isinstance(task_id, str) else repr(task_id),
        "family": family if isinstance(family, str) else "",
        "params": {},
        "status": TaskStatus.UNKNOWN,
        "worker": None,
        "priority": 0,
        "status_message": "",
        "progress": None,
    }


def stored_entry(
    task_id: object, family: object, data: object, seq: int, changed: float
) -> TaskEntry:
    """The task list's line for the row stored as ``data`` (:func:`list_entry`); for a row
    that is unusable (:func:`shown_row`), a line that says so as an UNKNOWN task's reason
    instead, so that one edited row does not stop the list."""
    try:
        return list_entry(shown_row(task_id, data), seq, changed)
    except UnusableRow as exc:
        return TaskEntry(**_unknown(task_id, family), reason=str(exc), changed=changed, seq=seq)


def stored_info(
    task_id: object, family: object, data: object, deps: list[str] | None = None
) -> TaskInfo:
    """The entry of ``GET /api/v1/tasks`` for the row stored as ``data`` (:func:`task_info`);
    for a row that is unusable (:func:`shown_row`), an UNKNOWN task whose explanation says
    so, so that one edited row does not stop the list."""
    try:
        return task_info(shown_row(task_id, data, deps))
    except UnusableRow as exc:
        return TaskInfo(
            **_unknown(task_id, family), dependencies=(), tracking_url="", explanation=str(exc)
        )


def list_entry(row: Mapping[str, Any], seq: int, changed: float) -> TaskEntry:
    """The task list's line for ``row``, saved at ``changed`` as change ``seq``."""
    params = row["params"]
    return TaskEntry(
        task_id=row["task_id"],
        family=row["family"],
        params=public_params(params),
        status=status_of(row["status"]),
        worker=list_worker(row),
        priority=row["priority"],
        status_message=hide_secret_params(row["status_message"], params),
        reason=_reason(row),
        progress=row["progress"],
        changed=changed,
        seq=seq,
    )


def task_info(row: Mapping[str, Any]) -> TaskInfo:
    """The entry of ``GET /api/v1/tasks`` for ``row``: the scheduler's record as it was
    saved, parameters and texts unredacted (the route is behind the server's token)."""
    return TaskInfo(
        task_id=row["task_id"],
        family=row["family"],
        params=dict(row["params"]),
        status=status_of(row["status"]),
        worker=row["worker"],
        priority=row["priority"],
        dependencies=tuple(row["deps"]),
        status_message=row["status_message"],
        progress=row["progress"],
        tracking_url=row["tracking_url"],
        explanation=row["explanation"],
        waiting=row.get("waiting") or "",
        submitted_by=row.get("submitted_by") or "",
    )


def task_detail(
    row: Mapping[str, Any],
    changed: float,
    *,
    deps: Sequence[TaskRef],
    dependents: Sequence[TaskRef],
    dependents_total: int,
    blocked: Sequence[TaskRef],
) -> TaskDetail:
    """The detail of ``row``'s task: ``deps`` in the row's order, at most
    :data:`DEPENDENTS_SHOWN` ``dependents`` of ``dependents_total``, and what blocks it
    (:func:`blocked_by`)."""
    params = row["params"]
    return TaskDetail(
        task_id=row["task_id"],
        family=row["family"],
        module=row["module"],
        params=public_params(params),
        status=status_of(row["status"]),
        worker=row["worker"],
        priority=row["priority"],
        resources=row["resources"],
        deps=tuple(deps),
        dependents=tuple(dependents),
        dependents_total=dependents_total,
        status_message=hide_secret_params(row["status_message"], params),
        progress=row["progress"],
        tracking_url=hide_secret_params(row["tracking_url"], params),
        explanation=hide_secret_params(row["explanation"], params),
        failures=len(row["failures"]),
        retry_count=row["retry_count"],
        attempts=tuple(row.get("attempts") or ()),
        attempts_kept=ATTEMPT_HISTORY,
        blocked_by=tuple(blocked),
        changed=changed,
        next_retry=_next_retry(row),
        labels=tuple(row.get("labels") or ()),
        waiting=row.get("waiting") or "",
        batch=tuple(row.get("batch") or ()),
        submitted_by=row.get("submitted_by") or "",
    )


def _next_retry(row: Mapping[str, Any]) -> float | None:
    """When ``row``'s task is retried (``FAILED``) or enabled again (``DISABLED``), epoch
    seconds; None for another status (or a record without a wake-up time)."""
    wake_at = row.get("wake_at") or 0.0
    if wake_at > 0 and row["status"] in (TaskStatus.FAILED, TaskStatus.DISABLED):
        return float(wake_at)
    return None


def blocked_by(
    status: Sequence[str], runners: Sequence[int], edges: Iterable[tuple[int, int]]
) -> tuple[list[int], list[int]]:
    """What keeps node 0 from running, in its upstream graph (nodes with their ``status``
    and number of workers able to run them, ``edges`` (task, dependency) indices): the
    nodes FAILED, DISABLED or UNKNOWN, or PENDING with nobody able to run them (missing
    external data), reached through nodes that are not DONE; and every node on a path from
    node 0 to one of them."""
    edges = list(edges)
    deps: list[list[int]] = [[] for _ in status]
    for task, dep in edges:
        deps[task].append(dep)
    open_ = [s != TaskStatus.DONE for s in status]
    reach = [False] * len(status)
    if not status or not open_[0]:
        return [], []
    reach[0] = True
    queue = deque([0])
    blocking = []
    while queue:
        node = queue.popleft()
        stuck = status[node] in _STUCK or (status[node] == TaskStatus.PENDING and not runners[node])
        if node and stuck:
            blocking.append(node)
            continue  # an obstacle: what is behind it is its own story
        for dep in deps[node]:
            if open_[dep] and not reach[dep]:
                reach[dep] = True
                queue.append(dep)
    # the nodes from which an obstacle can be reached, among those reached
    dependents: list[list[int]] = [[] for _ in status]
    for task, dep in edges:
        if reach[task] and reach[dep]:
            dependents[dep].append(task)
    on_path = [False] * len(status)
    queue = deque(blocking)
    for node in blocking:
        on_path[node] = True
    while queue:
        node = queue.popleft()
        for task in dependents[node]:
            if not on_path[task]:
                on_path[task] = True
                queue.append(task)
    return blocking, [i for i, on in enumerate(on_path) if on]


def graph_layers(count: int, edges: Iterable[tuple[int, int]], depth: Sequence[int]) -> list[int]:
    """The longest-path layer of each node from node 0 along ``edges`` (a, b): b is at least
    one layer beyond a; O(V+E). Nodes on a cycle keep their breadth-first ``depth``."""
    outgoing: list[list[int]] = [[] for _ in range(count)]
    incoming = [0] * count
    for a, b in edges:
        if a != b:
            outgoing[a].append(b)
            incoming[b] += 1
    layer = list(depth)
    ready = deque(i for i in range(count) if incoming[i] == 0)
    while ready:
        node = ready.popleft()
        for nxt in outgoing[node]:
            layer[nxt] = max(layer[nxt], layer[node] + 1)
            incoming[nxt] -= 1
            if incoming[nxt] == 0:
                ready.append(nxt)
    return layer


@dataclass(slots=True)
class GraphWalk:
    """Nodes found walking breadth-first out from ``ids[0]``, each with its distance, family,
    status and number of workers able to run it, the edges between them as (task,
    dependency) indices, and whether the walk stopped at its cap with more to find."""

    ids: list[str] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    family: list[str] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    runners: list[int] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)
    truncated: bool = False

    def add(
        self, task_id: str, depth: int, family: str, status: str, runners: int, cap: int
    ) -> int | None:
        """Keep a node found at ``depth`` unless the walk holds ``cap`` nodes already (then
        it is marked truncated): its index, or None."""
        if len(self.ids) == cap:
            self.truncated = True
            return None
        self.ids.append(task_id)
        self.depth.append(depth)
        self.family.append(family)
        self.status.append(status)
        self.runners.append(runners)
        return len(self.ids) - 1


def walk_graph(
    root: str,
    step: Callable[[str], Iterable[str]],
    node: Callable[[str], tuple[str, str, int]],
    cap: int,
    *,
    down: bool = False,
    through_done: bool = True,
) -> GraphWalk:
    """Breadth-first from ``root``, for a store that holds its rows in memory: ``step(t)``
    gives the dependencies of ``t`` (``down``: its dependents), ``node(t)`` its family, status
    and number of workers able to run it (``("", "UNKNOWN", 0)`` for a task the store does not
    have). At most ``cap`` nodes, nearest first; without ``through_done`` DONE tasks (but the
    root) are neither kept nor passed through."""
    walk = GraphWalk()
    index: dict[str, int] = {}
    layer = [root]
    depth = 0
    while layer and not walk.truncated:
        kept = []
        for task_id in layer:
            if task_id in index:
                continue
            family, status, runners = node(task_id)
            if depth and not through_done and status == TaskStatus.DONE:
                continue
            position = walk.add(task_id, depth, family, status, runners, cap)
            if position is None:
                break
            index[task_id] = position
            kept.append(task_id)
        layer = [far for near in kept for far in step(near) if far not in index]
        depth += 1
    for task_id, i in index.items():
        for far in step(task_id):
            j = index.get(far)
            if j is not None:
                walk.edges.append((j, i) if down else (i, j))
    return walk


def graph_answer(up: GraphWalk, below: Callable[[int], GraphWalk] | None, cap: int) -> TaskGraph:
    """The :class:`~conveyor.protocol.TaskGraph` of an upstream walk ``up`` (the root's
    dependencies, :func:`walk_graph`) and, unless None or ``up`` is truncated, of
    ``below(room)``, its downstream walk of at most ``room`` nodes (the root included): the
    layers, the edges of both, and what blocks the root."""
    blocking, path = blocked_by(up.status, up.runners, up.edges)
    nodes = [
        GraphNode(up.ids[i], up.family[i], status_of(up.status[i]), layer)
        for i, layer in enumerate(graph_layers(len(up.ids), up.edges, up.depth))
    ]
    edges = list(up.edges)
    truncated = up.truncated
    if below is not None and not truncated:
        down = below(cap - len(nodes) + 1)
        truncated = down.truncated
        offset = {0: 0}
        flipped = [(d, t) for t, d in down.edges]  # layers grow along dependents here
        layers = graph_layers(len(down.ids), flipped, down.depth)
        known = {n.id: i for i, n in enumerate(nodes)}
        for i in range(1, len(down.ids)):
            if down.ids[i] in known:
                offset[i] = known[down.ids[i]]
                continue
            offset[i] = len(nodes)
            nodes.append(
                GraphNode(down.ids[i], down.family[i], status_of(down.status[i]), -layers[i])
            )
        seen = set(edges)
        for task, dep in down.edges:
            pair = (offset[task], offset[dep])
            if pair not in seen:
                seen.add(pair)
                edges.append(pair)
    return TaskGraph(0, tuple(nodes), tuple(edges), truncated, cap, tuple(blocking), tuple(path))
