"""The SQLite store's reads (its ``TaskReads``), as queries on its tables (see
``store._MIGRATIONS``).

Every function takes an SQLite connection that sees the committed state (the store's own
reading connection; none leaves this package), so the UI never takes the scheduler's lock and
never lists every task to answer: counts are one ``GROUP BY`` over an index, the task list is a
keyset page over the change number, and a graph walks the ``edges`` table outward from one
task, O(V+E) in what it returns and capped at :data:`GRAPH_CAP` nodes, reading no further than
the cap however large the graph. What people see of a row is computed by
:mod:`conveyor.server.stores` (secret-named parameters, and their appearances in texts,
hidden), as for any other store.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ...protocol import (
    Changes,
    StoredWorker,
    TaskDetail,
    TaskFilters,
    TaskGraph,
    TaskInfo,
    TaskPage,
    TaskRef,
    TaskStatus,
    TaskSummary,
)
from ..stores import (
    DEPENDENTS_SHOWN,
    GRAPH_CAP,
    PAGE_MAX,
    GraphWalk,
    blocked_by,
    graph_answer,
    shown_row,
    status_of,
    stored_entry,
    stored_info,
    task_detail,
)

__all__ = [
    "DEPENDENTS_SHOWN",
    "GRAPH_CAP",
    "PAGE_MAX",
    "all_deps",
    "changes_since",
    "deps_of",
    "detail",
    "families",
    "graph",
    "in_order",
    "latest",
    "page",
    "summary",
    "task_ids",
    "task_infos",
    "workers",
]

_CHUNK = 900  # ids per IN (...) list: under SQLite's variable limit on any build
_ARMS = 250  # tasks per UNION ALL of edge reads: under SQLite's 500 terms a compound


def _where(filters: TaskFilters) -> tuple[str, list[Any]]:
    """The SQL condition of ``filters`` on the ``tasks`` table's UI columns (written with
    each row from ``stores.list_worker`` and ``stores.search_text``), and its arguments."""
    clauses, args = ["status IS NOT NULL"], []
    for column, value in (
        ("status", filters.state),
        ("family", filters.family),
        ("worker", filters.worker),
    ):
        if value:
            clauses.append(f"{column} = ?")
            args.append(value)
    if filters.text:
        clauses.append("instr(search, ?) > 0")
        args.append(filters.text.lower())
    return " AND ".join(clauses), args


def latest(db: sqlite3.Connection) -> int:
    """The number of the latest change saved (0 for none); it grows with every save,
    removals included, and never goes back."""
    return int(db.execute("SELECT seq FROM changes").fetchone()[0])


def summary(db: sqlite3.Connection) -> TaskSummary:
    """The count of registered tasks in each state (all six), their total, and the latest
    change number."""
    counts = dict.fromkeys(TaskStatus, 0)
    rows = db.execute("SELECT status, count(*) FROM tasks WHERE status IS NOT NULL GROUP BY status")
    for status, count in rows:
        if status in counts:
            counts[TaskStatus(status)] = count
    return TaskSummary(
        counts={str(k): v for k, v in counts.items()},
        total=sum(counts.values()),
        seq=latest(db),
    )


def families(db: sqlite3.Connection) -> tuple[str, ...]:
    """Every family of a registered task, sorted."""
    rows = db.execute(
        "SELECT DISTINCT family FROM tasks WHERE status IS NOT NULL AND family != ''"
        " ORDER BY family"
    )
    return tuple(family for (family,) in rows)


def page(db: sqlite3.Connection, filters: TaskFilters, cursor: int | None, limit: int) -> TaskPage:
    """One page of the filtered task list, newest change first, and the cursor of the next
    page (None on the last). ``cursor`` is the change number the page starts below."""
    where, args = _where(filters)
    if cursor is not None:
        where += " AND seq < ?"
        args.append(cursor)
    query = (
        f"SELECT seq, changed, task_id, family, data FROM tasks WHERE {where}"
        " ORDER BY seq DESC LIMIT ?"
    )
    found = db.execute(query, [*args, limit + 1]).fetchall()
    rows = [
        stored_entry(task_id, family, data, seq, changed)
        for seq, changed, task_id, family, data in found[:limit]
    ]
    return TaskPage(tuple(rows), rows[-1].seq if len(found) > limit else None)


def task_ids(db: sqlite3.Connection, filters: TaskFilters) -> tuple[str, ...]:
    """The id of every registered task ``filters`` match: one statement, so one consistent
    snapshot (a row saved meanwhile is read as it was, or as it is, never skipped)."""
    where, args = _where(filters)
    query = f"SELECT task_id FROM tasks WHERE {where} ORDER BY seq DESC"
    return tuple(t for (t,) in db.execute(query, args))


def changes_since(db: sqlite3.Connection, seq: int, limit: int = PAGE_MAX) -> Changes:
    """The latest change number and the ids of the tasks saved after change ``seq``, oldest
    first, at most ``limit``."""
    now = latest(db)
    if limit <= 0 or seq >= now:
        return Changes(now)
    found = db.execute(
        "SELECT task_id FROM tasks WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit + 1)
    ).fetchall()
    return Changes(now, tuple(t for (t,) in found[:limit]), len(found) > limit)


def workers(db: sqlite3.Connection) -> tuple[StoredWorker, ...]:
    """Every stored worker."""
    found = db.execute("SELECT worker_id, assistant FROM workers ORDER BY rowid")
    return tuple(StoredWorker(w, bool(a)) for w, a in found)


def task_infos(db: sqlite3.Connection) -> tuple[TaskInfo, ...]:
    """Every registered task as ``GET /api/v1/tasks`` lists it, oldest change first: one
    statement, so one consistent snapshot."""
    with _snapshot(db):
        edges = all_deps(db)
        found = db.execute(
            "SELECT task_id, family, data FROM tasks WHERE status IS NOT NULL ORDER BY seq"
        )
        return tuple(
            stored_info(task_id, family, data, edges.get(task_id))
            for task_id, family, data in found
        )


@contextlib.contextmanager
def _snapshot(db: sqlite3.Connection) -> Iterator[None]:
    """The statements inside read one snapshot (a read transaction)."""
    db.execute("BEGIN")
    try:
        yield
    finally:
        db.execute("COMMIT")


def detail(db: sqlite3.Connection, task_id: str) -> TaskDetail | None:
    """Everything the task detail shows, or None for a task the scheduler does not have."""
    with _snapshot(db):
        found = db.execute("SELECT data, changed FROM tasks WHERE task_id = ?", (task_id,))
        row = found.fetchone()
        if row is None:
            return None
        record, changed = shown_row(task_id, row[0], deps_of(db, task_id)), row[1]
    # (an edge whose task is no text, edited behind the server's back, is no dependent)
    dependent_edges = "FROM edges WHERE dep_id = ? AND typeof(task_id) = 'text'"
    (total,) = db.execute(f"SELECT count(*) {dependent_edges}", (task_id,)).fetchone()
    dependents = [
        dependent
        for (dependent,) in db.execute(
            f"SELECT task_id {dependent_edges} LIMIT ?", (task_id, DEPENDENTS_SHOWN)
        )
    ]
    upstream = _walk(db, task_id, down=False, cap=GRAPH_CAP, through_done=False)
    blocking, _ = blocked_by(upstream.status, upstream.runners, upstream.edges)
    return task_detail(
        record,
        changed,
        deps=_refs(db, record["deps"]),
        dependents=_refs(db, dependents),
        dependents_total=total,
        blocked=[
            TaskRef(upstream.ids[i], upstream.family[i], status_of(upstream.status[i]))
            for i in blocking
        ],
    )


def all_deps(db: sqlite3.Connection) -> dict[str, list[str] | None]:
    """Every task's dependencies from the ``edges`` table, in order (of ``pos``); None for a
    task whose edges have positions that are not integers. One statement, read in chunks
    (the table's own order: a task's edges together)."""
    found: dict[str, list[str] | None] = {}
    current: str | None = None
    pairs: list[tuple[Any, str]] = []
    cursor = db.execute("SELECT task_id, pos, dep_id FROM edges ORDER BY task_id")
    for chunk in iter(lambda: cursor.fetchmany(_EDGE_CHUNK), []):
        for task_id, pos, dep_id in chunk:
            if task_id != current:
                if current is not None:
                    found[current] = in_order(pairs)
                current, pairs = task_id, []
            pairs.append((pos, dep_id))
    if current is not None:
        found[current] = in_order(pairs)
    return found


_EDGE_CHUNK = 50_000


def in_order(pairs: list[tuple[Any, str]]) -> list[str] | None:
    """The dependencies of ``(pos, dep_id)`` pairs in the order of ``pos`` (None if a
    position is not an integer): put in place when the positions are 0 to n-1, as a store
    writes them, else sorted."""
    count = len(pairs)
    ordered: list[Any] = [None] * count
    for pos, dep_id in pairs:
        if type(pos) is not int or not 0 <= pos < count or ordered[pos] is not None:
            break
        ordered[pos] = dep_id
    else:
        return ordered
    if any(type(pos) is not int for pos, _ in pairs):
        return None
    # (by position alone: an edited row may repeat one with a dep_id that is no text, which
    # the row's check then reports; compared, it would be a TypeError)
    return [dep_id for _, dep_id in sorted(pairs, key=itemgetter(0))]


def deps_of(db: sqlite3.Connection, task_id: str) -> list[str]:
    """The dependencies of ``task_id`` in order."""
    found = db.execute("SELECT pos, dep_id FROM edges WHERE task_id = ?", (task_id,)).fetchall()
    return in_order(found) or []


def _refs(db: sqlite3.Connection, task_ids: Sequence[str]) -> list[TaskRef]:
    """``{task_id, family, status}`` of each id, in the given order."""
    known = {task_id: (family, status) for task_id, family, status, _ in _nodes(db, task_ids)}
    refs = []
    for task_id in task_ids:
        family, status = known.get(task_id, ("", TaskStatus.UNKNOWN))
        refs.append(TaskRef(task_id, family, status_of(status)))
    return refs


def _nodes(db: sqlite3.Connection, task_ids: Sequence[str]) -> Iterator[tuple[str, str, str, int]]:
    """``(task_id, family, status, number of workers that may run it)`` of the known ids (a
    row whose text is not JSON, edited behind the server's back, reads as no status and no
    runners: SQLite's JSON functions fail on it, and CASE does not call them then)."""
    for start in range(0, len(task_ids), _CHUNK):
        chunk = task_ids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        yield from db.execute(
            "SELECT task_id, family, CASE WHEN json_valid(data) THEN coalesce(status,"
            " json_extract(data, '$.status')) ELSE status END, CASE WHEN json_valid(data) THEN"
            f" json_array_length(data, '$.runners') END FROM tasks WHERE task_id IN ({marks})",
            chunk,
        )


def _edges_from(
    db: sqlite3.Connection, task_ids: Sequence[str], down: bool
) -> Generator[tuple[str, str], None, None]:
    """``(task, dependency)`` edges from the given tasks (``down``: to them), read lazily (a
    caller that stops early reads no more rows), in the order of their near end in
    ``task_ids``, then of the far end (as :func:`conveyor.server.stores.walk_graph` and the
    PostgreSQL store keep them): :data:`_ARMS` tasks a statement, one ``UNION ALL`` arm each
    (SQLite runs the arms in order, each along the index: no sort across tasks). An edge whose
    far end is no text (a BLOB edited in behind the server's back) is stepped over: ids are
    compared and sorted as text."""
    near, far = ("dep_id", "task_id") if down else ("task_id", "dep_id")
    arm = (
        f"SELECT * FROM (SELECT task_id, dep_id FROM edges WHERE {near} = ?"
        f" AND typeof({far}) = 'text' ORDER BY {far})"
    )
    step = min(_CHUNK, _ARMS)
    for start in range(0, len(task_ids), step):
        chunk = task_ids[start : start + step]
        with contextlib.closing(db.execute(" UNION ALL ".join([arm] * len(chunk)), chunk)) as rows:
            yield from rows


def _edges_among(
    db: sqlite3.Connection, task_ids: Sequence[str], members: Sequence[str], down: bool
) -> list[tuple[str, str]]:
    """The edges from the given tasks (``down``: to them) whose far end is one of ``members``:
    SQLite walks the index from each task and steps over the other edges inside the query
    (they never become rows)."""
    if not task_ids:
        return []
    near, far = ("dep_id", "task_id") if down else ("task_id", "dep_id")
    # (the unary + keeps SQLite from seeking every pair: |task_ids| x |members| seeks)
    query = (
        f"SELECT task_id, dep_id FROM edges WHERE {near} IN (SELECT value FROM json_each(?))"
        f" AND +{far} IN (SELECT value FROM json_each(?))"
    )
    return db.execute(query, (json.dumps(task_ids), json.dumps(members))).fetchall()


def _edges_to(
    db: sqlite3.Connection, task_id: str, members: Sequence[str], down: bool
) -> list[tuple[str, str]]:
    """The edges from ``task_id`` (``down``: to it) whose far end is one of ``members``, each
    looked up in the index: O(members), however many edges the task has."""
    if not members:
        return []
    near, far = ("dep_id", "task_id") if down else ("task_id", "dep_id")
    query = (
        f"SELECT task_id, dep_id FROM edges WHERE {near} = ?"
        f" AND {far} IN (SELECT value FROM json_each(?))"
    )
    return db.execute(query, (task_id, json.dumps(members))).fetchall()


@dataclass(slots=True)
class _Walker:
    """One breadth-first walk in progress (see :func:`_walk`)."""

    db: sqlite3.Connection
    down: bool
    cap: int
    through_done: bool
    walk: GraphWalk = field(default_factory=GraphWalk)
    index: dict[str, int] = field(default_factory=dict)
    read: list[tuple[str, str]] = field(default_factory=list)  # the edges read
    unread: list[str] = field(default_factory=list)  # tasks kept whose edges were not read
    stopped: tuple[str, str] | None = None  # the task whose edges stopped, and the last read
    passed: int = 0  # DONE tasks passed over

    def admit(self, batch: Sequence[str], depth: int) -> list[str]:
        """Add the tasks of ``batch`` in order at ``depth``, but DONE ones when not passing
        through them, until the cap: one more to add then marks the walk truncated; the tasks
        added."""
        found = {t: (f, s, r) for t, f, s, r in _nodes(self.db, batch)}
        walk, kept = self.walk, []
        for task_id in batch:
            family, status, runners = found.get(task_id, ("", "UNKNOWN", 0))
            if depth and not self.through_done and status == TaskStatus.DONE:
                self.passed += 1
                continue
            position = walk.add(task_id, depth, family, status, runners or 0, self.cap)
            if position is None:
                break
            self.index[task_id] = position
            kept.append(task_id)
        return kept

    def batch_size(self) -> int:
        """How many new tasks to look up at once: the room left and one to tell that there
        is more, and as many again as DONE tasks were passed over so far (when not passing
        through them), at most :data:`_CHUNK`."""
        room = self.cap - len(self.walk.ids) + 1
        return max(1, min(_CHUNK, room + self.passed))

    def grow(self, layer: Sequence[str], depth: int) -> list[str]:
        """The tasks of the next layer, added, read from the edges of ``layer`` no further
        than the cap (then :attr:`unread` and :attr:`stopped` say what was not read)."""
        added: list[str] = []
        seen: set[str] = set()  # the layer's new tasks, kept or passed over
        begun: set[str] = set()  # the tasks of ``layer`` whose edges were read from
        batch: list[str] = []
        size = self.batch_size()
        with contextlib.closing(_edges_from(self.db, layer, self.down)) as edges:
            for task, dep in edges:
                self.read.append((task, dep))
                near, far = (dep, task) if self.down else (task, dep)
                begun.add(near)
                if far in self.index or far in seen:
                    continue
                seen.add(far)
                batch.append(far)
                if len(batch) < size:
                    continue
                added += self.admit(batch, depth)
                batch, size = [], self.batch_size()
                if self.walk.truncated:  # stop reading: this task's other edges wait, and
                    self.stopped = (near, far)  # those of the tasks not begun
                    self.unread = [t for t in layer if t not in begun]
                    break
            else:
                added += self.admit(batch, depth)
        self.unread += added if self.walk.truncated else ()
        return added

    def border(self) -> list[tuple[str, str]]:
        """The edges between nodes kept that were not read when the walk stopped at the cap:
        from the tasks not begun and the last layer, and the rest of the stopped task's (whose
        edges come in order of the far end: only nodes past the last read can be missing)."""
        found = _edges_among(self.db, self.unread, self.walk.ids, self.down)
        if self.stopped is not None:
            task_id, last = self.stopped
            after = [t for t in self.walk.ids if t > last]  # (str order is SQLite's here)
            found += _edges_to(self.db, task_id, after, self.down)
        return found


def _walk(
    db: sqlite3.Connection, root: str, down: bool, cap: int, through_done: bool = True
) -> GraphWalk:
    """Breadth-first from ``root`` along dependencies (``down``: along dependents), at most
    ``cap`` nodes, nearest first; without ``through_done``, DONE tasks are not passed
    through (nor kept, but for the root).

    The rows it reads grow with what it keeps (and the DONE tasks it passes over), not with
    the graph: a layer's edges are read only until the cap is reached and one more task is
    found (to tell it truncated); the edges between kept nodes not read by then come from
    queries that return no others (SQLite still steps over the other edges of the tasks at
    the border inside one index walk, about a microsecond each: the one cost that follows
    the graph past the cap). The nodes, their order and depths, the edges and the flag are
    those of reading whole layers (``tests/test_ui_graph_cap.py``).
    """
    walker = _Walker(db, down, cap, through_done)
    layer, depth = walker.admit([root], 0), 0
    while layer and not walker.walk.truncated:
        depth += 1
        layer = walker.grow(layer, depth)
    walk, index = walker.walk, walker.index
    pairs = dict.fromkeys([*walker.read, *walker.border()])  # (no repeats, a fixed order)
    walk.edges = [(index[t], index[d]) for t, d in pairs if t in index and d in index]
    return walk


def graph(
    db: sqlite3.Connection, task_id: str, down: bool, cap: int = GRAPH_CAP
) -> TaskGraph | None:
    """The graph around ``task_id``: its upstream (and with ``down`` its downstream) tasks,
    each with a layer (0 the task, 1, 2, … its dependencies outward, -1, -2, … its
    dependents), the edges, and the failure path; None for an unknown task."""
    if db.execute("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)).fetchone() is None:
        return None
    up = _walk(db, task_id, down=False, cap=cap)
    below = functools.partial(_walk, db, task_id, True) if down else None
    return graph_answer(up, below, cap)
