"""A conformance check for state stores: built-in and third-party alike.

``check_state_store(open_store)`` saves and loads rows of the shape the central scheduler
writes (:func:`conveyor.scheduler.persist.to_row`) through a store, then reads them back
through its :class:`~conveyor.server.stores.TaskReads` as the web UI does (counts, pages in
order with their cursor, each filter, a task's detail, its graph up and down and capped, the
changes since a change number, the workers, the families) and as ``GET /api/v1/tasks`` does
(every registered task, unredacted), and raises ``AssertionError`` naming the first broken
promise: a store that passes serves the web UI and the task list of the API. ``open_store``
opens the store (called more than once when ``durable``: a store reopened on the same place
must load what was saved)::

    from conveyor.server.stores import StoreContext
    from conveyor.testing import check_state_store

    def test_my_store_conforms(tmp_path):
        check_state_store(lambda: MyStore(StoreContext(str(tmp_path / "state"))))
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

from ..protocol import (
    BatchSpec,
    RetrySpec,
    StoredWorker,
    TaskFilters,
    TaskInfo,
    TaskSpec,
    TaskStatus,
    Work,
)
from ..scheduler.persist import from_row, to_row
from ..scheduler.policy import SchedulerCore, TaskRecord
from ..secrets import REDACTED
from ..server.stores import CanSaveStakeholders

READ_CHECKS = [
    "reads-summary",
    "reads-changes",
    "reads-page",
    "reads-filters",
    "reads-detail",
    "reads-graph",
    "reads-workers",
    "reads-families",
    "reads-task-infos",
]
"""The names :func:`check_state_store` gives the checks of the reads, in order."""

__all__ = ["check_saves_apart", "check_state_store"]


def _row(task_id: str, seq: int, status: TaskStatus, text: str) -> dict[str, Any]:
    record = TaskRecord(
        task_id=task_id,
        seq=seq,
        family="Fam",
        module="conformance.mod",
        params={"p": text},
        status=status,
        deps=("other",),
        stakeholders=("w1",),
        runners=("w1",),
        explanation=text,
        progress=12.5,
    )
    return to_row(record)


def check_state_store(open_store: Callable[[], Any], *, durable: bool = True) -> list[str]:
    """Check save/load/upsert/remove, the reads (:data:`READ_CHECKS`), for a store that sets
    stakeholders apart (:class:`~conveyor.server.stores.CanSaveStakeholders`) that too
    (``stakeholders``, and :func:`check_saves_apart` for two seeds) and, if ``durable``,
    reopening; return the checks run."""
    store = open_store()
    checks = ["empty", "save-load", "upsert", "workers", "round-trip", "remove", *READ_CHECKS]
    try:
        rows, workers = store.load()
        assert (list(rows), list(workers)) == ([], []), "a new store is not empty"
        first = _row("a", 1, TaskStatus.PENDING, 'ünïcode ✓ "quotes" \n newline')
        second = _row("b", 2, TaskStatus.DONE, "")
        store.save([first, second], [("w1", False)])
        rows, workers = store.load()
        assert _by_id(rows) == {"a": first, "b": second}, "loaded rows differ from saved ones"
        updated = _row("a", 1, TaskStatus.FAILED, "it broke")
        store.save([updated], [("w2", True)])  # the server saves only the workers that changed
        rows, workers = store.load()
        assert _by_id(rows) == {"a": updated, "b": second}, "a saved row did not replace the old"
        assert sorted(workers) == [("w1", False), ("w2", True)], (
            f"a save must add workers, not replace them: {workers}"
        )
        restored = from_row(_by_id(rows)["a"])
        assert restored.status is TaskStatus.FAILED and restored.progress == 12.5, restored
        store.save([_row("c", 3, TaskStatus.DONE, "")], [("w3", False)])
        store.save([], [], gone_tasks=["c", "never-saved"], gone_workers=["w3"])
        rows, workers = store.load()
        assert sorted(_by_id(rows)) == ["a", "b"], "a pruned task's row was not deleted"
        assert sorted(workers) == [("w1", False), ("w2", True)], "a gone worker was not deleted"
        _check_reads(store)
        rows, workers = store.load()
        assert sorted(_by_id(rows)) == ["a", "b"], "the rows of the reads' checks were not deleted"
        apart = isinstance(store, CanSaveStakeholders)  # (store stays Any: no narrowing)
        if apart:
            checks.append("stakeholders")
            _check_stakeholders(store)
            for seed in range(2):
                check_saves_apart(store, seed=seed, steps=60)
            rows, workers = store.load()
            assert sorted(_by_id(rows)) == ["a", "b"], "the rows of the checks were not deleted"
            assert sorted(workers) == [("w1", False), ("w2", True)], "their workers were not"
    finally:
        store.close()
    if durable:
        checks.append("reopen")
        again = open_store()
        try:
            rows, workers = again.load()
            assert _by_id(rows) == {"a": updated, "b": second}, "a reopened store lost rows"
            assert sorted(workers) == [("w1", False), ("w2", True)], "a reopened store lost workers"
        finally:
            again.close()
    return checks


def _check_stakeholders(store: Any) -> None:
    """``save_stakeholders`` sets the two lists of each stored row named and nothing else of
    it, skips a task with no row, saves the rows it is given as ``save`` does, and a row saved
    right after as it was before is written (not taken for one unchanged; nothing is loaded
    in between: a load may tell the store what it holds); the rows are removed."""
    held = {t: _held(t, ("w1", "w2"), ("w1", "w2")) for t in ("s-t", "s-u", "s-v", "s-w")}
    store.save(list(held.values()), [])
    changed = _held("s-u", ("w1", "w2", "w3"), ("w1", "w2", "w3"), priority=4)
    interest = [
        ("s-t", ("w2",), ("w1",)),
        ("s-v", (), ("w1",)),
        ("s-w", ("w2",), ("w2", "w1")),
        ("s-none", (), ()),
    ]
    store.save_stakeholders([changed], [], interest)
    store.save([held["s-t"]], [])  # (as it was before its lists were set)
    rows = _by_id(r for r in store.load()[0] if r["task_id"].startswith("s-"))
    expected = {
        "s-t": held["s-t"],
        "s-u": changed,
        "s-v": {**held["s-v"], "stakeholders": [], "runners": ["w1"]},
        "s-w": {**held["s-w"], "stakeholders": ["w2"], "runners": ["w1", "w2"]},
    }
    for task_id, row in expected.items():
        assert rows.get(task_id) == row, (
            f"save_stakeholders must set a task's stakeholders and runners and leave the rest "
            f"of its row as it was, and a row saved after it must be written: {task_id} was "
            f"loaded as {rows.get(task_id)}, expected {row}"
        )
    assert sorted(rows) == sorted(expected), f"a task with no row got one: {sorted(rows)}"
    store.save([], [], gone_tasks=list(held))


def _held(
    task_id: str, stakeholders: tuple[str, ...], runners: tuple[str, ...], priority: int = 0
) -> dict[str, Any]:
    # (texts a task may hold that a JSON reader may not take as they are: characters beyond
    # ASCII, a float JSON writes with an exponent and, in half the tasks, a NUL, which
    # PostgreSQL's jsonb refuses)
    nul = "nul \x00, \\u0000 (no escape), " if task_id in ("s-t", "s-v") else ""
    return to_row(
        TaskRecord(
            task_id=task_id,
            seq=1,
            family="Held",
            module="conformance.held",
            params={"p": task_id, "text": f"{nul}ünïcode ✓"},
            progress=1e-07,
            stakeholders=stakeholders,
            runners=runners,
            priority=priority,
        )
    )


# (each field of a registration and the values a random one takes)
_VALUES: dict[str, list[Any]] = {
    "family": ["F", "G"],
    "params": [{"p": "1"}, {"p": "2"}],
    "status": [TaskStatus.PENDING] * 5 + [TaskStatus.DONE],
    "priority": [0, 0, 1, 3],
    "resources": [{}, {"r": 1}],
    "runnable": [True, True, True, False],
    "retry_count": [None, 1],
    "retry": [None, RetrySpec(backoff=2.0)],
    "labels": [(), ("gpu",)],
    "batch": [None, None, BatchSpec("k", 3)],
}


def _random_spec(rng: random.Random, pool: list[str], last: dict[str, TaskSpec]) -> TaskSpec:
    """A registration of one task of ``pool``: mostly the task's last one again, as it was or
    with one field changed (what a second worker's registration, or a changed task, sends),
    else all random; dependencies only on tasks later in the pool (no cycles)."""
    task_id = rng.choice(pool)
    later = pool[pool.index(task_id) + 1 :]
    deps = tuple(rng.sample(later, rng.randint(0, min(2, len(later)))))
    before = last.get(task_id)
    if before is not None and rng.random() < 0.7:
        name = rng.choice([*_VALUES, "deps", "none", "none"])
        if name == "deps":
            made = dataclasses.replace(before, deps=deps)
        elif name == "none":
            made = before
        else:
            made = dataclasses.replace(before, **{name: rng.choice(_VALUES[name])})
    else:
        fields = {name: rng.choice(values) for name, values in _VALUES.items()}
        made = TaskSpec(task_id, module="m", deps=deps, **fields)
    last[task_id] = made
    return made


_APART = "conformance-apart-"  # (the ids of check_saves_apart's tasks and workers begin so)


def check_saves_apart(store: Any, *, seed: int, steps: int = 120) -> None:
    """Random registrations by three workers (fields that change and fields that do not),
    releases, hand-outs, results and time, on a scheduler whose changes are saved to
    ``store`` as the server saves them (the stakeholders and runners of a task whose other
    fields did not change set apart: ``SchedulerCore.take_changes_apart``,
    ``save_stakeholders``): after every call, the rows the store loads (as the server does at
    start: ``load_records()`` where there is one) are the scheduler's, field for field
    (AssertionError naming the step and task otherwise). A change left out of the saves, or
    a list set wrong, shows here. Its tasks and workers (ids that begin with
    ``conformance-apart-``) are removed at the end; the store's other rows are left alone."""
    from . import FakeClock

    rng = random.Random(seed)
    clock = FakeClock()
    core = SchedulerCore(clock=clock, retry_delay=5.0, remove_delay=30.0)
    core.track_changes()
    core.keep_history = True
    pool = [f"{_APART}t{i}" for i in range(8)]
    workers = [f"{_APART}w{i}" for i in range(1, 4)]
    last: dict[str, TaskSpec] = {}
    for step in range(steps):
        worker = rng.choice(workers)
        kind = rng.random()
        if kind < 0.5:
            specs = [_random_spec(rng, pool, last) for _ in range(rng.randint(1, 3))]
            core.add_tasks(worker, specs)
        elif kind < 0.6:
            core.release(worker, rng.sample(pool, rng.randint(1, 4)))
        elif kind < 0.9:
            work = core.get_work(worker)
            if isinstance(work, Work) and rng.random() < 0.9:
                if rng.random() < 0.7:
                    core.task_done(worker, work.task_id, work.attempt)
                else:
                    core.task_failed(worker, work.task_id, "boom", work.attempt)
        else:
            clock.advance(rng.choice([1.0, 10.0, 40.0]))
            core.ping(worker)
        records, changed_workers, apart = core.take_changes_apart()
        gone_tasks, gone_workers = core.take_removals()
        store.save_stakeholders(
            [to_row(r) for r in records],
            changed_workers,
            apart,
            gone_tasks=gone_tasks,
            gone_workers=gone_workers,
        )
        stored = {t: r for t, r in _loaded(store).items() if t.startswith(_APART)}
        for task_id, row in stored.items():
            held = core.peek(task_id)
            assert held is not None, f"seed {seed}, step {step}: {task_id} stored, not held"
            assert row == to_row(held), (
                f"seed {seed}, step {step}: {task_id} is stored as {row}, held as {to_row(held)}"
            )
        registered = {t for t in pool if (r := core.peek(t)) is not None and r.registered}
        assert registered <= set(stored), f"seed {seed}, step {step}: registered, never stored"
    store.save([], [], gone_tasks=pool, gone_workers=workers)


def _loaded(store: Any) -> dict[str, dict[str, Any]]:
    """Each stored row by task id, as the server loads them at start: through the records of
    ``load_records()`` where the store has it, else ``load()``'s rows."""
    if callable(getattr(store, "load_records", None)):
        return {r.task_id: to_row(r) for r in store.load_records()[0]}
    return _by_id(store.load()[0])


def _by_id(rows: Any) -> dict[str, Any]:
    rows = list(rows)
    by_id = {row["task_id"]: row for row in rows}
    assert len(by_id) == len(rows), "a task has several rows: save must replace a task's row"
    return by_id


# --- the reads ------------------------------------------------------------------------------------

_GRAPH = {  # task id -> (family, status, deps, registered)
    "r-leaf2": ("RLeaf", TaskStatus.DONE, (), True),
    "r-leaf1": ("RLeaf", TaskStatus.FAILED, (), True),
    "r-mid": ("RMid", TaskStatus.PENDING, ("r-leaf1", "r-leaf2"), True),
    "r-root": ("RRoot", TaskStatus.RUNNING, ("r-mid",), True),
    "r-top": ("RTop", TaskStatus.PENDING, ("r-root",), True),
    "r-hidden": ("RHidden", TaskStatus.PENDING, ("r-top",), False),
}
_SAVED = list(_GRAPH)  # (saved in this order, one save each)
_LISTED = [t for t in reversed(_SAVED) if _GRAPH[t][3]]  # newest first, registered only


def _graph_row(task_id: str) -> dict[str, Any]:
    family, status, deps, registered = _GRAPH[task_id]
    params = {"p": "Needle" if task_id == "r-mid" else task_id, "password": "hay"}
    record = TaskRecord(
        task_id=task_id,
        seq=100 + _SAVED.index(task_id),
        family=family,
        module="conformance.reads",
        params=params,
        status=status,
        deps=deps,
        stakeholders=("w1",),
        runners=("w1",),
        worker="w9" if status is TaskStatus.RUNNING else None,
        explanation="it broke" if status is TaskStatus.FAILED else "",
        registered=registered,
    )
    return to_row(record)


def _check_reads(store: Any) -> None:
    """Save the rows of :data:`_GRAPH` and check every read against them; delete them."""
    before = store.summary()
    for task_id in _SAVED:
        store.save([_graph_row(task_id)], [])
    _check_summary(store, before)
    _check_changes(store, before.seq)
    _check_page(store)
    _check_filters(store)
    _check_detail(store)
    _check_graph(store)
    workers = set(store.workers())
    assert workers == {StoredWorker("w1", False), StoredWorker("w2", True)}, (
        f"workers() answered {workers}; expected the stored workers w1 and w2 (assistant)"
    )
    families = list(store.families())
    assert families == sorted(families), f"families() is not sorted: {families}"
    assert {"RLeaf", "RMid", "RRoot", "RTop"} <= set(families), families
    assert "RHidden" not in families, "families() lists the family of an unregistered task"
    _check_task_infos(store)
    store.save([], [], gone_tasks=_SAVED)
    after = store.summary()
    assert after.counts == before.counts, "summary() still counts deleted tasks"
    assert after.seq > before.seq, "deleting tasks did not move the change number on"


def _check_task_infos(store: Any) -> None:
    infos = list(store.task_infos())
    assert all(isinstance(info, TaskInfo) for info in infos), f"task_infos() answered {infos}"
    ids = [info.task_id for info in infos]
    assert len(ids) == len(set(ids)), f"task_infos() repeats a task: {ids}"
    assert [t for t in ids if t.startswith("r-")] == list(reversed(_LISTED)), (
        f"task_infos() listed {ids}; expected {list(reversed(_LISTED))} oldest change first"
        " (no unregistered task)"
    )
    root = infos[ids.index("r-root")]
    expected = TaskInfo(
        task_id="r-root",
        family="RRoot",
        params={"p": "r-root", "password": "hay"},
        status=TaskStatus.RUNNING,
        worker="w9",
        priority=0,
        dependencies=("r-mid",),
        status_message="",
        progress=None,
        tracking_url="",
        explanation="",
    )
    assert root == expected, f"task_infos() entry {root}; expected {expected} (unredacted)"
    leaf = infos[ids.index("r-leaf1")]
    assert leaf.status is TaskStatus.FAILED and leaf.explanation == "it broke", leaf
    assert not {"a", "b", "r-hidden"} & set(ids), f"task_infos() lists unregistered tasks: {ids}"


def _check_summary(store: Any, before: Any) -> None:
    summary = store.summary()
    expected = dict(before.counts)
    for _family, status, _deps, registered in _GRAPH.values():
        expected[status] += registered
    assert set(summary.counts) == set(map(str, TaskStatus)), (
        f"summary() must count all six states: {sorted(summary.counts)}"
    )
    assert summary.counts == expected, f"summary() counted {summary.counts}; expected {expected}"
    assert summary.total == sum(expected.values()), "summary().total is not the sum of counts"
    assert summary.seq >= before.seq + len(_SAVED), (
        f"the change number went from {before.seq} to {summary.seq} over {len(_SAVED)} saves"
    )


def _check_changes(store: Any, since: int) -> None:
    latest = store.summary().seq
    changes = store.changes_since(since)
    assert changes.seq == latest, f"changes_since().seq {changes.seq} is not the latest {latest}"
    assert list(changes.task_ids) == _SAVED and not changes.more, (
        f"changes_since({since}) listed {changes.task_ids}; expected {_SAVED}, oldest first"
    )
    some = store.changes_since(since, 2)
    assert list(some.task_ids) == _SAVED[:2] and some.more, f"changes_since(limit=2): {some}"
    none = store.changes_since(since, 0)
    assert none.seq == latest and not none.task_ids, f"changes_since(limit=0): {none}"
    assert not store.changes_since(latest).task_ids, "changes after the latest change"


def _check_page(store: Any) -> None:
    seen: list[Any] = []
    cursor = None
    for _ in range(100):
        page = store.page(TaskFilters(), cursor, 2)
        assert len(page.tasks) <= 2, f"page(limit=2) answered {len(page.tasks)} tasks"
        seen += page.tasks
        if page.next is None:
            break
        assert page.tasks and page.next == page.tasks[-1].seq, (
            f"page().next is {page.next}; expected the change number of its last task"
        )
        cursor = page.next
    ids = [entry.task_id for entry in seen]
    assert len(ids) == len(set(ids)), f"pages repeat a task: {ids}"
    numbers = [entry.seq for entry in seen]
    assert numbers == sorted(numbers, reverse=True), f"pages are not newest first: {numbers}"
    assert [t for t in ids if t.startswith("r-")] == _LISTED, (
        f"the pages list {ids}; expected {_LISTED} newest first (no unregistered task)"
    )
    root = next(entry for entry in seen if entry.task_id == "r-root")
    assert root.params == {"p": "r-root", "password": REDACTED}, (
        f"a list entry shows a secret-named parameter: {root.params}"
    )
    assert root.worker == "w9" and root.status == TaskStatus.RUNNING, root
    leaf = next(entry for entry in seen if entry.task_id == "r-leaf1")
    assert leaf.reason, "a FAILED task's list entry has no reason"


def _check_filters(store: Any) -> None:
    cases = {
        TaskFilters(state=TaskStatus.FAILED, family="RLeaf"): ["r-leaf1"],
        TaskFilters(family="RLeaf"): ["r-leaf1", "r-leaf2"],
        TaskFilters(worker="w9"): ["r-root"],
        TaskFilters(text="NEEDLE"): ["r-mid"],
        TaskFilters(text="hay"): [],  # (a secret-named parameter's value is not searched)
        TaskFilters(text="r-top"): ["r-top"],
    }
    for filters, expected in cases.items():
        ids = [e.task_id for e in store.page(filters, None, 50).tasks]
        assert ids == expected, f"page({filters}) listed {ids}; expected {expected}"


def _check_detail(store: Any) -> None:
    assert store.detail("r-nobody") is None, "detail() of an unknown task is not None"
    mid = store.detail("r-mid")
    assert mid is not None and mid.task_id == "r-mid" and mid.family == "RMid", mid
    deps = [(r.task_id, r.family, r.status) for r in mid.deps]
    assert deps == [("r-leaf1", "RLeaf", "FAILED"), ("r-leaf2", "RLeaf", "DONE")], deps
    dependents = [r.task_id for r in mid.dependents]
    assert dependents == ["r-root"] and mid.dependents_total == 1, mid.dependents
    assert [r.task_id for r in mid.blocked_by] == ["r-leaf1"], (
        f"detail().blocked_by is {mid.blocked_by}; expected the FAILED dependency only"
    )
    assert mid.params["password"] == REDACTED, "the detail shows a secret-named parameter"


def _check_graph(store: Any) -> None:
    assert store.graph("r-nobody", False) is None, "graph() of an unknown task is not None"
    up = store.graph("r-mid", False)
    assert up is not None and up.nodes[up.root].id == "r-mid", up
    layers = {n.id: n.layer for n in up.nodes}
    assert layers == {"r-mid": 0, "r-leaf1": 1, "r-leaf2": 1}, f"upstream graph: {layers}"
    assert _edges(up) == {("r-mid", "r-leaf1"), ("r-mid", "r-leaf2")}, _edges(up)
    assert [up.nodes[i].id for i in up.blocking] == ["r-leaf1"] and not up.truncated, up
    both = store.graph("r-mid", True)
    layers = {n.id: n.layer for n in both.nodes}
    # (a task nobody registered is in graphs, as in dependency lists)
    expected = {"r-mid": 0, "r-leaf1": 1, "r-leaf2": 1, "r-root": -1, "r-top": -2, "r-hidden": -3}
    assert layers == expected, f"graph(downstream) layers {layers}; expected {expected}"
    assert ("r-root", "r-mid") in _edges(both) and ("r-top", "r-root") in _edges(both)
    capped = store.graph("r-mid", True, 2)
    assert len(capped.nodes) == 2 and capped.truncated and capped.cap == 2, capped
    assert capped.nodes[0].id == "r-mid", "a capped graph does not start at its task"


def _edges(graph: Any) -> set[tuple[str, str]]:
    return {(graph.nodes[t].id, graph.nodes[d].id) for t, d in graph.edges}
