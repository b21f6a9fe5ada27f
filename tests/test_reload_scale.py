"""Reloading a large state (issue 25): the built-in SQLite store streams its rows and checks
each once (``load_records``), the records it makes are the ones ``load()``'s rows make, bad
rows are still reported by task id and field, stores with only ``load()`` still load, the
garbage collector is paused around a load and always resumes, and saves write edges only for
tasks that have them. All on real SQLite files."""

from __future__ import annotations

import dataclasses
import gc
import json
import sqlite3
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from conveyor.config import ServerSettings
from conveyor.errors import ConfigError
from conveyor.protocol import AttemptEnd, RetrySpec, TaskStatus
from conveyor.scheduler.persist import from_row, to_row
from conveyor.scheduler.policy import Attempt, TaskRecord
from conveyor.server.app import load_json
from conveyor.server.main import collector_paused, load_state
from conveyor.server.stores import SqliteStore, StoreContext, Workers

pytestmark = pytest.mark.timeout(120)

COUNT = 3000
STATUSES = list(TaskStatus)


def _record(i: int) -> TaskRecord:
    """Task ``i`` of a varied state: every field of a row takes several values."""
    worker = f"worker-{i % 7}"
    attempts = [
        Attempt(
            attempt=n + 1,
            started=1000.0 + n,
            worker=f"worker-{(i + n) % 7}",
            ended=None if n == i % 3 - 1 else 1000.5 + n,
            outcome=None if n == i % 3 - 1 else list(AttemptEnd)[(i + n) % len(AttemptEnd)],
        )
        for n in range(i % 3)
    ]
    return TaskRecord(
        task_id=f"T_{i}_{i * 2654435761 % 16**10:010x}",
        seq=i + 1,
        family=f"Family{i % 5}",
        module=f"mod{i % 3}",
        params={"i": str(i), "part": str(i % 4)} if i % 6 else {},
        loader="python" if i % 2 else "alt",
        status=STATUSES[i % len(STATUSES)],
        deps=tuple(f"T_{d}_{d * 2654435761 % 16**10:010x}" for d in range(max(0, i - i % 4), i)),
        own_priority=i % 9 - 4,
        priority=i % 11,
        resources={"cpu": i % 3} if i % 5 == 0 else {},
        stakeholders=(worker,) if i % 4 else (),
        runners=(worker, "worker-x") if i % 8 == 0 else (),
        worker=worker if i % 3 else None,
        retry_count=i % 4 if i % 2 else None,
        retry=RetrySpec(1.0, 2.0, None, 0.5) if i % 10 == 0 else None,
        labels=("gpu",) if i % 12 == 0 else (),
        waiting="no worker with gpu" if i % 24 == 0 else "",
        failures=deque([10.0, 11.5]) if i % 13 == 0 else None,
        wake_at=float(i % 5),
        explanation="it broke" if i % 17 == 0 else "",
        status_message=f"at {i}" if i % 19 == 0 else "",
        progress=i / COUNT if i % 2 == 0 else None,
        tracking_url="http://example.invalid/t" if i % 23 == 0 else "",
        registered=i % 29 != 0,
        attempt=i % 3,
        reported=i % 2,
        attempts=attempts or None,
    )


def _comparable(rec: TaskRecord) -> dict[str, Any]:
    """Every field of a record, an empty attempt history as None."""
    fields = {f.name: getattr(rec, f.name) for f in dataclasses.fields(rec)}
    fields["attempts"] = rec.attempts or None
    fields["deps"] = tuple(rec.deps)
    return fields


def _saved_state(path: Path, count: int = COUNT) -> list[TaskRecord]:
    """A state file of ``count`` varied tasks and two workers; the records saved."""
    records = [_record(i) for i in range(count)]
    store = SqliteStore(StoreContext(str(path)))
    try:
        store.save([to_row(r) for r in records], [("worker-0", False), ("helper", True)])
    finally:
        store.close()
    return records


def _settings(**changes: Any) -> ServerSettings:
    return dataclasses.replace(ServerSettings(), **changes)


