"""The SQLite store's schema 3 (issue 25, a million tasks): rows are stored compact (fields at
their default left out) and without their dependencies, which live in the ``edges`` table
with their positions; a merge writes only the edges it added. Rows read back as saved, an
older file (schema 2: whole rows, dependencies in the JSON) is migrated, a newer one refused
untouched, a merged registration's dependencies survive a restart in order, and bad rows are
still reported by field. All on real SQLite files and a real server."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import sys
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from conveyor.errors import ConfigError
from conveyor.protocol import AttemptEnd, RetrySpec, TaskStatus
from conveyor.scheduler import persist, policy
from conveyor.scheduler.persist import (
    DEFAULTS,
    RowError,
    compact_row,
    from_row,
    from_stored,
    full_row,
    stored_json,
    to_row,
)
from conveyor.scheduler.policy import ATTEMPT_HISTORY, Attempt, TaskRecord
from conveyor.server.sqlite import reads
from conveyor.server.sqlite.store import _MIGRATIONS, SCHEMA_VERSION, _interest_params, _task_row
from conveyor.server.stores import CorruptState, SqliteStore, StoreContext, UnusableRow
from conveyor.testing.processes import SchedulerProcess, child_env, kill_marked
from conveyor.testing.stores import check_saves_apart

pytestmark = pytest.mark.timeout(120)


def _busy(task_id: str, deps: tuple[str, ...] = ()) -> TaskRecord:
    """A record whose every field differs from its default."""
    return TaskRecord(
        task_id=task_id,
        seq=7,
        family="Busy",
        module="mod",
        params={"p": "1"},
        loader="alt",
        status=TaskStatus.FAILED,
        deps=deps,
        own_priority=3,
        priority=4,
        resources={"db": 1},
        stakeholders=("w1",),
        runners=("w1",),
        worker="w1",
        retry_count=2,
        retry=RetrySpec(1.0, 2.0, 60.0, 0.1),
        labels=("gpu",),
        waiting="no gpu",
        batch_key="k",
        batch_max=5,
        batch=(task_id, "other"),
        submitted_by="me",
        cancelled=True,
        failures=deque([5.0]),
        wake_at=12.5,
        explanation="it broke",
        status_message="half",
        progress=50.0,
        tracking_url="http://x",
        registered=True,
        attempt=3,
        reported=2,
        attempts=[Attempt(3, 10.0, "w1", 11.0, AttemptEnd.FAILED)],
    )


def _plain(task_id: str, deps: tuple[str, ...] = ()) -> TaskRecord:
    return TaskRecord(task_id=task_id, seq=1, family="Plain", deps=deps, registered=True)


def _open(path: Path) -> SqliteStore:
    return SqliteStore(StoreContext(str(path)))


def _db(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path)


def _saved(path: Path, *records: TaskRecord) -> None:
    """A state file at ``path`` holding ``records``, closed."""
    store = _open(path)
    try:
        store.save([to_row(r) for r in records], [])
    finally:
        store.close()


def _altered(path: Path, statement: str, values: tuple[Any, ...] = ()) -> None:
    """The state file at ``path`` changed by one SQL statement behind the store's back."""
    db = _db(path)
    try:
        db.execute(statement, values)
        db.commit()
    finally:
        db.close()


