"""The built-in state stores, ``sqlite`` and ``memory``: state in one SQLite file (WAL), or
in one in memory; both answer the web UI's reads (``TaskReads``) with the SQL of
:mod:`.reads`. This module and :mod:`.reads` are the only ones of the server that know
SQLite: nothing else sees a connection.

``save`` returns only once the rows are committed, so the server acknowledges nothing it could
lose to ``kill -9``. The store uses WAL, one writing connection (one writer, serialised by the
server), a read-only connection per reading thread, and a versioned schema migrated on open;
rows are JSON text, never pickle. See :mod:`conveyor.server.stores` for what is refused and
quarantined.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import sqlite3
import tempfile
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import structlog

from ...errors import ConfigError, StateStoreError
from ...protocol import (
    Changes,
    StoredWorker,
    TaskDetail,
    TaskFilters,
    TaskGraph,
    TaskInfo,
    TaskPage,
    TaskSummary,
)
from ...scheduler.persist import (
    RowError,
    compact_encoder,
    full_row,
    read_row,
    stored_json,
    workers_json,
)
from ...scheduler.policy import TaskRecord
from ...settings import Field
from ..statelock import StateLock
from ..stores import (
    GRAPH_CAP,
    PAGE_MAX,
    BadRow,
    CorruptState,
    Rows,
    StoreContext,
    Workers,
    list_worker,
    search_text,
)
from . import reads

__all__ = ["MemoryStore", "SqliteStore"]

T = TypeVar("T")
log = structlog.get_logger("conveyor.server")

# version -> statements that bring a database from the previous version to it
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE tasks (task_id TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE workers (worker_id TEXT PRIMARY KEY, assistant INTEGER NOT NULL)",
    ),
    # 2: what the web UI filters and sorts by, as columns written with each row (the row's
    # JSON stays the one source of the record), and the dependency edges, both ways indexed
    2: (
        "ALTER TABLE tasks ADD COLUMN status TEXT",  # NULL for a task nobody registered
        "ALTER TABLE tasks ADD COLUMN family TEXT",
        "ALTER TABLE tasks ADD COLUMN worker TEXT",  # running it, else the last to run it
        "ALTER TABLE tasks ADD COLUMN changed REAL NOT NULL DEFAULT 0",  # time of last save
        "ALTER TABLE tasks ADD COLUMN seq INTEGER NOT NULL DEFAULT 0",  # change number
        "ALTER TABLE tasks ADD COLUMN search TEXT",  # lower-case id and public name=value
        "CREATE INDEX tasks_by_seq ON tasks (seq)",
        "CREATE INDEX tasks_by_status ON tasks (status, seq)",
        "CREATE INDEX tasks_by_family ON tasks (family, seq)",
        "CREATE INDEX tasks_by_worker ON tasks (worker, seq)",
        "CREATE TABLE edges (task_id TEXT NOT NULL, dep_id TEXT NOT NULL,"
        " PRIMARY KEY (task_id, dep_id)) WITHOUT ROWID",
        "CREATE INDEX edges_by_dep ON edges (dep_id)",
        # the number of the latest change: grows with every save, deletions included, and
        # survives restarts, so a page polling it never misses a change
        "CREATE TABLE changes (seq INTEGER NOT NULL)",
        "INSERT INTO changes VALUES (0)",
    ),
    # 3: a task's dependencies only in the edges table, in order (pos: 0, 1, ... in the
    # order of the record's deps), no longer in its row's JSON, which leaves out every field
    # at its default (persist.compact_row): a registration that merges dependencies into a
    # task writes the new edges only, not all of them again
    3: ("ALTER TABLE edges ADD COLUMN pos INTEGER NOT NULL DEFAULT 0",),
}
SCHEMA_VERSION = max(_MIGRATIONS)

# Created by the first quarantine(), not by a migration, so that a database that is refused or
# never needs it is left exactly as it was. row_key and data have no type: values are kept as
# they were found (text, blob, number or NULL).
_QUARANTINE = (
    "CREATE TABLE IF NOT EXISTS quarantine (id INTEGER PRIMARY KEY, source_table TEXT NOT NULL,"
    " row_key, data, reason TEXT NOT NULL, quarantined_at REAL NOT NULL)"
)
# table -> (key column, data column): what quarantine() copies of a row of that table
_QUARANTINED = {"tasks": ("task_id", "data"), "workers": ("worker_id", "assistant")}

Columns = tuple[tuple[str, str, int, int], ...]  # (name, declared type, not null, primary key)


class SqliteStore:
    """State in one SQLite file (WAL), migrated to the current schema when opened; a
    :class:`~conveyor.server.stores.StateStore`, its
    :class:`~conveyor.server.stores.TaskReads` and
    :class:`~conveyor.server.stores.CanListIds`."""

    settings_schema: ClassVar[dict[str, Field]] = {
        "synchronous": Field(
            "str",
            "normal",
            choices=("normal", "full"),
            doc="SQLite synchronous mode: normal survives kill -9, full power loss",
        ),
    }

    _synchronous: ClassVar[str] = ""  # (a subclass's own synchronous mode, over the setting)

    def __init__(self, context: StoreContext) -> None:
        """Open (creating and migrating if needed) the database at ``context.state_path``.

        The state is locked first (an ``flock`` on ``<state_path>.lock``, which names the
        holder): a second server on the same file is refused (ConfigError) naming the first,
        and so is a file or directory this process cannot write. The schema is checked before
        anything is written: a file that is not a conveyor state database is refused
        (ConfigError) and left as it was.
        """
        self._path = context.state_path
        self._state_lock = StateLock(self._path, context.holder)
        synchronous = self._synchronous or str(context.settings.get("synchronous", "normal"))
        synchronous = synchronous.upper()
        self._lock = threading.Lock()
        self._readers = threading.local()  # a read-only connection per reading thread
        self._reader_list: list[sqlite3.Connection] = []
        # what the edges table holds, per task with edges: the deps saved last (the record's
        # own list, which only grows at its end) and how many of them; complete once
        # _edges_known
        self._deps: dict[str, tuple[Sequence[str], int]] = {}
        self._edges_known = False  # (True once loaded, or for a new file)
        self._digests: dict[str, bytes] = {}  # what each stored row's data is, in short
        self._seq = 0  # the latest change number (the changes table's)
        self._rescued: str | None = None  # what _rescue() did, once it did
        self._identity: tuple[int, int] | None = None  # the file opened, once it is
        try:
            self._db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            self._state_lock.release()
            raise self._unusable(exc) from None
        self._wal = False  # switched on by the first write: a refused file stays as it was
        self._checkpointer: _Checkpointer | None = None  # (started with the write-ahead log)
        try:
            self._version = self._check_schema()
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
            if self._version == 0:  # a new file: nothing in it to keep as it was
                self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # (before any table)
                self._upgrade()
                self._edges_known = True
            elif self._version == SCHEMA_VERSION:
                self._seq = _latest(self._db)
            self._identity = _identity(self._path)
        except BaseException as exc:
            if self._checkpointer is not None:  # (started by a migration's first write)
                self._checkpointer.close()
            self._db.close()
            self._state_lock.release()
            if isinstance(exc, sqlite3.Error):
                raise self._unusable(exc) from None
            raise

    def _unusable(self, exc: sqlite3.Error) -> ConfigError:
        return ConfigError(
            f"cannot use {self._path!r} as the scheduler's state database: {exc}; "
            "expected an SQLite file (or a path where one can be created)"
        )

    def _check_schema(self) -> int:
        """The database's schema version, after checking (reading only) that it is ours."""
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"state database {self._path!r} has schema version {version}, newer than this "
                f"conveyor understands ({SCHEMA_VERSION}); upgrade conveyor"
            )
        problem = _schema_problem(_tables_of(self._db), version)
        if problem:
            raise ConfigError(
                f"{self._path!r} is not a conveyor state database: {problem}; refusing to use or "
                "change it, even with --recover (quarantine is for rows, not for a foreign "
                "file); set [server] state_path to a conveyor state database or a new file"
            )
        return version

    def _upgrade(self) -> None:
        """Apply the missing migrations, each in its own transaction. A file with rows is
        upgraded only once they were all read back (``load()``) or by the first write or read
        after that, so a file refused for unusable rows is left exactly as it was."""
        if self._version == SCHEMA_VERSION:
            return
        for target in range(self._version + 1, SCHEMA_VERSION + 1):
            self._transaction(functools.partial(_apply, version=target))
            self._version = target
        self._seq = _latest(self._db)

    def _transaction(self, work: Callable[[sqlite3.Connection], object]) -> None:
        """``work`` in one transaction, committed, or rolled back if anything failed (the
        commit included: a full or read-only disk fails there)."""
        with self._lock:
            self._check_file()
            if not self._wal:
                self._db.execute("PRAGMA journal_mode=WAL")
                # (the log is checkpointed by a thread of its own; the writer does it too,
                # at commit, only if that thread falls far behind or stops)
                self._db.execute(f"PRAGMA wal_autocheckpoint={_WAL_BACKSTOP_PAGES}")
                synchronous = int(self._db.execute("PRAGMA synchronous").fetchone()[0])
                self._checkpointer = _Checkpointer(self._path, synchronous)
                self._wal = True
            self._db.execute("BEGIN IMMEDIATE")
            try:
                work(self._db)
                self._db.execute("COMMIT")
                if self._checkpointer is not None:
                    self._checkpointer.wrote()
            except BaseException:
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise

    def _check_file(self) -> None:
        """StateStoreError if the file at the state path is no longer the one opened: a
        write would go to a deleted file and be lost at the next start."""
        if self._identity is None:  # (still opening)
            return
        try:
            now = _identity(self._path)
        except FileNotFoundError:
            now = None
        if now != self._identity:
            what = "deleted" if now is None else "replaced by another file"
            raise StateStoreError(
                f"the state database {self._path!r} was {what} while this server was "
                f"running; nothing more is written to it; {self._rescue()}"
            )

    def _still_there(self) -> bool:
        """Whether the file at the state path is the one opened (a new reading connection
        would read it); after a deletion or replacement, reads go through the writing
        connection, which still holds every committed change."""
        if self._identity is None:
            return True
        try:
            return _identity(self._path) == self._identity
        except FileNotFoundError:
            return False

    def _rescue(self) -> str:
        """Copy what the open (deleted or replaced) database holds to
        ``<path>.rescued-<time>`` (never over an earlier rescue), once; say where it is and
        how to put it back, or why it could not be copied."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        target = f"{self._path}.rescued-{stamp}"
        if self._rescued is None:
            try:
                copy = sqlite3.connect(target)
                try:
                    self._db.backup(copy)
                finally:
                    copy.close()
                self._rescued = (
                    f"every change acknowledged so far is in {target!r}: stop this server, "
                    f"remove any {self._path + '-wal'!r} and {self._path + '-shm'!r}, move "
                    f"that file to {self._path!r} and start it again"
                )
            except (sqlite3.Error, OSError) as exc:
                self._rescued = f"copying what it holds to {target!r} failed too ({exc})"
        return self._rescued

    def probe(self) -> None:
        """Commit a write that changes nothing of the state (the change counter moves on: a
        rewrite of equal bytes is skipped by SQLite, so would prove nothing); raises what a
        save would raise now."""
        self._transaction(lambda db: db.execute("UPDATE changes SET seq = ?", (self._seq + 1,)))
        self._seq += 1

    def compact(self) -> int:
        """Give back up to :data:`_VACUUM_PAGES` free pages once more than
        :data:`_VACUUM_AT` are free (an incremental vacuum, typically a few ms); the count."""
        with self._lock:
            free = int(self._db.execute("PRAGMA freelist_count").fetchone()[0])
            vacuuming = int(self._db.execute("PRAGMA auto_vacuum").fetchone()[0]) == 2
            if free < _VACUUM_AT or not vacuuming:
                return 0
            self._check_file()
            # executescript steps the pragma to its end; execute() would free one page only
            self._db.executescript(f"PRAGMA incremental_vacuum({min(free, _VACUUM_PAGES)});")
            if self._checkpointer is not None:  # (so that the file shrinks, idle or not)
                self._checkpointer.wrote()
            return free - int(self._db.execute("PRAGMA freelist_count").fetchone()[0])

    def load(self) -> tuple[Rows, Workers]:
        """Every saved row and worker; CorruptState (nothing changed) naming unusable rows."""
        rows: Rows = []
        workers = self._read_back(lambda row, _record: rows.append(row), None)
        return rows, workers

    def load_records(self) -> tuple[list[TaskRecord], Workers]:
        """What :meth:`load` returns, as records: the rows are read a chunk at a time and each
        is parsed and checked once, so no more than a chunk of them exists at once; records
        share their repeated strings. The server loads with this when a store has it."""
        records: list[TaskRecord] = []
        workers = self._read_back(lambda _row, record: records.append(record), {})
        return records, workers

    def _read_back(
        self, keep: Callable[[dict[str, Any], TaskRecord], object], strings: dict[Any, Any] | None
    ) -> Workers:
        """Read every task row (``keep(row, record)`` for each usable one, until one is not)
        and return the workers; CorruptState (nothing changed) naming every unusable row, those
        whose text is not UTF-8 first. ``strings`` is
        :func:`~conveyor.scheduler.persist.from_stored`'s."""
        deps: dict[str, tuple[Sequence[str], int]] = {}
        digests: dict[str, bytes] = {}
        bad: list[BadRow] = []
        skipped: dict[str, set[int]] = {"tasks": set(), "workers": set()}
        with self._lock:
            self._db.execute("BEGIN")  # (one snapshot of the edges and the tasks)
            try:
                try:
                    worker_rows = self._read_rows(keep, strings, bad, deps, digests, skipped)
                except sqlite3.OperationalError as exc:
                    if not _not_decoded(exc):
                        raise
                    # text that is no UTF-8 stops the whole statement: find those rows by
                    # reading them as bytes, then read the rest again without them
                    bad[:] = self._undecodable()  # (and no keep() from here on)
                    for row_of in bad:
                        skipped[row_of.key[0]].add(row_of.key[1])
                    if not bad:  # (the bytes are elsewhere, in an edge: no row to move aside)
                        raise self._not_text(exc) from None
                    try:
                        worker_rows = self._read_rows(keep, strings, bad, deps, digests, skipped)
                    except sqlite3.OperationalError as again:
                        if not _not_decoded(again):
                            raise
                        raise self._not_text(again) from None
            finally:
                self._db.execute("COMMIT")
        pairs: Workers = []
        for rowid, worker_id, assistant in worker_rows:
            problem = _worker_problem(worker_id, assistant)
            if problem:
                where = f"worker row {rowid} (worker_id {worker_id!r})"
                bad.append(BadRow(("workers", rowid), where, problem))
            else:
                pairs.append((worker_id, bool(assistant)))
        if bad:
            raise CorruptState(f"state database {self._path!r}", bad)
        self._deps, self._digests = deps, digests
        self._edges_known = True
        if self._version < 3 <= SCHEMA_VERSION:  # (the rows are rewritten: their digests too)
            self._upgrade()
            with self._lock:
                for task_id, data in self._db.execute("SELECT task_id, data FROM tasks"):
                    if task_id in digests:
                        digests[task_id] = _digest(data)
        self._upgrade()
        self._vacuum_incrementally()
        return pairs

    def _read_rows(
        self,
        keep: Callable[[dict[str, Any], TaskRecord], object],
        strings: dict[Any, Any] | None,
        bad: list[BadRow],
        deps: dict[str, tuple[Sequence[str], int]],
        digests: dict[str, bytes],
        skipped: dict[str, set[int]],
    ) -> list[tuple[Any, ...]]:
        """:meth:`_read_back`'s reading, in its transaction: every task row but those of
        ``skipped`` checked (``keep(row, record)`` while ``bad`` is empty, each unusable one
        added to ``bad``), ``deps`` and ``digests`` filled; the worker rows, unchecked."""
        whole = strings is None  # (load() returns whole rows; load_records() none)
        edged = self._version >= 3  # (a row's dependencies are in table 'edges')
        edges = reads.all_deps(self._db) if edged else {}
        # (one statement: one snapshot of the table, read in chunks)
        cursor = self._db.execute("SELECT rowid, task_id, data FROM tasks" + _but(skipped["tasks"]))
        for chunk in iter(lambda: cursor.fetchmany(_LOAD_CHUNK), []):
            for rowid, task_id, data in chunk:
                listed = edges.get(task_id, _NO_EDGES)
                try:
                    if listed is None:
                        raise RowError(_UNORDERED, "deps")
                    stored = None if listed is _NO_EDGES else listed
                    row, record = _task_row(
                        task_id, data, strings, stored, whole=whole, edges=edged
                    )
                except RowError as exc:
                    where = f"task row {rowid} (task_id {task_id!r})"
                    bad.append(BadRow(("tasks", rowid), where, str(exc)))
                    continue
                if record.deps:
                    deps[task_id] = (record.deps, len(record.deps))
                digests[task_id] = _digest(data)
                if not bad:
                    keep(row, record)
            del chunk
        del edges
        workers = "SELECT rowid, worker_id, assistant FROM workers" + _but(skipped["workers"])
        return self._db.execute(workers).fetchall()

    def _not_text(self, exc: sqlite3.OperationalError) -> ConfigError:
        return ConfigError(
            f"cannot read the state database {self._path!r}: {exc}; expected its text in UTF-8"
            " (an edited or damaged file: restore it from a backup)"
        )

    def _undecodable(self) -> list[BadRow]:
        """The task and worker rows whose text is not UTF-8, which sqlite3 cannot read as
        text (the whole statement fails), found by reading them again as bytes; with the
        lock held. They are reported and quarantined like any unusable row."""
        bad: list[BadRow] = []
        self._db.text_factory = bytes
        try:
            for table, (key, data) in _QUARANTINED.items():
                found = self._db.execute(
                    f"SELECT rowid, typeof({key}), {key}, typeof({data}), {data} FROM {table}"
                )
                for rowid, key_type, key_value, data_type, data_value in found:
                    problem = _not_utf8(key, key_type, key_value) or _not_utf8(
                        data, data_type, data_value
                    )
                    if problem:
                        if isinstance(key_value, bytes):
                            key_value = key_value.decode("utf-8", "replace")
                        where = f"{table[:-1]} row {rowid} ({key} {key_value!r})"
                        bad.append(BadRow((table, rowid), where, problem))
        finally:
            self._db.text_factory = str
        return bad

    def _vacuum_incrementally(self) -> None:
        """Switch a file created before conveyor vacuumed incrementally to doing so: one full
        VACUUM, once (it rewrites the file, and needs as much free space again; afterwards
        :meth:`compact` gives space back). If it fails the file stays as it was, without
        compaction, and the next start tries again."""
        with self._lock:
            if int(self._db.execute("PRAGMA auto_vacuum").fetchone()[0]) == 2:
                return
            self._check_file()
            log.info("switching the state file to incremental vacuum (once)", state=self._path)
            try:
                self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
                self._db.execute("VACUUM")
            except sqlite3.Error as exc:
                log.warning(
                    "could not switch the state file to incremental vacuum; freed space will"
                    " not be given back",
                    state=self._path,
                    error=str(exc),
                )

    def quarantine(self, bad: Sequence[BadRow]) -> str:
        """Move the rows into the ``quarantine`` table (raw values, reason, time), in one
        transaction; return where they went."""
        now = time.time()

        def move(db: sqlite3.Connection) -> None:
            db.execute(_QUARANTINE)
            for row in bad:
                table, rowid = row.key
                key, data = _QUARANTINED[table]
                db.execute(
                    "INSERT INTO quarantine (source_table, row_key, data, reason, quarantined_at)"
                    f" SELECT ?, {key}, {data}, ?, ? FROM {table} WHERE rowid = ?",
                    (table, row.reason, now, rowid),
                )
                if table == "tasks" and self._version >= 2:
                    db.execute(
                        "DELETE FROM edges WHERE task_id = (SELECT task_id FROM tasks"
                        " WHERE rowid = ?)",
                        (rowid,),
                    )
                db.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))

        self._transaction(move)
        return f"the table 'quarantine' of {self._path!r}"

    def save(
        self,
        rows: Iterable[dict[str, Any]],
        workers: Iterable[tuple[str, bool]],
        *,
        gone_tasks: Collection[str] = (),
        gone_workers: Collection[str] = (),
    ) -> None:
        """Upsert and delete in one committed transaction; rows equal to what is stored are
        left alone (a re-registration that changed nothing is not a change)."""
        self.save_stakeholders(rows, workers, (), gone_tasks=gone_tasks, gone_workers=gone_workers)

    def save_stakeholders(
        self,
        rows: Iterable[dict[str, Any]],
        workers: Iterable[tuple[str, bool]],
        stakeholders: Sequence[tuple[str, Sequence[str], Sequence[str]]],
        *,
        gone_tasks: Collection[str] = (),
        gone_workers: Collection[str] = (),
    ) -> None:
        """:meth:`save`, and first, in the same transaction, the stakeholders and runners of
        each ``(task_id, stakeholders, runners)`` set in the task's row by SQLite's JSON
        functions on the stored text (the rest of it stays as it is, byte for byte): some
        4 µs a task where writing its row takes some 20. The row keeps its change number and
        its time of change: the UI shows neither list, only whether a task has runners, and
        the scheduler writes a task's first runner as a whole row. A row whose text is not a
        JSON object (edited behind the server's back: the next start reports it) is left as
        it is; each of these rows is written whole at its task's next other change."""
        self._upgrade()
        now = time.time()
        changed: list[tuple[Any, ...]] = []  # (task_id, data, *ui columns, digest)
        edges: list[tuple[str, Sequence[str], bool, int, Sequence[str]]] = []
        for row in rows:
            task_id = row["task_id"]
            data = stored_json(row, without="deps")
            digest = _digest(data)
            deps = row["deps"]
            work = self._edge_work(task_id, deps)
            if work is not None:
                edges.append((task_id, deps, *work))
            elif self._digests.get(task_id) == digest:
                continue
            changed.append((task_id, data, *_ui_columns(row), digest))
        worker_data = [(w, int(a)) for w, a in workers]
        if not (changed or worker_data or gone_tasks or gone_workers or stakeholders):
            return
        interest, shared = _interest_params(stakeholders)
        gone = [(t,) for t in gone_tasks]
        seq = self._seq + len(changed) + bool(gone)

        def write(db: sqlite3.Connection) -> None:
            db.executemany(_SET_INTEREST, interest)
            db.executemany(_SET_SHARED_INTEREST, shared)
            first = self._seq + 1
            db.executemany(
                _UPSERT_TASK,
                [(*c[:-1], now, first + i) for i, c in enumerate(changed)],
            )
            db.executemany("INSERT OR REPLACE INTO workers VALUES (?, ?)", worker_data)
            # (one statement of each kind for all the tasks; a task's old edges go first)
            db.executemany("DELETE FROM edges WHERE task_id = ?", [(e[0],) for e in edges if e[2]])
            db.executemany(
                "INSERT OR IGNORE INTO edges (task_id, dep_id, pos) VALUES (?, ?, ?)",
                [(e[0], d, e[3] + i) for e in edges for i, d in enumerate(e[4])],
            )
            db.executemany("DELETE FROM tasks WHERE task_id = ?", gone)
            db.executemany("DELETE FROM edges WHERE task_id = ?", gone)
            db.executemany("DELETE FROM workers WHERE worker_id = ?", [(w,) for w in gone_workers])
            db.execute("UPDATE changes SET seq = ?", (seq,))

        self._transaction(write)
        self._seq = seq
        for task_id, *_ in stakeholders:  # (its text is SQLite's: the next save writes it)
            self._digests.pop(task_id, None)
        for c in changed:
            self._digests[c[0]] = c[-1]
        for task_id, deps, *_ in edges:
            if deps:
                self._deps[task_id] = (deps, len(deps))
            else:
                self._deps.pop(task_id, None)
        for task_id in gone_tasks:
            self._deps.pop(task_id, None)
            self._digests.pop(task_id, None)

    def _edge_work(
        self, task_id: str, deps: Sequence[str]
    ) -> tuple[bool, int, Sequence[str]] | None:
        """What to write to bring the stored edges of ``task_id`` to ``deps`` (None:
        nothing): whether to delete them all first, the position of the first edge to
        insert, and the dependencies to insert from there. O(what was added) when ``deps`` is
        the list saved last, grown at its end (a registration merged more in: see
        :func:`~conveyor.scheduler.persist.to_row`); O(all of them) once when it is another
        sequence that extends it, or when they changed otherwise (then all are written
        again)."""
        known = self._deps.get(task_id)
        if known is None:
            if not deps and self._edges_known:
                return None  # (no edges stored, none to store: no statement)
            return True, 0, _unique(deps)
        saved, count = known
        if len(deps) >= count and (deps is saved or list(deps[:count]) == list(saved[:count])):
            added = deps[count:]
            # (a dependency named again, which conveyor's records never do, is not inserted
            # twice: its position stays a gap, and loading orders by position all the same)
            return (False, count, added) if added else None
        return True, 0, _unique(deps)

    def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(connection, *args)`` on a read-only connection of the calling thread's own,
        which sees what was committed: reading never waits for a write nor holds one up
        (WAL). If the file was deleted or replaced meanwhile, a thread without one reads
        through the writing connection instead (the server refuses writes then). The
        connection never leaves this module (and :mod:`.reads`)."""
        reader: sqlite3.Connection | None = getattr(self._readers, "db", None)
        if reader is None:
            if not self._still_there():  # (deleted or replaced: what we hold is in our handle)
                with self._lock:
                    return fn(self._db, *args)
            uri = _file_uri(self._path, "ro")
            reader = self._readers.db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            with self._lock:
                self._reader_list.append(reader)
        return fn(reader, *args)

    # --- TaskReads ----------------------------------------------------------------------------

    def summary(self) -> TaskSummary:
        """The count of registered tasks per state: one ``GROUP BY`` over an index."""
        return self._read(reads.summary)

    def families(self) -> tuple[str, ...]:
        """Every family of a registered task, sorted."""
        return self._read(reads.families)

    def page(self, filters: TaskFilters, cursor: int | None, limit: int) -> TaskPage:
        """A keyset page over the change number's index (see ``TaskReads.page``)."""
        return self._read(reads.page, filters, cursor, limit)

    def detail(self, task_id: str) -> TaskDetail | None:
        """The task's detail, or None."""
        return self._read(reads.detail, task_id)

    def graph(self, task_id: str, downstream: bool, cap: int = GRAPH_CAP) -> TaskGraph | None:
        """The graph around the task, walked on the ``edges`` table, reading no further than
        the cap; None for an unknown task."""
        return self._read(reads.graph, task_id, downstream, cap)

    def task_ids(self, filters: TaskFilters) -> tuple[str, ...]:
        """Every id ``filters`` match, in one statement (``CanListIds``)."""
        return self._read(reads.task_ids, filters)

    def changes_since(self, seq: int, limit: int = PAGE_MAX) -> Changes:
        """The latest change number (one row read) and the tasks saved after ``seq``."""
        return self._read(reads.changes_since, seq, limit)

    def workers(self) -> tuple[StoredWorker, ...]:
        """Every stored worker."""
        return self._read(reads.workers)

    def task_infos(self) -> tuple[TaskInfo, ...]:
        """Every registered task as ``GET /api/v1/tasks`` lists it, in one statement."""
        return self._read(reads.task_infos)

    def close(self) -> None:
        """Stop the checkpoints, close the connections (the last one checkpoints what is
        left and removes the write-ahead log) and release the lock (removing the lock
        file)."""
        if self._checkpointer is not None:
            self._checkpointer.close()
        with self._lock:
            for reader in self._reader_list:
                reader.close()
            self._reader_list.clear()
            self._db.close()
            self._state_lock.release()


