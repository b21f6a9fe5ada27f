"""What the web UI reads, as queries on the state store's tables (see ``stores._MIGRATIONS``).

Every function takes an SQLite connection that sees the committed state (a store's
:meth:`~.stores.CanRead.read`), so the UI never takes the scheduler's lock and never lists
every task to answer: counts are one ``GROUP BY`` over an index, the task list is a keyset page
over the change number, and a graph walks the ``edges`` table outward from one task, O(V+E) in
what it returns and capped at :data:`GRAPH_CAP` nodes, reading no further than the cap however
large the graph. Values people see have secret-named parameters, and their appearances in
texts, hidden (:mod:`conveyor.secrets`).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..protocol import TaskStatus
from ..reasons import failure_reason
from ..scheduler.policy import ATTEMPT_HISTORY
from ..secrets import REDACTED, hide_secret_params, is_secret_name

__all__ = [
    "DEPENDENTS_SHOWN",
    "GRAPH_CAP",
    "PAGE_MAX",
    "Filters",
    "detail",
    "families",
    "graph",
    "latest",
    "matching_ids",
    "page",
    "summary",
]

GRAPH_CAP = 10_000
"""The most nodes a graph answer holds (the nearest to its task first); more → truncated."""
PAGE_MAX = 500
"""The largest page of the task list."""
DEPENDENTS_SHOWN = 500
"""The most dependents a task's detail lists (their total is given too)."""

_STUCK = frozenset({TaskStatus.FAILED, TaskStatus.DISABLED, TaskStatus.UNKNOWN})
_CHUNK = 900  # ids per IN (...) list: under SQLite's variable limit on any build


@dataclass(frozen=True, slots=True)
class Filters:
    """The task list's filters; empty means any. ``text`` is matched case-insensitively
    against the id and the public parameters, ``name=value`` (the store's ``search``
    column; secret-named parameters are not in it)."""

    state: str = ""
    family: str = ""
    worker: str = ""
    text: str = ""

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition and its arguments."""
        clauses, args = ["status IS NOT NULL"], []
        for column, value in (("status", self.state), ("family", self.family)):
            if value:
                clauses.append(f"{column} = ?")
                args.append(value)
        if self.worker:
            clauses.append("worker = ?")
            args.append(self.worker)
        if self.text:
            clauses.append("instr(search, ?) > 0")
            args.append(self.text.lower())
        return " AND ".join(clauses), args


def latest(db: sqlite3.Connection) -> int:
    """The number of the latest change saved (0 for none); it grows with every save,
    removals included, and never goes back."""
    return int(db.execute("SELECT seq FROM changes").fetchone()[0])


def summary(db: sqlite3.Connection) -> dict[str, Any]:
    """The count of registered tasks in each state (all six), their total, and the latest
    change number."""
    counts = dict.fromkeys(TaskStatus, 0)
    rows = db.execute("SELECT status, count(*) FROM tasks WHERE status IS NOT NULL GROUP BY status")
    for status, count in rows:
        if status in counts:
            counts[TaskStatus(status)] = count
    return {
        "counts": {str(k): v for k, v in counts.items()},
        "total": sum(counts.values()),
        "seq": latest(db),
    }


def families(db: sqlite3.Connection) -> list[str]:
    """Every family of a registered task, sorted."""
    rows = db.execute(
        "SELECT DISTINCT family FROM tasks WHERE status IS NOT NULL AND family != ''"
        " ORDER BY family"
    )
    return [family for (family,) in rows]


def page(
    db: sqlite3.Connection, filters: Filters, cursor: int | None, limit: int
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the filtered task list, newest change first, and the cursor of the next
    page (None on the last). ``cursor`` is the change number the page starts below."""
    rows: list[dict[str, Any]] = []
    for row in _filtered(db, filters, cursor):
        if len(rows) == limit:
            return rows, rows[-1]["seq"]
        rows.append(row)
    return rows, None


def matching_ids(db: sqlite3.Connection, filters: Filters) -> list[str]:
    """The id of every task the filters match (for an action on all of them)."""
    where, args = filters.where()
    return [t for (t,) in db.execute(f"SELECT task_id FROM tasks WHERE {where}", args)]


def _filtered(
    db: sqlite3.Connection, filters: Filters, cursor: int | None
) -> Iterator[dict[str, Any]]:
    where, args = filters.where()
    if cursor is not None:
        where += " AND seq < ?"
        args.append(cursor)
    query = f"SELECT seq, changed, data FROM tasks WHERE {where} ORDER BY seq DESC"
    for seq, changed, data in db.execute(query, args):  # (read lazily: stops with the page)
        yield _list_entry(json.loads(data), seq, changed)


