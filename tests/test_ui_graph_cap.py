"""The UI graph's cost follows its node cap, not the graph (issue 20, item 6; SPEC §9).

A graph answer holds at most a cap of nodes, the nearest first. The walk behind it
(``reads._walk``, used by the graph and by the task detail's *Blocked by*) used to read the
whole next breadth-first layer, every edge and every node row of it, before applying the cap:
a task with 100,000 dependencies cost ten times one with 10,000 for the same 10,000 nodes.
These tests count the rows SQLite hands to Python and the statements run (a row factory and
a trace callback on the store's own read connection: these tests are of the SQLite store's
queries, so they use its connection), never the clock, on real SQLite stores
in tmp_path holding graphs 30 times the cap; and they check that the bounded walk returns
exactly what reading whole layers returns, on seeded random graphs.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from conveyor.protocol import TaskStatus
from conveyor.scheduler.persist import to_row
from conveyor.scheduler.policy import TaskRecord
from conveyor.server.sqlite import reads
from conveyor.server.stores import SqliteStore, StoreContext

T = TypeVar("T")
CAP = 1_000  # the cap the tests ask for (the graph route's is reads.GRAPH_CAP)
BIG = 30 * CAP  # tasks beyond the cap in every large graph
ROWS_PER_NODE = 3  # a bound on rows per node shown: its own row, an edge, and slack


@dataclass
class Counted:
    """What one read handed to Python: rows and SQL statements."""

    rows: int = 0
    statements: int = 0


def _row(task_id: str, deps: Sequence[str] = (), status: TaskStatus = TaskStatus.PENDING) -> Any:
    record = TaskRecord(task_id=task_id, seq=1, family=task_id[:1].upper(), registered=True)
    record.deps, record.status, record.runners = tuple(deps), status, ("w",)
    return to_row(record)


def _store(path: Path, rows: Sequence[Any]) -> SqliteStore:
    store = SqliteStore(StoreContext(str(path)))
    store.load()
    for start in range(0, len(rows), 5_000):
        store.save(rows[start : start + 5_000], [])
    return store


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[Callable[[Sequence[Any]], SqliteStore]]:
    """Opens SQLite stores in tmp_path holding the given rows; closes them afterwards."""
    stores: list[SqliteStore] = []

    def open_(rows: Sequence[Any]) -> SqliteStore:
        stores.append(_store(tmp_path / f"state-{len(stores)}.db", rows))
        return stores[-1]

    yield open_
    for store in stores:
        store.close()


def _counted(store: SqliteStore, read: Callable[[sqlite3.Connection], T]) -> tuple[T, Counted]:
    """``read`` on the store's read connection, counting the rows and statements it took."""
    counted = Counted()

    def count_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> tuple[Any, ...]:
        counted.rows += 1
        return row

    def count_statement(statement: str) -> None:
        counted.statements += 1

    def run(db: sqlite3.Connection) -> T:
        db.row_factory, factory = count_row, db.row_factory
        db.set_trace_callback(count_statement)
        try:
            return read(db)
        finally:
            db.row_factory = factory
            db.set_trace_callback(None)

    return _as_json(store._read(run)), counted


def _as_json(answer: Any) -> Any:
    """A typed read answer (``TaskGraph``, ``TaskDetail``) as the UI's JSON has it."""
    if dataclasses.is_dataclass(answer) and not isinstance(answer, type):
        return json.loads(json.dumps(dataclasses.asdict(answer)))
    return answer


def _fan_in(leaves: int) -> list[Any]:
    """``root`` needing ``leaves`` tasks that need nothing."""
    ids = [f"leaf-{n:06d}" for n in range(leaves)]
    return [*(_row(t) for t in ids), _row("root", ids)]


def _layered(middles: int, leaves: int, done_every: int = 0) -> list[Any]:
    """``root`` needing ``middles`` tasks, each needing ``leaves`` tasks of its own (every
    ``done_every``-th of them DONE, and then ``leaf-000-00001`` FAILED)."""
    rows = []
    for m in range(middles):
        ids = [f"leaf-{m:03d}-{n:05d}" for n in range(leaves)]
        for n, task_id in enumerate(ids):
            status = TaskStatus.PENDING
            if done_every and n % done_every == 0:
                status = TaskStatus.DONE
            elif done_every and (m, n) == (0, 1):
                status = TaskStatus.FAILED
            rows.append(_row(task_id, status=status))
        rows.append(_row(f"mid-{m:03d}", ids))
    return [*rows, _row("root", [f"mid-{m:03d}" for m in range(middles)])]