def test_a_state_of_thousands_reloads_every_field_of_every_record(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    saved = _saved_state(path)
    store = SqliteStore(StoreContext(str(path)))
    try:
        records, workers = load_state(store, _settings())
        rows, row_workers = store.load()
    finally:
        store.close()
    assert sorted(workers) == [("helper", True), ("worker-0", False)] == sorted(row_workers)
    by_id = {r.task_id: r for r in records}
    assert len(records) == len(by_id) == COUNT
    for original in saved:
        assert _comparable(by_id[original.task_id]) == _comparable(original), original.task_id
    # the rows load() returns make the same records
    assert [_comparable(from_row(r)) for r in rows] == [_comparable(r) for r in records]


def test_reloaded_records_share_their_repeated_strings(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _saved_state(path, 200)
    store = SqliteStore(StoreContext(str(path)))
    try:
        records, _ = store.load_records()
    finally:
        store.close()
    for name in ("family", "module", "loader"):
        distinct = {id(getattr(r, name)) for r in records}
        assert len(distinct) == len({getattr(r, name) for r in records}), name
    workers = [r.worker for r in records if r.worker is not None]
    workers += [w for r in records for w in r.stakeholders]
    workers += [a.worker for r in records for a in r.attempts or ()]
    assert len({id(w) for w in workers}) == len(set(workers))
    assert all(r.attempts is None or r.attempts for r in records)


def _break_row(path: Path, task_id: str, field: str, value: Any) -> None:
    db = sqlite3.connect(path)
    try:
        (data,) = db.execute("SELECT data FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        row = json.loads(data)
        row[field] = value
        db.execute("UPDATE tasks SET data = ? WHERE task_id = ?", (json.dumps(row), task_id))
        db.commit()
    finally:
        db.close()


def test_a_bad_row_among_thousands_is_reported_and_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    saved = _saved_state(path)
    bad = saved[COUNT // 2 + 1]
    _break_row(path, bad.task_id, "priority", "high")
    store = SqliteStore(StoreContext(str(path)))
    try:
        with pytest.raises(ConfigError) as refused:
            load_state(store, _settings())
        message = str(refused.value)
        assert f"task_id {bad.task_id!r}" in message
        assert "field 'priority' is \"high\"; expected an integer" in message
        assert "--recover" in message
        assert gc.isenabled()
        records, _ = load_state(store, _settings(on_corrupt_state="quarantine"))
    finally:
        store.close()
    assert len(records) == COUNT - 1
    assert bad.task_id not in {r.task_id for r in records}
    db = sqlite3.connect(path)
    try:
        quarantined = db.execute("SELECT row_key, reason FROM quarantine").fetchall()
    finally:
        db.close()
    assert quarantined == [(bad.task_id, "field 'priority' is \"high\"; expected an integer")]


class RowsOnly:
    """A store with ``load()`` only, as a third-party one may be: the rows of an SQLite
    store."""

    def __init__(self, inner: SqliteStore) -> None:
        self.inner = inner

    def load(self) -> tuple[list[dict[str, Any]], Workers]:
        return self.inner.load()


def test_a_store_without_load_records_loads_the_same_records(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _saved_state(path, 500)
    store = SqliteStore(StoreContext(str(path)))
    try:
        streamed, workers = load_state(store, _settings())
        from_rows, row_workers = load_state(RowsOnly(store), _settings())  # type: ignore[arg-type]
    finally:
        store.close()
    assert [_comparable(r) for r in from_rows] == [_comparable(r) for r in streamed]
    assert row_workers == workers


def test_an_unusable_row_from_a_rows_only_store_is_refused(tmp_path: Path) -> None:
    class Lying(RowsOnly):
        def load(self) -> tuple[list[dict[str, Any]], Workers]:
            rows, workers = super().load()
            rows[3]["status"] = "SLEEPING"
            return rows, workers

    path = tmp_path / "state.db"
    saved = _saved_state(path, 10)
    store = SqliteStore(StoreContext(str(path)))
    try:
        with pytest.raises(ConfigError, match="returned an unusable task row") as refused:
            load_state(Lying(store), _settings())  # type: ignore[arg-type]
    finally:
        store.close()
    assert f"task_id {saved[3].task_id!r}" in str(refused.value)
    assert gc.isenabled()


def test_the_collector_is_paused_inside_and_always_resumes() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # (the inner one leaves it to the outer)
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("load failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # (left off, as it was)
    finally:
        gc.enable()


def _edges(path: Path) -> set[tuple[str, str]]:
    db = sqlite3.connect(path)
    try:
        return set(db.execute("SELECT task_id, dep_id FROM edges").fetchall())
    finally:
        db.close()


def _row(task_id: str, deps: list[str], seq: int) -> dict[str, Any]:
    return to_row(TaskRecord(task_id=task_id, seq=seq, family="F", deps=tuple(deps)))


def test_edges_follow_the_dependencies_through_saves_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteStore(StoreContext(str(path)))
    try:
        store.save([_row("a", [], 1), _row("b", [], 2), _row("w", ["a"], 3)], [])
        assert _edges(path) == {("w", "a")}
        store.save([_row("w", ["a", "b"], 4), _row("a", [], 5)], [])
        assert _edges(path) == {("w", "a"), ("w", "b")}
        store.save([_row("w", ["b"], 6), _row("b", ["a"], 7)], [])
        assert _edges(path) == {("w", "b"), ("b", "a")}
        store.save([_row("w", [], 8)], [])
        assert _edges(path) == {("b", "a")}
    finally:
        store.close()
    # a store that saves before loading does not know the stored edges: it replaces them
    again = SqliteStore(StoreContext(str(path)))
    try:
        again.save([_row("b", [], 9)], [])
        assert _edges(path) == set()
        again.save([_row("w", ["a"], 10)], [])
        assert _edges(path) == {("w", "a")}
    finally:
        again.close()
    third = SqliteStore(StoreContext(str(path)))
    try:
        records, _ = third.load_records()
        assert {r.task_id: tuple(r.deps) for r in records} == {"a": (), "b": (), "w": ("a",)}
        third.save([_row("a", [], 11), _row("w", ["a", "b"], 12)], [], gone_tasks=["b"])
        assert _edges(path) == {("w", "a"), ("w", "b")}
    finally:
        third.close()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": "\\ud800"}',
        b'{"a": "x\\uDFFFy"}',
        b'{"a": "\xed\xa0\x80"}',  # a surrogate encoded in the bytes (json decodes those)
        '{"a": "\\ud800"}'.encode("utf-16"),
        b'{"a": ["ok", {"\\ud83d": 1}]}',
    ],
)
def test_a_lone_surrogate_is_still_refused_however_it_arrives(raw: bytes) -> None:
    with pytest.raises(ValueError, match="not valid Unicode"):
        load_json(raw)


def test_bodies_without_surrogates_load() -> None:
    assert load_json(b'{"a": "caf\\u00e9 \\ud83d\\ude00", "b": "\xed\x9e\xa3"}') == {
        "a": "café \U0001f600",
        "b": "\ud7a3",
    }
    assert load_json('{"a": "é"}'.encode("utf-16")) == {"a": "é"}