def _stored(path: Path, task_id: str) -> dict[str, Any]:
    db = _db(path)
    try:
        (data,) = db.execute("SELECT data FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
    finally:
        db.close()
    stored: dict[str, Any] = json.loads(data)
    return stored


def _edges(path: Path, task_id: str) -> list[tuple[str, int]]:
    db = _db(path)
    try:
        return db.execute(
            "SELECT dep_id, pos FROM edges WHERE task_id = ? ORDER BY pos", (task_id,)
        ).fetchall()
    finally:
        db.close()


def test_compact_rows_read_back_identical(tmp_path: Path) -> None:
    """A row with every field at its default and one with none are stored compact (the
    defaults and the dependencies left out of the JSON) and load back equal to what was
    saved, as rows and as records."""
    path = tmp_path / "state.db"
    plain, busy = to_row(_plain("a")), to_row(_busy("b", ("a", "z", "c")))
    store = _open(path)
    try:
        store.save([plain, busy], [("w1", False)])
    finally:
        store.close()
    assert set(_stored(path, "a")) == {
        "task_id", "seq", "family", "module", "params", "status", "stakeholders", "runners",
        "registered",
    }  # fmt: skip
    assert "deps" not in _stored(path, "b") and len(_stored(path, "b")) == len(busy) - 1
    assert _edges(path, "b") == [("a", 0), ("z", 1), ("c", 2)]
    store = _open(path)
    try:
        rows, _ = store.load()
        records, _ = store.load_records()
    finally:
        store.close()
    assert {r["task_id"]: r for r in rows} == {"a": plain, "b": busy}
    assert sorted((to_row(r) for r in records), key=lambda r: r["task_id"]) == [plain, busy]


def test_compact_row_and_full_row_are_inverse() -> None:
    """``full_row(compact_row(row)) == row`` for rows at and away from the defaults; a value
    equal to a default but of another type (0 for 0.0) is kept, not dropped."""
    for row in (to_row(_plain("a")), to_row(_busy("b", ("x",)))):
        assert full_row(compact_row(row)) == row
        assert from_row(full_row(compact_row(row))).status == row["status"]
    odd = {**to_row(_plain("c")), "wake_at": 0}
    assert compact_row(odd)["wake_at"] == 0 and full_row(compact_row(odd)) == odd
    assert "deps" not in compact_row(to_row(_plain("d", ("x",))), without="deps")
    assert set(DEFAULTS) < set(to_row(_plain("e")))


@pytest.mark.parametrize("accelerated", [True, False], ids=["c-encoder", "python-encoder"])
def test_stored_json_is_what_json_dumps_makes(
    accelerated: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stored_json`` writes the text ``json.dumps`` makes of the compact row, with json's C
    encoder built once or, where there is none, with json's own: enums as their values,
    floats, None, text that is not ASCII (escaped), nested lists and objects. The encoder of
    the server's answers (``ensure_ascii=False, allow_nan=False``) makes ``json.dumps``'s text
    of those settings."""
    if not accelerated:
        monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    encode = persist.compact_encoder()
    as_utf8 = persist.compact_encoder(ensure_ascii=False, allow_nan=False)
    odd = {
        **to_row(_busy('é \u2028 "q"', ("x",))),
        "explanation": "línea\nnueva ☃ \x00",
        "progress": 1e-7,
        "wake_at": 1796595894.9212937,
    }
    for row in (to_row(_plain("a")), to_row(_busy("b", ("x",))), odd):
        compact = compact_row(row, without="deps")
        assert encode(compact) == json.dumps(compact, separators=(",", ":"))
        assert json.loads(encode(compact)) == json.loads(json.dumps(compact))
        assert as_utf8(compact) == json.dumps(compact, separators=(",", ":"), ensure_ascii=False)
    assert stored_json(odd, without="deps") == json.dumps(
        compact_row(odd, without="deps"), separators=(",", ":")
    )
    assert "é" in as_utf8(odd) and "é" not in encode(odd)
    assert encode({"x": float("nan")}) == '{"x":NaN}'  # (as json.dumps: rows never hold one)
    with pytest.raises(ValueError):  # (an answer that would not be JSON is refused)
        as_utf8({"x": float("nan")})


def test_the_stored_defaults_are_pinned() -> None:
    """What a compact row leaves out is part of the file format: a field left out means its
    default, so the defaults must never follow a change in the code's constants."""
    assert DEFAULTS["loader"] == "conveyor"
    assert "status" not in DEFAULTS and "task_id" not in DEFAULTS and "params" not in DEFAULTS


def test_a_dependency_repeated_in_an_old_row_is_loaded_once() -> None:
    """A row an older release wrote with a repeated dependency loads it once (counted twice,
    the task would never become ready), whichever way it is read."""
    row = {**to_row(_plain("r", ("c", "a", "b"))), "deps": ["c", "a", "b", "a"]}
    assert list(from_row(row).deps) == ["c", "a", "b"]
    compact = compact_row(row)
    assert list(from_stored(compact).deps) == ["c", "a", "b"]
    assert list(from_stored(compact_row(row, without="deps"), deps=["c", "a", "a"]).deps) == [
        "c",
        "a",
    ]


def _typed(value: Any) -> Any:
    """``value`` with the type of each of its parts (and a float's sign and digits), so that
    equal means made alike: ``==`` takes 1 for 1.0, a tuple for no list and an enum for its
    text, but a loaded record must have exactly what from_row gives it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (type(value), tuple((f.name, _typed(getattr(value, f.name))) for f in fields))
    if isinstance(value, Mapping):
        return (type(value), tuple((_typed(k), _typed(v)) for k, v in value.items()))
    if isinstance(value, list | tuple | deque):
        return (type(value), tuple(_typed(v) for v in value))
    if isinstance(value, set):
        return (type(value), tuple(sorted(value)))
    return (type(value), repr(value) if isinstance(value, float) else value)


def _fields(record: TaskRecord) -> Any:
    """Every slot of ``record``, typed (:func:`_typed`)."""
    return _typed(record)


def _containers(value: Any) -> list[Any]:
    """``value`` and every list and dict inside it (what a record must not share)."""
    found = [value] if isinstance(value, list | dict) else []
    for inner in value.values() if isinstance(value, dict) else value if found else ():
        found += _containers(inner)
    return found


@pytest.mark.parametrize("strings", [None, {}])
def test_from_stored_makes_what_from_row_makes_of_the_whole_row(
    strings: dict[str, str] | None,
) -> None:
    """For compact rows, with and without deps kept apart, and for bad ones, from_stored
    gives the record from_row gives of the whole row, or the same RowError."""
    rows = [to_row(_plain("a")), to_row(_busy("b", ("x", "y"))), to_row(_plain("c", ("x",)))]
    for row in rows:
        stored = compact_row(row, without="deps")
        deps = list(row["deps"]) or None
        expected = from_row(full_row(stored, **({"deps": deps} if deps else {})), strings)
        assert _fields(from_stored(stored, strings, deps)) == _fields(expected)
        assert _fields(from_stored(compact_row(row), strings)) == _fields(expected)
    plain = compact_row(to_row(_plain("d")))
    ordered = OrderedDict(plain)  # (a mapping of another kind: the careful path's to judge)
    assert _fields(from_stored(ordered, strings)) == _fields(from_row(full_row(plain), strings))
    spoilt = [
        [1],
        {k: v for k, v in plain.items() if k != "status"},
        {**plain, "colour": "red"},
        {**plain, "labels": ""},
        {**plain, "priority": True},
        {**plain, "wake_at": float("inf")},
        {**plain, "deps": ["a", 1]},
    ]
    for bad in spoilt:
        with pytest.raises(RowError) as wanted:
            from_row(full_row(bad) if isinstance(bad, dict) else bad)
        with pytest.raises(RowError) as got:
            from_stored(bad, strings)
        assert (str(got.value), got.value.field) == (str(wanted.value), wanted.value.field)


def _as_stored(record: TaskRecord) -> dict[str, Any]:
    """What a store reads back of ``record``: its compact row, as json makes it."""
    return json.loads(stored_json(to_row(record)))


def test_from_stored_converts_a_stored_row_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row as a store reads it back, every field set or none, is converted without
    from_row (which judges only what does not fit)."""

    def judged(*_args: object) -> TaskRecord:
        raise AssertionError("from_row was asked")

    expected = [from_row(to_row(r), {}) for r in (_busy("b", ("x",)), _plain("p"))]
    monkeypatch.setattr(persist, "_canonical", judged)
    got = [from_stored(_as_stored(r), {}) for r in (_busy("b", ("x",)), _plain("p"))]
    assert [_fields(r) for r in got] == [_fields(r) for r in expected]
    assert got[0].dependents is not got[1].dependents
    assert got[0].resources is not got[1].resources


_ODD_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 7, 2.0, -0.5, float("nan"), float("inf"), float("-inf"),
    10**400, -0.0, "", "x", "DONE", "timed_out", [], ["w1"], ["w1", "w2"], ["w1", 2], [["w1"]],
    [{}], [None], [1.5, 2], {}, {"p": "1"}, {"p": 1}, {"p": None}, {"db": 1}, {"db": -1},
    {"db": True},
]  # fmt: skip
_ATTEMPT = {"attempt": 3, "started": 10.0, "ended": 11.0, "outcome": "failed", "worker": "w1"}


def _odd_rows() -> Iterator[dict[str, Any]]:
    """The stored row of a busy record with one field, or one field of an attempt in its
    history, set to each odd value, or left out; and with an unknown field."""
    base = _as_stored(_busy("b", ("x", "y")))
    yield {**base, "colour": "red"}
    # a history longer than is kept, whose oldest entries (dropped on load) are bad
    long = [{**_ATTEMPT, "attempt": n} for n in range(ATTEMPT_HISTORY + 5)]
    yield {**base, "attempts": long}
    yield {**base, "attempts": [{**_ATTEMPT, "outcome": "?"}, *long]}
    yield {**base, "attempts": [*long, {**_ATTEMPT, "outcome": "?"}]}
    for name in persist._FIELDS:
        if name in base:
            yield {k: v for k, v in base.items() if k != name}
        for value in _ODD_VALUES:
            yield {**base, name: value}
    for key in [*_ATTEMPT, "extra"]:  # (the fields of an attempt, and one it has not)
        if key in _ATTEMPT:
            yield {**base, "attempts": [{k: v for k, v in _ATTEMPT.items() if k != key}]}
        for value in _ODD_VALUES:
            yield {**base, "attempts": [_ATTEMPT, {**_ATTEMPT, key: value}]}


@pytest.mark.parametrize("deps", [None, [], ["x", "y", "x"], ["x", 1]])
@pytest.mark.parametrize("shared", [False, True])
def test_from_stored_judges_any_value_as_from_row_does(
    shared: bool, deps: list[Any] | None
) -> None:
    """from_stored's conversions take only what json makes of a row a store wrote and leave
    anything else to from_row: whatever one field holds, and whatever dependencies the edges
    give, the record is the one from_row makes of the whole row, slot for slot and type for
    type, or the RowError is the same; and the record holds no list or dict of the row's or
    of the dependencies given (a store keeps neither)."""
    for row in _odd_rows():
        whole = full_row(row) if deps is None else full_row(row, deps=deps)
        try:
            expected = _fields(from_row(whole, {} if shared else None))
        except RowError as wanted:
            with pytest.raises(RowError) as got:
                from_stored(row, {} if shared else None, deps)
            assert (str(got.value), got.value.field) == (str(wanted), wanted.field), row
            continue
        record = from_stored(row, {} if shared else None, deps)
        assert _fields(record) == expected, row
        given_in = [row, deps]  # (alive while ids are compared)
        given = {id(c) for c in _containers(given_in)}
        held = [getattr(record, f.name) for f in dataclasses.fields(TaskRecord)]
        assert not [c for c in _containers(held) if id(c) in given], row


def test_loaded_records_share_their_repeated_values() -> None:
    """Rows loaded with one strings dict share one object per family, module, parameter name
    and worker id, one tuple per list of stakeholders or runners, and one per history's worker;
    without it, nothing is shared: each record has its own tuples."""
    rows = [_as_stored(_busy(t)) for t in ("a", "b")]
    strings: dict[Any, Any] = {}
    first, second = (from_stored(r, strings) for r in rows)
    assert first.stakeholders == ("w1",) and first.stakeholders is second.stakeholders
    assert first.runners is second.runners and first.family is second.family
    assert first.module is second.module and first.worker is second.worker
    assert next(iter(first.params)) is next(iter(second.params))
    assert first.attempts and second.attempts
    assert first.attempts[0].worker is second.attempts[0].worker is first.worker
    assert first.stakeholders[0] is first.runners[0] is first.worker
    assert first.params is not rows[0]["params"]
    apart = [from_stored(r) for r in rows]
    assert apart[0].stakeholders is not apart[1].stakeholders
    assert [from_stored(_as_stored(_plain("p")), s).attempts for s in (None, {})] == [
        [],
        None,
    ]


def _version_2_file(path: Path, rows: list[dict[str, Any]]) -> None:
    """A state file as conveyor wrote it at schema 2: whole rows, deps in the JSON, edges
    without positions."""
    db = _db(path)
    try:
        for version in (1, 2):
            for statement in _MIGRATIONS[version]:
                db.execute(statement)
        for n, row in enumerate(rows, 1):
            db.execute(
                "INSERT INTO tasks (task_id, data, status, family, worker, search, changed, seq)"
                " VALUES (?, ?, ?, ?, NULL, ?, 1.0, ?)",
                (row["task_id"], json.dumps(row), row["status"], row["family"], row["task_id"], n),
            )
            db.executemany(
                "INSERT INTO edges VALUES (?, ?)", [(row["task_id"], d) for d in row["deps"]]
            )
        db.execute("UPDATE changes SET seq = ?", (len(rows),))
        db.execute("INSERT INTO workers VALUES ('w1', 0)")
        db.execute("PRAGMA user_version = 2")
        db.commit()
    finally:
        db.close()


def test_a_version_2_file_is_read_and_migrated(tmp_path: Path) -> None:
    """Whole rows with their deps in the JSON (schema 2) load as they were; loading moves
    the deps into the edges table in their order and writes the rows compact (schema 3);
    the file then loads the same, and the UI's detail lists the deps in order."""
    path = tmp_path / "old.db"
    rows = [to_row(_plain(t)) for t in ("z", "a", "m")]
    rows.append(to_row(_busy("w", ("z", "a", "m"))))
    _version_2_file(path, rows)
    store = _open(path)
    try:
        loaded, workers = store.load()
        assert {r["task_id"]: r for r in loaded} == {r["task_id"]: r for r in rows}
        assert workers == [("w1", False)]
    finally:
        store.close()
    db = _db(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    finally:
        db.close()
    assert _edges(path, "w") == [("z", 0), ("a", 1), ("m", 2)]
    assert "deps" not in _stored(path, "w") and "loader" not in _stored(path, "a")
    store = _open(path)
    try:
        records, _ = store.load_records()
        detail = store.detail("w")
        infos = {i.task_id: i for i in store.task_infos()}
    finally:
        store.close()
    assert {r.task_id: tuple(r.deps) for r in records}["w"] == ("z", "a", "m")
    assert detail is not None and [d.task_id for d in detail.deps] == ["z", "a", "m"]
    assert infos["w"].dependencies == ("z", "a", "m")


def test_a_newer_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """A file of a schema newer than this conveyor's is refused (ConfigError saying to
    upgrade) before anything is written: byte for byte unchanged, nothing quarantined."""
    path = tmp_path / "state.db"
    _saved(path, _plain("a"))
    _altered(path, f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(ConfigError, match=f"schema version {SCHEMA_VERSION + 1}, newer") as e:
        _open(path)
    assert "upgrade conveyor" in str(e.value)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_merge_writes_only_the_added_edges_and_they_reload_in_order(tmp_path: Path) -> None:
    """Saving a record whose deps list grew writes the new edges at the next positions and
    leaves the others as they were; a list that no longer extends the saved one replaces
    them; a reload gives the deps in order as a list that the next merge extends."""
    path = tmp_path / "state.db"
    wrapper = _plain("w", ("d9", "d1"))
    store = _open(path)
    try:
        store.save([to_row(wrapper)], [])
        wrapper.deps = list(wrapper.deps)
        for batch in (("d5", "d0"), ("d7",)):
            wrapper.deps.extend(batch)
            row = to_row(wrapper)
            assert row["deps"] is wrapper.deps  # (no copy: the store reads what was added)
            store.save([row], [])
        assert _edges(path, "w") == [("d9", 0), ("d1", 1), ("d5", 2), ("d0", 3), ("d7", 4)]
    finally:
        store.close()
    store = _open(path)
    try:
        (record,), _ = store.load_records()
        assert record.deps == ["d9", "d1", "d5", "d0", "d7"]
        record.deps.append("d3")
        store.save([to_row(record)], [])
        assert _edges(path, "w")[-1] == ("d3", 5)
        store.save([to_row(_plain("w", ("d1", "d2")))], [])
        assert _edges(path, "w") == [("d1", 0), ("d2", 1)]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("priority", "high", "field 'priority' is \"high\"; expected an integer"),
        ("status", None, "field 'status' is null; expected one of"),
        ("attempts", [{**_ATTEMPT, "outcome": []}], "; outcome null or one of succeeded,"),
        ("wake_at", 10**400, "expected a finite number"),
        ("family", "F\ud800", "data holds a lone surrogate"),
        ("params", {"p\udfff": "1"}, "data holds a lone surrogate"),
        ("stakeholders", ["w1", ["w2"]], 'field \'stakeholders\' is ["w1", ["w2"]]; expected'),
        # (a secret parameter's value is not shown, in the report nor in the quarantine)
        ("params", {"db_password": "hunter2", "n": 5}, '{"db_password": "***", "n": 5}; expected'),
        ("colour", "red", "field 'colour' is not a field of a task row"),
        ("deps", ["x"], "field 'deps' is in the row's JSON; expected the dependencies only in"),
    ],
)
def test_bad_compact_rows_are_still_reported_and_quarantined(
    tmp_path: Path, field: str, value: Any, said: str
) -> None:
    """A compact row with a field of the wrong type (or one that is no field, or dependencies
    in its JSON where the edges table has none) is reported by task id and field, and
    quarantined; the rest loads."""
    path = tmp_path / "state.db"
    _saved(path, _plain("good", ("bad",)), _plain("bad"))
    row = {**_stored(path, "bad"), field: value}
    _altered(path, "UPDATE tasks SET data = ? WHERE task_id = 'bad'", (json.dumps(row),))
    store = _open(path)
    try:
        with pytest.raises(CorruptState) as caught:
            store.load()
        (bad,) = caught.value.bad
        assert "task_id 'bad'" in bad.where and said in bad.reason
        store.quarantine(caught.value.bad)
        rows, _ = store.load()
    finally:
        store.close()
    assert [r["task_id"] for r in rows] == ["good"] and rows[0]["deps"] == ["bad"]


def test_a_character_beyond_the_bmp_loads_back(tmp_path: Path) -> None:
    """A character beyond the BMP (a surrogate pair in the stored JSON text) loads as it was
    saved: only a lone surrogate makes a row unusable, in an escape of either case."""
    path = tmp_path / "state.db"
    saved = TaskRecord("t", 1, family="F", params={"p": "\U0001f600"}, registered=True)
    _saved(path, saved, _plain("u"))
    db = _db(path)
    try:
        (text,) = db.execute("SELECT data FROM tasks WHERE task_id = 't'").fetchone()
    finally:
        db.close()
    assert "\\ud83d\\ude00" in text
    store = _open(path)
    try:
        records, _ = store.load_records()
    finally:
        store.close()
    assert {r.task_id: r.params for r in records}["t"] == {"p": "\U0001f600"}
    _altered(path, "UPDATE tasks SET data = replace(data, '\"Plain\"', '\"P\\uDC00\"')")
    store = _open(path)
    try:
        with pytest.raises(CorruptState) as caught:
            store.load_records()
    finally:
        store.close()
    assert [(b.where, b.reason.split(" (")[0]) for b in caught.value.bad] == [
        ("task row 2 (task_id 'u')", "data holds a lone surrogate")
    ]


def test_a_value_nested_as_deep_as_json_reads_is_a_bad_row_not_a_crash() -> None:
    """A stored value nested just under the depth json can read (so deep that showing it in
    the error would go over) is reported as the field it is in, or as data that is not JSON:
    a RowError either way, at every depth around the limit."""
    limit = sys.getrecursionlimit()
    base = json.dumps({**_as_stored(_plain("t")), "explanation": "HERE"})
    seen = set()
    for depth in range(limit - 150, limit + 5):
        data = base.replace('"HERE"', "[" * depth + "]" * depth)
        with pytest.raises(RowError) as caught:
            _task_row("t", data, {}, None, whole=False, edges=True)
        seen.add(caught.value.field)
    assert seen == {"explanation", "data"}, seen


def test_edges_repeating_a_position_with_a_dep_that_is_no_text_make_the_row_unusable(
    tmp_path: Path,
) -> None:
    """Two edges of a task at one position, one of them a BLOB (an edited file), are reported
    as the task's field 'deps', not compared into a TypeError."""
    path = tmp_path / "state.db"
    _saved(path, _plain("w", ("a", "b")), _plain("a"), _plain("b"))
    _altered(path, "UPDATE edges SET dep_id = X'62', pos = 0 WHERE task_id = 'w' AND dep_id = 'b'")
    store = _open(path)
    try:
        with pytest.raises(CorruptState) as caught:
            store.load_records()
        (bad,) = caught.value.bad
        assert "task_id 'w'" in bad.where and "field 'deps'" in bad.reason
        (info,) = [i for i in store.task_infos() if i.task_id == "w"]
        assert info.status == TaskStatus.UNKNOWN  # (the API's list checks them as the load)
        assert "task 'w' is unusable: field 'deps'" in info.explanation
    finally:
        store.close()


def test_text_that_is_not_utf8_is_reported_by_row_and_quarantined(tmp_path: Path) -> None:
    """A task's data or a worker's id edited into bytes that are not UTF-8 (which SQLite
    cannot hand over as text) is reported by row, with every other unusable row, and
    quarantined as it is, byte for byte; the rest loads. The same bytes in an edge, which is
    no row to move aside, are a ConfigError saying so, not a traceback."""
    path = tmp_path / "state.db"
    store = _open(path)
    try:
        store.load_records()
        rows = [to_row(_plain(t)) for t in ("good", "bad", "late")]
        store.save(rows, [("w1", False), ("w2", True)])
    finally:
        store.close()
    _altered(path, "UPDATE tasks SET data = CAST(X'7B22FF' AS TEXT) WHERE task_id = 'bad'")
    _altered(path, "UPDATE tasks SET data = 'not json' WHERE task_id = 'late'")
    _altered(path, "UPDATE workers SET worker_id = CAST(X'77FE' AS TEXT) WHERE worker_id = 'w2'")
    store = _open(path)
    try:
        with pytest.raises(CorruptState) as caught:
            store.load_records()
        found = [(b.key[0], b.where, b.reason.split(" (")[0]) for b in caught.value.bad]
        assert found == [
            ("tasks", "task row 2 (task_id 'bad')", "data is not UTF-8 text"),
            ("workers", "worker row 2 (worker_id 'w\ufffd')", "worker_id is not UTF-8 text"),
            ("tasks", "task row 3 (task_id 'late')", "data is not JSON"),
        ]
        assert "(invalid start byte at byte 2)" in caught.value.bad[0].reason
        store.quarantine(caught.value.bad)
        records, workers = store.load_records()
    finally:
        store.close()
    assert [r.task_id for r in records] == ["good"] and workers == [("w1", False)]
    db = _db(path)
    try:
        db.text_factory = bytes
        kept = db.execute("SELECT source_table, data FROM quarantine ORDER BY id").fetchall()
    finally:
        db.close()
    assert kept == [(b"tasks", b'{"\xff'), (b"workers", 1), (b"tasks", b"not json")]
    _saved(path, _plain("w", ("a",)))
    _altered(path, "UPDATE edges SET dep_id = CAST(X'61FF' AS TEXT) WHERE task_id = 'w'")
    store = _open(path)
    try:
        with pytest.raises(ConfigError, match=r"cannot read the state database .*UTF-8"):
            store.load_records()
    finally:
        store.close()


def test_a_read_error_of_another_kind_is_not_taken_for_bytes_that_are_not_utf8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only sqlite3's "could not decode" sends the load looking for rows that are not UTF-8:
    another read error (a disk failing, which cannot be made here) comes out as it is."""
    path = tmp_path / "state.db"
    _saved(path, _plain("a"))

    def failing(_db: sqlite3.Connection) -> dict[str, list[str] | None]:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(reads, "all_deps", failing)
    store = _open(path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
            store.load_records()
    finally:
        store.close()


def test_dependencies_in_a_rows_json_beside_its_edges_give_way_to_the_edges(
    tmp_path: Path,
) -> None:
    """A row whose JSON holds dependencies while the edges table holds its own loads with
    the edges' (nothing is lost: the next save writes the row without them)."""
    path = tmp_path / "state.db"
    _saved(path, _plain("w", ("a", "b")))
    row = {**_stored(path, "w"), "deps": ["x"]}
    _altered(path, "UPDATE tasks SET data = ? WHERE task_id = 'w'", (json.dumps(row),))
    store = _open(path)
    try:
        (record,), _ = store.load_records()
        assert record.deps == ["a", "b"]
        detail = store.detail("w")  # (the UI's reads take them as the load does)
        assert detail is not None and [d.task_id for d in detail.deps] == ["a", "b"]
        record.deps.append("c")
        store.save([to_row(record)], [])
        assert "deps" not in _stored(path, "w")  # (written again, without them)
        assert [dep for dep, _ in _edges(path, "w")] == ["a", "b", "c"]
    finally:
        store.close()


def test_the_task_list_and_the_detail_show_the_same_dependencies(tmp_path: Path) -> None:
    """The UI's two readers take a task's dependencies alike, as the load does: from the
    edges when it has some, whatever its JSON holds; a row whose JSON holds some and that
    has no edges (edited so) is unusable to both, as the load refuses it."""
    path = tmp_path / "state.db"
    _saved(path, _plain("w", ("a", "b")), _plain("v"))
    for task_id in ("w", "v"):
        row = {**_stored(path, task_id), "deps": ["x"]}
        _altered(path, "UPDATE tasks SET data = ? WHERE task_id = ?", (json.dumps(row), task_id))
    store = _open(path)
    try:
        listed = {i.task_id: i for i in store.task_infos()}
        detail = store.detail("w")
        with pytest.raises(UnusableRow, match="field 'deps' is in the row's JSON"):
            store.detail("v")
    finally:
        store.close()
    assert detail is not None and [d.task_id for d in detail.deps] == ["a", "b"]
    assert list(listed["w"].dependencies) == ["a", "b"]
    assert listed["v"].status == TaskStatus.UNKNOWN
    assert "field 'deps' is in the row's JSON" in listed["v"].explanation


def test_edges_whose_positions_are_not_numbers_make_the_row_unusable(tmp_path: Path) -> None:
    """An edge position that is not an integer is reported as the task's field 'deps'."""
    path = tmp_path / "state.db"
    _saved(path, _plain("w", ("a", "b")))
    _altered(path, "UPDATE edges SET pos = 'first' WHERE dep_id = 'a'")
    store = _open(path)
    try:
        with pytest.raises(CorruptState) as caught:
            store.load()
    finally:
        store.close()
    (bad,) = caught.value.bad
    assert "task_id 'w'" in bad.where and "field 'deps'" in bad.reason


def _add(server: SchedulerProcess, deps: list[str]) -> None:
    """Register the wrapper ``W`` naming ``deps`` (and the deps themselves) over HTTP."""
    specs: list[dict[str, Any]] = [{"task_id": d, "family": "Leaf", "module": "m"} for d in deps]
    specs.append({"task_id": "W", "family": "Wrap", "module": "m", "deps": deps})
    reply = server.request("POST", "/api/v1/add_tasks", {"worker_id": "w1", "tasks": specs})
    assert reply.status == 200, reply


def _dependencies(server: SchedulerProcess) -> tuple[str, ...]:
    reply = server.request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply
    (wrapper,) = [t for t in reply.json()["tasks"] if t["task_id"] == "W"]
    return tuple(wrapper["dependencies"])


@pytest.mark.timeout(180)
def test_a_merged_registrations_deps_survive_kill_9_in_order(tmp_path: Path) -> None:
    """A wrapper registered in three requests, each naming more dependencies (out of
    alphabetical order), keeps them all in the order they came across ``kill -9`` and a
    restart of a real server, and a merge after the restart extends them."""
    config = tmp_path / "server.toml"
    config.write_text("", encoding="utf-8")
    marker = uuid.uuid4().hex
    server = SchedulerProcess(tmp_path, config, child_env(tmp_path, "PC_MARKER", marker))
    batches = [["d5", "d1"], ["d9", "d0", "d1"], ["d3"]]
    try:
        server.start()
        for batch in batches:
            _add(server, batch)
        order = ("d5", "d1", "d9", "d0", "d3")
        assert _dependencies(server) == order
        server.kill()
        server.start()
        assert _dependencies(server) == order
        _add(server, ["d2"])
        server.kill()
        server.start()
        assert _dependencies(server) == (*order, "d2")
    finally:
        server.kill()
        kill_marked("PC_MARKER", marker)
    assert _edges(server.state, "W") == [(d, n) for n, d in enumerate((*order, "d2"))]


def _rewrite(path: Path, task_id: str, change: Any) -> None:
    """Task ``task_id``'s stored JSON replaced by ``change(row)``, escaped to ASCII (so that a
    lone surrogate is stored as its ``\\ud800`` escape), behind the store's back."""
    _altered(
        path,
        "UPDATE tasks SET data = ? WHERE task_id = ?",
        (json.dumps(change(_stored(path, task_id))), task_id),
    )


# (what is done to task "b"'s stored row while the store runs, and what its error says; the
# task list, which shows no dependencies, reads no edges)
_EDITS: list[tuple[str, Any, str]] = [
    ("a list", lambda path: _rewrite(path, "b", lambda row: []), "the row is a JSON list"),
    (
        "params",  # (a value that is no string, beside a secret: the secret is not shown)
        lambda path: _rewrite(
            path, "b", lambda row: {**row, "params": {"db_password": "hunter2", "n": 5}}
        ),
        "field 'params' is not what a task row holds; expected",
    ),
    (
        "surrogate",
        lambda path: _rewrite(path, "b", lambda row: {**row, "family": "F\ud800"}),
        "lone surrogate",
    ),
    (
        "another id",
        lambda path: _rewrite(path, "b", lambda row: {**row, "task_id": "c"}),
        "field 'task_id' is 'c'",
    ),
    (
        "a BLOB edge",
        lambda path: _altered(path, "INSERT INTO edges VALUES ('b', x'00ff', 0)"),
        "field 'deps' is",
    ),
]


@pytest.mark.parametrize(
    ("edit", "said"), [(e[1], e[2]) for e in _EDITS], ids=[e[0] for e in _EDITS]
)
def test_a_row_edited_while_the_store_runs_is_shown_as_unusable(
    tmp_path: Path, edit: Any, said: str
) -> None:
    """A row edited behind a running store (a start checks every row, the web UI's reads
    came after) no longer breaks the reads: the task list and ``GET /api/v1/tasks`` show it as
    an UNKNOWN task whose reason names the task and what is wrong (never a value it holds: a
    secret parameter's, say), and list the others as they are; its detail answers
    UnusableRow with the same words, and the detail of a task that depends on it is shown."""
    path = tmp_path / "state.db"
    store = _open(path)
    try:
        store.load()
        store.save([to_row(_plain("a", ("b",))), to_row(_plain("b"))], [])
        edit(path)
        entries = {e.task_id: e for e in store.page(reads.TaskFilters(), None, 10).tasks}
        infos = {i.task_id: i for i in store.task_infos()}
        assert entries["a"].status == TaskStatus.PENDING and entries["a"].reason == ""
        assert infos["a"].status == TaskStatus.PENDING and infos["a"].dependencies == ("b",)
        shown = [infos["b"].explanation]
        if said.startswith("field 'deps'"):  # (an edge: the list reads none)
            assert entries["b"].status == TaskStatus.PENDING
        else:
            assert entries["b"].status == TaskStatus.UNKNOWN
            assert entries["b"].family == "Plain"  # (from its column)
            shown.append(entries["b"].reason)
        assert infos["b"].status == TaskStatus.UNKNOWN
        with pytest.raises(UnusableRow) as caught:
            store.detail("b")
        for text in (*shown, str(caught.value)):
            assert "the stored row of task 'b' is unusable" in text and said in text
            assert "hunter2" not in text
        detail = store.detail("a")
        assert detail is not None and [d.task_id for d in detail.deps] == ["b"]
    finally:
        store.close()


def test_reads_around_a_row_that_is_no_json_or_has_no_known_status(tmp_path: Path) -> None:
    """A row whose text is not JSON, or whose status column holds no status (edited behind
    the running store), does not break the reads of the tasks around it: the detail and the
    graph of a task that depends on them show them (UNKNOWN where the status is unknown), and
    the summary counts the tasks whose status it knows."""
    path = tmp_path / "state.db"
    store = _open(path)
    try:
        store.load()
        store.save([to_row(_plain("a", ("b", "c"))), to_row(_plain("b")), to_row(_plain("c"))], [])
        _altered(path, "UPDATE tasks SET data = 'nope' WHERE task_id = 'b'")
        _altered(path, "UPDATE tasks SET status = 'WAT' WHERE task_id = 'c'")
        detail = store.detail("a")
        assert detail is not None
        assert [(d.task_id, d.status) for d in detail.deps] == [
            ("b", TaskStatus.PENDING),
            ("c", TaskStatus.UNKNOWN),
        ]
        graph = store.graph("a", False)
        assert graph is not None and {n.id for n in graph.nodes} == {"a", "b", "c"}
        assert store.summary().total == 2
    finally:
        store.close()


@pytest.mark.parametrize("end", ["task_id", "dep_id"])
def test_reads_step_over_an_edge_whose_end_is_a_blob(tmp_path: Path, end: str) -> None:
    """An edge whose task or dependency was edited into a BLOB (behind the running store; a
    number would be stored as text, the columns' affinity) is stepped over by the graphs both
    ways and by a detail's dependents: they show the tasks around it instead of failing
    (comparing a BLOB with a text raised TypeError); the detail of the task whose
    dependencies it spoils answers UnusableRow."""
    path = tmp_path / "state.db"
    store = _open(path)
    try:
        store.load()
        rows = [_plain("a", ("b", "c")), _plain("b"), _plain("c", ("d",)), _plain("d")]
        store.save([to_row(r) for r in rows], [])
        _altered(path, f"UPDATE edges SET {end} = x'00ff' WHERE task_id = 'a' AND dep_id = 'b'")
        for task_id in "abcd":
            for down in (False, True):
                graph = store.graph(task_id, down)
                assert graph is not None, (task_id, down)
                assert all(isinstance(n.id, str) for n in graph.nodes), (task_id, down)
        up = store.graph("a", False)
        assert up is not None and {n.id for n in up.nodes} >= {"a", "c", "d"}
        down = store.graph("d", True)
        assert down is not None and {n.id for n in down.nodes} >= {"a", "c", "d"}
        detail = store.detail("b")
        assert detail is not None
        assert all(isinstance(d.task_id, str) for d in detail.dependents)
        assert detail.dependents_total == len(detail.dependents)
        if end == "dep_id":  # (a's dependencies: one is no task id)
            with pytest.raises(UnusableRow, match="field 'deps'"):
                store.detail("a")
    finally:
        store.close()


@pytest.mark.timeout(180)
def test_the_server_answers_an_unusable_row_with_what_is_wrong(tmp_path: Path) -> None:
    """Over HTTP: the task's detail in the UI answers 500 with the row's problem, not an
    internal error; ``GET /api/v1/tasks`` and the UI's task list (no token set) show the row
    as UNKNOWN with the reason."""
    config = tmp_path / "server.toml"
    config.write_text("", encoding="utf-8")
    marker = uuid.uuid4().hex
    server = SchedulerProcess(tmp_path, config, child_env(tmp_path, "PC_MARKER", marker))
    try:
        server.start()
        _add(server, ["d1"])
        _rewrite(server.state, "d1", lambda row: {**row, "params": "x"})
        reply = server.request("GET", "/ui/api/task?id=d1")
        assert reply.status == 500, reply
        error = reply.json()["error"]
        assert "the stored row of task 'd1' is unusable: field 'params'" in error
        assert "--recover" in error
        reply = server.request("GET", "/api/v1/tasks")
        assert reply.status == 200, reply
        (info,) = [t for t in reply.json()["tasks"] if t["task_id"] == "d1"]
        assert info["status"] == "UNKNOWN" and "field 'params'" in info["explanation"]
        listed = server.request("GET", "/ui/api/tasks")
        assert listed.status == 200, listed
        (entry,) = [t for t in listed.json()["tasks"] if t["task_id"] == "d1"]
        assert entry["status"] == "UNKNOWN" and "field 'params'" in entry["reason"]
    finally:
        server.kill()
        kill_marked("PC_MARKER", marker)


def _held_by(task_id: str, *workers: str) -> TaskRecord:
    record = _plain(task_id)
    record.stakeholders = record.runners = tuple(workers)
    return record


def _row_of(path: Path, task_id: str) -> tuple[str, int]:
    db = _db(path)
    try:
        found = db.execute("SELECT data, seq FROM tasks WHERE task_id = ?", (task_id,))
        data, seq = found.fetchone()
        return str(data), int(seq)
    finally:
        db.close()


def _held_after_reload(path: Path) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each task's stakeholders and runners as a store opened afresh on ``path`` loads them."""
    store = _open(path)
    try:
        records, _ = store.load_records()
        return {r.task_id: (r.stakeholders, r.runners) for r in records}
    finally:
        store.close()


def test_stakeholders_are_set_in_the_stored_row_alone(tmp_path: Path) -> None:
    """save_stakeholders sets the stakeholders and runners of each stored row and leaves the
    rest of its text as it was, byte for byte, and its change number; a row that is not JSON
    is left alone, and so is a task with no row; the reload gives the lists set; and a row
    saved again as it was before is written (not taken as unchanged)."""
    path = tmp_path / "state.db"
    store = _open(path)
    try:
        store.load()
        store.save([to_row(_held_by(t, "w1", "w2")) for t in ("t", "u", "v", "x")], [])
        before, seq = _row_of(path, "t")
        _altered(path, "UPDATE tasks SET data = 'nope' WHERE task_id = 'x'")
        again = _held_by("u", "w1", "w2", "w3")  # (changed otherwise in the same call)
        again.priority = 4
        interest = [("t", ("w2",), ("w2", "w1")), ("v", (), ("w1",)), ("x", (), ()), ("y", (), ())]
        store.save_stakeholders([to_row(again)], [], interest)
        data, seq_after = _row_of(path, "t")
        assert seq_after == seq
        assert data == before.replace('"stakeholders":["w1","w2"]', '"stakeholders":["w2"]')
        assert _row_of(path, "x")[0] == "nope"
        _altered(path, "DELETE FROM tasks WHERE task_id = 'x'")
        store.save([to_row(_held_by("t", "w1", "w2"))], [])  # (as before)
    finally:
        store.close()
    assert _held_after_reload(path) == {
        "t": (("w1", "w2"), ("w1", "w2")),
        "u": (("w1", "w2", "w3"), ("w1", "w2", "w3")),
        "v": ((), ("w1",)),
    }


def test_tasks_given_the_same_lists_are_set_together(tmp_path: Path) -> None:
    """The tasks that save_stakeholders gives the same two lists (in any order) are set by
    statements on their ids as a JSON array, 1,000 at most a statement: every one of them is
    set, ids that JSON escapes or that are not ASCII included, and an id holding a NUL (which
    SQLite's JSON functions cut short) by itself; a row among them that is not a JSON object,
    a task with no row, and the rows no task of the call names are left alone; a task given
    other lists gets its own; and each row keeps its change number."""
    odd = ['q"uote', "back\\slash", "new\nline", "caf\u00e9", "\U0001f680 rocket", "nul\x00end"]
    plain = [f"p{i}" for i in range(1201)]
    path = tmp_path / "state.db"
    store = _open(path)
    try:
        store.load()
        bad = {"not json": "nope", "array": "[1, 2]"}
        named = [*odd, *plain, "own"]
        store.save([to_row(_held_by(t, "w1")) for t in [*named, *bad, "nul", "other"]], [])
        seqs = {t: _row_of(path, t)[1] for t in named}
        for task_id, data in bad.items():
            _altered(path, "UPDATE tasks SET data = ? WHERE task_id = ?", (data, task_id))
        untouched = {t: _row_of(path, t) for t in ("nul", "other")}
        together = [
            (t, ("w2", "w1") if i % 2 else ("w1", "w2"), ("w1", "w2"))
            for i, t in enumerate([*odd, *plain, *bad, "no row"])
        ]
        store.save_stakeholders([], [], [*together, ("own", (), ("w1",))])
        assert {t: _row_of(path, t)[0] for t in bad} == bad
        assert {t: _row_of(path, t) for t in untouched} == untouched
        assert {t: _row_of(path, t)[1] for t in seqs} == seqs
        _altered(path, "DELETE FROM tasks WHERE task_id IN ('not json', 'array')")
    finally:
        store.close()
    assert _held_after_reload(path) == {
        **{t: (("w1", "w2"), ("w1", "w2")) for t in [*odd, *plain]},
        "own": ((), ("w1",)),
        "nul": (("w1",), ("w1",)),
        "other": (("w1",), ("w1",)),
    }
    one, many = _interest_params(together)
    assert sorted(t for *_, t in one) == ["nul\x00end"]
    assert [len(json.loads(ids)) for *_, ids in many] == [1000, len(together) - 1001]


def test_a_registration_compares_every_field_a_store_keeps() -> None:
    """What a registration compares to tell whether it changed a task beyond its stakeholders
    and runners is every field ``to_row`` writes but those and the id and number: a field
    added to the rows must be added there, or a registration changing it alone would not be
    saved."""
    compared = set(policy._PERSISTED_FIELDS)
    assert compared | {"task_id", "seq", "stakeholders", "runners"} == set(
        to_row(TaskRecord("t", 1))
    )
    assert len(compared) == len(policy._PERSISTED_FIELDS)


@pytest.mark.parametrize("seed", range(12))
def test_what_is_stored_is_what_the_scheduler_holds_after_random_calls(
    tmp_path: Path, seed: int
) -> None:
    """Random registrations by three workers (fields that change and fields that do not),
    releases, hand-outs, results and time, saved the way the server saves (the stakeholders
    and runners of a task whose other fields did not change set apart,
    ``take_changes_apart``): after every call, the records the store loads are the
    scheduler's, field for field (:func:`conveyor.testing.stores.check_saves_apart`, which
    the conformance check of every store that sets them apart runs for two seeds)."""
    store = _open(tmp_path / "state.db")
    try:
        store.load()
        check_saves_apart(store, seed=seed, steps=120)
    finally:
        store.close()