@pytest.mark.timeout(120)
def test_a_fan_in_30_times_the_cap_reads_rows_in_proportion_to_the_cap(
    opened: Callable[[Sequence[Any]], SqliteStore],
) -> None:
    """A task needing 30,000 tasks, graphed with a cap of 1,000: the answer holds the task
    and 999 of them, truncated, and the read takes at most 3 rows per node shown and a few
    statements (reading whole layers took 60,002 rows in 39 statements)."""
    store = opened(_fan_in(BIG))
    answer, counted = _counted(store, lambda db: reads.graph(db, "root", False, cap=CAP))
    assert answer is not None
    assert (len(answer["nodes"]), len(answer["edges"]), answer["truncated"]) == (CAP, CAP - 1, True)
    assert {n["layer"] for n in answer["nodes"][1:]} == {1}
    assert counted.rows <= ROWS_PER_NODE * CAP, counted
    assert counted.statements <= 10, counted


@pytest.mark.timeout(120)
def test_the_dependents_of_a_task_needed_by_30_times_the_cap_read_in_proportion_to_it(
    opened: Callable[[Sequence[Any]], SqliteStore],
) -> None:
    """The same downstream: a task 30,000 tasks need, graphed with down=1 and a cap of 1,000,
    holds 1,000 nodes at layer -1 and 0, truncated, for at most 3 rows per node."""
    users = [_row(f"user-{n:06d}", ["base"]) for n in range(BIG)]
    store = opened([_row("base"), *users])
    answer, counted = _counted(store, lambda db: reads.graph(db, "base", True, cap=CAP))
    assert answer is not None
    assert (len(answer["nodes"]), len(answer["edges"]), answer["truncated"]) == (CAP, CAP - 1, True)
    assert {n["layer"] for n in answer["nodes"][1:]} == {-1}
    assert counted.rows <= ROWS_PER_NODE * CAP, counted
    assert counted.statements <= 10, counted


@pytest.mark.timeout(120)
def test_a_cap_reached_inside_the_second_layer_reads_no_further(
    opened: Callable[[Sequence[Any]], SqliteStore],
) -> None:
    """A task needing 30 tasks that each need 1,000: the cap of 1,000 is reached among the
    first ones' dependencies; the answer holds the 30 and 969 of theirs with their edges,
    and the read stays within 3 rows per node shown (the others' 29,000 edges are not read)."""
    store = opened(_layered(30, 1_000))
    answer, counted = _counted(store, lambda db: reads.graph(db, "root", False, cap=CAP))
    assert answer is not None
    layers = [n["layer"] for n in answer["nodes"]]
    assert layers.count(1) == 30 and layers.count(2) == CAP - 31 and answer["truncated"]
    assert len(answer["edges"]) == CAP - 1  # each node's one edge from the task needing it
    assert counted.rows <= ROWS_PER_NODE * CAP, counted


