"""The ``postgres`` state store: :class:`PostgresStore`.

State lives in one schema of a PostgreSQL database (``[state_stores.postgres] schema``, created
if missing), migrated to :data:`SCHEMA_VERSION` under a transaction-scoped advisory lock so that
servers starting together do not race, and never while another server's lease is live (it may be
a server of the older release, which cannot use the migrated tables). Rows are JSON text (never
pickle) with the columns the web UI filters and sorts by written next to them, the dependency
edges in a table of their own, and a change counter; the reads are in :mod:`.reads`.

Several servers may share the store (:class:`~conveyor.server.stores.CanLead`): the ``lease``
table holds one row, the current term, its holder and when it runs out by the database's clock.
Once a store has asked for the lease, saves are refused until the server arms the term it leads
under (``fence(term)``, after loading the state); then each save and probe takes that row
``FOR SHARE`` in its own transaction and fails with :class:`~conveyor.server.stores.Deposed`
(writing nothing) unless the term is still that one: a save commits before a take-over (which
then loads it) or is refused.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import ipaddress
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import psycopg
import psycopg.conninfo
from conveyor.errors import ConfigError, StateStoreError
from conveyor.protocol import (
    Changes,
    StoredWorker,
    TaskDetail,
    TaskFilters,
    TaskGraph,
    TaskInfo,
    TaskPage,
    TaskSummary,
)
from conveyor.secrets import REDACTED, redact_text
from conveyor.server.stores import (
    GRAPH_CAP,
    PAGE_MAX,
    BadRow,
    CorruptState,
    Deposed,
    Lease,
    RowError,
    StoreContext,
    TaskRecord,
    full_row,
    list_worker,
    read_row,
    search_text,
    stored_json,
    workers_json,
)
from conveyor.settings import Field
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from . import reads

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

T = TypeVar("T")

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_SECTION = "[state_stores.postgres]"
_DEPOSED = "CV001"  # the SQLSTATE the fence raises
_LOCK_TIMEOUT = "55P03"  # lock_not_available: a lock wait ran past lock_timeout
_MIGRATION_CHUNK = 2000
"""How many rows migration 3 reads, rewrites and writes back at a time (all in the migration's
one transaction): its memory is bounded by a chunk, not by the table."""

# One save, as one statement: fenced (unless expected is NULL: a store that never led), then the
# tasks upserted with consecutive change numbers, their edges, the workers and what is gone.
# A function, so that a save is one statement with its arguments sent as such (no text to build
# and parse each time, plans kept for the session) and holds no lock across a round trip.
_SAVE_FUNCTION = (
    "CREATE FUNCTION {s}.save(expected bigint, now double precision, ids text[],"
    " datas text[], statuses text[], states text[], families text[], workers text[],"
    " searches text[], runners integer[], every text[], removed_tasks text[],"
    " removed_deps text[], added_tasks text[], added_deps text[], worker_ids text[],"
    " assistants boolean[], gone text[], gone_workers text[]) RETURNS void"
    " LANGUAGE plpgsql AS $$"
    " DECLARE base bigint;"
    " BEGIN"
    "  IF expected IS NOT NULL THEN PERFORM {s}.fence(expected); END IF;"
    "  IF cardinality(ids) > 0 THEN"
    "   UPDATE {s}.changes SET seq = seq + cardinality(ids) WHERE id = 1"
    "    RETURNING seq - cardinality(ids) INTO base;"
    "   INSERT INTO {s}.tasks AS t"
    "    (task_id, data, status, state, family, worker, search, runners, changed, seq)"
    "    SELECT r.task_id, r.data, r.status, r.state, r.family, r.worker, r.search, r.runners,"
    "     now, base + r.n"
    "    FROM unnest(ids, datas, statuses, states, families, workers, searches, runners)"
    "     WITH ORDINALITY AS r(task_id, data, status, state, family, worker, search, runners, n)"
    "    ON CONFLICT (task_id) DO UPDATE SET data = excluded.data, status = excluded.status,"
    "     state = excluded.state, family = excluded.family, worker = excluded.worker,"
    "     search = excluded.search, runners = excluded.runners, changed = excluded.changed,"
    "     seq = excluded.seq;"
    "  END IF;"
    "  IF cardinality(every) > 0 THEN"
    "   DELETE FROM {s}.edges WHERE task_id = ANY(every);"
    "  END IF;"
    "  IF cardinality(removed_tasks) > 0 THEN"
    "   DELETE FROM {s}.edges e USING unnest(removed_tasks, removed_deps) AS r(task_id, dep_id)"
    "    WHERE e.task_id = r.task_id AND e.dep_id = r.dep_id;"
    "  END IF;"
    "  IF cardinality(added_tasks) > 0 THEN"
    "   INSERT INTO {s}.edges (task_id, dep_id) SELECT * FROM unnest(added_tasks, added_deps)"
    "    ON CONFLICT DO NOTHING;"
    "  END IF;"
    "  IF cardinality(worker_ids) > 0 THEN"
    "   INSERT INTO {s}.workers (worker_id, assistant)"
    "    SELECT * FROM unnest(worker_ids, assistants)"
    "    ON CONFLICT (worker_id) DO UPDATE SET assistant = excluded.assistant;"
    "  END IF;"
    "  IF cardinality(gone) > 0 THEN"
    "   DELETE FROM {s}.tasks WHERE task_id = ANY(gone);"
    "   DELETE FROM {s}.edges WHERE task_id = ANY(gone);"
    "   UPDATE {s}.changes SET seq = seq + 1 WHERE id = 1;"
    "  END IF;"
    "  IF cardinality(gone_workers) > 0 THEN"
    "   DELETE FROM {s}.workers WHERE worker_id = ANY(gone_workers);"
    "  END IF;"
    " END $$"
)


def _e(text: str) -> str:
    """``text`` as a PostgreSQL escape string literal (``E'...'``): read the same whatever a
    database's ``standard_conforming_strings``, which decides what a backslash means in '...'."""
    return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


_JSON_SPACE = " \n\r\t"  # (what JSON takes for white space)
# An array of JSON strings, to its closing bracket (a regular expression)
_STRINGS = r'\[(?:"(?:[^"\\]|\\.)*"(?:,"(?:[^"\\]|\\.)*")*)?\]'

