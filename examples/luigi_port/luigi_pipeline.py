"""The Luigi program that examples/luigi_port/pipeline.py is the conveyor port of.

This is plain Luigi 3 code, as the shop's team ran it under ``luigi`` with ``luigi.cfg``
(next to this file). docs/migrating-from-luigi.md runs it unchanged: under ``luigi`` against
``conveyor scheduler`` (step 1), under ``conveyor run`` with the conveyor-luigi plugin (step 2),
and mixed with the ported tasks (step 3). It makes the same partitions and reports as the
port, byte for byte, and the same database rows.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections import Counter
from collections.abc import Iterable
from datetime import date
from typing import Any

import luigi
from luigi.date_interval import Custom
from luigi.tools.range import RangeDaily
from luigi.util import inherits, requires

__all__ = ["Backfill", "DailyCounts", "PeriodDatabase", "PeriodReport", "RawEvents", "Site"]


class Site(luigi.Task):
    """The parameter every task shares; tasks take it with ``@inherits(Site)``."""

    root = luigi.PathParameter(description="directory holding raw/, daily/ and periods/")


@inherits(Site)
class RawEvents(luigi.ExternalTask):
    """One day of the collector's event log: made elsewhere, only checked for."""

    day = luigi.DateParameter(description="the day the events happened")

    def output(self) -> luigi.LocalTarget:
        """``<root>/raw/YYYY/MM/DD/events.jsonl``."""
        return luigi.LocalTarget(self.root / "raw" / f"{self.day:%Y/%m/%d}" / "events.jsonl")


@requires(RawEvents)
class DailyCounts(luigi.Task):
    """The daily partition: events per type for one day, ``type<TAB>count`` lines."""

    def output(self) -> luigi.LocalTarget:
        """``<root>/daily/YYYY-MM-DD.tsv``."""
        return luigi.LocalTarget(self.root / "daily" / f"{self.day}.tsv")

    def run(self) -> None:
        """Count the day's events by type."""
        counts: Counter[str] = Counter()
        with self.input().open("r") as src:
            for line in src:
                counts[json.loads(line)["type"]] += 1
        with self.output().open("w") as out:
            out.writelines(f"{kind}\t{n}\n" for kind, n in sorted(counts.items()))

    @classmethod
    def bulk_complete(cls, parameter_tuples: Iterable[date]) -> list[date]:
        """The days whose partition exists (``RangeDaily`` asks this)."""
        done = []
        for day in parameter_tuples:
            task = cls(day=day)
            if os.path.exists(task.output().path):
                done.append(day)
        return done


@inherits(Site)
class PeriodDatabase(luigi.Task):
    """Every daily partition of an interval in one SQLite file, table counts(day, type, n)."""

    interval = luigi.DateIntervalParameter(description="2026-11, 2026-W45, 2026-11-01-2026-11-08")

    def requires(self) -> list[DailyCounts]:
        """The interval's daily partitions."""
        return [self.clone(DailyCounts, day=day) for day in self.interval.dates()]

    def output(self) -> luigi.LocalTarget:
        """``<root>/periods/<interval>.sqlite``."""
        return luigi.LocalTarget(self.root / "periods" / f"{self.interval}.sqlite")

    def run(self) -> None:
        """Load the partitions, one transaction, through a temporary path."""
        days = self.interval.dates()
        with (
            self.output().temporary_path() as path,
            contextlib.closing(sqlite3.connect(path)) as db,
            db,
        ):
            db.execute(
                "CREATE TABLE counts (day TEXT NOT NULL, type TEXT NOT NULL,"
                " n INTEGER NOT NULL, PRIMARY KEY (day, type))"
            )
            for done, (day, target) in enumerate(zip(days, self.input(), strict=True), 1):
                with target.open("r") as src:
                    rows = [(str(day), *_split(line)) for line in src]
                db.executemany("INSERT INTO counts VALUES (?, ?, ?)", rows)
                self.set_progress_percentage(100 * done / len(days))


@requires(PeriodDatabase)
class PeriodReport(luigi.Task):
    """Totals per event type over an interval, and its busiest day."""

    def output(self) -> luigi.LocalTarget:
        """``<root>/periods/<interval>.txt``."""
        return luigi.LocalTarget(self.root / "periods" / f"{self.interval}.txt")

    def run(self) -> None:
        """Query the interval's database and write the report."""
        with contextlib.closing(sqlite3.connect(self.input().path)) as db:
            per_type = db.execute(
                "SELECT type, SUM(n) FROM counts GROUP BY type ORDER BY type"
            ).fetchall()
            busiest = db.execute(
                "SELECT day, SUM(n) AS total FROM counts GROUP BY day"
                " ORDER BY total DESC, day LIMIT 1"
            ).fetchone()
        days = self.interval.dates()
        with self.output().open("w") as out:
            out.write(f"period {self.interval}: {len(days)} days, {days[0]} to {days[-1]}\n")
            out.writelines(f"{kind}\t{n}\n" for kind, n in per_type)
            out.write(f"total\t{sum(n for _, n in per_type)}\n")
            out.write(f"busiest\t{busiest[0]}\t{busiest[1]}\n")


class Backfill(luigi.WrapperTask):
    """The nightly job: the missing daily partitions from start to stop (excluded), then the
    report of that period."""

    start = luigi.DateParameter(description="the first day, included")
    stop = luigi.DateParameter(description="the day after the last one, excluded")

    def requires(self) -> list[Any]:
        """The range of daily partitions and the period's report."""
        return [
            RangeDaily(of=DailyCounts, param_name="day", start=self.start, stop=self.stop),
            PeriodReport(interval=Custom(self.start, self.stop)),
        ]


def _split(line: str) -> tuple[str, int]:
    """A daily partition's ``type<TAB>n`` line as ``(type, n)``."""
    kind, n = line.rstrip("\n").split("\t")
    return kind, int(n)