@pytest.mark.timeout(120)
def test_the_detail_s_blocked_by_walk_stops_at_the_cap_too(
    opened: Callable[[Sequence[Any]], SqliteStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task detail walks upstream past no DONE task for *Blocked by*, capped like the
    graph: with a cap of 1,000 over 30 x 1,000 dependencies (every tenth DONE, one FAILED
    among the first read), the detail of the root names the FAILED one as blocking it and
    reads at most 3 rows per node of the cap, the DONE ones passed over included."""
    monkeypatch.setattr(reads, "GRAPH_CAP", CAP)
    store = opened(_layered(30, 1_000, done_every=10))
    answer, counted = _counted(store, lambda db: reads.detail(db, "root"))
    assert answer is not None
    assert [ref["task_id"] for ref in answer["blocked_by"]] == ["leaf-000-00001"]
    assert len(answer["deps"]) == 30
    assert counted.rows <= ROWS_PER_NODE * CAP, counted


# --- the bounded walk returns what reading whole layers returns --------------------------------


@dataclass
class Graph:
    """A random graph: each task's dependencies (ids without a row among them), statuses."""

    deps: dict[str, list[str]]
    status: dict[str, TaskStatus]

    def rows(self) -> list[Any]:
        """The store rows of the tasks that have one."""
        return [_row(t, d, self.status[t]) for t, d in self.deps.items()]


def _random_graph(rng: random.Random) -> Graph:
    """Up to 300 tasks with 0 to 30 dependencies each: diamonds, cycles, tasks needing
    themselves, dependencies nobody registered, a third of the tasks DONE."""
    ids = [f"{rng.choice('abcxyz')}{n:04d}" for n in range(rng.randrange(5, 300))]
    deps: dict[str, list[str]] = {}
    status: dict[str, TaskStatus] = {}
    for task_id in ids:
        chosen = rng.sample(ids, min(len(ids), rng.choice((0, 1, 2, 3, 5, 10, 30))))
        if rng.random() < 0.05:
            chosen.append(f"ghost{rng.randrange(5)}")
        deps[task_id] = chosen
        status[task_id] = rng.choice((TaskStatus.PENDING, TaskStatus.DONE, TaskStatus.FAILED))
    return Graph(deps, status)


def _whole_layers(
    graph: Graph, root: str, down: bool, cap: int, through_done: bool
) -> tuple[list[str], list[int], bool, set[tuple[str, str]]]:
    """The walk's specification, reading whole layers: breadth-first, a layer's new tasks in
    the order of the edges from the layer before (by the position of their near end in that
    layer, then by the id of their far end, as ``stores.walk_graph`` keeps them), DONE ones
    passed over without ``through_done`` (but the root), the first ``cap`` kept, truncated
    when one more would be; and every edge between two tasks kept."""
    near_to_far: dict[str, list[str]] = {}
    for task, deps in graph.deps.items():
        for dep in deps:
            near, far = (dep, task) if down else (task, dep)
            near_to_far.setdefault(near, []).append(far)
    ids, depth, truncated = [root], [0], False
    layer, level = [root], 0
    depth_of = {root: 0}
    while layer and not truncated:
        level += 1
        frontier: dict[str, None] = {}
        for near in layer:
            for far in sorted(set(near_to_far.get(near, ()))):
                if far not in depth_of:
                    frontier[far] = None
        layer = []
        for task_id in frontier:
            if not through_done and graph.status.get(task_id) == TaskStatus.DONE:
                continue
            if len(ids) == cap:
                truncated = True
                break
            ids.append(task_id)
            depth.append(level)
            depth_of[task_id] = level
            layer.append(task_id)
    kept = set(ids)
    edges = {(t, d) for t, ds in graph.deps.items() for d in ds if t in kept and d in kept}
    return ids, depth, truncated, edges


@pytest.mark.timeout(120)
def test_the_bounded_walk_keeps_the_nodes_order_edges_and_flag_of_whole_layers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 12 seeded random graphs (cycles, diamonds, unregistered and DONE tasks), from 8
    tasks each, both ways, passing DONE tasks or not, and caps from 1 to past the graph's
    size: the walk keeps the same nodes in the same order at the same depths, the same
    edges and the same truncated flag as reading whole layers; with 7 ids per IN list, so
    that layers span several lists."""
    monkeypatch.setattr(reads, "_CHUNK", 7)
    rng = random.Random(20)
    for number in range(12):
        graph = _random_graph(rng)
        store = _store(tmp_path / f"random-{number}.db", graph.rows())
        try:
            for root in rng.sample(sorted(graph.deps), 8):
                size = len(graph.deps)
                for cap in sorted({1, 2, 3, 8, 40, rng.randrange(1, size + 2), size + 10}):
                    for down in (False, True):
                        for through_done in (True, False):
                            walk = store._read(
                                lambda db, r=root, c=cap, d=down, p=through_done: reads._walk(
                                    db, r, d, c, p
                                )
                            )
                            got = (
                                walk.ids,
                                walk.depth,
                                walk.truncated,
                                {(walk.ids[t], walk.ids[d]) for t, d in walk.edges},
                            )
                            expected = _whole_layers(graph, root, down, cap, through_done)
                            assert got == expected, (number, root, cap, down, through_done)
                            assert len(walk.edges) == len(expected[3]), "an edge came twice"
        finally:
            store.close()


def test_a_truncated_layer_keeps_the_nodes_walk_graph_keeps(tmp_path: Path) -> None:
    """A layer's new tasks in the order of their near task's position in the layer before,
    then by id, as ``stores.walk_graph`` and the PostgreSQL store keep them: R needs a and
    b, a needs z, b needs c, z needs m, c needs n; at a cap of 6 the walk keeps m (it kept n,
    ordering the layer before by id: c before z)."""
    from conveyor.server.stores import walk_graph

    deps = {"R": ["a", "b"], "a": ["z"], "b": ["c"], "z": ["m"], "c": ["n"], "m": [], "n": []}
    store = _store(tmp_path / "order.db", [_row(t, d) for t, d in deps.items()])
    try:
        walk = store._read(lambda db: reads._walk(db, "R", False, 6))
        expected = walk_graph("R", lambda t: deps.get(t, ()), lambda t: ("F", "PENDING", 1), 6)
        assert walk.ids == expected.ids == ["R", "a", "b", "z", "c", "m"]
        assert walk.truncated and expected.truncated
        graph = store.graph("R", False, 6)
        assert graph is not None and [n.id for n in graph.nodes] == expected.ids
    finally:
        store.close()