# put_list(doc, key, list): the JSON object text doc with the array of strings under its key
# replaced by list, every other byte as it was; or, if its last '"<key>":[' is not followed by
# such an array, with the key added at its end (a reader takes the last of a key given twice,
# and the next call finds that one). For a row that jsonb cannot read: jsonb refuses the escape
# of a NUL (\u0000), which a parameter or a message may hold (and, in a database not in UTF-8,
# which the store now refuses at start, that of any character the encoding lacks). In the text
# conveyor writes, '"<key>":[' followed by strings can only be that field of the record: inside
# a string the quotes are escaped, and no nested object holds an array under these names.
# (Found by strpos on the reversed text, then matched from there: a row costs some 3.5 times
# what jsonb takes.)
_PUT_LIST = (
    "CREATE FUNCTION {s}.put_list(doc text, key text, list text) RETURNS text"
    " LANGUAGE sql IMMUTABLE AS $$"
    " SELECT CASE WHEN m IS NOT NULL"
    "  THEN overlay(doc placing n || list from p for length(m))"
    f"  ELSE head || CASE WHEN right(rtrim(head, {_e(_JSON_SPACE)}), 1) = '{{{{' THEN '' ELSE ','"
    "   END || n || list || '}}' END"
    " FROM (SELECT n, p, head, CASE WHEN p > 0 THEN substring(substr(doc, p) from"
    f"   '^' || n || {_e(_STRINGS)}) END AS m"
    "  FROM (SELECT n, CASE WHEN r > 0 THEN length(doc) - r - length(n) + 1 ELSE 0 END AS p,"
    f"   left(rtrim(doc, {_e(_JSON_SPACE)}), -1) AS head"
    "   FROM (SELECT n, strpos(reverse(doc), reverse(n || '[')) AS r"
    "    FROM (SELECT '\"' || key || '\":' AS n) AS k) AS a) AS b) AS found"
    " $$"
)

# Sets the stakeholders and runners (JSON arrays of worker ids) of the rows named by {source}:
# interest_ids and its lists, unnested, or the one-th of each; the runners column is their
# count. A row is changed only if its text is a JSON object (json, which takes any escape,
# checks it). Where {plain} holds, jsonb writes the row back in its own form (key order,
# spacing, numbers as numeric prints them), which reads the same, at some 4 µs a row; other
# rows go through put_list. Only the rows named are read as JSON (in materialized steps of the
# rows joined: a condition in the UPDATE's own WHERE could be tried on others first).
_SET_INTEREST = (
    "WITH hit AS MATERIALIZED (SELECT t.task_id, t.data, i.sh, i.rn FROM {source}"
    " AS i(task_id, sh, rn) JOIN {{s}}.tasks AS t ON t.task_id = i.task_id FOR UPDATE OF t),"
    " made AS MATERIALIZED (SELECT task_id, rn, CASE WHEN {plain}"
    " THEN (data::jsonb || jsonb_build_object('stakeholders', sh::jsonb, 'runners',"
    " rn::jsonb))::text"
    " ELSE {{s}}.put_list({{s}}.put_list(data, 'stakeholders', sh), 'runners', rn) END AS doc"
    " FROM hit WHERE json_typeof(data::json) = 'object')"
    " UPDATE {{s}}.tasks AS t SET data = made.doc, runners = json_array_length(made.rn::json)"
    " FROM made WHERE t.task_id = made.task_id"
)
# (jsonb for a row without a NUL's escape in a UTF-8 database: the encoding's test, from before
# other encodings were refused, stays as schema 4's function has it)
_JSONB_READS = f"getdatabaseencoding() = 'UTF8' AND strpos(data, {_e(chr(92) + 'u0000')}) = 0"
_ALL_NAMED = "unnest(interest_ids, interest_stakeholders, interest_runners)"
_ONE_NAMED = "(SELECT interest_ids[one], interest_stakeholders[one], interest_runners[one])"


def _edited(text: str, *changes: tuple[str, str]) -> str:
    """``text`` with each ``(old, new)`` of ``changes`` made, each ``old`` found exactly once."""
    for old, new in changes:
        if text.count(old) != 1:
            raise AssertionError(f"expected {old!r} once in the text edited")
        text = text.replace(old, new)
    return text


# Schema 3's save: the same, but edges come with their positions, and a task's edges are either
# all replaced (every) or added to (no single edge is deleted any more).
_SAVE_FUNCTION_3 = (
    "CREATE FUNCTION {s}.save(expected bigint, now double precision, ids text[],"
    " datas text[], statuses text[], states text[], families text[], workers text[],"
    " searches text[], runners integer[], every text[], added_tasks text[],"
    " added_deps text[], added_pos integer[], worker_ids text[], assistants boolean[],"
    " gone text[], gone_workers text[]) RETURNS void"
    " LANGUAGE plpgsql AS $$"
    " DECLARE base bigint;"
    " BEGIN"
    "  IF expected IS NOT NULL THEN PERFORM {s}.fence(expected); END IF;"
    "  IF cardinality(ids) > 0 THEN"
    "   UPDATE {s}.changes SET seq = seq + cardinality(ids) WHERE id = 1"
    "    RETURNING seq - cardinality(ids) INTO base;"
    "   INSERT INTO {s}.tasks AS t"
    "    (task_id, data, status, state, family, worker, search, runners, changed, seq)"
    "    SELECT r.task_id, r.data, r.status, r.state, r.family, r.worker, r.search, r.runners,"
    "     now, base + r.n"
    "    FROM unnest(ids, datas, statuses, states, families, workers, searches, runners)"
    "     WITH ORDINALITY AS r(task_id, data, status, state, family, worker, search, runners, n)"
    "    ON CONFLICT (task_id) DO UPDATE SET data = excluded.data, status = excluded.status,"
    "     state = excluded.state, family = excluded.family, worker = excluded.worker,"
    "     search = excluded.search, runners = excluded.runners, changed = excluded.changed,"
    "     seq = excluded.seq;"
    "  END IF;"
    "  IF cardinality(every) > 0 THEN"
    "   DELETE FROM {s}.edges WHERE task_id = ANY(every);"
    "  END IF;"
    "  IF cardinality(added_tasks) > 0 THEN"
    "   INSERT INTO {s}.edges (task_id, dep_id, pos)"
    "    SELECT * FROM unnest(added_tasks, added_deps, added_pos) ON CONFLICT DO NOTHING;"
    "  END IF;"
    "  IF cardinality(worker_ids) > 0 THEN"
    "   INSERT INTO {s}.workers (worker_id, assistant)"
    "    SELECT * FROM unnest(worker_ids, assistants)"
    "    ON CONFLICT (worker_id) DO UPDATE SET assistant = excluded.assistant;"
    "  END IF;"
    "  IF cardinality(gone) > 0 THEN"
    "   DELETE FROM {s}.tasks WHERE task_id = ANY(gone);"
    "   DELETE FROM {s}.edges WHERE task_id = ANY(gone);"
    "   UPDATE {s}.changes SET seq = seq + 1 WHERE id = 1;"
    "  END IF;"
    "  IF cardinality(gone_workers) > 0 THEN"
    "   DELETE FROM {s}.workers WHERE worker_id = ANY(gone_workers);"
    "  END IF;"
    " END $$"
)

