"""State stores for the central scheduler: ``memory`` and ``sqlite`` (entry points in
``conveyor.state_stores``).

A store saves rows (see :mod:`conveyor.scheduler.persist`) and loads them at start-up. ``save``
returns only once the rows are committed, so the server acknowledges nothing it could lose to
``kill -9``. The SQLite store uses WAL, one connection (one writer, serialised by the server)
and a versioned schema migrated on open; rows are JSON text, never pickle.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from ..errors import ConfigError
from ..settings import Field

__all__ = ["MemoryStore", "SqliteStore", "StateStore"]

Rows = list[dict[str, Any]]
Workers = list[tuple[str, bool]]


@dataclass(frozen=True, slots=True)
class StoreContext:
    """What a state store is built with (``cls(context)``): ``[server] state_path`` and the
    store's own ``[state_stores.<name>]`` table, validated against its ``settings_schema``."""

    state_path: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)


class StateStore(Protocol):
    """What the server needs from a store; built once as ``cls(StoreContext)``.
    ``conveyor.testing.stores.check_state_store`` is its conformance check."""

    settings_schema: ClassVar[dict[str, Field]]

    def load(self) -> tuple[Rows, Workers]:
        """Every saved task row and ``(worker_id, assistant)`` pair."""

    def save(self, rows: Iterable[dict[str, Any]], workers: Iterable[tuple[str, bool]]) -> None:
        """Upsert rows and workers; return once they are durable."""

    def close(self) -> None:
        """Release the store."""


class MemoryStore:
    """Keeps state in memory only: a restart starts empty (for tests and throwaway servers)."""

    settings_schema: ClassVar[dict[str, Field]] = {}

    def __init__(self, context: StoreContext | None = None) -> None:
        """Nothing is read from ``context``: the state lives in this object."""
        self._rows: dict[str, dict[str, Any]] = {}
        self._workers: dict[str, bool] = {}

    def load(self) -> tuple[Rows, Workers]:
        """What was saved in this process."""
        return list(self._rows.values()), list(self._workers.items())

    def save(self, rows: Iterable[dict[str, Any]], workers: Iterable[tuple[str, bool]]) -> None:
        """Keep copies of the rows."""
        for row in rows:
            self._rows[row["task_id"]] = json.loads(json.dumps(row))
        self._workers.update(workers)

    def close(self) -> None:
        """Nothing to release."""


# version -> statements that bring a database from the previous version to it
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE tasks (task_id TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE workers (worker_id TEXT PRIMARY KEY, assistant INTEGER NOT NULL)",
    ),
}
SCHEMA_VERSION = max(_MIGRATIONS)


class SqliteStore:
    """State in one SQLite file (WAL), migrated to the current schema when opened."""

    settings_schema: ClassVar[dict[str, Field]] = {
        "synchronous": Field(
            "str",
            "normal",
            choices=("normal", "full"),
            doc="SQLite synchronous mode: normal survives kill -9, full power loss",
        ),
    }

    def __init__(self, context: StoreContext) -> None:
        """Open (creating and migrating if needed) the database at ``context.state_path``."""
        state_path = context.state_path
        synchronous = str(context.settings.get("synchronous", "normal")).upper()
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(state_path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._migrate(state_path)
        except sqlite3.Error as exc:
            raise ConfigError(
                f"cannot use {state_path!r} as the scheduler's state database: {exc}; "
                "expected an SQLite file (or a path where one can be created)"
            ) from None

    def _migrate(self, state_path: str) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"state database {state_path!r} has schema version {version}, newer than this "
                f"conveyor understands ({SCHEMA_VERSION}); upgrade conveyor"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            self._transaction(functools.partial(_apply, version=target))

    def _transaction(self, work: Callable[[sqlite3.Connection], None]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                work(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def load(self) -> tuple[Rows, Workers]:
        """Every saved row and worker."""
        with self._lock:
            rows = [json.loads(d) for (d,) in self._db.execute("SELECT data FROM tasks")]
            workers = [
                (w, bool(a))
                for w, a in self._db.execute("SELECT worker_id, assistant FROM workers")
            ]
        return rows, workers

    def save(self, rows: Iterable[dict[str, Any]], workers: Iterable[tuple[str, bool]]) -> None:
        """Upsert in one committed transaction."""
        task_data = [(r["task_id"], json.dumps(r, separators=(",", ":"))) for r in rows]
        worker_data = [(w, int(a)) for w, a in workers]
        if not task_data and not worker_data:
            return

        def write(db: sqlite3.Connection) -> None:
            db.executemany("INSERT OR REPLACE INTO tasks VALUES (?, ?)", task_data)
            db.executemany("INSERT OR REPLACE INTO workers VALUES (?, ?)", worker_data)

        self._transaction(write)

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


def _apply(db: sqlite3.Connection, version: int) -> None:
    for statement in _MIGRATIONS[version]:
        db.execute(statement)
    db.execute(f"PRAGMA user_version={version}")
