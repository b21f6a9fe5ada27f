"""The ``postgres`` state store against a real PostgreSQL server (``pg_cluster``): the
conformance check, the schema and its migrations, what is refused, the lease and its fencing,
and a restart of PostgreSQL under an open store."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from conveyor.errors import ConfigError, StateStoreError
from conveyor.protocol import AttemptEnd, RetrySpec, TaskFilters, TaskStatus
from conveyor.scheduler.persist import to_row
from conveyor.scheduler.policy import Attempt, TaskRecord
from conveyor.server.stores import (
    CanLead,
    CanListIds,
    CanProbe,
    CanSaveStakeholders,
    CorruptState,
    Deposed,
    Lease,
    StoreContext,
    TaskReads,
    UnusableRow,
)
from conveyor.testing import check_state_store

from conveyor_postgres import SCHEMA_VERSION, PostgresStore
from conveyor_postgres.store import _SAVE_TYPES
from conveyor_postgres.testing import ThrowawayCluster


def _open(dsn: str, **settings: Any) -> PostgresStore:
    return PostgresStore(StoreContext(settings={"dsn": dsn, **settings}))


@pytest.fixture
def stores(pg_dsn: str) -> Iterator[Callable[..., PostgresStore]]:
    """Opens stores on the test's database; closes them all at the end."""
    opened: list[PostgresStore] = []

    def open_store(**settings: Any) -> PostgresStore:
        store = _open(pg_dsn, **settings)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


def _row(task_id: str, status: TaskStatus = TaskStatus.PENDING, deps: tuple[str, ...] = ()) -> Any:
    return to_row(
        TaskRecord(
            task_id=task_id,
            seq=1,
            family="Fam",
            module="m",
            params={"p": task_id},
            status=status,
            deps=deps,
            stakeholders=("w1",),
            runners=("w1",),
            registered=True,
        )
    )


def _ids(store: PostgresStore) -> set[str]:
    return {row["task_id"] for row in store.load()[0]}


def _database(dsn: str) -> str:
    return dsn.rsplit("/", 1)[1]


