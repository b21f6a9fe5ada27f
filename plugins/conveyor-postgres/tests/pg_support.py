"""Helpers of the PostgreSQL store's process tests: a scheduler's configuration on a
PostgreSQL database, running ``conveyor`` commands, and a small task module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

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