def _list_entry(record: dict[str, Any], seq: int, changed: float) -> dict[str, Any]:
    params = record["params"]
    attempts = record.get("attempts") or ()
    return {
        "task_id": record["task_id"],
        "family": record["family"],
        "params": _public(params),
        "status": record["status"],
        "worker": record["worker"] or (attempts[-1]["worker"] if attempts else None),
        "priority": record["priority"],
        "status_message": hide_secret_params(record["status_message"], params),
        "reason": _reason(record),
        "progress": record["progress"],
        "changed": changed,
        "seq": seq,
    }


def _reason(record: Mapping[str, Any]) -> str:
    """Why a FAILED, DISABLED or UNKNOWN task is so, in one line ("" for another state, or
    without an explanation), secrets hidden."""
    explanation = record["explanation"]
    if not explanation or record["status"] not in _STUCK:
        return ""
    return failure_reason(explanation, record["params"])


def _public(params: Mapping[str, str]) -> dict[str, str]:
    return {k: REDACTED if is_secret_name(k) and v else v for k, v in params.items()}


def detail(db: sqlite3.Connection, task_id: str) -> dict[str, Any] | None:
    """Everything the task detail shows, or None for a task the scheduler does not have."""
    found = db.execute("SELECT data, changed FROM tasks WHERE task_id = ?", (task_id,))
    row = found.fetchone()
    if row is None:
        return None
    record, changed = json.loads(row[0]), row[1]
    params = record["params"]
    (total,) = db.execute("SELECT count(*) FROM edges WHERE dep_id = ?", (task_id,)).fetchone()
    dependents = [
        dependent
        for (dependent,) in db.execute(
            "SELECT task_id FROM edges WHERE dep_id = ? LIMIT ?", (task_id, DEPENDENTS_SHOWN)
        )
    ]
    upstream = _walk(db, task_id, down=False, cap=GRAPH_CAP, through_done=False)
    blocking, _ = _obstacles(upstream)
    return {
        "task_id": record["task_id"],
        "family": record["family"],
        "module": record["module"],
        "params": _public(params),
        "status": record["status"],
        "worker": record["worker"],
        "priority": record["priority"],
        "resources": record["resources"],
        "deps": _refs(db, record["deps"]),
        "dependents": _refs(db, dependents),
        "dependents_total": total,
        "status_message": hide_secret_params(record["status_message"], params),
        "progress": record["progress"],
        "tracking_url": hide_secret_params(record["tracking_url"], params),
        "explanation": hide_secret_params(record["explanation"], params),
        "failures": len(record["failures"]),
        "retry_count": record["retry_count"],
        "attempts": record.get("attempts") or [],
        "attempts_kept": ATTEMPT_HISTORY,
        "blocked_by": [
            {"task_id": upstream.ids[i], "family": upstream.family[i], "status": s}
            for i in blocking
            for s in (upstream.status[i],)
        ],
        "changed": changed,
    }


def _refs(db: sqlite3.Connection, task_ids: Sequence[str]) -> list[dict[str, str]]:
    """``{task_id, family, status}`` of each id, in the given order."""
    known = {task_id: (family, status) for task_id, family, status, _ in _nodes(db, task_ids)}
    refs = []
    for task_id in task_ids:
        family, status = known.get(task_id, ("", TaskStatus.UNKNOWN))
        refs.append({"task_id": task_id, "family": family, "status": status})
    return refs


def _nodes(db: sqlite3.Connection, task_ids: Sequence[str]) -> Iterator[tuple[str, str, str, int]]:
    """``(task_id, family, status, number of workers that may run it)`` of the known ids."""
    for start in range(0, len(task_ids), _CHUNK):
        chunk = task_ids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        yield from db.execute(
            "SELECT task_id, family, coalesce(status, json_extract(data, '$.status')),"
            f" json_array_length(data, '$.runners') FROM tasks WHERE task_id IN ({marks})",
            chunk,
        )


def _edges_from(
    db: sqlite3.Connection, task_ids: Sequence[str], down: bool
) -> Generator[tuple[str, str], None, None]:
    """``(task, dependency)`` edges from the given tasks (``down``: to them), read lazily (a
    caller that stops early reads no more rows): :data:`_CHUNK` tasks at a time, each chunk's
    edges in the order of their near, then far, end."""
    near, far = ("dep_id", "task_id") if down else ("task_id", "dep_id")
    for start in range(0, len(task_ids), _CHUNK):
        chunk = task_ids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        # (ORDER BY: the order the index gives anyway, so no sort, and no row read ahead)
        where = f"{near} IN ({marks}) ORDER BY {near}, {far}"
        with contextlib.closing(
            db.execute(f"SELECT task_id, dep_id FROM edges WHERE {where}", chunk)
        ) as rows:
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
class _Walk:
    """Nodes found walking out from ``ids[0]``, each with its distance, and their edges."""

    ids: list[str]
    depth: list[int]
    family: list[str]
    status: list[str]
    runners: list[int]
    edges: list[tuple[int, int]]  # (task, dependency) indices
    truncated: bool = False


