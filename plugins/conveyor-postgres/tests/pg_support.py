"""Helpers of the PostgreSQL store's process tests: a scheduler's configuration on a
PostgreSQL database, running ``conveyor`` commands, a small task module, and a store of
schema 2 (as an older conveyor-postgres left it) to migrate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from conveyor_postgres.store import _MIGRATIONS

MARKER_VARIABLE = "PGSTORETEST_MARKER"  # not CONVEYOR_*: those are configuration overrides

TASKS = """
import os

import conveyor


class Leaf(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, f"leaf-{self.n}.out"))

    def run(self):
        with self.output().open("w") as f:
            f.write("done")


class Root(conveyor.Task):
    root = conveyor.Parameter()

    def requires(self):
        return [Leaf(root=self.root, n=n) for n in range(2)]

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "root.out"))

    def run(self):
        with self.output().open("w") as f:
            f.write("done")
"""


def write_config(path: Path, *, dsn: str = "", dsn_file: str = "", lease: float = 3.0) -> Path:
    """A configuration file whose server keeps its state in PostgreSQL."""
    key, value = ("dsn_file", dsn_file) if dsn_file else ("dsn", dsn)
    path.write_text(
        textwrap.dedent(
            f"""\
            [server]
            state_store = "postgres"
            leader_lease = {lease}

            [state_stores.postgres]
            {key} = {json.dumps(value)}
            connect_timeout = 3
            """
        ),
        encoding="utf-8",
    )
    return path


def child_env(directory: Path, marker: str) -> dict[str, str]:
    """This process's environment without ``CONVEYOR_*`` variables, ``directory`` first on
    ``PYTHONPATH`` and the test's marker set (so what it starts can be found and killed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(directory), env.get("PYTHONPATH")) if p)
    env[MARKER_VARIABLE] = marker
    return env


def conveyor(
    directory: Path, env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m conveyor *args`` in ``directory`` to its end (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "conveyor", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def get_json(url: str) -> Any:
    """The JSON answer of ``GET url`` (urllib raises for an error status)."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def schema_2_store(dsn: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """A schema ``conveyor`` of version 2 in ``dsn``'s database holding ``rows`` (whole rows,
    as ``persist.to_row`` makes them) as conveyor-postgres of schema 2 stored them: the whole
    row in its JSON, deps included, and its edges without positions. Its lease was never
    taken (see :func:`set_lease`)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
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
            for dep in dict.fromkeys(row["deps"]):
                conn.execute("INSERT INTO conveyor.edges VALUES (%s, %s)", (row["task_id"], dep))


def set_lease(dsn: str, term: int, holder: str, seconds: float | None) -> None:
    """Make the lease row say ``holder`` took ``term`` and that it runs out ``seconds`` from
    now by the database's clock (negative: it ran out; None: nobody holds it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE conveyor.lease SET term = %s, holder = %s,"
            " expires = clock_timestamp() + make_interval(secs => %s) WHERE id = 1",
            (term, holder, None if seconds is None else float(seconds)),
        )
