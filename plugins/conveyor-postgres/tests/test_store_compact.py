"""Schema 3 of the ``postgres`` store against a real PostgreSQL server: a task's dependencies
live only in the edges table, with their positions, rows are stored compact, a merge writes
only the edges it added, and a schema-2 store (whole rows, deps in the JSON) is migrated: in
chunks, all or nothing, and never while another server's lease is live."""

from __future__ import annotations

import json
import re
import threading
import uuid
from typing import Any

import psycopg
import pytest
from conveyor.errors import ConfigError
from conveyor.protocol import TaskStatus
from conveyor.scheduler.persist import to_row
from conveyor.scheduler.policy import TaskRecord
from conveyor.server.stores import StoreContext
from psycopg import sql

from conveyor_postgres import SCHEMA_VERSION, PostgresStore
from conveyor_postgres import store as store_module
from conveyor_postgres.testing import ThrowawayCluster
from pg_support import schema_2_store, set_lease


def _open(dsn: str, holder: str = "") -> PostgresStore:
    return PostgresStore(StoreContext(settings={"dsn": dsn}, holder=holder))


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
    schema_2_store(pg_dsn, rows)
    store = _open(pg_dsn)
    try:
        loaded = {r["task_id"]: r for r in store.load()[0]}
    finally:
        store.close()
    assert loaded == {r["task_id"]: r for r in rows}
    assert _query(pg_dsn, "SELECT version FROM {s}.schema_version") == [(SCHEMA_VERSION,)]
    assert SCHEMA_VERSION >= 3  # (through 3, where the deps moved out, and every later step)
    assert _edges(pg_dsn, "w") == [("z", 0), ("a", 1), ("m", 2)]
    ((data,),) = _query(pg_dsn, "SELECT data FROM {s}.tasks WHERE task_id = 'w'")
    assert "deps" not in json.loads(data)


# --- migrating while older servers may run ------------------------------------------------------

OLD = "http://sched-old.internal:8082"  # a server of the older release, as the lease names it
NEW = "http://sched-new.internal:8082"  # the upgraded server opening the store


def _schema_2_rows() -> list[dict[str, Any]]:
    return [to_row(_record("w", ("z", "a", "m"))), *(to_row(_record(t)) for t in "zam")]