@dataclass(slots=True)
class _Walker:
    """One breadth-first walk in progress (see :func:`_walk`)."""

    db: sqlite3.Connection
    down: bool
    cap: int
    through_done: bool
    walk: _Walk = field(default_factory=lambda: _Walk([], [], [], [], [], []))
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
            if len(walk.ids) == self.cap:
                walk.truncated = True
                break
            self.index[task_id] = len(walk.ids)
            walk.ids.append(task_id)
            walk.depth.append(depth)
            walk.family.append(family)
            walk.status.append(status)
            walk.runners.append(runners or 0)
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
) -> _Walk:
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


def _obstacles(walk: _Walk) -> tuple[list[int], list[int]]:
    """What keeps ``walk.ids[0]`` from running, in an upstream walk: the tasks FAILED,
    DISABLED or UNKNOWN, or PENDING with nobody able to run them (missing external data),
    reached through tasks that are not DONE; and every node on a path from the root to one."""
    deps: list[list[int]] = [[] for _ in walk.ids]
    for task, dep in walk.edges:
        deps[task].append(dep)
    open_ = [s != TaskStatus.DONE for s in walk.status]
    reach = [False] * len(walk.ids)
    if not walk.ids or not open_[0]:
        return [], []
    reach[0] = True
    queue = deque([0])
    blocking = []
    while queue:
        node = queue.popleft()
        status = walk.status[node]
        stuck = status in _STUCK or (status == TaskStatus.PENDING and not walk.runners[node])
        if node and stuck:
            blocking.append(node)
            continue  # an obstacle: what is behind it is its own story
        for dep in deps[node]:
            if open_[dep] and not reach[dep]:
                reach[dep] = True
                queue.append(dep)
    # the nodes from which an obstacle can be reached, among those reached
    dependents: list[list[int]] = [[] for _ in walk.ids]
    for task, dep in walk.edges:
        if reach[task] and reach[dep]:
            dependents[dep].append(task)
    on_path = [False] * len(walk.ids)
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


def graph(
    db: sqlite3.Connection, task_id: str, down: bool, cap: int = GRAPH_CAP
) -> dict[str, Any] | None:
    """The graph around ``task_id``: its upstream (and with ``down`` its downstream) tasks,
    each with a layer (0 the task, 1, 2, … its dependencies outward, -1, -2, … its
    dependents), the edges, and the failure path; None for an unknown task."""
    if db.execute("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)).fetchone() is None:
        return None
    up = _walk(db, task_id, down=False, cap=cap)
    blocking, path = _obstacles(up)
    nodes = [
        {"id": up.ids[i], "family": up.family[i], "status": up.status[i], "layer": layer}
        for i, layer in enumerate(_layers(len(up.ids), up.edges, up.depth))
    ]
    edges = [list(e) for e in up.edges]
    truncated = up.truncated
    if down and not truncated:
        below = _walk(db, task_id, down=True, cap=cap - len(nodes) + 1)
        truncated = below.truncated
        offset = {0: 0}
        flipped = [(d, t) for t, d in below.edges]  # layers grow along dependents here
        layers = _layers(len(below.ids), flipped, below.depth)
        known = {n["id"]: i for i, n in enumerate(nodes)}
        for i in range(1, len(below.ids)):
            if below.ids[i] in known:
                offset[i] = known[below.ids[i]]
                continue
            offset[i] = len(nodes)
            nodes.append(
                {
                    "id": below.ids[i],
                    "family": below.family[i],
                    "status": below.status[i],
                    "layer": -layers[i],
                }
            )
        seen = {tuple(e) for e in edges}
        for task, dep in below.edges:
            pair = (offset[task], offset[dep])
            if pair not in seen:
                seen.add(pair)
                edges.append(list(pair))
    return {
        "root": 0,
        "nodes": nodes,
        "edges": edges,
        "truncated": truncated,
        "cap": cap,
        "blocking": blocking,
        "path": path,
    }


def _layers(count: int, edges: Iterable[tuple[int, int]], depth: Sequence[int]) -> list[int]:
    """The longest-path layer of each node from node 0 along ``edges`` (a, b): b is at least
    one layer beyond a; O(V+E). Nodes on a cycle keep their breadth-first depth."""
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