# Schema 4's save: schema 3's, and first the stakeholders and runners of other tasks set in their
# stored rows alone (CanSaveStakeholders), the rest of each row as it is. A row that is not a
# JSON object (edited behind the server's back) is left as it is: the first try sets them all
# at once; only if a row's text is not JSON, or jsonb refuses it, is each set alone (by its
# index in the arrays), in a subtransaction of its own, then once more by put_list alone, and
# if that fails too, skipped.
_SAVE_FUNCTION_4 = _edited(
    _SAVE_FUNCTION_3,
    (
        " gone text[], gone_workers text[]) RETURNS void",
        " gone text[], gone_workers text[], interest_ids text[], interest_stakeholders text[],"
        " interest_runners text[]) RETURNS void",
    ),
    (" DECLARE base bigint;", " DECLARE base bigint; one integer;"),
    (
        "  IF expected IS NOT NULL THEN PERFORM {s}.fence(expected); END IF;",
        "  IF expected IS NOT NULL THEN PERFORM {s}.fence(expected); END IF;"
        "  IF cardinality(interest_ids) > 0 THEN"
        "   BEGIN"
        f"    {_SET_INTEREST.format(source=_ALL_NAMED, plain=_JSONB_READS)};"
        "   EXCEPTION WHEN data_exception OR program_limit_exceeded THEN"
        "    FOR one IN 1 .. cardinality(interest_ids) LOOP"
        "     BEGIN"
        f"      {_SET_INTEREST.format(source=_ONE_NAMED, plain=_JSONB_READS)};"
        "     EXCEPTION WHEN data_exception OR program_limit_exceeded THEN"
        "      BEGIN"
        f"       {_SET_INTEREST.format(source=_ONE_NAMED, plain='false')};"
        "      EXCEPTION WHEN data_exception OR program_limit_exceeded THEN NULL;"
        "      END;"
        "     END;"
        "    END LOOP;"
        "   END;"
        "  END IF;",
    ),
)

# version -> statements that bring a schema from the previous version to it ({s}: the schema)
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        # status: NULL for a task nobody registered (the UI lists registered tasks only);
        # state: the status all the same (graphs show unregistered tasks); runners: how many
        # workers may run it; changed: time of the last save; seq: its change number
        # (ids and families in code point order, as Python sorts, whatever the database's)
        'CREATE TABLE {s}.tasks (task_id text COLLATE "C" PRIMARY KEY, data text NOT NULL,'
        ' status text, state text NOT NULL, family text COLLATE "C" NOT NULL, worker text,'
        " search text NOT NULL, runners integer NOT NULL, changed double precision NOT NULL,"
        " seq bigint NOT NULL)",
        "CREATE INDEX tasks_by_seq ON {s}.tasks (seq)",
        "CREATE INDEX tasks_by_status ON {s}.tasks (status, seq)",
        "CREATE INDEX tasks_by_family ON {s}.tasks (family, seq)",
        "CREATE INDEX tasks_by_worker ON {s}.tasks (worker, seq)",
        'CREATE TABLE {s}.edges (task_id text COLLATE "C" NOT NULL,'
        ' dep_id text COLLATE "C" NOT NULL, PRIMARY KEY (task_id, dep_id))',
        "CREATE INDEX edges_by_dep ON {s}.edges (dep_id, task_id)",
        'CREATE TABLE {s}.workers (worker_id text COLLATE "C" PRIMARY KEY,'
        " assistant boolean NOT NULL)",
        # the number of the latest change: grows with every save, deletions included
        "CREATE TABLE {s}.changes (id integer PRIMARY KEY CHECK (id = 1), seq bigint NOT NULL)",
        "INSERT INTO {s}.changes VALUES (1, 0)",
        # who leads: term 0 was never taken; expires NULL: nobody holds it
        "CREATE TABLE {s}.lease (id integer PRIMARY KEY CHECK (id = 1), term bigint NOT NULL,"
        " holder text NOT NULL, expires timestamptz)",
        "INSERT INTO {s}.lease VALUES (1, 0, '', NULL)",
        # the fence of every write of a leader: the lease row FOR SHARE (a taker's FOR UPDATE
        # waits for the write to commit), and an error unless the term is still the writer's
        "CREATE FUNCTION {s}.fence(expected bigint) RETURNS bigint LANGUAGE plpgsql AS $$"
        " DECLARE current bigint;"
        " BEGIN"
        "  SELECT term INTO current FROM {s}.lease WHERE id = 1 FOR SHARE;"
        "  IF current IS DISTINCT FROM expected THEN"
        f"   RAISE EXCEPTION USING ERRCODE = '{_DEPOSED}', MESSAGE = format("
        "    'another server took the lease (term %s); this one held term %s',"
        "    current, expected);"
        "  END IF;"
        "  RETURN current;"
        " END $$",
    ),
    # 2: a save as one call of a function (see _SAVE_FUNCTION)
    2: (_SAVE_FUNCTION,),
    # 3: a task's dependencies only in the edges table, with their positions (pos: 0, 1, ...
    # in the order of the record's deps), no longer in its row's JSON, which leaves out
    # every field at its default (persist.compact_row): a merge writes the new edges only.
    # The rows are rewritten by _move_deps_out, in Python, after these statements.
    3: (
        "ALTER TABLE {s}.edges ADD COLUMN pos integer NOT NULL DEFAULT 0",
        "DROP FUNCTION {s}.save",
        _SAVE_FUNCTION_3,
    ),
    # 4: the stakeholders and runners of a task set in its row alone (see _SAVE_FUNCTION_4):
    # put_list and a save function with three more arguments, beside schema 3's (the tables
    # are the same), so that a server of schema 3 still running saves as before
    4: (_PUT_LIST, _SAVE_FUNCTION_4),
}
SCHEMA_VERSION = max(_MIGRATIONS)
"""The version of the schema this conveyor-postgres creates and understands."""
_ADDITIVE = frozenset({4})
"""The migrations a running server of the version before can work on (they add functions and
change no table): one made of these alone does not wait for the lease (see :meth:`_end_lease`)."""

_TABLES = {
    "schema_version": ("version",),
    "tasks": (
        "task_id",
        "data",
        "status",
        "state",
        "family",
        "worker",
        "search",
        "runners",
        "changed",
        "seq",
    ),
    "edges": ("task_id", "dep_id", "pos"),
    "workers": ("worker_id", "assistant"),
    "changes": ("id", "seq"),
    "lease": ("id", "term", "holder", "expires"),
}
"""The tables (and their columns, in order) of the schema at :data:`SCHEMA_VERSION`."""
_TABLES_AT = {
    1: {**_TABLES, "edges": ("task_id", "dep_id")},
    2: {**_TABLES, "edges": ("task_id", "dep_id")},
    3: _TABLES,
    SCHEMA_VERSION: _TABLES,
}
"""The tables of each schema version an upgrade starts from."""


def _is_identifier(value: Any) -> bool:
    return isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None