def _dump(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything migration 3 may change: the version, the edges' columns, every row of the
    tasks, edges and lease tables."""
    return {
        "version": _query(dsn, "SELECT version FROM {s}.schema_version"),
        "columns": _query(
            dsn,
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'conveyor' AND table_name = 'edges' ORDER BY ordinal_position",
        ),
        "tasks": _query(dsn, "SELECT * FROM {s}.tasks ORDER BY task_id"),
        "edges": _query(dsn, "SELECT * FROM {s}.edges ORDER BY task_id, dep_id"),
        "lease": _query(dsn, "SELECT * FROM {s}.lease"),
    }


def _lease(dsn: str) -> tuple[int, str, bool]:
    """The lease row: its term, its holder, whether it says nobody holds it (expires NULL)."""
    ((term, holder, free),) = _query(
        dsn, "SELECT term, holder, expires IS NULL FROM {s}.lease WHERE id = 1"
    )
    return int(term), str(holder), bool(free)


def test_a_live_lease_of_another_server_refuses_the_migration_untouched(pg_dsn: str) -> None:
    """A server of the older release may hold the lease (leading, or about to renew it): the
    upgraded server refuses to start, in one line naming the holder, both versions and what
    to do, and the store is exactly as it was, still schema 2."""
    schema_2_store(pg_dsn, _schema_2_rows())
    set_lease(pg_dsn, 4, OLD, 600)
    before = _dump(pg_dsn)
    with pytest.raises(ConfigError) as caught:
        _open(pg_dsn, holder=NEW)
    message = str(caught.value)
    assert "\n" not in message, message
    assert f"while {OLD!r} holds its lease (term 4" in message, message
    assert f"stored 2, this conveyor-postgres {SCHEMA_VERSION})" in message, message
    assert "stop every scheduler of the older version, or wait for its lease to expire (" in message
    assert message.endswith("then start this one again"), message
    waited = re.search(r"wait for its lease to expire \((\d+\.\d) s\)", message)
    assert waited is not None and 500 < float(waited[1]) <= 600, message
    assert _dump(pg_dsn) == before
    assert before["version"] == [(2,)] and before["columns"] == [("task_id",), ("dep_id",)]
    # (another upgraded server is refused the same way: nothing was left half done)
    with pytest.raises(ConfigError, match="holds its lease"):
        _open(pg_dsn)
    assert _dump(pg_dsn) == before
    # a lease in this server's own name is another's all the same when that name could be
    # another host's (servers bound to a loopback or unspecified address, no public_url)
    for own in ("http://127.0.0.1:8082", "http://0.0.0.0:8082", "http://[::]:8082"):
        set_lease(pg_dsn, 4, own, 600)
        with pytest.raises(ConfigError, match=f"while {re.escape(repr(own))} holds its lease"):
            _open(pg_dsn, holder=own)
        assert _dump(pg_dsn)["version"] == [(2,)]


@pytest.mark.parametrize(
    ("lease", "opener", "after"),
    [
        pytest.param(None, NEW, (0, "", True), id="never-taken"),
        pytest.param((4, "", None), NEW, (4, "", True), id="given-up"),
        # its holder is gone: the migration ends its term, so that it cannot renew it
        pytest.param((4, OLD, -1.0), NEW, (5, "", True), id="run-out"),
        # this server's own (a run of it that died): it is no other server
        pytest.param((4, NEW, 600.0), NEW, (5, "", True), id="this-servers-own"),
    ],
)
def test_a_lease_nobody_else_holds_live_lets_the_migration_go_on(
    pg_dsn: str,
    lease: tuple[int, str, float | None] | None,
    opener: str,
    after: tuple[int, str, bool],
) -> None:
    """Never taken, given up, run out or this server's own: the store is migrated (the rows
    load as saved) and a held term is ended; an upgraded server then takes the next one."""
    rows = _schema_2_rows()
    schema_2_store(pg_dsn, rows)
    if lease is not None:
        set_lease(pg_dsn, *lease)
    store = _open(pg_dsn, holder=opener)
    try:
        assert _query(pg_dsn, "SELECT version FROM {s}.schema_version") == [(SCHEMA_VERSION,)]
        assert _lease(pg_dsn) == after
        assert {r["task_id"]: r for r in store.load()[0]} == {r["task_id"]: r for r in rows}
        taken = store.lead(opener, 30)
        assert (taken.held, taken.term) == (True, after[0] + 1), taken
    finally:
        store.close()
    assert _edges(pg_dsn, "w") == [("z", 0), ("a", 1), ("m", 2)]


def test_upgraded_servers_starting_together_migrate_once(pg_dsn: str) -> None:
    """Three upgraded servers open a schema-2 store whose lease ran out, at once: all start,
    the migration ran once (the old term was ended once) and the rows load as saved."""
    rows = _schema_2_rows()
    schema_2_store(pg_dsn, rows)
    set_lease(pg_dsn, 4, OLD, -1.0)
    opened: list[PostgresStore] = []
    errors: list[BaseException] = []

    def open_one(n: int) -> None:
        try:
            opened.append(_open(pg_dsn, holder=f"http://new-{n}:8082"))
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=open_one, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        assert not errors and len(opened) == 3, errors
        assert _lease(pg_dsn) == (5, "", True)
        assert {r["task_id"]: r for r in opened[1].load()[0]} == {r["task_id"]: r for r in rows}
    finally:
        for store in opened:
            store.close()


def _chunked_rows() -> list[dict[str, Any]]:
    """Wrappers with deps (one listing a dep twice) and leaves: more rows than a few chunks."""
    wrappers = [
        to_row(_record(f"w{n}", (*(f"leaf{(n * 3 + k) % 9}" for k in range(n % 4)), "leaf0")))
        for n in range(8)
    ]
    return wrappers + [to_row(_record(f"leaf{n}")) for n in range(9)]


def _as_loaded(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``rows`` by id as a migrated store loads them: a dep listed twice, once."""
    return {r["task_id"]: {**r, "deps": list(dict.fromkeys(r["deps"]))} for r in rows}