_NO_EDGES: list[str] = []
_UNORDERED = "field 'deps': the positions of its edges (table 'edges') are not integers"
_LOAD_CHUNK = 10_000
"""Task rows fetched from SQLite at a time by a load."""
_WAL_SIZE_LIMIT = 64 * 2**20
"""Bytes the write-ahead log is cut back to after a checkpoint (SQLite's journal_size_limit)."""
_WAL_BACKSTOP_PAGES = 10_000
"""Pages of write-ahead log past which a commit checkpoints it itself (SQLite's
wal_autocheckpoint; its default, 1,000, is left to the :class:`_Checkpointer`)."""
_CHECKPOINT_AFTER = 0.05
"""Seconds the :class:`_Checkpointer` lets commits gather after the first before it runs."""
_CHECKPOINT_IDLE = 30.0
"""Seconds without a commit after which the :class:`_Checkpointer`'s thread ends."""


_CHECKPOINT_FAILED = "cannot checkpoint the state file's write-ahead log in the background"


class _Checkpointer:
    """Checkpoints the write-ahead log of the database at ``path`` in a thread of its own,
    on a connection of its own, some :data:`_CHECKPOINT_AFTER` seconds after a commit.

    SQLite's automatic checkpoint runs inside the commit that fills the log to 1,000 pages,
    which then waits for the copy into the database and its fsync (some 4 ms here, on one
    commit in 80 of the server's task phase): on the event loop's thread, that held up every
    request behind it. A passive checkpoint on another connection copies what the commits
    wrote without taking their lock, and SQLite lets the writer go on meanwhile; what a
    commit makes durable, and when, is the same (the commit itself).

    The thread starts with the first commit and ends after :data:`_CHECKPOINT_IDLE` seconds
    without one (the next starts another), so a store left open and unused, or dropped
    without :meth:`close`, keeps no thread nor connection for long."""

    def __init__(self, path: str, synchronous: int) -> None:
        """For the database at ``path``; ``synchronous`` is the writer's (the checkpoints'
        fsyncs)."""
        self._path = path
        self._uri = _file_uri(path, "rw")  # (never made: the writer made it)
        self._synchronous = synchronous
        self._due = threading.Event()  # a commit since the last checkpoint
        self._stop = threading.Event()
        self._starting = threading.Lock()  # (guards _thread: started, or ending)
        self._thread: threading.Thread | None = None
        self._unstarted = False  # (the last start failed)

    def wrote(self) -> None:
        """A commit went to the log: a checkpoint is due (its thread started if need be).
        Never raises: the commit is stored whatever happens here."""
        with self._starting:  # (with _run's idle end: a commit's call is never lost)
            self._due.set()
            if self._thread is not None or self._stop.is_set():
                return
            thread = threading.Thread(  # (named for its file: py-spy, tests)
                target=self._run, name=f"conveyor-checkpoint {self._path}", daemon=True
            )
            try:
                thread.start()
            except RuntimeError as exc:  # (no thread to be had: the commits' own checkpoint
                # meanwhile; the next commit tries again, logged once until one starts)
                if not self._unstarted:
                    log.warning(_CHECKPOINT_FAILED, state=self._path, error=str(exc))
                self._unstarted = True
                return
            self._unstarted = False
            self._thread = thread

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self._uri, uri=True, isolation_level=None, check_same_thread=False)
            db.execute(f"PRAGMA synchronous={self._synchronous}")
        except sqlite3.Error as exc:  # (the commits checkpoint the log: the backstop)
            log.warning(_CHECKPOINT_FAILED, state=self._path, error=str(exc))
            return  # (_thread stays set: not tried again at every commit)
        failing = False  # (logged once until a checkpoint succeeds again)
        try:
            while True:
                if not self._due.wait(_CHECKPOINT_IDLE):
                    with self._starting:
                        if not self._due.is_set():  # (else a commit came just now: go on)
                            db.close()  # (before close() can find no thread to wait for)
                            self._thread = None  # (the next commit starts another)
                            return
                    continue
                if self._stop.wait(_CHECKPOINT_AFTER):
                    return
                self._due.clear()
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # (a full disk, a file size limit: tried again
                    # after the next commit; the commits' own checkpoint meanwhile)
                    if not failing:
                        log.warning(_CHECKPOINT_FAILED, state=self._path, error=str(exc))
                    failing = True
                else:
                    failing = False
        finally:
            db.close()

    def close(self) -> None:
        """Stop the thread, after the checkpoint it may be running (none starts again)."""
        with self._starting:
            self._stop.set()
            thread = self._thread
        self._due.set()
        if thread is not None:
            thread.join()


