"""Luigi tasks for ``conveyor run`` tests, imported only by the subprocesses of those tests.

This module imports :mod:`luigi_tasks_for_tests` (never the other way round) and defines a
second Luigi task of the family ``Total``, which makes that family ambiguous in Luigi's register
of any process that imports this module.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from typing import Any

import conveyor
import luigi

import luigi_tasks_for_tests as lt


class Summary(luigi.Task):
    """The root of a graph whose dependency (Numbers) is defined in another module."""

    root = luigi.Parameter()

    def requires(self) -> lt.Numbers:
        return lt.Numbers(root=self.root, date=datetime.date(2024, 1, 1))

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "summary.txt"))

    def run(self) -> None:
        with self.input().open("r") as src:
            total = sum(int(line) for line in src.read().split())
        with self.output().open("w") as out:
            out.write(f"sum={total}\n")


class Total(luigi.Task):
    """Same family as ``luigi_tasks_for_tests.Total``."""

    root = luigi.Parameter()
    word = luigi.Parameter(default="own")

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "own-total.txt"))

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write(f"{self.word}\n")


class Crowded(luigi.Task):
    """A parameter named like a flag of Luigi's own command line (``--workers``)."""

    root = luigi.Parameter()
    workers = luigi.IntParameter(default=1)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "crowded.txt"))


class Guarded(luigi.Task):
    """A secret-named parameter."""

    root = luigi.Parameter()
    api_token = luigi.IntParameter(default=0)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "guarded.txt"))


class Counted(luigi.Task):
    """Writes 1..n into a file named after ``n``."""

    root = luigi.Parameter()
    n = luigi.IntParameter(default=1)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, f"counted-{self.n}.txt"))

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("".join(f"{i}\n" for i in range(1, self.n + 1)))


class Middle(conveyor.Task):
    """A conveyor task between two Luigi tasks: its ``requires()`` makes Counted without an
    ``n``, so ``--Counted-n`` must be in force in its attempt's process too."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return Counted(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "middle.txt"))

    def run(self) -> None:
        with self.requires().output().open("r") as src:
            total = sum(int(line) for line in src.read().split())
        with self.output().open("w") as out:
            out.write(f"sum={total}\n")


class MixedRoot(luigi.Task):
    """Luigi -> conveyor (Middle) -> Luigi (Numbers)."""

    root = luigi.Parameter()

    def requires(self) -> Middle:
        return Middle(root=self.root)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "mixed-root.txt"))

    def run(self) -> None:
        with self.requires().output().open("r") as src, self.output().open("w") as out:
            out.write(src.read())


class Nested(luigi.Task):
    """Its ``run()`` starts a Python process that rebuilds Numbers with the luigi loader and
    writes the count it got: the outer run's ``--Numbers-count`` must not reach it."""

    root = luigi.Parameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "nested.txt"))

    def run(self) -> None:
        code = (
            "from conveyor_luigi import LuigiLoader; "
            "task = LuigiLoader().load('luigi_tasks_for_tests', 'Numbers', "
            f"{{'root': {self.root!r}, 'date': '2024-01-01'}}); "
            "print(task.luigi_task.count)"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
        with self.output().open("w") as out:
            out.write(done.stdout)
