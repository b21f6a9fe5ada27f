"""Luigi tasks for ``conveyor run`` tests, imported only by the subprocesses of those tests.

This module imports :mod:`luigi_tasks_for_tests` (never the other way round) and defines a
second Luigi task of the family ``Total``, which makes that family ambiguous in Luigi's register
of any process that imports this module.
"""

from __future__ import annotations

import datetime
import os

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