_VACUUM_AT = 256
"""Free pages (4 KiB each) before :meth:`SqliteStore.compact` gives any back."""
_VACUUM_PAGES = 512
"""Pages one :meth:`SqliteStore.compact` gives back at most (2 MiB, typically a few ms)."""


def _file_uri(path: str, mode: str) -> str:
    """An SQLite URI opening the file at ``path`` (absolute, as it is now) in ``mode``."""
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?mode={mode}"


def _identity(path: str) -> tuple[int, int]:
    """The file at ``path`` as the file system knows it: (device, inode)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _unique(deps: Sequence[str]) -> list[str]:
    """``deps`` without repeats, in order (a task's edges are stored once each)."""
    return list(dict.fromkeys(deps))


def _digest(data: str) -> bytes:
    return hashlib.blake2b(data.encode(), digest_size=16).digest()


def _latest(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT seq FROM changes").fetchone()[0])


# (an update in place when the task is there: its rowid and its task_id index entry stay, where
# INSERT OR REPLACE deleted the row and inserted it anew, every index entry with it)
_UPSERT_TASK = (
    "INSERT INTO tasks (task_id, data, status, family, worker, search, changed, seq)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET data = excluded.data,"
    " status = excluded.status, family = excluded.family, worker = excluded.worker,"
    " search = excluded.search, changed = excluded.changed, seq = excluded.seq"
)


# (the stakeholders and runners of a stored row set; parameters: each list as JSON text, the
# task id. Only a row that is a JSON object: CASE does not evaluate json_type(), which fails
# on text that is not JSON, unless json_valid() holds)
_SET_INTEREST = (
    "UPDATE tasks SET data = json_set(data, '$.stakeholders', json(?), '$.runners', json(?))"
    " WHERE task_id = ? AND CASE WHEN json_valid(data) THEN json_type(data) = 'object' ELSE 0 END"
)
# (the same for the tasks given the same two lists, their ids a JSON array: a registration or
# a release gives most of its tasks the same lists, and one statement for all of them costs a
# quarter less a row than one a row, measured in docs/performance.md)
_SET_SHARED_INTEREST = _SET_INTEREST.replace(
    "task_id = ?", "task_id IN (SELECT value FROM json_each(?))"
)
_encode_ids = compact_encoder(ensure_ascii=False)
_SHARED_MAX = 1000  # task ids a statement: their JSON stays a few MiB at most


def _interest_params(
    stakeholders: Sequence[tuple[str, Sequence[str], Sequence[str]]],
) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """The parameters of :data:`_SET_INTEREST` (a task each) and of
    :data:`_SET_SHARED_INTEREST` (up to :data:`_SHARED_MAX` tasks given the same two lists
    each, their ids as a JSON array) that set each ``(task_id, stakeholders, runners)`` of
    ``stakeholders``. A task id holding a NUL goes alone: SQLite's JSON functions end a
    string at its ``\\u0000``, so the array would name another task, or none."""
    in_order: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for task_id, held, ran in stakeholders:
        in_order.setdefault((tuple(held), tuple(ran)), []).append(task_id)
    alike: dict[tuple[str, str], list[str]] = {}  # (the same lists in another order: sorted)
    for (held, ran), ids in in_order.items():
        alike.setdefault((workers_json(held), workers_json(ran)), []).extend(ids)
    one: list[tuple[str, str, str]] = []
    many: list[tuple[str, str, str]] = []
    for (held_json, ran_json), ids in alike.items():
        together = [t for t in ids if "\x00" not in t]
        alone = [t for t in ids if "\x00" in t] if len(together) < len(ids) else []
        for start in range(0, len(together), _SHARED_MAX):
            chunk = together[start : start + _SHARED_MAX]
            if len(chunk) > 1:
                many.append((held_json, ran_json, _encode_ids(chunk)))
            else:
                alone += chunk
        one.extend((held_json, ran_json, t) for t in alone)
    return one, many


def _ui_columns(row: Mapping[str, Any]) -> tuple[str | None, str, str | None, str]:
    """What the UI filters by: status (None for a task nobody registered), family, the worker
    running it or else the last to run it (``stores.list_worker``), and the text its filter
    searches (``stores.search_text``)."""
    status = str(row["status"]) if row["registered"] else None
    return status, row["family"], list_worker(row), search_text(row)


def _fill_ui_columns(db: sqlite3.Connection) -> None:
    """Migration 2's data: the new columns and the edges of every row there is. A row that is
    not a task record is left alone here; ``load()`` reports it."""
    found = db.execute("SELECT rowid, task_id, data FROM tasks ORDER BY rowid").fetchall()
    now = time.time()
    for rowid, task_id, data in found:
        try:
            row, _ = _task_row(task_id, data)
        except RowError:
            continue
        columns = _ui_columns(row)
        db.execute(
            "UPDATE tasks SET status = ?, family = ?, worker = ?, search = ?, changed = ?,"
            " seq = ? WHERE rowid = ?",
            (*columns, now, rowid, rowid),
        )
        pairs = [(task_id, dep) for dep in dict.fromkeys(row["deps"])]
        db.executemany("INSERT OR IGNORE INTO edges VALUES (?, ?)", pairs)
    db.execute("UPDATE changes SET seq = (SELECT coalesce(max(seq), 0) FROM tasks)")


def _move_deps_out(db: sqlite3.Connection) -> None:
    """Migration 3's data: each row's dependencies into the edges table with their
    positions, and its JSON rewritten compact, without them (a chunk of rows at a time). A
    row that is not a task record is left alone here; ``load()`` reports it."""
    last = 0
    while found := db.execute(
        "SELECT rowid, task_id, data FROM tasks WHERE rowid > ? ORDER BY rowid LIMIT ?",
        (last, _LOAD_CHUNK),
    ).fetchall():
        last = found[-1][0]
        for rowid, task_id, data in found:
            try:
                row, _ = _task_row(task_id, data)
            except RowError:
                continue
            db.execute("DELETE FROM edges WHERE task_id = ?", (task_id,))
            db.executemany(
                "INSERT OR IGNORE INTO edges (task_id, dep_id, pos) VALUES (?, ?, ?)",
                [(task_id, dep, pos) for pos, dep in enumerate(_unique(row["deps"]))],
            )
            compact = stored_json(row, without="deps")
            db.execute("UPDATE tasks SET data = ? WHERE rowid = ?", (compact, rowid))


_BACKFILLS: dict[int, Callable[[sqlite3.Connection], None]] = {
    2: _fill_ui_columns,
    3: _move_deps_out,
}
"""Migrations whose data Python computes, run after their statements."""


class MemoryStore(SqliteStore):
    """Keeps state in memory only (an SQLite database in memory): a restart starts empty.
    For tests and throwaway servers; it takes no settings."""

    settings_schema: ClassVar[dict[str, Field]] = {}
    _synchronous = "off"  # nothing here is meant to survive

    def __init__(self, context: StoreContext | None = None) -> None:
        """Nothing is read from ``context``: the state lives in this object, in a database
        file of a temporary directory (in ``/dev/shm``, which is memory, where there is one)
        that goes when the store is closed or collected. A file, not SQLite's ``:memory:``, so
        that reads have their own connections as with ``sqlite``."""
        shm = "/dev/shm"
        where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()
        _sweep(where)
        directory = tempfile.mkdtemp(prefix=f"{_MEMORY_PREFIX}{os.getpid()}-", dir=where)
        self._remove = weakref.finalize(self, shutil.rmtree, directory, ignore_errors=True)
        super().__init__(StoreContext(os.path.join(directory, "state.db")))

    def close(self) -> None:
        """Close the connections and remove the database."""
        super().close()
        self._remove()


_MEMORY_PREFIX = "conveyor-memory-"


def _sweep(where: str) -> None:
    """Remove the memory stores of processes that are gone (killed before they could)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(where):
            pid = name[len(_MEMORY_PREFIX) :].partition("-")[0]
            if name.startswith(_MEMORY_PREFIX) and pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(os.path.join(where, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _apply(db: sqlite3.Connection, version: int) -> None:
    for statement in _MIGRATIONS[version]:
        db.execute(statement)
    backfill = _BACKFILLS.get(version)
    if backfill is not None:
        backfill(db)
    db.execute(f"PRAGMA user_version={version}")


# --- reading rows back ----------------------------------------------------------------------------


def _task_row(
    task_id: object,
    data: object,
    strings: dict[Any, Any] | None = None,
    deps: list[str] | None = None,
    *,
    whole: bool = True,
    edges: bool = False,
) -> tuple[dict[str, Any], TaskRecord]:
    """The row saved as ``data`` under ``task_id`` with ``deps`` (from the edges table, in
    order; None: none there) as its dependencies (the whole row, see
    :func:`~conveyor.scheduler.persist.full_row`; with ``whole`` false, the row as stored),
    and its record; RowError if ``data`` is not text, or as
    :func:`~conveyor.scheduler.persist.read_row` (``edges``: a file of schema 3 or later)."""
    if not isinstance(data, str):
        raise RowError(f"data is {_sql_kind(data)}; expected JSON text", "data")
    row, record = read_row(task_id, data, deps, edged=edges, strings=strings)
    if whole:
        row = full_row(row) if deps is None else full_row(row, deps=deps)
    return row, record


def _not_decoded(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` is sqlite3's "could not decode" of text that is not UTF-8 (which has
    no SQLite error code: SQLite handed the bytes over; Python could not make them text)."""
    return str(exc).startswith("Could not decode to UTF-8")


def _but(rowids: set[int]) -> str:
    """A WHERE clause leaving out the rows ``rowids`` ("" for none); they are integers."""
    return (
        f" WHERE rowid NOT IN ({','.join(str(int(r)) for r in sorted(rowids))})" if rowids else ""
    )


def _not_utf8(column: str, sql_type: bytes, value: object) -> str:
    """What is wrong with ``column``'s ``value`` read as bytes: "" unless it is TEXT
    (``sql_type``, as ``typeof()`` gives it) that is not UTF-8."""
    if sql_type != b"text" or not isinstance(value, bytes):
        return ""
    try:
        value.decode()
    except UnicodeDecodeError as exc:
        return f"{column} is not UTF-8 text ({exc.reason} at byte {exc.start})"
    return ""


def _worker_problem(worker_id: object, assistant: object) -> str:
    # (an empty id is refused at the edge now, but an older server stored it: it loads, and
    # goes like any silent worker)
    if not isinstance(worker_id, str):
        return f"worker_id is {_sql_kind(worker_id)}; expected a string"
    if type(assistant) is not int or assistant not in (0, 1):
        return f"assistant is {assistant!r}; expected 0 or 1"
    return ""


def _sql_kind(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "a BLOB"
    kinds = {int: "an INTEGER", float: "a REAL"}
    return f"{kinds.get(type(value), 'TEXT')} {value!r}"


# --- is this database ours? -----------------------------------------------------------------------


def _tables_of(db: sqlite3.Connection) -> dict[str, Columns]:
    """Every table and view of ``db`` (SQLite's own excepted) with its columns."""
    names = db.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
        " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    ).fetchall()
    return {
        name: tuple(
            (column, kind.upper(), notnull, pk)
            for _, column, kind, notnull, _, pk in db.execute(
                "SELECT * FROM pragma_table_info(?)", (name,)
            )
        )
        for (name,) in names
    }


@functools.cache
def _tables_after(statements: tuple[str, ...]) -> dict[str, Columns]:
    """The tables an empty database has after ``statements``: the expected schema, built from
    the statements that create it rather than written down a second time."""
    db = sqlite3.connect(":memory:")
    try:
        for statement in statements:
            db.execute(statement)
        return _tables_of(db)
    finally:
        db.close()


def _schema_problem(found: Mapping[str, Columns], version: int) -> str:
    """What makes ``found`` differ from conveyor's schema at ``version`` ("" if nothing)."""
    if version == 0 and found:  # not created by conveyor: say how it differs from our schema
        return _difference(found, _schema_at(SCHEMA_VERSION)) or (
            "its tables have no conveyor schema version (PRAGMA user_version is 0)"
        )
    return _difference(found, _schema_at(version))


def _schema_at(version: int) -> dict[str, Columns]:
    return _tables_after(tuple(s for v in range(1, version + 1) for s in _MIGRATIONS[v]))


def _difference(found: Mapping[str, Columns], expected: Mapping[str, Columns]) -> str:
    tables = dict(found)
    if tables.get("quarantine") == _tables_after((_QUARANTINE,))["quarantine"]:
        del tables["quarantine"]
    for name, columns in expected.items():
        if name in tables and tables[name] != columns:
            return (
                f"its table {name!r} has the columns {_columns(tables[name])}; "
                f"expected {_columns(columns)}"
            )
    extra = sorted(set(tables) - set(expected))
    if extra:
        return f"it has {_names('table', extra)}, which conveyor does not use"
    missing = sorted(set(expected) - set(tables))
    if missing:
        return f"it lacks {_names('table', missing)}"
    return ""


def _names(what: str, names: Sequence[str]) -> str:
    listed = ", ".join(repr(n) for n in names)
    return f"{what} {listed}" if len(names) == 1 else f"{what}s {listed}"


def _columns(columns: Columns) -> str:
    def column(name: str, kind: str, notnull: int, pk: int) -> str:
        words = [name, kind, "NOT NULL" if notnull else "", "PRIMARY KEY" if pk else ""]
        return " ".join(w for w in words if w)

    return "(" + ", ".join(column(*c) for c in columns) + ")"
