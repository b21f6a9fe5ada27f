"""The PostgreSQL store's reads (its ``TaskReads``), as queries on its tables (see
``store._MIGRATIONS``).

Each function is given a :class:`Reader`: a read-only connection in one REPEATABLE READ
transaction (so a read is one snapshot of what was committed) and the store's query builder.
Counts are one ``GROUP BY`` over an index, the task list a keyset page over the change number,
and a graph a walk of the ``edges`` table, one query per layer, capped. What people see of a
row is computed by :mod:`conveyor.server.stores`, as for every store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from conveyor.protocol import (
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
from conveyor.server.stores import (
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
from psycopg import sql

__all__ = [
    "Reader",
    "changes_since",
    "detail",
    "families",
    "graph",
    "load_all",
    "page",
    "summary",
    "task_ids",
    "task_infos",
    "workers",
]


@dataclass(frozen=True, slots=True)
class Reader:
    """A reading connection and the store's query builder (``{s}``: the schema)."""

    conn: psycopg.Connection[Any]
    q: Callable[[str], sql.Composed]

    def rows(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of the query ``text`` with ``params``."""
        return self.conn.execute(self.q(text), params).fetchall()

    def latest(self) -> int:
        """The number of the latest change saved (0 for none)."""
        return int(self.rows("SELECT seq FROM {s}.changes WHERE id = 1")[0][0])


def load_all(
    r: Reader,
) -> tuple[list[tuple[str, str]], dict[str, list[str]], list[tuple[str, bool]]]:
    """Every task row (id, JSON text), every task's dependencies (from the edges, in order)
    and every worker, in one snapshot."""
    tasks = r.rows("SELECT task_id, data FROM {s}.tasks ORDER BY seq")
    edges = _all_deps(r)
    found = r.rows("SELECT worker_id, assistant FROM {s}.workers ORDER BY worker_id")
    return [(t, d) for t, d in tasks], edges, [(w, bool(a)) for w, a in found]


def _all_deps(r: Reader) -> dict[str, list[str]]:
    """Every task's dependencies from the edges table, in order."""
    found: dict[str, list[str]] = {}
    for task_id, dep_id in r.rows(
        'SELECT task_id, dep_id FROM {s}.edges ORDER BY task_id COLLATE "C", pos'
    ):
        deps = found.get(task_id)
        if deps is None:
            deps = found[task_id] = []
        deps.append(dep_id)
    return found


def _deps_of(r: Reader, task_id: str) -> list[str]:
    """The dependencies of ``task_id`` in order."""
    found = r.rows("SELECT dep_id FROM {s}.edges WHERE task_id = %s ORDER BY pos", (task_id,))
    return [d for (d,) in found]


def _unmatchable(*values: object) -> bool:
    """Whether a filter or id holds a NUL character: no text PostgreSQL stores does (and it
    refuses one as an argument), so nothing matches, as in the other stores."""
    return any(isinstance(v, str) and "\x00" in v for v in values)


def _matches_nothing(filters: TaskFilters) -> bool:
    return _unmatchable(filters.state, filters.family, filters.worker, filters.text)


def _where(filters: TaskFilters) -> tuple[str, list[Any]]:
    """The SQL condition of ``filters`` on the UI columns, and its arguments."""
    clauses, args = ["status IS NOT NULL"], []
    for column, value in (
        ("status", filters.state),
        ("family", filters.family),
        ("worker", filters.worker),
    ):
        if value:
            clauses.append(f"{column} = %s")
            args.append(str(value))
    if filters.text:
        clauses.append("strpos(search, %s) > 0")
        args.append(filters.text.lower())
    return " AND ".join(clauses), args


def summary(r: Reader) -> TaskSummary:
    """The count of registered tasks in each state (all six), their total, and the latest
    change number."""
    counts = dict.fromkeys(TaskStatus, 0)
    for status, count in r.rows(
        "SELECT status, count(*) FROM {s}.tasks WHERE status IS NOT NULL GROUP BY status"
    ):
        if status in counts:
            counts[TaskStatus(status)] = int(count)
    return TaskSummary(
        counts={str(k): v for k, v in counts.items()}, total=sum(counts.values()), seq=r.latest()
    )


def families(r: Reader) -> tuple[str, ...]:
    """Every family of a registered task, sorted (by code point, as Python sorts)."""
    found = r.rows(
        'SELECT DISTINCT family COLLATE "C" FROM {s}.tasks'
        " WHERE status IS NOT NULL AND family <> '' ORDER BY 1"
    )
    return tuple(f for (f,) in found)


def page(r: Reader, filters: TaskFilters, cursor: int | None, limit: int) -> TaskPage:
    """One page of the filtered list, newest change first, and the next page's cursor."""
    if _matches_nothing(filters):
        return TaskPage((), None)
    where, args = _where(filters)
    if cursor is not None:
        where += " AND seq < %s"
        args.append(cursor)
    found = r.rows(
        f"SELECT seq, changed, task_id, family, data FROM {{s}}.tasks WHERE {where}"
        " ORDER BY seq DESC LIMIT %s",
        [*args, limit + 1],
    )
    rows = [
        stored_entry(task_id, family, data, seq, changed)
        for seq, changed, task_id, family, data in found[:limit]
    ]
    return TaskPage(tuple(rows), rows[-1].seq if len(found) > limit else None)


def task_ids(r: Reader, filters: TaskFilters) -> tuple[str, ...]:
    """The id of every registered task ``filters`` match, in one statement."""
    if _matches_nothing(filters):
        return ()
    where, args = _where(filters)
    found = r.rows(f"SELECT task_id FROM {{s}}.tasks WHERE {where} ORDER BY seq DESC", args)
    return tuple(t for (t,) in found)


def changes_since(r: Reader, seq: int, limit: int = PAGE_MAX) -> Changes:
    """The latest change number and the tasks saved after ``seq``, oldest first."""
    now = r.latest()
    if limit <= 0 or seq >= now:
        return Changes(now)
    found = r.rows(
        "SELECT task_id FROM {s}.tasks WHERE seq > %s ORDER BY seq LIMIT %s", (seq, limit + 1)
    )
    return Changes(now, tuple(t for (t,) in found[:limit]), len(found) > limit)


def workers(r: Reader) -> tuple[StoredWorker, ...]:
    """Every stored worker."""
    found = r.rows("SELECT worker_id, assistant FROM {s}.workers ORDER BY worker_id")
    return tuple(StoredWorker(w, bool(a)) for w, a in found)


def task_infos(r: Reader) -> tuple[TaskInfo, ...]:
    """Every registered task as ``GET /api/v1/tasks`` lists it, oldest change first."""
    edges = _all_deps(r)
    found = r.rows(
        "SELECT task_id, family, data FROM {s}.tasks WHERE status IS NOT NULL ORDER BY seq"
    )
    return tuple(stored_info(t, family, data, edges.get(t)) for t, family, data in found)


def detail(r: Reader, task_id: str) -> TaskDetail | None:
    """Everything the task detail shows, or None for a task the store does not have."""
    if _unmatchable(task_id):
        return None
    found = r.rows("SELECT data, changed FROM {s}.tasks WHERE task_id = %s", (task_id,))
    if not found:
        return None
    record, changed = shown_row(task_id, found[0][0], _deps_of(r, task_id)), found[0][1]
    ((total,),) = r.rows("SELECT count(*) FROM {s}.edges WHERE dep_id = %s", (task_id,))
    dependents = [
        t
        for (t,) in r.rows(
            'SELECT task_id FROM {s}.edges WHERE dep_id = %s ORDER BY task_id COLLATE "C" LIMIT %s',
            (task_id, DEPENDENTS_SHOWN),
        )
    ]
    upstream = _walk(r, task_id, down=False, cap=GRAPH_CAP, through_done=False)
    blocking, _ = blocked_by(upstream.status, upstream.runners, upstream.edges)
    return task_detail(
        record,
        changed,
        deps=_refs(r, record["deps"]),
        dependents=_refs(r, dependents),
        dependents_total=int(total),
        blocked=[
            TaskRef(upstream.ids[i], upstream.family[i], status_of(upstream.status[i]))
            for i in blocking
        ],
    )


def _nodes(r: Reader, ids: Sequence[str]) -> dict[str, tuple[str, str, int]]:
    """``task_id -> (family, status, workers able to run it)`` of the known ids."""
    if not ids:
        return {}
    found = r.rows(
        "SELECT task_id, family, state, runners FROM {s}.tasks WHERE task_id = ANY(%s)",
        (list(ids),),
    )
    return {t: (f, s, n) for t, f, s, n in found}


def _refs(r: Reader, ids: Sequence[str]) -> list[TaskRef]:
    """``{task_id, family, status}`` of each id, in the given order."""
    known = _nodes(r, ids)
    refs = []
    for task_id in ids:
        family, status, _ = known.get(task_id, ("", TaskStatus.UNKNOWN, 0))
        refs.append(TaskRef(task_id, family, status_of(status)))
    return refs


def _edges_from(
    r: Reader, ids: Sequence[str], down: bool
) -> list[tuple[str, str, str | None, str | None, int | None]]:
    """``(task, dependency)`` edges from the given tasks (``down``: to them), in the order of
    their near end in ``ids``, then of the far end, each with its far end's family, status
    and number of workers able to run it (None: a task the store does not have)."""
    near, far = ("dep_id", "task_id") if down else ("task_id", "dep_id")
    found = r.rows(
        "SELECT e.task_id, e.dep_id, t.family, t.state, t.runners"
        " FROM unnest(%s::text[]) WITH ORDINALITY AS l(id, n)"
        f" JOIN {{s}}.edges e ON e.{near} = l.id"
        f' LEFT JOIN {{s}}.tasks t ON t.task_id = e.{far} ORDER BY l.n, e.{far} COLLATE "C"',
        (list(ids),),
    )
    return [(t, d, f, s, n) for t, d, f, s, n in found]


def _edges_among(
    r: Reader, ids: Sequence[str], members: Sequence[str], down: bool
) -> list[tuple[str, str]]:
    """The edges from the given tasks (``down``: to them) whose far end is a member."""
    if not ids:
        return []
    near, far = ("dep_id", "task_id") if down else ("task_id", "dep_id")
    found = r.rows(
        f"SELECT task_id, dep_id FROM {{s}}.edges WHERE {near} = ANY(%s) AND {far} = ANY(%s)",
        (list(ids), list(members)),
    )
    return [(t, d) for t, d in found]


def _walk(r: Reader, root: str, down: bool, cap: int, through_done: bool = True) -> GraphWalk:
    """Breadth-first from ``root`` along dependencies (``down``: dependents), at most ``cap``
    nodes, nearest first, one query for the edges and one for the nodes per layer; without
    ``through_done`` DONE tasks (but the root) are neither kept nor passed through. The same
    nodes, depths and edges as :func:`conveyor.server.stores.walk_graph`."""
    walk = GraphWalk()
    index: dict[str, int] = {}

    def admit(
        batch: Sequence[str], depth: int, found: dict[str, tuple[str, str, int]]
    ) -> list[str]:
        kept = []
        for task_id in batch:
            family, status, runners = found.get(task_id, ("", "UNKNOWN", 0))
            if depth and not through_done and status == TaskStatus.DONE:
                continue
            position = walk.add(task_id, depth, family, status, runners or 0, cap)
            if position is None:
                break
            index[task_id] = position
            kept.append(task_id)
        return kept

    layer, depth = admit([root], 0, _nodes(r, [root])), 0
    read: list[tuple[str, str]] = []
    while layer and not walk.truncated:  # (one query a layer: its edges and their far ends)
        depth += 1
        fresh: dict[str, tuple[str, str, int]] = {}
        for task, dep, family, status, runners in _edges_from(r, layer, down):
            read.append((task, dep))
            far = task if down else dep
            if far not in index and family is not None and status is not None:
                fresh[far] = (family, status, runners or 0)
            elif far not in index:
                fresh[far] = ("", "UNKNOWN", 0)
        layer = admit(list(fresh), depth, fresh)
    if walk.truncated:  # the last layer's edges among the nodes kept were not read
        read += _edges_among(r, layer, walk.ids, down)
    pairs = dict.fromkeys(read)
    walk.edges = [(index[t], index[d]) for t, d in pairs if t in index and d in index]
    return walk


def graph(r: Reader, task_id: str, down: bool, cap: int = GRAPH_CAP) -> TaskGraph | None:
    """The graph around ``task_id`` (see ``TaskReads.graph``); None for an unknown task."""
    if _unmatchable(task_id):
        return None
    if not r.rows("SELECT 1 FROM {s}.tasks WHERE task_id = %s", (task_id,)):
        return None
    up = _walk(r, task_id, down=False, cap=cap)
    below = functools.partial(_walk, r, task_id, True) if down else None
    return graph_answer(up, below, cap)