class PostgresStore:
    """State in a PostgreSQL schema; a :class:`~conveyor.server.stores.StateStore`, its
    :class:`~conveyor.server.stores.TaskReads`, ``CanListIds``, ``CanProbe`` and ``CanLead``.

    Two connection pools: one for the writes and the lease (two connections: a save and a
    renewal of the lease may overlap) and one of ``pool_size`` read-only connections for the
    web UI, so that reads never hold up a save. Connections are checked before use, so one
    broken by a restart of PostgreSQL is replaced.
    """

    settings_schema: ClassVar[dict[str, Field]] = {
        "dsn": Field(
            "str",
            "",
            doc="libpq connection string or postgresql:// URL (its password is never shown)",
        ),
        "dsn_file": Field("str", "", doc="a file holding the DSN (instead of dsn)"),
        "schema": Field(
            "str",
            "conveyor",
            check=_is_identifier,
            expect="an SQL identifier (letters, digits and _, not starting with a digit)",
            doc="the schema holding conveyor's tables (created if missing)",
        ),
        "pool_size": Field("int", 4, ge=1, doc="connections for the web UI's reads"),
        "connect_timeout": Field(
            "seconds", 5.0, gt=0, doc="how long to wait for PostgreSQL to answer a connection"
        ),
    }

    @staticmethod
    def check_settings(settings: Mapping[str, Any]) -> None:
        """ConfigError unless exactly one of ``dsn`` and ``dsn_file`` is set."""
        if bool(settings.get("dsn")) == bool(settings.get("dsn_file")):
            raise ConfigError(
                f"{_SECTION} needs exactly one of dsn and dsn_file: expected the PostgreSQL "
                "connection string (dsn) or a file holding it (dsn_file)",
                key="state_stores.postgres.dsn",
            )

    def __init__(self, context: StoreContext) -> None:
        """Connect, create the schema if it is missing and migrate it; ConfigError (one line,
        never the password; nothing left open) if the database cannot be reached or used."""
        settings = dict(context.settings)
        self.check_settings(settings)
        schema = settings.get("schema", "conveyor")
        if not _is_identifier(schema):
            raise ConfigError(
                f"{_SECTION} schema = {schema!r} is invalid; expected "
                f"{self.settings_schema['schema'].expect}"
            )
        self._schema = str(schema)
        self._holder = context.holder  # (who opens it: its lease, if live, is no other server's)
        self._dsn, origin = _read_dsn(settings)
        try:
            info = psycopg.conninfo.conninfo_to_dict(self._dsn)
        except psycopg.Error as exc:
            why = " ".join(_hide_quoted(str(exc)).split())  # (libpq's message ends in \n)
            raise ConfigError(
                f"{_SECTION} {origin} is not a PostgreSQL connection string ({why}); expected "
                "a postgresql:// URL or libpq key=value pairs"
            ) from None
        self._password = str(info.get("password") or "")
        user = str(info.get("user") or _login())
        host = str(info.get("host") or info.get("hostaddr") or "the local socket")
        port = str(info.get("port") or "5432")
        database = str(info.get("dbname") or user)
        self._origin = origin
        self.where = f"{host}:{port}/{database}"
        self._user = user
        self._timeout = float(settings.get("connect_timeout", 5.0))
        pool_size = int(settings.get("pool_size", 4))
        self._queries: dict[str, sql.Composed] = {}
        self._write_lock = threading.Lock()  # saves, probes and loads, one at a time
        self._lease_lock = threading.Lock()
        # what the edges table holds, per task with edges: the deps saved last (a list that
        # only grows at its end, see persist.to_row) and how many of them
        self._deps: dict[str, tuple[Sequence[str], int]] = {}
        self._digests: dict[str, bytes] = {}  # what each stored row's data is, in short
        self._term: int | None = None  # the term of the lease this store holds (None: none)
        self._fence: int | None = None  # the term saves carry (None: unfenced; 0: refused)
        self._writers: ConnectionPool[Any] | None = None
        self._saver: psycopg.Connection[Any] | None = None  # (checked out of _writers)
        self._readers: ConnectionPool[Any] | None = None
        seconds = max(1, round(self._timeout))
        kwargs = {
            "connect_timeout": seconds,
            "application_name": "conveyor-scheduler",
            # (text goes as UTF-8 whatever PGCLIENTENCODING says; the database is UTF-8 too,
            # see _check_encoding, so no character is converted, nor refused)
            "client_encoding": "UTF8",
            # a server gone silent (a host or network down, no reset sent) fails the call in
            # seconds instead of the system's TCP timeouts (minutes), with the store's lock held
            "keepalives": 1,
            "keepalives_idle": seconds,
            "keepalives_interval": 1,
            "keepalives_count": 3,
            "tcp_user_timeout": 1000 * (seconds + 3),
            # no wait for a lock, and no transaction left open by a client gone quiet (paused,
            # say), outlasts these: a stuck peer cannot hold up the others' saves and lease
            "options": " ".join(
                part
                for part in (
                    str(info.get("options") or ""),
                    f"-c lock_timeout={round(self._timeout * 1000)}",
                    f"-c idle_in_transaction_session_timeout={round((self._timeout + 5) * 1000)}",
                )
                if part
            ),
        }
        try:
            with self._connect(kwargs) as conn:
                self._check_encoding(conn)
                self._migrate(conn)
            # (autocommit: a save is one message of statements, one implicit transaction)
            self._writers = self._pool("conveyor-writes", 2, {**kwargs, "autocommit": True}, None)
            self._readers = self._pool("conveyor-reads", pool_size, kwargs, _read_only)
        except BaseException:
            self.close()
            raise

    # --- opening ------------------------------------------------------------------------------

    def _connect(self, kwargs: dict[str, Any]) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self._dsn, **kwargs)
        except psycopg.Error as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: BaseException) -> ConfigError:
        return ConfigError(
            f"cannot use the PostgreSQL state store at {self.where} as user {self._user!r}: "
            f"{self._reason(exc)}; check {_SECTION} {self._origin}"
        )

    def _reason(self, exc: BaseException) -> str:
        """What went wrong, in one line, without the password."""
        text = str(exc) or type(exc).__name__
        text = re.sub(r"\bFATAL:\s*", "", text)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        first = lines[0] if lines else type(exc).__name__
        if "failed:" in first:  # connection to server at "h", port p failed: <why>
            first = first.rsplit("failed:", 1)[1].strip() or first
            if first.lower().startswith("connection refused"):
                first = "connection refused (is PostgreSQL running there?)"
        return self._hide(" ".join(first.split()))

    def _hide(self, text: str) -> str:
        if self._password:
            text = text.replace(self._password, REDACTED)
        return redact_text(text)

    def _pool(
        self,
        name: str,
        size: int,
        kwargs: dict[str, Any],
        configure: Callable[[psycopg.Connection[Any]], None] | None,
    ) -> ConnectionPool[Any]:
        pool: ConnectionPool[Any] = ConnectionPool(
            self._dsn,
            min_size=1,
            max_size=size,
            kwargs=kwargs,
            configure=configure,
            check=ConnectionPool.check_connection,
            open=False,
            name=name,
            timeout=self._timeout,
            reconnect_timeout=0,  # (a failed reconnection is not retried in the background
            # with a growing backoff: the next request connects anew, as soon as PostgreSQL is back)
        )
        try:
            pool.open(wait=True, timeout=self._timeout + 1)
        except PoolTimeout as exc:
            pool.close()
            raise self._unreachable(exc) from None
        return pool

    def q(self, text: str) -> sql.Composed:
        """``text`` with ``{s}`` replaced by the quoted schema name (composed once)."""
        found = self._queries.get(text)
        if found is None:
            found = self._queries[text] = sql.SQL(text).format(s=sql.Identifier(self._schema))
        return found

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Create the schema if missing, check it is ours, bring it to :data:`SCHEMA_VERSION`:
        one transaction under an advisory lock (servers starting together wait for each
        other). A schema of another application, or a newer version, is refused untouched, and
        so is an older one while another server's lease is live (see :meth:`_end_lease`),
        unless every step is one a server of the older version can work on (:data:`_ADDITIVE`)."""
        try:
            with conn.transaction():
                lock = f"conveyor-postgres schema {self._schema}"
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
                found = conn.execute(
                    "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self._schema,)
                ).fetchone()
                if found is None:
                    conn.execute(self.q("CREATE SCHEMA {s}"))
                version = self._check_schema(conn)
                if 0 < version < SCHEMA_VERSION and not _ADDITIVE.issuperset(
                    range(version + 1, SCHEMA_VERSION + 1)
                ):
                    self._end_lease(conn, version)
                if version == 0:
                    conn.execute(
                        self.q("CREATE TABLE {s}.schema_version (version integer NOT NULL)")
                    )
                    conn.execute(self.q("INSERT INTO {s}.schema_version VALUES (0)"))
                for target in range(version + 1, SCHEMA_VERSION + 1):
                    for statement in _MIGRATIONS[target]:
                        conn.execute(self.q(statement))
                    if target == 3:
                        self._move_deps_out(conn)
                    conn.execute(self.q("UPDATE {s}.schema_version SET version = %s"), (target,))
        except ConfigError:
            raise
        except psycopg.Error as exc:
            if exc.sqlstate == _LOCK_TIMEOUT:  # (the advisory lock, or a table's)
                raise ConfigError(
                    f"cannot set up the schema {self._schema!r} of the PostgreSQL state store "
                    f"at {self.where}: another connection held its lock for more than "
                    f"{self._timeout:g} s (connect_timeout); expected it to be free (start "
                    "again, or look for a stuck session in pg_stat_activity)"
                ) from None
            raise ConfigError(
                f"cannot set up the schema {self._schema!r} of the PostgreSQL state store at "
                f"{self.where}: {self._reason(exc)}; expected a database user {self._user!r} "
                "may create tables in"
            ) from None

    def _end_lease(self, conn: psycopg.Connection[Any], version: int) -> None:
        """Before migrating a schema of ``version``: ConfigError (one line; the transaction,
        and with it everything, rolled back) if a server other than this one holds a live
        lease, as it may be a server of the older release, which cannot use the migrated
        tables (a lease in this server's own name is another's all the same when that name
        could be another host's: a loopback or unspecified address). Otherwise end the term
        of whoever held the lease (its term + 1, held by nobody), so that a server of the
        older release paused past its lease cannot renew it (a holder may renew a lease
        nobody took since it ran out) and lead on tables it cannot use. The lease row stays
        locked (``FOR UPDATE``) until the migration commits: no server takes or renews the
        lease between this look and the migration."""
        conn.execute(self.q("SELECT 1 FROM {s}.lease WHERE id = 1 FOR UPDATE"))
        found = conn.execute(
            self.q("SELECT term, holder, expires - clock_timestamp() FROM {s}.lease WHERE id = 1")
        ).fetchone()
        if found is None:
            return  # (no lease row: nobody can have led; load() and lead() report it)
        term, holder, left = found
        seconds = left.total_seconds() if left is not None else 0.0
        if seconds > 0 and not (holder == self._holder and _names_one_host(holder)):
            held_by = repr(self._hide(holder)) if holder else "a server that gave no name"
            raise ConfigError(
                f"refusing to migrate the schema {self._schema!r} of the PostgreSQL state "
                f"store at {self.where} (schema version: stored {version}, this "
                f"conveyor-postgres {SCHEMA_VERSION}) while {held_by} holds its lease (term "
                f"{term}, {seconds:.1f} s left): a scheduler of the older version cannot use "
                "the migrated tables; stop every scheduler of the older version, or wait for "
                f"its lease to expire ({seconds:.1f} s), then start this one again"
            )
        if holder or left is not None:
            conn.execute(
                self.q(
                    "UPDATE {s}.lease SET term = term + 1, holder = '', expires = NULL WHERE id = 1"
                )
            )

    def _move_deps_out(self, conn: psycopg.Connection[Any]) -> None:
        """Migration 3's data: each row's dependencies into the edges table with their
        positions, and its JSON rewritten compact, without them; :data:`_MIGRATION_CHUNK`
        rows at a time, in the order of their ids (keyset pagination on the primary key), in
        the caller's transaction. A row that is not a task record is left alone here;
        ``load()`` reports it."""
        chunk = _MIGRATION_CHUNK
        first = self.q("SELECT task_id, data FROM {s}.tasks ORDER BY task_id LIMIT %s")
        after = self.q(
            "SELECT task_id, data FROM {s}.tasks WHERE task_id > %s ORDER BY task_id LIMIT %s"
        )
        found = conn.execute(first, (chunk,)).fetchall()
        while found:
            self._move_chunk(conn, found)
            if len(found) < chunk:
                break
            found = conn.execute(after, (found[-1][0], chunk)).fetchall()

    def _move_chunk(self, conn: psycopg.Connection[Any], found: list[tuple[Any, ...]]) -> None:
        """:meth:`_move_deps_out` for the rows ``found`` (``(task_id, data)`` pairs)."""
        ids, datas, pairs = [], [], []
        for task_id, data in found:
            try:
                row, _record = _task_row(task_id, data)
            except RowError:
                continue
            ids.append(task_id)
            datas.append(_data(row))
            pairs += [(task_id, d, n) for n, d in enumerate(dict.fromkeys(row["deps"]))]
        if not ids:
            return
        conn.execute(self.q("DELETE FROM {s}.edges WHERE task_id = ANY(%s)"), (ids,))
        conn.execute(
            self.q(
                "INSERT INTO {s}.edges (task_id, dep_id, pos)"
                " SELECT * FROM unnest(%s::text[], %s::text[], %s::integer[])"
            ),
            ([p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs]),
        )
        conn.execute(
            self.q(
                "UPDATE {s}.tasks t SET data = r.data FROM unnest(%s::text[], %s::text[])"
                " AS r(task_id, data) WHERE t.task_id = r.task_id"
            ),
            (ids, datas),
        )

    def _check_encoding(self, conn: psycopg.Connection[Any]) -> None:
        """ConfigError unless the database is in UTF-8 (before anything is created in it). A
        task's id, family and parameters (stored as text for the web UI's search too) may hold
        any character, and PostgreSQL refuses to store one its database's encoding lacks: in
        LATIN1, say, a task with a Chinese character in its id or a parameter could never be
        saved, and the requests carrying it would fail for as long as it is registered.
        Refused at start, not at that task."""
        try:
            row = conn.execute("SELECT getdatabaseencoding()").fetchone()
            conn.rollback()  # (no transaction left open for _migrate's own)
        except psycopg.Error as exc:
            raise self._unreachable(exc) from None
        encoding = str(row[0]) if row else "unknown"
        if encoding != "UTF8":
            raise ConfigError(
                f"cannot use the PostgreSQL state store at {self.where}: its database's "
                f"encoding is {encoding}; expected UTF8 (a task's id, family and parameters "
                "may hold any character): create one (CREATE DATABASE ... ENCODING 'UTF8' "
                "LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0, or with a UTF-8 locale) and "
                f"point {_SECTION} {self._origin} at it"
            )

    def _check_schema(self, conn: psycopg.Connection[Any]) -> int:
        """The schema's version (0: empty), after checking (reading only) that it is ours."""
        rows = conn.execute(
            "SELECT c.relname, a.attname FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0"
            " AND NOT a.attisdropped"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
            " ORDER BY c.relname, a.attnum",
            (self._schema,),
        ).fetchall()
        tables: dict[str, list[str]] = {}
        for table, column in rows:
            tables.setdefault(table, [])
            if column is not None:
                tables[table].append(column)
        what = f"the schema {self._schema!r} of {self.where}"
        refuse = (
            f"{what} is not a conveyor state schema: {{}}; refusing to use or change it; "
            f"set {_SECTION} schema to a conveyor schema or a new name"
        )
        if not tables:
            return 0
        if "schema_version" not in tables:
            extra = ", ".join(repr(t) for t in sorted(tables))
            raise ConfigError(refuse.format(f"it holds tables conveyor does not use ({extra})"))
        found = conn.execute(self.q("SELECT version FROM {s}.schema_version")).fetchall()
        if len(found) != 1 or not isinstance(found[0][0], int):
            raise ConfigError(refuse.format("its table 'schema_version' does not hold one version"))
        version = int(found[0][0])
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"{what} has schema version {version}, newer than this conveyor-postgres "
                f"understands ({SCHEMA_VERSION}); upgrade conveyor-postgres"
            )
        expected = _TABLES_AT.get(version, {"schema_version": ("version",)})
        unknown = sorted(set(tables) - set(expected))
        if unknown:
            listed = ", ".join(repr(t) for t in unknown)
            raise ConfigError(refuse.format(f"it holds tables conveyor does not use ({listed})"))
        for table, columns in expected.items():
            if table not in tables:
                raise ConfigError(refuse.format(f"it lacks the table {table!r}"))
            if tuple(tables[table]) != columns:
                raise ConfigError(
                    refuse.format(
                        f"its table {table!r} has the columns ({', '.join(tables[table])}); "
                        f"expected ({', '.join(columns)})"
                    )
                )
        return version

    # --- writing ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, writing: bool = False) -> Iterator[None]:
        """PostgreSQL's errors as the store's: Deposed (the fence refused a save),
        StateStoreError (one line, no password) for the rest; ``writing``: say whether the
        write is known not to have happened."""
        try:
            yield
        except psycopg.Error as exc:
            if exc.sqlstate == _DEPOSED:
                self._fence = 0
                raise Deposed(f"{self._reason(exc)}; nothing was written") from None
            if isinstance(exc, PoolTimeout):
                raise StateStoreError(
                    f"PostgreSQL at {self.where} cannot be reached ({self._reason(exc)})"
                    + ("; nothing was written" if writing else "")
                ) from None
            reason = self._reason(exc)
            if exc.sqlstate == _LOCK_TIMEOUT:
                reason = (
                    f"waited {self._timeout:g} s (connect_timeout) for a lock another "
                    "connection holds (a stuck or paused server?)"
                )
            tail = ""
            if writing and _refused(exc):
                tail = "; nothing was written"
            elif writing:  # (the connection broke after the write was sent: it may have been)
                tail = "; whether it was written is not known (no answer came)"
            raise StateStoreError(f"PostgreSQL at {self.where}: {reason}{tail}") from None

    def _send(self, conn: psycopg.Connection[Any], statements: list[_Statement]) -> Any:
        """Run ``statements`` as one message (their arguments bound here): PostgreSQL runs
        them as one transaction without waiting for this process in between, so a lock they
        take is never held across a round trip (a server paused meanwhile holds none); the
        cursor, at the first one's result."""
        binder = psycopg.ClientCursor(conn)
        text = ";\n".join(binder.mogrify(query, args) for query, args in statements)
        return conn.execute(text.encode())

    def _armed(self) -> int | None:
        """The term saves carry (None: unfenced); Deposed if none is armed."""
        term = self._fence
        if term == 0:
            raise Deposed("this server does not lead; nothing was written")
        return term

    def _write_save(self, args: list[Any]) -> None:
        """One :data:`_SAVE_FUNCTION` call with ``args`` (after the armed term), committed
        before returning; the errors of :meth:`_write`."""
        term = self._armed()
        call = self.q(_SAVE_CALL)
        with self._errors(writing=True):
            self._on_saver(lambda conn: conn.execute(call, [term, *args], prepare=True))

    def _on_saver(self, send: Callable[[psycopg.Connection[Any]], object]) -> None:
        """``send(conn)`` on the writes' own connection, kept between writes (checking a
        pooled one out costs a round trip each time). One that broke while it was kept
        (PostgreSQL restarted, its backend terminated) is found out by the write: it goes back
        for the pool to check, and the write is sent once more on a checked connection (it is
        fenced, and sending it again changes nothing but change numbers). Called under
        ``_write_lock``."""
        assert self._writers is not None
        while True:
            kept = self._saver is not None
            conn = self._saver if self._saver is not None else self._writers.getconn()
            self._saver = conn
            try:
                send(conn)
                return
            except BaseException as exc:
                self._saver = None
                self._writers.putconn(conn)
                if not kept or not isinstance(exc, psycopg.Error) or _refused(exc):
                    raise

    def _write(self, work: Callable[[_Batch], object]) -> None:
        """The statements ``work`` adds, in one transaction, fenced by the armed term,
        committed before returning; Deposed (nothing written) if another server took the
        lease, StateStoreError if PostgreSQL cannot be reached or refuses."""
        term = self._armed()
        batch = _Batch()
        if term is not None:
            batch.execute(self.q("SELECT {s}.fence(%s)"), (term,))
        work(batch)
        with self._errors(writing=True):
            self._on_saver(lambda conn: self._send(conn, batch.statements))

    def save(
        self,
        rows: Iterable[dict[str, Any]],
        workers: Iterable[tuple[str, bool]],
        *,
        gone_tasks: Collection[str] = (),
        gone_workers: Collection[str] = (),
    ) -> None:
        """Upsert and delete in one committed transaction (one call of the schema's ``save``
        function); rows equal to what is stored are left alone."""
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
        each ``(task_id, stakeholders, runners)`` set in the task's stored row (its ``runners``
        column too), the rest of it as it is (:class:`~conveyor.server.stores.CanSaveStakeholders`).
        The row keeps its change number and time of change, as with the SQLite store; PostgreSQL
        writes its JSON back in jsonb's form, or edits the text of a row jsonb cannot read
        (``put_list``): either reads the same. A row PostgreSQL cannot read as a JSON object
        (edited behind the server's back) is left as it is. Each of these rows is written whole
        at its task's next other change."""
        with self._write_lock:
            now = time.time()
            changed: dict[str, tuple[Any, ...]] = {}  # task_id -> (columns..., digest)
            edges: dict[str, tuple[Sequence[str], bool, int, Sequence[str]]] = {}
            for row in rows:
                task_id = row["task_id"]
                data = _data(row)
                digest = _digest(data)
                deps = row["deps"]
                known = self._deps.get(task_id)
                if known is None and not deps and task_id in self._digests:
                    work = None  # (stored without edges, none to store)
                else:
                    work = _edge_work(known, deps)
                edges.pop(task_id, None)  # (the last row of a task saved twice counts)
                changed.pop(task_id, None)
                if work is not None:
                    edges[task_id] = (deps, *work)
                elif self._digests.get(task_id) == digest:
                    continue
                changed[task_id] = (task_id, data, *_ui_columns(row), digest)
            every = [t for t, e in edges.items() if e[1]]
            added = [(t, d, e[2] + n) for t, e in edges.items() for n, d in enumerate(e[3])]
            worker_data = dict(workers)
            gone = list(dict.fromkeys(gone_tasks))
            gone_w = list(dict.fromkeys(gone_workers))
            interest = [
                (t, workers_json(tuple(h)), workers_json(tuple(r))) for t, h, r in stakeholders
            ]
            if not (changed or worker_data or gone or gone_w or interest):
                return
            columns = [list(c) for c in zip(*(c[:-1] for c in changed.values()), strict=True)]
            args = [
                now,
                *(columns or [[] for _ in range(8)]),
                every,
                [a[0] for a in added],
                [a[1] for a in added],
                [a[2] for a in added],
                list(worker_data),
                list(worker_data.values()),
                gone,
                gone_w,
                *([list(c) for c in zip(*interest, strict=True)] or [[], [], []]),
            ]
            self._write_save(args)
            for task_id, *_ in interest:  # (its text is PostgreSQL's: the next save writes it)
                self._digests.pop(task_id, None)
            for task_id, c in changed.items():
                self._digests[task_id] = c[-1]
            for task_id, (deps, *_) in edges.items():
                if deps:
                    self._deps[task_id] = (deps, len(deps))
                else:
                    self._deps.pop(task_id, None)
            for task_id in gone:
                self._deps.pop(task_id, None)
                self._digests.pop(task_id, None)

    def probe(self) -> None:
        """Commit a write that changes nothing (fenced as a save is); raises what a save
        would raise now."""
        with self._write_lock:
            self._write(lambda cur: cur.execute(self.q(_TOUCH)))

    def load(self) -> tuple[list[dict[str, Any]], list[tuple[str, bool]]]:
        """Every saved row and worker, read in one snapshot; CorruptState (nothing changed)
        naming the rows that cannot be read back."""
        rows: list[dict[str, Any]] = []
        workers = self._read_back(lambda row, _record: rows.append(row), None)
        return rows, workers

    def load_records(self) -> tuple[list[TaskRecord], list[tuple[str, bool]]]:
        """What :meth:`load` returns, as records: each row parsed and checked once (by
        :func:`~conveyor.scheduler.persist.from_stored`, where :meth:`load`'s rows are checked
        again by the server), and records share their repeated strings. The server loads with
        this when a store has it: at start, and when it takes the lease."""
        records: list[TaskRecord] = []
        workers = self._read_back(lambda _row, record: records.append(record), {})
        return records, workers

    def _read_back(
        self,
        keep: Callable[[dict[str, Any], TaskRecord], object],
        strings: dict[Any, Any] | None,
    ) -> list[tuple[str, bool]]:
        """Read every task row in one snapshot (``keep(row, record)`` for each usable one;
        the whole row only when ``strings`` is None, as :meth:`load` returns it) and return
        the workers; CorruptState (nothing changed) naming every unusable row."""
        with self._write_lock:
            tasks, edges, workers = self._read(reads.load_all)
            bad: list[BadRow] = []
            deps: dict[str, tuple[Sequence[str], int]] = {}
            digests: dict[str, bytes] = {}
            whole = strings is None
            for task_id, data in tasks:
                try:
                    row, record = _task_row(
                        task_id, data, edges.get(task_id), edged=True, strings=strings
                    )
                except RowError as exc:
                    bad.append(BadRow(("tasks", task_id), f"task row {task_id!r}", str(exc)))
                    continue
                if not bad:
                    keep(row, record)
                if record.deps:  # (the list a load gives, which a merge extends: see save)
                    kept = row["deps"] if whole else record.deps
                    deps[task_id] = (kept, len(kept))
                digests[task_id] = _digest(data)
            del tasks, edges
            if bad:
                raise CorruptState(
                    f"the PostgreSQL state store {self.where} (schema {self._schema!r})", bad
                )
            self._deps, self._digests = deps, digests
            return [(w, bool(a)) for w, a in workers]

    # --- the lease ----------------------------------------------------------------------------

    def lead(self, holder: str, lease: float) -> Lease:
        """Renew the lease if this store took the current term for ``holder``, take it (term
        + 1) if nobody holds a live one, else change nothing; by the database's clock. One
        message: an ``UPDATE`` of the lease row only where one of those holds (a standby
        that finds a live lease locks nothing), then a look at the row."""
        assert self._writers is not None
        with self._lease_lock:
            if self._fence is None:
                self._fence = 0  # (asked for the lease: saves wait for fence())
            mine = -1 if self._term is None else self._term
            # (the UPDATE's conditions are on the row itself: if another server changes it
            # meanwhile, they are checked again on what it wrote, so no term is taken twice)
            take = (
                self.q(
                    "UPDATE {s}.lease SET holder = %(h)s,"
                    " term = CASE WHEN term = %(mine)s AND holder = %(h)s THEN term"
                    " ELSE term + 1 END,"
                    " expires = clock_timestamp() + make_interval(secs => %(lease)s)"
                    " WHERE id = 1 AND ((term = %(mine)s AND holder = %(h)s)"
                    " OR expires IS NULL OR expires <= clock_timestamp())"
                    " RETURNING term, expires - clock_timestamp()"
                ),
                {"h": holder, "mine": mine, "lease": float(lease)},
            )
            look = (
                self.q(
                    "SELECT term, holder, expires - clock_timestamp() FROM {s}.lease WHERE id = 1"
                ),
                None,
            )
            with self._errors(), self._writers.connection() as conn:
                cur = self._send(conn, [take, look])
                taken = cur.fetchone()
                cur.nextset()
                term, current, left = cur.fetchone()
            held = taken is not None
            if held:
                term, left = taken
            live = left is not None and left.total_seconds() > 0
            self._term = int(term) if held else None
            if not held:
                self._fence = 0  # (another server leads: nothing more is saved)
            shown = holder if held else (current if live else "")
            expires_in = max(0.0, left.total_seconds()) if left is not None else 0.0
            return Lease(int(term), shown, held, float(expires_in))

    def fence(self, term: int) -> None:
        """Carry ``term`` in every save from now on (0: refuse every save); see
        :meth:`conveyor.server.stores.CanLead.fence`."""
        self._fence = term

    def resign(self) -> None:
        """Give the lease up now if this store holds it; saves are refused from now on."""
        assert self._writers is not None
        with self._lease_lock:
            self._fence = 0
            term, self._term = self._term, None
            if term is None:
                return
            with self._errors(), self._writers.connection() as conn:
                conn.execute(
                    self.q(
                        "UPDATE {s}.lease SET holder = '', expires = NULL"
                        " WHERE id = 1 AND term = %s"
                    ),
                    (term,),
                )

    # --- TaskReads ----------------------------------------------------------------------------

    def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(reader, *args)`` on a read-only connection (one snapshot per call)."""
        assert self._readers is not None
        with self._errors(), self._readers.connection() as conn:
            return fn(reads.Reader(conn, self.q), *args)

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
        """The graph around the task, walked layer by layer on the ``edges`` table; None for
        an unknown task."""
        return self._read(reads.graph, task_id, downstream, cap)

    def task_ids(self, filters: TaskFilters) -> tuple[str, ...]:
        """Every id ``filters`` match, in one statement (``CanListIds``)."""
        return self._read(reads.task_ids, filters)

    def changes_since(self, seq: int, limit: int = PAGE_MAX) -> Changes:
        """The latest change number and the tasks saved after ``seq``."""
        return self._read(reads.changes_since, seq, limit)

    def workers(self) -> tuple[StoredWorker, ...]:
        """Every stored worker."""
        return self._read(reads.workers)

    def task_infos(self) -> tuple[TaskInfo, ...]:
        """Every registered task as ``GET /api/v1/tasks`` lists it, in one statement."""
        return self._read(reads.task_infos)

    def close(self) -> None:
        """Close both pools (the lease is left as it is: ``resign()`` gives it up)."""
        with self._write_lock:
            if self._saver is not None and self._writers is not None:
                self._writers.putconn(self._saver)
            self._saver = None
        for pool in (self._readers, self._writers):
            if pool is not None:
                pool.close()
        self._readers = self._writers = None


# --- helpers --------------------------------------------------------------------------------------

_Statement = tuple[Any, Any]  # (a query, its arguments or None)


class _Batch:
    """The statements of one write, collected to be sent as one message (``execute`` as a
    cursor's)."""

    def __init__(self) -> None:
        self.statements: list[_Statement] = []

    def execute(self, query: Any, params: Any = None) -> None:
        """Add ``query`` with ``params`` to the write."""
        self.statements.append((query, params))


def _refused(exc: psycopg.Error) -> bool:
    """Whether PostgreSQL answered ``exc`` (so the transaction it ended was rolled back),
    rather than the connection breaking before an answer came."""
    state = exc.sqlstate or ""
    return bool(state) and not state.startswith(("08", "57P"))


_SAVE_TYPES = (
    "bigint", "float8", "text[]", "text[]", "text[]", "text[]", "text[]", "text[]", "text[]",
    "integer[]", "text[]", "text[]", "text[]", "integer[]", "text[]", "boolean[]", "text[]",
    "text[]", "text[]", "text[]", "text[]",
)  # fmt: skip
_SAVE_CALL = "SELECT {s}.save(" + ", ".join(f"%b::{t}" for t in _SAVE_TYPES) + ")"
_TOUCH = "UPDATE {s}.changes SET seq = seq WHERE id = 1"


def _names_one_host(url: str) -> bool:
    """Whether the server URL ``url`` names one host: not a loopback or unspecified address
    (``http://127.0.0.1:8082``, ``http://0.0.0.0:8082``), which servers on other hosts may
    name themselves by too."""
    try:
        host = urllib.parse.urlsplit(url).hostname
    except ValueError:
        return False
    if not host or host == "localhost":
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return True
    return not (address.is_loopback or address.is_unspecified)


def _login() -> str:
    """The user libpq connects as when the DSN names none (the login name)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "(the login name)"


def _data(row: Mapping[str, Any]) -> str:
    """What is stored of ``row``: its compact JSON, without its dependencies (the edges)."""
    return stored_json(row, without="deps")


def _edge_work(
    known: tuple[Sequence[str], int] | None, deps: Sequence[str]
) -> tuple[bool, int, Sequence[str]] | None:
    """What to write to bring a task's stored edges (``known``: the deps saved last and how
    many; None: not known) to ``deps`` (None: nothing): whether to replace them all, the
    position of the first to insert, and the dependencies to insert from there; O(what was
    added) when ``deps`` is the list saved last, grown at its end."""
    if known is None:
        return True, 0, list(dict.fromkeys(deps))
    saved, count = known
    if len(deps) >= count and (deps is saved or list(deps[:count]) == list(saved[:count])):
        added = deps[count:]
        return (False, count, added) if added else None
    return True, 0, list(dict.fromkeys(deps))


def _read_only(conn: psycopg.Connection[Any]) -> None:
    """A reading connection: every read one REPEATABLE READ, read-only transaction."""
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True


def _read_dsn(settings: Mapping[str, Any]) -> tuple[str, str]:
    """The DSN and where it came from (``dsn``, or ``dsn_file 'path'``)."""
    path = settings.get("dsn_file") or ""
    if not path:
        return str(settings["dsn"]).strip(), "dsn"
    origin = f"dsn_file {str(path)!r}"
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"{_SECTION} {origin} cannot be read ({reason}); expected a file holding the "
            "PostgreSQL connection string"
        ) from None
    if not text:
        raise ConfigError(
            f"{_SECTION} {origin} is empty; expected a file holding the PostgreSQL "
            "connection string"
        )
    return text, origin


def _hide_quoted(text: str) -> str:
    """``text`` without what it quotes (a part of a DSN that may be its password)."""
    return re.sub(r'"[^"]*"', lambda m: m[0] if m[0] == '"="' else '"…"', text)


def _digest(data: str) -> bytes:
    """A short digest of a row's JSON: whether it changed since it was saved."""
    return hashlib.blake2b(data.encode(), digest_size=16).digest()


def _clean(text: str | None) -> str | None:
    """``text`` as PostgreSQL's text can hold it (no NUL character)."""
    return None if text is None else text.replace("\x00", "")


def _ui_columns(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the UI filters, sorts and draws by: status (None for a task nobody registered),
    state, family, the worker running it or else the last to run it, the text its filter
    searches, and the number of workers able to run it."""
    state = str(row["status"])
    status = state if row["registered"] else None
    return (
        status,
        state,
        _clean(row["family"]),
        _clean(list_worker(row)),
        _clean(search_text(row)),
        len(row.get("runners") or ()),
    )


def _task_row(
    task_id: str,
    data: str,
    deps: list[str] | None = None,
    *,
    edged: bool = False,
    strings: dict[Any, Any] | None = None,
) -> tuple[dict[str, Any], TaskRecord]:
    """The whole row saved as ``data`` under ``task_id``, with ``deps`` (from the edges table,
    in order; None: none there) as its dependencies, and its record; with ``strings``, the row
    is not made: ``{}``. RowError as :func:`conveyor.server.stores.read_row` (``edged``:
    schema 3) says."""
    stored, record = read_row(task_id, data, deps, edged=edged, strings=strings)
    if strings is not None:
        return {}, record
    return (full_row(stored) if deps is None else full_row(stored, deps=deps)), record