def _wait_for(what: str, check: Callable[[], bool], deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


# --- conformance and the schema -------------------------------------------------------------------


def test_conforms(pg_dsn: str) -> None:
    checks = check_state_store(lambda: _open(pg_dsn))
    assert "reopen" in checks and "reads-graph" in checks


def test_implements_the_optional_protocols(stores: Callable[..., PostgresStore]) -> None:
    store = stores()
    for protocol in (TaskReads, CanListIds, CanProbe, CanLead, CanSaveStakeholders):
        assert isinstance(store, protocol), protocol


def test_creates_a_versioned_schema_of_its_own(
    pg_cluster: ThrowawayCluster, pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    stores(schema="sched_a")
    db = _database(pg_dsn)
    assert pg_cluster.sql("SELECT version FROM sched_a.schema_version", db) == [(SCHEMA_VERSION,)]
    tables = {t for (t,) in pg_cluster.sql("SELECT tablename FROM pg_tables", db)}
    assert {"tasks", "edges", "workers", "changes", "lease"} <= tables
    # a second store on another schema of the same database keeps its own state
    a, b = stores(schema="sched_a"), stores(schema="sched_b")
    a.save([_row("x")], [])
    assert _ids(a) == {"x"} and _ids(b) == set()


def test_two_stores_opening_a_new_schema_together_both_open(pg_dsn: str) -> None:
    opened: list[PostgresStore] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            opened.append(_open(pg_dsn))
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        assert not errors and len(opened) == 3, errors
        opened[0].save([_row("a")], [])
        assert _ids(opened[2]) == {"a"}
    finally:
        for store in opened:
            store.close()


def test_a_newer_schema_is_refused_naming_both_versions(
    pg_cluster: ThrowawayCluster, pg_dsn: str
) -> None:
    _open(pg_dsn).close()
    pg_cluster.sql("UPDATE conveyor.schema_version SET version = 7", _database(pg_dsn))
    with pytest.raises(ConfigError) as caught:
        _open(pg_dsn)
    message = str(caught.value)
    assert "schema version 7" in message and f"({SCHEMA_VERSION})" in message, message
    assert "upgrade conveyor-postgres" in message and "\n" not in message


def test_a_schema_of_another_application_is_refused_untouched(
    pg_cluster: ThrowawayCluster, pg_dsn: str
) -> None:
    db = _database(pg_dsn)
    pg_cluster.sql("CREATE SCHEMA conveyor", db)
    pg_cluster.sql("CREATE TABLE conveyor.orders (id int)", db)
    with pytest.raises(ConfigError, match=r"not a conveyor state schema.*'orders'"):
        _open(pg_dsn)
    tables = pg_cluster.sql("SELECT tablename FROM pg_tables WHERE schemaname = 'conveyor'", db)
    assert tables == [("orders",)]
    # ours with a foreign table added is refused too
    _open(pg_dsn, schema="ours").close()
    pg_cluster.sql("CREATE TABLE ours.extra (id int)", db)
    with pytest.raises(ConfigError, match="'extra'"):
        _open(pg_dsn, schema="ours")


def test_unusable_rows_are_reported_not_loaded(
    pg_cluster: ThrowawayCluster, pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    store = stores()
    store.save([_row("good")], [])
    pg_cluster.sql(
        "INSERT INTO conveyor.tasks VALUES ('bad', '{not json', 'PENDING', 'PENDING', 'F',"
        " NULL, 'bad', 0, 0, 99)",
        _database(pg_dsn),
    )
    with pytest.raises(CorruptState) as caught:
        store.load()
    assert [b.key for b in caught.value.bad] == [("tasks", "bad")]
    assert "not JSON" in caught.value.bad[0].reason


def test_a_row_holding_its_dependencies_in_its_json_is_reported(
    pg_cluster: ThrowawayCluster, pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    """Since schema 3 a task's dependencies are only in the edges table: a row whose JSON
    holds some is refused (taken as the task's, they would be lost at its next save)."""
    store = stores()
    store.save([_row("good"), _row("bad")], [])
    pg_cluster.sql(
        "UPDATE conveyor.tasks SET data = jsonb_set(data::jsonb, '{deps}', '[\"x\"]')::text"
        " WHERE task_id = 'bad'",
        _database(pg_dsn),
    )
    with pytest.raises(CorruptState) as caught:
        store.load()
    assert [b.key for b in caught.value.bad] == [("tasks", "bad")]
    assert "field 'deps' is in the row's JSON" in caught.value.bad[0].reason


def test_dependencies_in_a_rows_json_beside_its_edges_give_way_to_the_edges(
    pg_cluster: ThrowawayCluster, pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    """A row whose JSON holds dependencies while the edges hold its own is loaded, and shown
    in the task list and detail, with the edges' (nothing is lost); one whose edges hold none
    is unusable to the UI's readers as to the load."""
    store = stores()
    store.save([_row("w", deps=("a", "b")), _row("a"), _row("b")], [])
    pg_cluster.sql(
        "UPDATE conveyor.tasks SET data = jsonb_set(data::jsonb, '{deps}', '[\"x\"]')::text"
        " WHERE task_id IN ('w', 'b')",
        _database(pg_dsn),
    )
    listed = {i.task_id: i for i in store.task_infos()}
    detail = store.detail("w")
    assert detail is not None and [d.task_id for d in detail.deps] == ["a", "b"]
    assert list(listed["w"].dependencies) == ["a", "b"]
    assert listed["b"].status == TaskStatus.UNKNOWN
    assert "field 'deps' is in the row's JSON" in listed["b"].explanation
    with pytest.raises(UnusableRow, match="field 'deps' is in the row's JSON"):
        store.detail("b")
    pg_cluster.sql(
        "UPDATE conveyor.tasks SET data = (data::jsonb - 'deps')::text WHERE task_id = 'b'",
        _database(pg_dsn),
    )
    rows, _ = store.load()
    assert {r["task_id"]: r["deps"] for r in rows}["w"] == ["a", "b"]


def _busy(task_id: str, deps: tuple[str, ...]) -> TaskRecord:
    """A record whose every stored field differs from its default."""
    return TaskRecord(
        task_id=task_id, seq=3, family="Busy", module="m", params={"p": "1"}, loader="alt",
        status=TaskStatus.FAILED, deps=deps, own_priority=1, priority=2, resources={"db": 1},
        stakeholders=("w1", "w2"), runners=("w2",), worker="w2", retry_count=2,
        retry=RetrySpec(1.0, 2.0, 60.0, 0.5), labels=("gpu",), waiting="no gpu",
        batch_key="k", batch_max=4, batch=(task_id,), submitted_by="me", cancelled=True,
        failures=deque([5.0, 6.5]), wake_at=12.5, explanation="why", status_message="half",
        progress=50.0, tracking_url="http://x", registered=True, attempt=3, reported=2,
        attempts=[Attempt(3, 10.0, "w2", 11.5, AttemptEnd.FAILED)],
    )  # fmt: skip


def test_load_records_gives_the_records_of_the_rows_load_gives(
    pg_cluster: ThrowawayCluster, pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    """load_records() (what the server loads with) gives, for every row, the record the
    server would make of the row load() gives, sharing repeated strings, and reports an
    unusable row as load() does; a save after it writes only what changed."""
    store = stores()
    records = [_busy("b", ("a", "c")), _busy("d", ()), TaskRecord("a", 1, registered=True)]
    store.save([to_row(r) for r in records] + [_row("c")], [("w1", False), ("w2", True)])
    rows, workers = store.load()
    loaded, loaded_workers = stores().load_records()
    assert loaded_workers == workers == [("w1", False), ("w2", True)]
    assert [to_row(r) for r in loaded] == rows
    got = {r.task_id: r for r in loaded}
    assert got["b"].attempts == records[0].attempts and got["b"].failures == deque([5.0, 6.5])
    assert got["b"].stakeholders is got["d"].stakeholders and got["a"].attempts is None
    assert list(got["b"].deps) == ["a", "c"] and got["d"].deps == ()
    again = stores()
    again.load_records()
    seq = again.summary().seq
    again.save([to_row(got["b"]), to_row(got["d"])], [])  # (as loaded: nothing to write)
    assert again.summary().seq == seq
    pg_cluster.sql(
        "UPDATE conveyor.tasks SET data = jsonb_set(data::jsonb, '{priority}', '\"high\"')::text"
        " WHERE task_id = 'd'",
        _database(pg_dsn),
    )
    _refused_by_both_loads(store, "d", "field 'priority' is \"high\"; expected an integer")


def _refused_by_both_loads(store: PostgresStore, task_id: str, said: str) -> None:
    """load() and load_records() each refuse the row of ``task_id`` alone, saying ``said``."""
    for load in (store.load, store.load_records):
        with pytest.raises(CorruptState) as caught:
            load()
        assert [b.key for b in caught.value.bad] == [("tasks", task_id)]
        assert said in caught.value.bad[0].reason


def test_a_row_with_a_lone_surrogate_is_reported(
    pg_cluster: ThrowawayCluster, pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    """A row edited to hold a lone surrogate (which no save could write back) is reported;
    a character beyond the BMP (a pair) loads as it was."""
    store = stores()
    store.save([_row("good"), _row("bad"), _row("\U0001f600")], [])
    pg_cluster.sql(
        "UPDATE conveyor.tasks SET data = replace(data, '\"Fam\"', '\"F\\ud800\"')"
        " WHERE task_id = 'bad'",
        _database(pg_dsn),
    )
    _refused_by_both_loads(store, "bad", "data holds a lone surrogate")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ("'[]'", "the row is a JSON list"),
        (
            'jsonb_set(data::jsonb, \'{params}\', \'{"db_password": "hunter2", "n": 5}\')::text',
            "field 'params' is not what a task row holds; expected",
        ),
    ],
)
def test_a_row_edited_while_the_store_runs_is_shown_as_unusable(
    pg_cluster: ThrowawayCluster,
    pg_dsn: str,
    stores: Callable[..., PostgresStore],
    edit: str,
    said: str,
) -> None:
    """A row edited behind a running store no longer breaks the web UI's reads: the task
    list and the API's list show it as an UNKNOWN task whose reason says what is wrong (never
    a value it holds: a secret parameter's, say), beside the others; its detail answers
    UnusableRow with the same words."""
    store = stores()
    store.save([_row("a"), _row("b")], [])
    pg_cluster.sql(
        f"UPDATE conveyor.tasks SET data = {edit} WHERE task_id = 'b'", _database(pg_dsn)
    )
    entries = {e.task_id: e for e in store.page(TaskFilters(), None, 10).tasks}
    assert entries["a"].reason == ""
    assert entries["b"].status == TaskStatus.UNKNOWN
    assert "the stored row of task 'b' is unusable" in entries["b"].reason
    assert said in entries["b"].reason
    assert store.detail("a") is not None
    with pytest.raises(UnusableRow, match=said) as caught:
        store.detail("b")
    infos = {i.task_id: i for i in store.task_infos()}
    assert infos["a"].status != TaskStatus.UNKNOWN
    assert infos["b"].status == TaskStatus.UNKNOWN
    for text in (entries["b"].reason, infos["b"].explanation, str(caught.value)):
        assert "the stored row of task 'b' is unusable" in text and said in text
        assert "hunter2" not in text


def test_an_unchanged_row_is_not_written_again(stores: Callable[..., PostgresStore]) -> None:
    store = stores()
    store.save([_row("a")], [])
    seq = store.summary().seq
    store.save([_row("a")], [])
    assert store.summary().seq == seq, "saving an equal row moved the change number on"
    store.save([_row("a", TaskStatus.DONE)], [])
    assert store.summary().seq == seq + 1


def _stored(pg_cluster: ThrowawayCluster, dsn: str, task_id: str) -> tuple[Any, ...]:
    ((found),) = pg_cluster.sql(
        f"SELECT data, runners, seq, changed FROM conveyor.tasks WHERE task_id = '{task_id}'",
        _database(dsn),
    )
    return tuple(found)


def test_stakeholders_are_set_in_the_row_alone(
    pg_cluster: ThrowawayCluster, pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    """save_stakeholders sets the two lists in a stored row and its runners column (the
    count the graph shows), keeps its change number and time of change and the rest of its
    text as written (a NUL's escape included, which jsonb would refuse), skips a row whose
    text PostgreSQL cannot read as JSON (not JSON, or nested too deep: the other rows of the
    save are set all the same) and a task with no row; a later whole save of a row set so
    writes it again."""
    store = stores()
    nul = {**_row("n"), "explanation": "a NUL \x00 and \\u0000, which jsonb refuses"}
    store.save(
        [
            *(_row(t) for t in ("a", "b", "x", "z")),
            nul,
            {**nul, "task_id": "m"},
            {**nul, "task_id": "q"},
        ],
        [],
    )
    a_before, _, a_seq, a_changed = _stored(pg_cluster, pg_dsn, "a")
    nul_before = _stored(pg_cluster, pg_dsn, "n")[0]
    bare = {k: v for k, v in json.loads(nul_before).items() if k not in ("stakeholders", "runners")}
    pg_cluster.sql(  # (m's text without the two fields, and a space at its end)
        f"UPDATE conveyor.tasks SET data = '{json.dumps({**bare, 'task_id': 'm'})} '"
        " WHERE task_id = 'm'",
        _database(pg_dsn),
    )
    spaced = _stored(pg_cluster, pg_dsn, "q")[0].replace(
        '"stakeholders":["w1"]', '"stakeholders":[ "w1"]'
    )
    pg_cluster.sql(  # (q's text as another writer would put it: put_list adds the field again)
        f"UPDATE conveyor.tasks SET data = '{spaced}' WHERE task_id = 'q'", _database(pg_dsn)
    )
    deep = '{"a":' * 300_000 + "1" + "}" * 300_000  # (too deep for PostgreSQL's JSON parser)
    pg_cluster.sql(
        f"UPDATE conveyor.tasks SET data = '{deep}' WHERE task_id = 'x'", _database(pg_dsn)
    )
    pg_cluster.sql(  # (not JSON at all)
        "UPDATE conveyor.tasks SET data = 'nope' WHERE task_id = 'z'", _database(pg_dsn)
    )
    interest = [
        ("q", ("w3",), ("w3",)),
        ("a", ("w2",), ("w1", "w2", "w3")),
        ("x", (), ()),
        ("z", (), ()),
        ("b", (), ()),
        ("y", (), ()),
        ("n", ('w"1', "w\\2"), ("w\\2",)),
        ("m", ("w1",), ("w\\2",)),
    ]
    store.save_stakeholders([], [], interest)
    nul_after = _stored(pg_cluster, pg_dsn, "n")[0]
    assert "\\u0000" in nul_after and "\\\\u0000" in nul_after, nul_after  # (as written)
    assert json.loads(nul_after) == {
        **json.loads(nul_before),
        "stakeholders": ['w"1', "w\\2"],
        "runners": ["w\\2"],
    }
    assert nul_after == nul_before.replace(  # (the rest of its text as it was)
        '"stakeholders":["w1"],"runners":["w1"]',
        '"stakeholders":["w\\"1","w\\\\2"],"runners":["w\\\\2"]',
    )
    added = json.loads(_stored(pg_cluster, pg_dsn, "m")[0])
    assert added == {**bare, "task_id": "m", "stakeholders": ["w1"], "runners": ["w\\2"]}
    data, runners, seq, changed = _stored(pg_cluster, pg_dsn, "a")
    assert (seq, changed) == (a_seq, a_changed)
    assert runners == 3
    assert json.loads(data) == {
        **json.loads(a_before),
        "stakeholders": ["w2"],
        "runners": ["w1", "w2", "w3"],
    }
    assert _stored(pg_cluster, pg_dsn, "b")[1] == 0
    assert _stored(pg_cluster, pg_dsn, "x")[:2] == (deep, 1)
    assert _stored(pg_cluster, pg_dsn, "z")[:2] == ("nope", 1)
    assert pg_cluster.sql(
        "SELECT count(*) FROM conveyor.tasks WHERE task_id = 'y'", _database(pg_dsn)
    ) == [(0,)]
    store.save_stakeholders([], [], [("q", ("w4",), ("w4",))])  # (the field added is found)
    q_text = _stored(pg_cluster, pg_dsn, "q")[0]
    assert q_text.count('"stakeholders":') == 2 and q_text.count('"runners":') == 1, q_text
    store.save([_row("a")], [])  # (as before the lists were set: written again)
    assert json.loads(_stored(pg_cluster, pg_dsn, "a")[0]) == json.loads(a_before)
    pg_cluster.sql("DELETE FROM conveyor.tasks WHERE task_id IN ('x', 'z')", _database(pg_dsn))
    loaded = {r.task_id: (r.stakeholders, r.runners) for r in store.load_records()[0]}
    assert loaded == {
        "a": (("w1",), ("w1",)),
        "b": ((), ()),
        "n": (('w"1', "w\\2"), ("w\\2",)),
        "m": (("w1",), ("w\\2",)),
        "q": (("w4",), ("w4",)),
    }


def test_a_database_whose_strings_are_not_standard_conforms(
    pg_cluster: ThrowawayCluster,
) -> None:
    """With ``standard_conforming_strings`` off (a backslash in '...' is then an escape), the
    schema is created and every check passes, the stakeholders set apart included: the
    store's literals with a backslash are escape strings, read the same either way."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    dsn = pg_cluster.create_database(name)
    pg_cluster.sql(f"ALTER DATABASE {name} SET standard_conforming_strings = off")
    assert pg_cluster.sql("SHOW standard_conforming_strings", name) == [("off",)]
    checks = check_state_store(lambda: _open(dsn))
    assert "stakeholders" in checks and "reopen" in checks


def test_a_database_not_in_utf8_is_refused_at_start_with_nothing_created(
    pg_cluster: ThrowawayCluster,
) -> None:
    """A LATIN1 database could not hold a task whose id, family or parameters have a
    character LATIN1 lacks (PostgreSQL refuses it, and every save naming the task would
    fail): the store
    refuses the database at start, saying what it found and what to do, and leaves it as it
    was (no schema)."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    pg_cluster.sql(
        f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
    )
    with pytest.raises(ConfigError) as caught:
        _open(pg_cluster.dsn(name))
    message = str(caught.value)
    assert "encoding is LATIN1; expected UTF8" in message, message
    assert "ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'" in message and "dsn" in message, message
    schemas = "SELECT count(*) FROM pg_namespace WHERE nspname = 'conveyor'"
    assert pg_cluster.sql(schemas, name) == [(0,)]


def test_text_goes_as_utf8_whatever_the_client_encoding_of_the_environment(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With PGCLIENTENCODING=LATIN1 in the environment, psycopg would encode a task's id and
    family in LATIN1 and fail on a character it lacks: the store's connections ask for UTF8,
    so such a task is saved, read back, and set apart like any other."""
    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    wide = to_row(
        TaskRecord(
            task_id="任务_1",
            seq=1,
            family="任务",
            module="m",
            params={"p": "中文 ü"},
            stakeholders=("w1",),
            registered=True,
        )
    )
    store = _open(pg_dsn)
    try:
        store.save([wide], [])
        store.save_stakeholders([], [], [("任务_1", ("w1", "w2"), ())])
        loaded = {r.task_id: r for r in store.load_records()[0]}
    finally:
        store.close()
    assert loaded["任务_1"].family == "任务"
    assert loaded["任务_1"].params == {"p": "中文 ü"}
    assert loaded["任务_1"].stakeholders == ("w1", "w2")


def test_a_schema_3_store_is_migrated_and_a_server_of_schema_3_still_saves(
    pg_cluster: ThrowawayCluster, pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    """A schema of version 3 (whose save function takes no stakeholders) is brought to the
    current version, its rows kept, and its saves set stakeholders apart, even while a server
    of schema 3 holds the lease (its term is left alone): schema 3's save function is still
    there, so that server, or a standby of that release that takes the lease, saves whole
    rows as before."""
    store = stores()
    store.save([_row("a")], [])
    store.close()
    database = _database(pg_dsn)
    signature = ", ".join(_SAVE_TYPES)
    pg_cluster.sql(
        f"DROP FUNCTION conveyor.save({signature}); DROP FUNCTION conveyor.put_list;"
        " UPDATE conveyor.schema_version SET version = 3",
        database,
    )
    assert pg_cluster.sql("SELECT version FROM conveyor.schema_version", database) == [(3,)]
    lease = "SELECT term, holder FROM conveyor.lease"
    pg_cluster.sql(  # (a server of schema 3 leads: the migration need not wait for it)
        "UPDATE conveyor.lease SET term = 7, holder = 'http://old.example:8082',"
        " expires = clock_timestamp() + interval '60 seconds'",
        database,
    )
    store = stores()
    assert pg_cluster.sql("SELECT version FROM conveyor.schema_version", database) == [
        (SCHEMA_VERSION,)
    ]
    assert pg_cluster.sql(lease, database) == [(7, "http://old.example:8082")]
    store.save_stakeholders([_row("b")], [], [("a", ("w1", "w2"), ("w2",))])
    loaded = {r.task_id: (r.stakeholders, r.runners) for r in store.load_records()[0]}
    assert loaded == {"a": (("w1", "w2"), ("w2",)), "b": (("w1",), ("w1",))}
    old = _row("c")  # (saved as a schema 3 server does: unfenced, whole, no edges)
    pg_cluster.sql(
        "SELECT conveyor.save(NULL, 1.0, ARRAY['c'], ARRAY['"
        + json.dumps({k: v for k, v in old.items() if k != "deps"})
        + "'], ARRAY['PENDING'], ARRAY['PENDING'], ARRAY['Fam'], ARRAY[NULL], ARRAY['c'],"
        " ARRAY[1], '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')",
        database,
    )
    assert {r["task_id"]: r for r in store.load()[0]}["c"] == old


def test_edges_follow_the_rows(stores: Callable[..., PostgresStore]) -> None:
    store = stores()
    store.save([_row("a", deps=("b", "c")), _row("b"), _row("c")], [])
    store.save([_row("a", deps=("c", "d"))], [])
    graph = store.graph("a", False)
    assert graph is not None
    assert {(graph.nodes[t].id, graph.nodes[d].id) for t, d in graph.edges} == {
        ("a", "c"),
        ("a", "d"),
    }
    # a new store (no knowledge of what is stored) rewrites the edges of a row it saves
    again = stores()
    again.save([_row("a", deps=("b",))], [])
    detail = store.detail("b")
    assert detail is not None and [r.task_id for r in detail.dependents] == ["a"]
    dropped = store.detail("c")
    assert dropped is not None and dropped.dependents == ()


# --- settings and connection errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({}, "exactly one of dsn and dsn_file"),
        ({"dsn": "x", "dsn_file": "y"}, "exactly one of dsn and dsn_file"),
        ({"dsn": "host=h", "schema": "no-dash"}, "schema = 'no-dash' is invalid"),
        ({"dsn_file": "/nonexistent/dsn"}, "dsn_file '/nonexistent/dsn' cannot be read"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        PostgresStore(StoreContext(settings=settings))


def test_dsn_file(tmp_path: Any, pg_dsn: str) -> None:
    path = tmp_path / "dsn"
    path.write_text(pg_dsn + "\n")
    store = PostgresStore(StoreContext(settings={"dsn_file": str(path)}))
    try:
        store.save([_row("a")], [])
        assert _ids(store) == {"a"}
    finally:
        store.close()


def test_wrong_password_is_one_line_without_it(pg_cluster: ThrowawayCluster, pg_dsn: str) -> None:
    db = _database(pg_dsn)
    wrong = "Wr0ng-S3cret"
    for dsn in (
        pg_cluster.dsn(db, password=wrong),
        f"host=127.0.0.1 port={pg_cluster.port} dbname={db} user=conveyor password={wrong}",
    ):
        with pytest.raises(ConfigError) as caught:
            _open(dsn)
        message = str(caught.value)
        assert wrong not in message and "\n" not in message, message
        assert f"127.0.0.1:{pg_cluster.port}/{db}" in message, message
        assert "'conveyor'" in message and "password authentication failed" in message, message


def test_unreachable_and_unknown_database(pg_cluster: ThrowawayCluster) -> None:
    with pytest.raises(ConfigError) as caught:
        _open(f"postgresql://conveyor:pw@127.0.0.1:{_closed_port()}/x", connect_timeout=2)
    message = str(caught.value)
    assert "connection refused" in message.lower() and "\n" not in message, message
    assert ":pw@" not in message
    with pytest.raises(ConfigError, match='database "nosuchdb" does not exist'):
        _open(pg_cluster.dsn("nosuchdb"))


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the lease and its fence ----------------------------------------------------------------------


def _lead(store: PostgresStore, holder: str, lease: float) -> Lease:
    """``store.lead()``, then, as the server does once it loaded the state, the term it holds
    armed for its saves."""
    answer = store.lead(holder, lease)
    if answer.held:
        store.fence(answer.term)
    return answer


def test_a_term_taken_again_saves_nothing_until_it_is_armed(
    stores: Callable[..., PostgresStore],
) -> None:
    """A leader deposed, then leading again under a newer term: a save of the state it held
    under the old term (a call under way all along) is refused; only once the server armed the
    new term (after loading the state) do saves go through."""
    a, b = stores(), stores()
    assert _lead(a, "http://a", 60).held
    a.save([_row("by-a")], [])
    a.resign()
    a.fence(1)  # (as if a call under way had the old term: the store must still refuse it)
    assert _lead(b, "http://b", 60).term == 2
    b.resign()
    again = a.lead("http://a", 60)
    assert (again.term, again.held) == (3, True)
    with pytest.raises(Deposed):
        a.save([_row("stale")], [])
    a.fence(again.term)
    a.save([_row("fresh")], [])
    assert _ids(stores()) == {"by-a", "fresh"}


def test_the_lease_changes_hands_only_when_it_runs_out(
    stores: Callable[..., PostgresStore],
) -> None:
    a, b, reader = stores(), stores(), stores()
    first = _lead(a, "http://a", 0.5)
    assert (first.term, first.holder, first.held) == (1, "http://a", True)
    assert 0 < first.expires_in <= 0.5
    seen = _lead(b, "http://b", 0.5)
    assert (seen.term, seen.holder, seen.held) == (1, "http://a", False)
    assert 0 < seen.expires_in <= 0.5
    a.save([_row("by-a")], [])
    assert _ids(reader) == {"by-a"}
    # a is paused past its lease: b takes it with the next term
    _wait_for("b to take the lease", lambda: _lead(b, "http://b", 30).held)
    taken = _lead(b, "http://b", 30)
    assert (taken.term, taken.holder, taken.held) == (2, "http://b", True)
    with pytest.raises(Deposed):
        a.save([_row("late-a")], [])
    with pytest.raises(Deposed):
        a.probe()
    assert _ids(stores()) == {"by-a"}, "a deposed leader's save was written"
    again = _lead(a, "http://a", 0.5)
    assert (again.term, again.holder, again.held) == (2, "http://b", False)
    with pytest.raises(Deposed):
        a.save([_row("late-a")], [])
    b.save([_row("by-b")], [])
    b.probe()
    assert _ids(reader) == {"by-a", "by-b"}


def test_renewal_after_running_out_keeps_the_term(
    pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    a = stores()
    assert _lead(a, "http://a", 0.2).term == 1
    _wait_for("the lease to run out", lambda: _lease_row(pg_dsn)[1], 10)
    renewed = _lead(a, "http://a", 30)
    assert (renewed.term, renewed.held) == (1, True)
    a.save([_row("x")], [])


def _lease_row(dsn: str) -> tuple[int, bool]:
    """The stored term, and whether the lease has run out (by the database's clock)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT term, expires IS NULL OR expires <= clock_timestamp() FROM conveyor.lease"
        ).fetchone()
    assert row is not None
    return int(row[0]), bool(row[1])


def test_resign_hands_over_at_once(stores: Callable[..., PostgresStore]) -> None:
    a, b = stores(), stores()
    assert _lead(a, "http://a", 60).held
    assert not _lead(b, "http://b", 60).held
    a.resign()
    with pytest.raises(Deposed):
        a.save([_row("after-resign")], [])
    taken = _lead(b, "http://b", 60)
    assert (taken.term, taken.holder, taken.held) == (2, "http://b", True)
    a.resign()  # (again: nothing to give up)
    assert _lead(b, "http://b", 60).held


def test_a_store_that_never_led_saves_unfenced(stores: Callable[..., PostgresStore]) -> None:
    leader, tool = stores(), stores()
    assert _lead(leader, "http://a", 60).held
    tool.save([_row("by-tool")], [])
    tool.probe()
    assert _ids(leader) == {"by-tool"}


@pytest.mark.timeout(90)
def test_a_save_in_flight_commits_before_a_take_over(
    pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    """A save holding the lease row FOR SHARE: the taker's lead() waits for it to commit,
    then takes over and loads what it saved (never a save after a take-over). (A long
    connect_timeout: lock waits end after it.)"""
    a, b = stores(connect_timeout=60), stores(connect_timeout=60)
    assert _lead(a, "http://a", 0.5).held
    with psycopg.connect(pg_dsn) as blocker:
        # hold the change counter's row: a's save takes the fence, then waits on this
        blocker.execute("SELECT seq FROM conveyor.changes WHERE id = 1 FOR UPDATE")
        saved: list[BaseException | None] = []
        taken: list[Any] = []

        def save() -> None:
            try:
                a.save([_row("in-flight")], [])
                saved.append(None)
            except BaseException as exc:  # (asserted below)
                saved.append(exc)

        saving = threading.Thread(target=save)
        saving.start()
        _wait_for("a's save to wait for the lock", lambda: _lock_waiters(pg_dsn) == 1)
        _wait_for("a's lease to run out", lambda: _lease_row(pg_dsn)[1])
        taking = threading.Thread(target=lambda: taken.append(_lead(b, "http://b", 60)))
        taking.start()
        _wait_for("b's lead() to wait for a's save", lambda: _lock_waiters(pg_dsn) == 2)
        assert not taken, "b took the lease while a's fenced save was in flight"
        blocker.rollback()  # a's save goes on and commits; then b takes over
        saving.join(30)
        taking.join(30)
    assert saved == [None], saved
    assert taken and taken[0].held and taken[0].term == 2, taken
    assert _ids(b) == {"in-flight"}
    with pytest.raises(Deposed):
        a.save([_row("late")], [])


def _in_thread(call: Callable[[], Any], deadline: float = 60.0) -> Any:
    """``call()``'s answer or the exception it raised, run in a thread that must end within
    ``deadline`` (a call that hangs fails the test instead of hanging it)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except Exception as exc:  # (returned: the caller asserts on it)
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(deadline)
    assert out, f"{call} still waits after {deadline} s"
    return out[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("locked", ["lease", "changes"])
def test_a_row_locked_by_a_stuck_session_bounds_saves_and_leases(
    pg_dsn: str, stores: Callable[..., PostgresStore], locked: str
) -> None:
    """A session (a paused server's, say) holding the lease row, or the change counter's,
    FOR UPDATE: the leader's saves and renewals fail within about connect_timeout
    (StateStoreError, nothing written), instead of waiting for as long as it holds it; a
    standby that finds the lease live answers at once (it locks nothing); once the lock is
    gone all goes on (review: they used to wait for the holder, forever)."""
    leader, standby = stores(connect_timeout=1), stores(connect_timeout=1)
    assert _lead(leader, "http://a", 600).held
    leader.save([_row("before")], [])
    with psycopg.connect(pg_dsn) as blocker:
        blocker.execute(f"SELECT 1 FROM conveyor.{locked} WHERE id = 1 FOR UPDATE")
        failed = _in_thread(lambda: leader.save([_row("during")], []))
        assert isinstance(failed, StateStoreError), failed
        assert "lock" in str(failed) and "nothing was written" in str(failed), failed
        assert "\n" not in str(failed)
        lease = _in_thread(lambda: standby.lead("http://b", 600))
        assert isinstance(lease, Lease) and not lease.held and lease.holder == "http://a"
        if locked == "lease":
            renewal = _in_thread(lambda: leader.lead("http://a", 600))
            assert isinstance(renewal, StateStoreError), renewal
        blocker.rollback()
    assert _ids(leader) == {"before"}
    assert _lead(leader, "http://a", 600).held
    leader.save([_row("after")], [])
    assert _ids(leader) == {"before", "after"}


@pytest.mark.timeout(120)
def test_a_save_whose_connection_breaks_says_its_outcome_is_not_known(
    pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    """The connection cut while a save waits for PostgreSQL's answer: StateStoreError saying
    whether it was written is not known (never "nothing was written", which the client
    cannot tell once the save was sent); the next save goes through."""
    store = stores(connect_timeout=60)
    with psycopg.connect(pg_dsn, autocommit=True) as admin, psycopg.connect(pg_dsn) as blocker:
        blocker.execute("SELECT seq FROM conveyor.changes WHERE id = 1 FOR UPDATE")
        out: list[BaseException | None] = []
        saving = threading.Thread(
            target=lambda: out.append(_raised(lambda: store.save([_row("cut")], [])))
        )
        saving.start()
        _wait_for("the save to wait for the lock", lambda: _lock_waiters(pg_dsn) == 1)
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname ="
            " current_database() AND wait_event_type = 'Lock'"
        )
        saving.join(60)
        blocker.rollback()
    assert out and isinstance(out[0], StateStoreError), out
    assert "not known" in str(out[0]) and "nothing was written" not in str(out[0]), out
    store.save([_row("next")], [])
    assert _ids(store) == {"next"}


def _raised(call: Callable[[], object]) -> BaseException | None:
    try:
        call()
    except BaseException as exc:  # (returned: the caller asserts on it)
        return exc
    return None


def test_every_connection_bounds_its_lock_waits_and_open_transactions(
    stores: Callable[..., PostgresStore],
) -> None:
    """lock_timeout (connect_timeout) and idle_in_transaction_session_timeout (5 s more) on
    the writing and reading connections, the DSN's own options kept."""
    store = stores(connect_timeout=2)
    for pool in (store._writers, store._readers):
        assert pool is not None
        with pool.connection() as conn:
            shown = [
                conn.execute(f"SHOW {name}").fetchone()
                for name in ("lock_timeout", "idle_in_transaction_session_timeout")
            ]
        assert shown == [("2s",), ("7s",)], shown


def test_nul_in_a_filter_or_an_id_matches_nothing(stores: Callable[..., PostgresStore]) -> None:
    """As in the other stores (PostgreSQL refuses NUL in text: that was a 500)."""
    from conveyor.protocol import TaskFilters

    store = stores()
    store.save([_row("a", deps=("b",)), _row("b")], [])
    for filters in (
        TaskFilters(text="a\x00"),
        TaskFilters(family="Fam\x00"),
        TaskFilters(worker="\x00"),
        TaskFilters(state="PENDING\x00"),
    ):
        assert store.page(filters, None, 10).tasks == (), filters
        assert store.task_ids(filters) == (), filters
    assert store.detail("a\x00") is None
    assert store.graph("a\x00", True) is None
    assert len(store.page(TaskFilters(), None, 10).tasks) == 2


@pytest.mark.timeout(180)
def test_a_cluster_that_cannot_start_leaves_nothing_behind(pg_cluster: ThrowawayCluster) -> None:
    """A server setting PostgreSQL refuses: ClusterUnavailable, and neither a server nor its
    directory is left (review: ``with`` did not clean up a failed start)."""
    from conveyor_postgres.testing import ClusterUnavailable

    cluster = ThrowawayCluster(settings={"shared_buffers": "lots"})
    with pytest.raises(ClusterUnavailable, match="did not start"), cluster:
        pytest.fail("the cluster started")
    assert not cluster.base.exists()


def _lock_waiters(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    assert row is not None
    return int(row[0])


# --- PostgreSQL restarted under an open store -----------------------------------------------------


@pytest.mark.timeout(180)
def test_saves_survive_a_restart_of_postgresql(
    pg_cluster: ThrowawayCluster, stores: Callable[..., PostgresStore]
) -> None:
    store = stores(connect_timeout=2)
    assert _lead(store, "http://a", 120).held
    store.save([_row("before")], [("w1", False)])
    pg_cluster.restart()
    failures: list[str] = []
    end = time.monotonic() + 60
    while True:  # the first save after a restart may fail: the next one goes through
        try:
            store.save([_row("after")], [])
            break
        except StateStoreError as exc:
            failures.append(str(exc))
            assert time.monotonic() < end, failures
            time.sleep(0.1)
    assert len(failures) <= 1, failures
    assert all(pg_cluster.password not in f for f in failures), failures
    assert _ids(stores()) == {"before", "after"}
    assert store.summary().total == 2
    assert _lead(store, "http://a", 120).term == 1, "the restart changed the lease's term"


# --- the reads answer as the built-in store does --------------------------------------------------


def test_reads_answer_as_the_builtin_store_does(stores: Callable[..., PostgresStore]) -> None:
    """A random graph of 300 tasks (some unregistered, some missing) saved to both stores:
    every page, detail and graph (capped or not, up and down) is the same."""
    import random

    from conveyor.protocol import TaskFilters
    from conveyor.server.stores import MemoryStore

    rng = random.Random(23)
    statuses = list(TaskStatus)
    rows = []
    for n in range(300):
        deps = tuple(sorted({f"t{rng.randrange(n)}" for _ in range(rng.randrange(4))})) if n else ()
        if rng.random() < 0.05:
            deps += (f"missing{n}",)
        row = _row(f"t{n}", rng.choice(statuses), deps)
        row["registered"] = rng.random() > 0.1
        rows.append(row)
    ours, builtin = stores(), MemoryStore()
    try:
        for start in range(0, 300, 7):  # (several saves: change numbers as the server gives them)
            ours.save(rows[start : start + 7], [])
            builtin.save(rows[start : start + 7], [])
        assert ours.summary().counts == builtin.summary().counts
        for filters in (
            TaskFilters(),
            TaskFilters(state=TaskStatus.FAILED),
            TaskFilters(text="t1"),
        ):
            assert [e.task_id for e in ours.page(filters, None, 500).tasks] == [
                e.task_id for e in builtin.page(filters, None, 500).tasks
            ]
        for task_id in ("t0", "t150", "t299", *(f"t{rng.randrange(300)}" for _ in range(20))):
            a, b = ours.detail(task_id), builtin.detail(task_id)
            assert a is not None and b is not None
            assert (a.deps, a.dependents, a.dependents_total, a.blocked_by) == (
                b.deps,
                b.dependents,
                b.dependents_total,
                b.blocked_by,
            ), task_id
            for down in (False, True):
                for cap in (1, 2, 5, 40, 10_000):
                    ga, gb = ours.graph(task_id, down, cap), builtin.graph(task_id, down, cap)
                    assert ga is not None and gb is not None
                    assert _shape(ga) == _shape(gb), (task_id, down, cap)
    finally:
        builtin.close()


def test_a_truncated_graph_keeps_the_nodes_every_store_keeps(
    stores: Callable[..., PostgresStore],
) -> None:
    """Layers ordered by the position of the near task in the layer before, then the far id
    (``walk_graph``'s order), in the built-in store too: R needs a and b, a needs z, b needs
    c, z needs m, c needs n; capped at 6, every store keeps m (review: SQLite kept n)."""
    from conveyor.server.stores import MemoryStore, walk_graph

    deps = {"R": ("a", "b"), "a": ("z",), "b": ("c",), "z": ("m",), "c": ("n",), "m": (), "n": ()}
    rows = [_row(t, deps=d) for t, d in deps.items()]
    ours, builtin = stores(), MemoryStore()
    try:
        ours.save(rows, [])
        builtin.save(rows, [])
        expected = walk_graph("R", lambda t: deps.get(t, ()), lambda t: ("Fam", "PENDING", 1), 6)
        assert expected.ids == ["R", "a", "b", "z", "c", "m"] and expected.truncated
        for store in (ours, builtin):
            graph = store.graph("R", False, 6)
            assert graph is not None and graph.truncated
            assert [n.id for n in graph.nodes] == expected.ids, store
    finally:
        builtin.close()


def _shape(graph: Any) -> Any:
    ids = [n.id for n in graph.nodes]
    return (
        {(n.id, n.status, n.layer) for n in graph.nodes},
        {(ids[t], ids[d]) for t, d in graph.edges},
        graph.truncated,
        {ids[i] for i in graph.blocking},
        {ids[i] for i in graph.path},
    )


def test_a_leader_again_writes_what_another_changed_meanwhile(
    stores: Callable[..., PostgresStore],
) -> None:
    """A store that leads again loads first (as the server does): a row the other leader
    changed meanwhile is written again, not skipped as unchanged."""
    a, b = stores(), stores()
    assert _lead(a, "http://a", 60).held
    a.save([_row("x")], [])
    a.resign()
    assert _lead(b, "http://b", 60).held
    b.load()
    b.save([_row("x", TaskStatus.DONE)], [])
    b.resign()
    assert _lead(a, "http://a", 60).term == 3
    a.load()
    a.save([_row("x")], [])
    rows = {row["task_id"]: row for row in stores().load()[0]}
    assert rows["x"]["status"] == TaskStatus.PENDING


@pytest.mark.timeout(120)
def test_saves_fail_while_postgresql_is_down_and_resume_after(
    pg_cluster: ThrowawayCluster, stores: Callable[..., PostgresStore]
) -> None:
    store = stores(connect_timeout=1)
    store.save([_row("before")], [])
    pg_cluster.stop()
    try:
        with pytest.raises(StateStoreError) as caught:
            store.save([_row("while-down")], [])
        message = str(caught.value)
        assert pg_cluster.password not in message and "\n" not in message, message
        with pytest.raises(StateStoreError):
            store.probe()
    finally:
        pg_cluster.start()
    end = time.monotonic() + 60
    while True:
        try:
            store.probe()
            break
        except StateStoreError:
            assert time.monotonic() < end, "the store did not reconnect"
            time.sleep(0.1)
    store.save([_row("after")], [])
    assert _ids(stores()) == {"before", "after"}


def test_a_kept_write_connection_that_broke_is_replaced_without_failing_a_save(
    pg_dsn: str, stores: Callable[..., PostgresStore]
) -> None:
    """The saves' own connection, kept between saves, is ended by PostgreSQL (as by a restart
    or an administrator): the next save finds it out, and goes through on a new connection
    instead of failing (which would make the server refuse a change and reload its state)."""
    store = stores()
    assert _lead(store, "http://a", 120).held
    store.save([_row("before")], [])
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert ended and all(row[0] for row in ended)
    store.save([_row("after")], [])  # (no StateStoreError)
    store.probe()
    assert _ids(stores()) == {"before", "after"}
