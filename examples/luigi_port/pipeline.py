"""A web shop's event pipeline, written for Luigi and ported to conveyor.

Every day the shop's event collector drops one file of JSON lines under
``<root>/raw/YYYY/MM/DD/events.jsonl`` (:class:`RawEvents`, an external input). From there:

* :class:`DailyCounts` -- the daily partition: events per type for one day, as TSV;
* :class:`PeriodDatabase` -- every daily partition of a date interval loaded into one SQLite
  file (``sqlite3`` writes that file itself, so the task uses ``temporary_path()``);
* :class:`PeriodReport` -- totals for the interval and its busiest day, read from that file;
* :class:`Backfill` -- the nightly job: ``conveyor.RangeDaily`` fills the daily partitions that
  are missing between two dates, and the period is reported.

``root`` comes from the configuration (``[tasks."examples.luigi_port.pipeline.DailyCounts"]``
and ``...PeriodReport`` in ``worker.toml`` here), as a ``[DailyCounts]`` section of luigi.cfg
gave it in Luigi. See README.md for the commands.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import date

import conveyor

__all__ = ["Backfill", "DailyCounts", "PeriodDatabase", "PeriodReport", "RawEvents", "Site"]


class Site(conveyor.Task):
    """The parameter every task of this pipeline shares. Never scheduled: tasks take its
    parameter with @conveyor.inherits(Site)."""

    root = conveyor.PathParameter(description="directory holding raw/, daily/ and periods/")


@conveyor.inherits(Site)
class RawEvents(conveyor.ExternalTask):
    """One day of the collector's event log: made elsewhere, only checked for."""

    day = conveyor.DateParameter(description="the day the events happened")

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.root / "raw" / f"{self.day:%Y/%m/%d}" / "events.jsonl")


@conveyor.requires(RawEvents)
class DailyCounts(conveyor.Task):
    """The daily partition: how many events of each type one day had, one line per type
    (type, a tab, the count)."""

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.root / "daily" / f"{self.day}.tsv")

    def run(self) -> None:
        counts: Counter[str] = Counter()
        with self.input().open("r") as src:
            for line in src:
                counts[json.loads(line)["type"]] += 1
        with self.output().open("w") as out:  # atomic: the file appears only when complete
            out.writelines(f"{kind}\t{n}\n" for kind, n in sorted(counts.items()))

    @classmethod
    def bulk_complete(cls, days: Sequence[date]) -> list[date]:
        """The days whose partition exists, from one listing of ``daily/``: ``RangeDaily``
        asks this instead of calling ``complete()`` once per day."""
        tasks = [cls(day=day) for day in days]  # ``root`` as the range gives it, or configured
        by_directory: dict[str, set[str]] = {}
        done = []
        for task in tasks:
            directory, name = os.path.split(task.output().path)
            if directory not in by_directory:
                by_directory[directory] = _listing(directory)
            if name in by_directory[directory]:
                done.append(task.day)
        return done


@conveyor.inherits(Site)
class PeriodDatabase(conveyor.Task):
    """Every daily partition of an interval in one SQLite file, table counts(day, type, n)."""

    interval = conveyor.DateIntervalParameter(
        description="the days: 2026-11, 2026-W45, 2026-11-01-2026-11-08 (end excluded), ..."
    )

    def requires(self) -> list[DailyCounts]:
        return [self.clone(DailyCounts, day=day) for day in self.interval.dates()]

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.root / "periods" / f"{self.interval}.sqlite")

    def run(self) -> None:
        days = self.interval.dates()
        # sqlite3 writes the file itself: give it a temporary path, renamed into place only
        # when the block ends without an exception; the rows go in as one transaction
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
                    db.executemany("INSERT INTO counts VALUES (?, ?, ?)", _rows(day, src))
                self.set_progress_percentage(100 * done / len(days))


@conveyor.requires(PeriodDatabase)
class PeriodReport(conveyor.Task):
    """Totals per event type over an interval, and its busiest day."""

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.root / "periods" / f"{self.interval}.txt")

    def run(self) -> None:
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


class Backfill(conveyor.WrapperTask):
    """The nightly job: every missing daily partition from start to stop (excluded), then the
    report of that period."""

    start = conveyor.DateParameter(description="the first day, included")
    stop = conveyor.DateParameter(description="the day after the last one, excluded")

    def requires(self) -> list[conveyor.Task]:
        return [
            conveyor.RangeDaily(of=DailyCounts, start=self.start, stop=self.stop),
            PeriodReport(interval=conveyor.DateInterval.custom(self.start, self.stop)),
        ]


def _rows(day: date, lines: Iterable[str]) -> list[tuple[str, str, int]]:
    """A daily partition's ``type<TAB>n`` lines as rows of ``counts``."""
    rows = []
    for line in lines:
        kind, n = line.rstrip("\n").split("\t")
        rows.append((day.isoformat(), kind, int(n)))
    return rows


def _listing(directory: str) -> set[str]:
    """The names in ``directory``; none if it does not exist yet."""
    try:
        return set(os.listdir(directory))
    except FileNotFoundError:
        return set()
