"""Schema 3 of the ``postgres`` store against a real PostgreSQL server: a task's dependencies
live only in the edges table, with their positions, rows are stored compact, a merge writes
only the edges it added, and a schema-2 store (whole rows, deps in the JSON) is migrated."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from conveyor.protocol import TaskStatus
from conveyor.scheduler.persist import to_row
from conveyor.scheduler.policy import TaskRecord
from conveyor.server.stores import StoreContext
from psycopg import sql

from conveyor_postgres import SCHEMA_VERSION, PostgresStore
from conveyor_postgres.store import _MIGRATIONS


def _open(dsn: str) -> PostgresStore:
    return PostgresStore(StoreContext(settings={"dsn": dsn}))


def _record(task_id: str, deps: tuple[str, ...] = ()) -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        seq=1,
        family="Fam",
        module="m",
        params={"p": task_id},
        status=TaskStatus.PENDING,
        deps=deps,
        stakeholders=("w1",),
        runners=("w1",),
        registered=True,
    )


def _query(dsn: str, text: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(sql.SQL(text).format(s=sql.Identifier("conveyor")), args)
        return cursor.fetchall() if cursor.description else []


def _edges(dsn: str, task_id: str) -> list[tuple[str, int]]:
    return [
        (d, p)
        for d, p in _query(
            dsn, "SELECT dep_id, pos FROM {s}.edges WHERE task_id = %s ORDER BY pos", task_id
        )
    ]


def test_a_merge_writes_the_added_edges_in_order_and_rows_are_compact(pg_dsn: str) -> None:
    """The wrapper's deps (a list that grows) are stored as positioned edges, a merge adds
    the new ones after them, its JSON holds neither deps nor defaults, and a reopened store
    loads the rows as saved (deps in order) and reads them in order."""
    wrapper = _record("w", ("d9", "d1"))
    store = _open(pg_dsn)
    try:
        store.save([to_row(wrapper), to_row(_record("d9"))], [("w1", False)])
        wrapper.deps = list(wrapper.deps)
        wrapper.deps += ["d5", "d0"]
        store.save([to_row(wrapper)], [])
    finally:
        store.close()
    assert _edges(pg_dsn, "w") == [("d9", 0), ("d1", 1), ("d5", 2), ("d0", 3)]
    ((data,),) = _query(pg_dsn, "SELECT data FROM {s}.tasks WHERE task_id = 'w'")
    assert "deps" not in json.loads(data) and "loader" not in json.loads(data)
    store = _open(pg_dsn)
    try:
        rows = {r["task_id"]: r for r in store.load()[0]}
        detail = store.detail("w")
        infos = {i.task_id: i for i in store.task_infos()}
    finally:
        store.close()
    assert rows["w"] == to_row(wrapper) and rows["d9"] == to_row(_record("d9"))
    assert detail is not None and [d.task_id for d in detail.deps] == ["d9", "d1", "d5", "d0"]
    assert infos["w"].dependencies == ("d9", "d1", "d5", "d0")


def test_a_schema_2_store_is_migrated_keeping_the_order_of_deps(pg_dsn: str) -> None:
    """Whole rows with deps in their JSON and edges without positions (schema 2) become
    compact rows and positioned edges in the order of the deps; the rows load as saved."""
    rows = [to_row(_record("w", ("z", "a", "m"))), *(to_row(_record(t)) for t in "zam")]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA conveyor")
        conn.execute("CREATE TABLE conveyor.schema_version (version integer NOT NULL)")
        conn.execute("INSERT INTO conveyor.schema_version VALUES (2)")
        for version in (1, 2):
            for statement in _MIGRATIONS[version]:
                conn.execute(sql.SQL(statement).format(s=sql.Identifier("conveyor")))
        for n, row in enumerate(rows, 1):
            conn.execute(
                "INSERT INTO conveyor.tasks VALUES (%s, %s, 'PENDING', 'PENDING', 'Fam', NULL,"
                " '', 1, 1.0, %s)",
                (row["task_id"], json.dumps(row), n),
            )
            for dep in row["deps"]:
                conn.execute("INSERT INTO conveyor.edges VALUES (%s, %s)", (row["task_id"], dep))
    store = _open(pg_dsn)
    try:
        loaded = {r["task_id"]: r for r in store.load()[0]}
    finally:
        store.close()
    assert loaded == {r["task_id"]: r for r in rows}
    assert _query(pg_dsn, "SELECT version FROM {s}.schema_version") == [(SCHEMA_VERSION,)]
    assert SCHEMA_VERSION == 3
    assert _edges(pg_dsn, "w") == [("z", 0), ("a", 1), ("m", 2)]
    ((data,),) = _query(pg_dsn, "SELECT data FROM {s}.tasks WHERE task_id = 'w'")
    assert "deps" not in json.loads(data)