_BAD = {"bad": "not JSON", "liar": json.dumps({"task_id": "someone else"})}
"""Rows that are not task records: the migration leaves them as they are."""


@pytest.mark.timeout(120)
def test_a_migration_in_chunks_writes_what_one_in_one_chunk_writes(
    pg_cluster: ThrowawayCluster, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """17 task rows and 2 rows that are not task records, migrated 3 rows at a time and in one
    chunk (in two databases): the same tasks, edges and version, every task row compact, the
    bad ones untouched, and the rows load as saved."""
    rows = _chunked_rows()
    one_chunk = pg_cluster.create_database(f"t_{uuid.uuid4().hex[:16]}")
    for dsn in (pg_dsn, one_chunk):
        schema_2_store(dsn, rows)
        for task_id, data in _BAD.items():
            _query(
                dsn,
                "INSERT INTO {s}.tasks VALUES (%s, %s, 'PENDING', 'PENDING', 'Fam', NULL, '', 1,"
                " 1.0, 99)",
                task_id,
                data,
            )
    assert len(rows) + len(_BAD) > 6 * 3
    _open(one_chunk).close()
    monkeypatch.setattr(store_module, "_MIGRATION_CHUNK", 3)
    _open(pg_dsn).close()
    chunked, whole = _dump(pg_dsn), _dump(one_chunk)
    assert chunked == whole
    assert chunked["version"] == [(SCHEMA_VERSION,)]
    data = {task_id: text for task_id, text, *_ in chunked["tasks"]}
    assert {t: data[t] for t in _BAD} == _BAD
    assert all("deps" not in json.loads(data[r["task_id"]]) for r in rows)
    assert _edges(pg_dsn, "w5") == [("leaf6", 0), ("leaf0", 1)]
    assert _edges(pg_dsn, "w3") == [("leaf0", 0), ("leaf1", 1), ("leaf2", 2)]
    _query(pg_dsn, "DELETE FROM {s}.tasks WHERE task_id = ANY(%s)", list(_BAD))
    store = _open(pg_dsn)
    try:
        assert {r["task_id"]: r for r in store.load()[0]} == _as_loaded(rows)
    finally:
        store.close()


@pytest.mark.timeout(120)
def test_a_migration_failing_in_a_later_chunk_changes_nothing(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunks are one transaction: PostgreSQL refusing a row of the last chunk (a
    trigger) leaves every row, the edges and the version as they were; once the trigger is
    gone the migration goes through."""
    rows = _chunked_rows()
    schema_2_store(pg_dsn, rows)
    _query(
        pg_dsn,
        "CREATE FUNCTION {s}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION 'refusing %%', NEW.task_id; END $$",
    )
    _query(
        pg_dsn,
        "CREATE TRIGGER refuse BEFORE UPDATE ON {s}.tasks FOR EACH ROW"
        " WHEN (NEW.task_id = 'w7') EXECUTE FUNCTION {s}.refuse()",
    )
    before = _dump(pg_dsn)
    monkeypatch.setattr(store_module, "_MIGRATION_CHUNK", 3)
    with pytest.raises(ConfigError, match="refusing w7"):
        _open(pg_dsn)
    assert _dump(pg_dsn) == before
    _query(pg_dsn, "DROP TRIGGER refuse ON {s}.tasks")
    store = _open(pg_dsn)
    try:
        assert {r["task_id"]: r for r in store.load()[0]} == _as_loaded(rows)
    finally:
        store.close()
