"""The worked port of docs/migrating-from-luigi.md: ``examples/luigi_port`` run end to end through
the real CLI, with the example's own worker.toml, in a temporary directory (the configured
``root`` is relative, so every file lands there).

The raw input is written by ``python -m examples.luigi_port.sample``; its content is fixed by the
date (day ``d``: ``10 + d`` views, ``d`` carts, ``d // 2`` purchases), so every output is checked
exactly.
"""

from __future__ import annotations

import datetime
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "examples" / "luigi_port" / "worker.toml"
PIPELINE = "examples.luigi_port.pipeline"
ROOT = Path("out") / "luigi_port"  # as the example's worker.toml sets it, relative to cwd

RunCli = Callable[..., subprocess.CompletedProcess[str]]
Run = Callable[..., subprocess.CompletedProcess[str]]


def _days(start: str, stop: str) -> list[datetime.date]:
    first, end = datetime.date.fromisoformat(start), datetime.date.fromisoformat(stop)
    return [first + datetime.timedelta(days=n) for n in range((end - first).days)]


def _counts(day: datetime.date) -> dict[str, int]:
    """What the sample writes for ``day`` (examples.luigi_port.sample.events_of)."""
    return {"cart": day.day, "purchase": day.day // 2, "view": 10 + day.day}


def _seen(day: datetime.date) -> list[tuple[str, int]]:
    """The event types ``day`` has (a type without events has no line), sorted."""
    return [(kind, n) for kind, n in sorted(_counts(day).items()) if n]


def _tsv(day: datetime.date) -> str:
    return "".join(f"{kind}\t{n}\n" for kind, n in _seen(day))


def _report(interval: str, days: list[datetime.date]) -> str:
    totals = {kind: sum(_counts(day)[kind] for day in days) for kind in _counts(days[0])}
    busiest = max(days, key=lambda day: (sum(_counts(day).values()), -day.toordinal()))
    return (
        f"period {interval}: {len(days)} days, {days[0]} to {days[-1]}\n"
        + "".join(f"{kind}\t{n}\n" for kind, n in sorted(totals.items()))
        + f"total\t{sum(totals.values())}\n"
        + f"busiest\t{busiest}\t{sum(_counts(busiest).values())}\n"
    )


def _ran(stdout: str, family: str) -> int:
    """How many tasks of ``family`` the summary lists under ``ran successfully``."""
    section = stdout.split("ran successfully:", 1)
    if len(section) == 1:
        return 0
    for line in section[1].splitlines()[1:]:
        if not line.startswith("    - "):
            break
        count, name = line[6:].split(" ", 2)[:2]
        if name == f"{family}:":
            return int(count)
    return 0


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The repository on the path (for ``examples``), as running from its root would give."""
    return {"PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}


@pytest.fixture
def sample(tmp_path: Path, env: dict[str, str]) -> Callable[[str, str], None]:
    """Write the raw input for ``start`` .. ``stop`` (excluded), with the README's command."""

    def write(start: str, stop: str) -> None:
        command = ["-m", "examples.luigi_port.sample", "--root", str(ROOT)]
        subprocess.run(
            [sys.executable, *command, "--start", start, "--stop", stop],
            cwd=tmp_path,
            env={**os.environ, **env},
            check=True,
            capture_output=True,
            timeout=60,
        )

    return write


@pytest.fixture
def run(run_cli: RunCli, tmp_path: Path, env: dict[str, str]) -> Run:
    """``conveyor run TASK ... --config examples/luigi_port/worker.toml`` in tmp_path."""

    def go(task: str, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli("run", task, *args, "--config", str(CONFIG), cwd=tmp_path, env=env)

    return go


def test_a_first_run_builds_everything_and_a_second_finds_it_complete(
    sample: Callable[[str, str], None], run: Run, tmp_path: Path
) -> None:
    """Backfill over a week builds the 7 daily partitions, the period's SQLite file and its
    report, with the expected content; run again, it finds everything complete and rewrites
    nothing."""
    sample("2026-11-01", "2026-11-08")
    days = _days("2026-11-01", "2026-11-08")
    root = tmp_path / ROOT

    first = run(f"{PIPELINE}.Backfill", "--start", "2026-11-01", "--stop", "2026-11-08")

    assert first.returncode == 0, first.stdout + first.stderr
    for day in days:
        assert (root / "daily" / f"{day}.tsv").read_text() == _tsv(day)
    interval = "2026-11-01-2026-11-08"
    with sqlite3.connect(root / "periods" / f"{interval}.sqlite") as db:
        rows = db.execute("SELECT day, type, n FROM counts ORDER BY day, type").fetchall()
    assert rows == [(str(day), kind, n) for day in days for kind, n in _seen(day)]
    assert (root / "periods" / f"{interval}.txt").read_text() == _report(interval, days)
    assert _ran(first.stdout, "DailyCounts") == 7
    assert _ran(first.stdout, "PeriodDatabase") == 1
    assert _ran(first.stdout, "PeriodReport") == 1
    assert "0 of 7 days were already complete" in first.stdout
    assert not list(root.rglob("*conveyor-tmp*")), "a temporary file was left behind"
    assert first.stdout.rstrip().splitlines()[-1].startswith("Verdict: succeeded")

    made = {path: path.stat().st_mtime_ns for path in root.rglob("*") if path.is_file()}
    second = run(f"{PIPELINE}.Backfill", "--start", "2026-11-01", "--stop", "2026-11-08")

    assert second.returncode == 0, second.stdout + second.stderr
    assert "ran successfully" not in second.stdout
    assert "were already complete" in second.stdout
    assert "Backfill" in second.stdout
    assert {path: path.stat().st_mtime_ns for path in made} == made


def test_a_range_backfill_requires_only_the_missing_days(
    sample: Callable[[str, str], None], run: Run, tmp_path: Path
) -> None:
    """With 6 of 10 daily partitions present (a week built, one of its days deleted since),
    ``conveyor run conveyor.RangeDaily --of ...DailyCounts`` builds exactly the 4 missing ones,
    leaves the others alone, and says so in the summary; a report for the ISO week 2026-W45
    then needs no daily partition built again."""
    sample("2026-11-01", "2026-11-11")
    root = tmp_path / ROOT
    built = run(f"{PIPELINE}.Backfill", "--start", "2026-11-01", "--stop", "2026-11-08")
    assert built.returncode == 0, built.stdout + built.stderr
    (root / "daily" / "2026-11-03.tsv").unlink()
    kept = {path: path.stat().st_mtime_ns for path in (root / "daily").iterdir() if path.is_file()}

    backfill = run(
        "conveyor.RangeDaily",
        *("--of", f"{PIPELINE}.DailyCounts", "--start", "2026-11-01", "--stop", "2026-11-11"),
    )

    assert backfill.returncode == 0, backfill.stdout + backfill.stderr
    assert _ran(backfill.stdout, "DailyCounts") == 4
    assert "6 of 10 days were already complete" in backfill.stdout
    for day in ("2026-11-03", "2026-11-08", "2026-11-09", "2026-11-10"):
        assert f"day={day}" in backfill.stdout.split("ran successfully:", 1)[1]
    for day in _days("2026-11-01", "2026-11-11"):
        assert (root / "daily" / f"{day}.tsv").read_text() == _tsv(day)
    assert {path: path.stat().st_mtime_ns for path in kept} == kept
    assert backfill.stdout.rstrip().splitlines()[-1].startswith("Verdict: succeeded")

    week = run(f"{PIPELINE}.PeriodReport", "--interval", "2026-W45")

    assert week.returncode == 0, week.stdout + week.stderr
    assert _ran(week.stdout, "DailyCounts") == 0
    assert _ran(week.stdout, "PeriodDatabase") == 1
    assert (root / "periods" / "2026-W45.txt").read_text() == _report(
        "2026-W45", _days("2026-11-02", "2026-11-09")
    )


def test_a_day_without_raw_events_is_missing_external_data(
    sample: Callable[[str, str], None], run: Run, tmp_path: Path
) -> None:
    """A backfill reaching past the last raw file builds what it can, reports the missing
    external input and exits with 4, as Luigi's [retcode] missing_data would have it."""
    sample("2026-11-01", "2026-11-03")

    proc = run(f"{PIPELINE}.Backfill", "--start", "2026-11-01", "--stop", "2026-11-04")

    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "are missing external data" in proc.stdout
    assert "RawEvents(root=out/luigi_port, day=2026-11-03)" in proc.stdout
    assert _ran(proc.stdout, "DailyCounts") == 2
    assert not (tmp_path / ROOT / "daily" / "2026-11-03.tsv").exists()
