"""Tests for conveyor.ranges: RangeDaily, RangeHourly and RangeMonthly backfills."""

from __future__ import annotations

import datetime
import json
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import conveyor
from conveyor.core.summary import Category, SummaryFacts, render_summary
from conveyor.parameters import DateHourParameter, MonthParameter
from conveyor.ranges import RangeBase, RangeDaily, RangeHourly, RangeMonthly
from conveyor.testing import FakeClock

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the run_cli fixture (conftest.py)
WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

D = datetime.date
H = datetime.datetime

CHECKED: list[str] = []
"""task ids whose complete() was called (by the range's pool or by the worker)."""


@pytest.fixture(autouse=True)
def _fresh_records() -> Iterator[None]:
    """Every test starts with no recorded complete() or bulk_complete() calls."""
    CHECKED.clear()
    RgBulk.calls.clear()
    yield


class RgDaily(conveyor.Task):
    """A daily file under root; records its complete() calls."""

    day = conveyor.DateParameter()
    root = conveyor.PathParameter(significant=False)

    def output(self) -> conveyor.LocalTarget:
        """root/<day>.txt"""
        return conveyor.LocalTarget(self.root / f"{self.day}.txt")

    def complete(self) -> bool:
        """As usual, recorded."""
        CHECKED.append(self.task_id)
        return super().complete()

    def run(self) -> None:
        """Write the file."""
        with self.output().open("w") as out:
            out.write("new\n")


class RgBulk(RgDaily):
    """RgDaily with a bulk_complete() answering for many days at once (counted)."""

    calls: ClassVar[list[list[datetime.date]]] = []

    @classmethod
    def bulk_complete(cls, parameter_tuples: Iterable[datetime.date]) -> list[datetime.date]:
        """The days whose file exists; ``cls(day)`` builds the task with the range's
        of_params, as in Luigi."""
        days = list(parameter_tuples)
        RgBulk.calls.append(days)
        return [day for day in days if Path(cls(day).output().path).exists()]


class RgOwnRoot(conveyor.Task):
    """Only a day; its directory is a class attribute (so a range needs no of_params)."""

    ROOT: ClassVar[Path] = Path("/nonexistent")
    seen: ClassVar[list[object]] = []
    day = conveyor.DateParameter()

    @classmethod
    def bulk_complete(cls, days: list[datetime.date]) -> list[str]:
        """Called on the class itself; answers in string form (normalised by the range)."""
        RgOwnRoot.seen.append(cls)
        return [d.isoformat() for d in days if (cls.ROOT / f"{d}.txt").exists()]

    def output(self) -> conveyor.LocalTarget:
        """ROOT/<day>.txt"""
        return conveyor.LocalTarget(RgOwnRoot.ROOT / f"{self.day}.txt")


class RgNotBulk(RgDaily):
    """A bulk_complete() that declines (NotImplementedError): the range checks each task."""

    @classmethod
    def bulk_complete(cls, parameter_tuples: Iterable[datetime.date]) -> list[datetime.date]:
        """Declines."""
        raise NotImplementedError


class RgBadBulk(RgDaily):
    """A bulk_complete() returning something that is not a list of days."""

    @classmethod
    def bulk_complete(cls, parameter_tuples: Iterable[datetime.date]) -> Any:
        """Not an iterable of days."""
        return 42


class RgHourly(conveyor.Task):
    """An hourly file."""

    hour = DateHourParameter()
    root = conveyor.PathParameter(significant=False)

    def output(self) -> conveyor.LocalTarget:
        """root/<YYYY-MM-DDTHH>.txt"""
        return conveyor.LocalTarget(self.root / f"{self.hour:%Y-%m-%dT%H}.txt")

    def run(self) -> None:
        """Write the file."""
        with self.output().open("w") as out:
            out.write("new\n")


class RgMonthly(conveyor.Task):
    """A monthly file."""

    month = MonthParameter()
    root = conveyor.PathParameter(significant=False)

    def output(self) -> conveyor.LocalTarget:
        """root/<YYYY-MM>.txt"""
        return conveyor.LocalTarget(self.root / f"{self.month:%Y-%m}.txt")

    def run(self) -> None:
        """Write the file."""
        with self.output().open("w") as out:
            out.write("new\n")


class RgTwoDates(conveyor.Task):
    """A label first, then two dates: the range's value goes to ``day`` unless told."""

    label = conveyor.Parameter(default="x")
    day = conveyor.DateParameter()
    since = conveyor.DateParameter(default="2000-01-01")

    def complete(self) -> bool:
        """Never complete."""
        return False


class RgBarrier(conveyor.Task):
    """complete() waits for ``parties`` checks to run at the same time (no sleeping)."""

    barrier: ClassVar[threading.Barrier] = threading.Barrier(1)
    day = conveyor.DateParameter()

    def complete(self) -> bool:
        """True once enough checks are waiting together; BrokenBarrierError if they never
        are (the range then counts the day as missing)."""
        RgBarrier.barrier.wait(timeout=20)
        return True


class RgBroken(RgDaily):
    """complete() raises for one day."""

    def complete(self) -> bool:
        """Raises on 2026-01-03."""
        if self.day == D(2026, 1, 3):
            raise OSError("storage unreachable")
        return super().complete()


def _days(start: datetime.date, count: int) -> list[datetime.date]:
    return [start + datetime.timedelta(days=i) for i in range(count)]


def _prepare(root: Path, days: Iterable[datetime.date]) -> None:
    """Files for ``days`` exist already (content ``old``)."""
    for day in days:
        (root / f"{day}.txt").write_text("old\n")


def _daily(cls: type[conveyor.Task], root: Path, **kwargs: Any) -> RangeDaily:
    return RangeDaily(
        of=cls,
        of_params={"root": str(root)},
        start=kwargs.pop("start", "2026-01-01"),
        stop=kwargs.pop("stop", "2026-01-11"),
        **kwargs,
    )


def _required_days(task: RangeBase, name: str = "") -> list[Any]:
    """The value of each required task's first parameter (or of ``name``)."""
    return [
        t.param_kwargs[name] if name else next(iter(t.param_kwargs.values()))
        for t in task.requires()
    ]


COMPLETE = [D(2026, 1, 2), D(2026, 1, 5), D(2026, 1, 9)]
MISSING = [d for d in _days(D(2026, 1, 1), 10) if d not in COMPLETE]


# --- RangeDaily over 10 days with 3 complete -------------------------------------------------


def test_range_daily_requires_exactly_the_7_missing_days(tmp_path: Path) -> None:
    """Of 10 days with 3 complete, requires() is the 7 others, oldest first."""
    _prepare(tmp_path, COMPLETE)
    task = _daily(RgDaily, tmp_path)
    assert _required_days(task) == MISSING
    assert all(isinstance(t, RgDaily) and t.root == tmp_path for t in task.requires())
    assert task.complete() is False


def test_range_daily_builds_only_the_missing_days(tmp_path: Path) -> None:
    """Through the worker: the 7 missing days run, the 3 complete ones are left alone, the
    range is done and a second run finds everything complete."""
    _prepare(tmp_path, COMPLETE)
    result = conveyor.build(_daily(RgDaily, tmp_path))
    assert result.ok, result.summary
    ran = sorted(t.param_kwargs["day"] for t in result.tasks.values() if isinstance(t, RgDaily))
    assert ran == MISSING
    for day in _days(D(2026, 1, 1), 10):
        expected = "old\n" if day in COMPLETE else "new\n"
        assert (tmp_path / f"{day}.txt").read_text() == expected
    assert not (tmp_path / "2026-01-11.txt").exists()  # stop is excluded

    again = conveyor.build(_daily(RgDaily, tmp_path))
    assert again.ok
    assert list(again.tasks.values()) == [_daily(RgDaily, tmp_path)]
    assert "were already complete" in again.summary


def test_summary_says_how_many_days_were_already_complete(tmp_path: Path) -> None:
    """The execution summary has a note with the range's count of complete days."""
    _prepare(tmp_path, COMPLETE)
    task = _daily(RgDaily, tmp_path)
    assert task.summary_note() == ""  # not checked yet
    result = conveyor.build(task)
    assert "3 of 10 days were already complete; 7 required" in result.summary
    notes = result.summary.split("Notes:\n", 1)[1].splitlines()
    assert notes[0].startswith("    - RangeDaily(")
    assert result.summary.splitlines()[-1].startswith("Verdict: succeeded")

    full = conveyor.build(_daily(RgDaily, tmp_path))
    assert "10 of 10 days were already complete" in full.summary
    assert "* 1 were already complete:" in full.summary


def test_summary_notes_are_listed_in_order_and_capped() -> None:
    """The summary's Notes section lists each task's note (family, then id order), at most
    20, then how many more."""
    ids = [f"t{i:02d}" for i in range(23)]
    facts = SummaryFacts(
        categories={t: Category.COMPLETED for t in ids},
        families={t: "F" for t in ids},
        label=lambda t: f"F({t})",
        requested=ids,
        notes={t: f"note {t}" for t in reversed(ids)},
    )
    text = render_summary(facts)
    notes = text.split("Notes:\n", 1)[1].splitlines()
    assert notes[0] == "    - F(t00): note t00"
    assert notes[19] == "    - F(t19): note t19"
    assert notes[20] == "    ... and 3 more"
    assert "Notes:" not in render_summary(
        SummaryFacts(categories={}, families={}, label=str, requested=[])
    )


class RgNoteRaises(conveyor.Task):
    """A task whose summary_note() raises: the summary says so, the run is unaffected."""

    def complete(self) -> bool:
        """Always complete."""
        return True

    def summary_note(self) -> str:
        """Raises."""
        raise RuntimeError("no note today")


def test_a_summary_note_that_raises_is_reported_in_its_place() -> None:
    """summary_note() raising puts the error in the note; the verdict stays succeeded."""
    result = conveyor.build(RgNoteRaises())
    assert result.ok
    assert "RgNoteRaises: summary_note() raised RuntimeError: no note today" in result.summary


def test_a_range_with_nothing_missing_is_complete_without_running(tmp_path: Path) -> None:
    """All 10 days present: the range is complete, requires nothing and nothing runs."""
    _prepare(tmp_path, _days(D(2026, 1, 1), 10))
    task = _daily(RgDaily, tmp_path)
    assert task.complete() is True
    assert task.requires() == []
    result = conveyor.build(_daily(RgDaily, tmp_path))
    assert result.ok and len(result.tasks) == 1


def test_complete_is_checked_concurrently_on_a_bounded_pool(tmp_path: Path) -> None:
    """Without bulk_complete the range checks complete() of its days at the same time: three
    checks meet at a barrier only if three run together (sequential checks would break it)."""
    RgBarrier.barrier = threading.Barrier(3)

    class Three(RangeDaily):
        check_threads = 3

    task = Three(of=RgBarrier, start="2026-01-01", stop="2026-01-04")
    assert task.complete() is True
    assert not RgBarrier.barrier.broken


def test_a_complete_that_raises_counts_as_missing(tmp_path: Path) -> None:
    """A day whose complete() raises is required; the worker reports it broken, the other
    missing days still run."""
    _prepare(tmp_path, COMPLETE)
    task = _daily(RgBroken, tmp_path)
    assert D(2026, 1, 3) in _required_days(task)
    result = conveyor.build(_daily(RgBroken, tmp_path))
    assert result.exit_code == 3
    broken = [t for t, s in result.states.items() if s == "UNKNOWN"]
    assert [result.tasks[t].param_kwargs["day"] for t in broken] == [D(2026, 1, 3)]
    assert "storage unreachable" in result.errors[broken[0]]
    assert (tmp_path / "2026-01-04.txt").read_text() == "new\n"


# --- bulk_complete ---------------------------------------------------------------------------


def test_bulk_complete_is_used_instead_of_complete(tmp_path: Path) -> None:
    """With bulk_complete() the range asks it once for all 10 days and calls no complete()."""
    _prepare(tmp_path, COMPLETE)
    task = _daily(RgBulk, tmp_path)
    assert _required_days(task) == MISSING
    assert RgBulk.calls == [_days(D(2026, 1, 1), 10)]
    assert CHECKED == []
    task.requires()
    assert len(RgBulk.calls) == 1  # checked once per range task
    assert task.complete() is False  # asked again: only the required days, in bulk again
    assert RgBulk.calls[1] == MISSING
    assert CHECKED == []


def test_bulk_complete_in_a_build_never_checks_the_complete_days(tmp_path: Path) -> None:
    """Through the worker only the required days get complete() calls (the worker's own);
    the 3 days bulk_complete() answered for are never built into tasks that are checked."""
    _prepare(tmp_path, COMPLETE)
    result = conveyor.build(_daily(RgBulk, tmp_path))
    assert result.ok, result.summary
    complete_ids = {RgBulk(day=d, root=tmp_path).task_id for d in COMPLETE}
    assert CHECKED and not complete_ids & set(CHECKED)
    assert RgBulk.calls[0] == _days(D(2026, 1, 1), 10)
    assert "3 of 10 days were already complete; 7 required" in result.summary


def test_bulk_complete_without_of_params_gets_the_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without of_params, cls is the task class itself; string answers are normalised."""
    monkeypatch.setattr(RgOwnRoot, "ROOT", tmp_path)
    monkeypatch.setattr(RgOwnRoot, "seen", [])
    _prepare(tmp_path, COMPLETE)
    task = RangeDaily(of=RgOwnRoot, start="2026-01-01", stop="2026-01-11")
    assert _required_days(task) == MISSING
    assert RgOwnRoot.seen == [RgOwnRoot]


def test_bulk_complete_declining_falls_back_to_complete(tmp_path: Path) -> None:
    """A bulk_complete() raising NotImplementedError makes the range call complete()."""
    _prepare(tmp_path, COMPLETE)
    task = _daily(RgNotBulk, tmp_path)
    assert _required_days(task) == MISSING
    assert len(CHECKED) == 10


def test_bulk_complete_returning_garbage_breaks_the_range(tmp_path: Path) -> None:
    """A bulk_complete() answer that is not an iterable of days is a TaskDefinitionError,
    and the build reports the range broken (exit code 3)."""
    task = _daily(RgBadBulk, tmp_path)
    with pytest.raises(conveyor.TaskDefinitionError, match=r"RgBadBulk.bulk_complete\(\)"):
        task.complete()
    result = conveyor.build(_daily(RgBadBulk, tmp_path))
    assert result.exit_code == 3
    assert "expected an iterable" in next(iter(result.errors.values()))


# --- task_limit, reverse, days_back ----------------------------------------------------------


def test_task_limit_requires_the_oldest_missing(tmp_path: Path) -> None:
    """task_limit=3 requires the 3 oldest missing days."""
    _prepare(tmp_path, COMPLETE)
    assert _required_days(_daily(RgDaily, tmp_path, task_limit=3)) == MISSING[:3]


def test_reverse_requires_the_newest_first(tmp_path: Path) -> None:
    """reverse: newest first; with task_limit the newest 2."""
    _prepare(tmp_path, COMPLETE)
    assert _required_days(_daily(RgDaily, tmp_path, reverse=True)) == MISSING[::-1]
    assert _required_days(_daily(RgDaily, tmp_path, reverse=True, task_limit=2)) == [
        D(2026, 1, 10),
        D(2026, 1, 8),
    ]


def test_a_limited_backfill_runs_its_batch_and_succeeds(tmp_path: Path) -> None:
    """Through the worker a task_limit'ed range runs its batch only and is done; the summary
    says how many were missing; the next run takes the next batch."""
    _prepare(tmp_path, COMPLETE)
    result = conveyor.build(_daily(RgDaily, tmp_path, task_limit=2))
    assert result.ok, result.summary
    assert "3 of 10 days were already complete; 7 missing, 2 required (task_limit 2)" in (
        result.summary
    )
    made = sorted(p.name for p in tmp_path.iterdir() if p.read_text() == "new\n")
    assert made == ["2026-01-01.txt", "2026-01-03.txt"]
    second = _daily(RgDaily, tmp_path, task_limit=2)
    assert _required_days(second) == [D(2026, 1, 4), D(2026, 1, 6)]


@pytest.mark.parametrize("executor", ["fork", "subprocess"])
def test_a_limited_backfill_under_a_process_executor(tmp_path: Path, executor: str) -> None:
    """With attempts in other processes a limited range succeeds, and its own attempt does
    not fail on the next batch (the worker sends it the requirements it knows, so the range
    is not scanned again there): no failed attempt, the range among the tasks that ran."""
    from conveyor.testing import RecordingPlugin

    _prepare(tmp_path, COMPLETE)
    recorder = RecordingPlugin()
    config = conveyor.Config().with_overrides(executor=executor, workers=2)
    with conveyor.Worker(config=config, plugins=[recorder]) as worker:
        worker.add(_daily(RgDaily, tmp_path, task_limit=2))
        assert worker.run()
    assert (tmp_path / "2026-01-03.txt").read_text() == "new\n"
    failed = recorder.events("conveyor_task_failed")
    assert failed == [], failed


def test_a_range_under_the_subprocess_executor(tmp_path: Path) -> None:
    """With attempts in fresh interpreters (the range rebuilt from its string form, its ``of``
    class found again there) the backfill succeeds."""
    _prepare(tmp_path, COMPLETE)
    result = conveyor.build(_daily(RgDaily, tmp_path), executor="subprocess", workers=2)
    assert result.ok, result.summary
    assert "3 of 10 days were already complete; 7 required" in result.summary


def test_days_back_limits_how_far_back_from_stop(tmp_path: Path) -> None:
    """days_back=4 keeps only the last 4 days before stop, whatever start says."""
    task = _daily(RgDaily, tmp_path, start="2020-01-01", days_back=4)
    assert _required_days(task) == _days(D(2026, 1, 7), 4)
    assert task.complete() is False
    assert task.summary_note() == "0 of 4 days were already complete; 4 required"


def test_an_empty_range_is_complete(tmp_path: Path) -> None:
    """start == stop is an empty range: complete, nothing required."""
    task = _daily(RgDaily, tmp_path, start="2026-01-05", stop="2026-01-05")
    assert task.complete() is True
    assert task.requires() == []


# --- parameters, stop's default, identity ----------------------------------------------------


def test_stop_defaults_to_tomorrow_utc_and_is_part_of_the_task_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop's default is computed when the task is made (so the range ends with today, UTC),
    is in the string form and the task id, and a rebuilt task keeps it."""
    clock = FakeClock(H(2026, 3, 4, 23, 30, tzinfo=datetime.UTC).timestamp())
    monkeypatch.setattr(RangeBase, "clock", clock)
    task = RangeDaily(of=RgDaily, start="2026-03-01", of_params={"root": str(tmp_path)})
    assert task.stop == D(2026, 3, 5)
    assert task.to_str_params()["stop"] == "2026-03-05"
    assert _required_days(task) == _days(D(2026, 3, 1), 4)

    clock.now += 3600  # past midnight UTC: a new day, a new range
    later = RangeDaily(of=RgDaily, start="2026-03-01", of_params={"root": str(tmp_path)})
    assert later.stop == D(2026, 3, 6)
    assert later.task_id != task.task_id
    assert RangeDaily.from_str_params(task.to_str_params()) == task


def test_of_is_a_task_class_with_a_string_form(tmp_path: Path) -> None:
    """of takes the class or its module.Family string; of_params are in the task id."""
    by_class = _daily(RgDaily, tmp_path)
    by_name = RangeDaily(
        of=f"{__name__}.RgDaily",
        of_params=json.dumps({"root": str(tmp_path)}),
        start="2026-01-01",
        stop="2026-01-11",
    )
    assert by_name == by_class
    assert by_class.to_str_params()["of"] == f"{__name__}.RgDaily"
    assert _daily(RgDaily, tmp_path / "x").task_id != by_class.task_id


def test_param_name_picks_the_parameter_that_takes_the_date() -> None:
    """By default the first DateParameter of_params does not set (not simply the first
    parameter); param_name chooses another."""
    task = RangeDaily(of=RgTwoDates, start="2026-01-01", stop="2026-01-03")
    assert [t.param_kwargs["day"] for t in task.requires()] == _days(D(2026, 1, 1), 2)
    skip_day = RangeDaily(
        of=RgTwoDates, start="2026-01-01", stop="2026-01-02", of_params={"day": "2025-05-05"}
    )
    assert skip_day.requires() == [RgTwoDates(day="2025-05-05", since="2026-01-01")]
    named = RangeDaily(of=RgTwoDates, start="2026-01-01", stop="2026-01-02", param_name="since")
    with pytest.raises(conveyor.ParameterError, match="missing required parameter 'day'"):
        named.requires()
    named = RangeDaily(
        of=RgTwoDates,
        start="2026-01-01",
        stop="2026-01-02",
        param_name="since",
        of_params={"day": "2025-05-05"},
    )
    assert named.requires() == [RgTwoDates(day="2025-05-05", since="2026-01-01")]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": "2026-02-01", "stop": "2026-01-01"}, "start 2026-02-01 is after stop"),
        ({"param_name": "nope"}, "param_name 'nope' is not a parameter of RgTwoDates"),
        ({"of_params": {"dya": 1}}, "of_params sets 'dya', which is not a parameter"),
        ({"days_back": -1}, "days_back must be >= 0"),
        ({"task_limit": -2}, "task_limit must be >= 0"),
        ({"start": "2026-13-01"}, "parameter 'start'"),
    ],
)
def test_bad_range_parameters_are_parameter_errors(kwargs: dict[str, Any], message: str) -> None:
    """Each bad combination fails at construction, naming the range and what is wrong."""
    given = {"of": RgTwoDates, "start": "2026-01-01", "stop": "2026-01-05", **kwargs}
    with pytest.raises(conveyor.ParameterError, match="RangeDaily: ") as caught:
        RangeDaily(**given)
    assert message in str(caught.value)


def test_repr_shows_of_start_stop_and_what_is_not_default(tmp_path: Path) -> None:
    """A range's label (in the summary and logs) leaves out parameters at their default."""
    task = RangeDaily(of=RgTwoDates, start="2026-01-01", stop="2026-01-05", task_limit=3)
    assert repr(task) == (
        f"RangeDaily(of={__name__}.RgTwoDates, task_limit=3, start=2026-01-01, stop=2026-01-05)"
    )


def test_range_base_is_not_a_range_itself() -> None:
    """RangeBase has no period: making one says which classes to use."""
    with pytest.raises(TypeError, match="use RangeDaily, RangeHourly or RangeMonthly"):
        RangeBase(of=RgTwoDates)


def test_of_must_be_a_task_class() -> None:
    """of = a class that is not a Task, or an unknown name, is a ParameterError."""
    with pytest.raises(conveyor.ParameterError, match="parameter 'of'"):
        RangeDaily(of=dict, start="2026-01-01")
    with pytest.raises(conveyor.ParameterError, match="parameter 'of'"):
        RangeDaily(of="no_such_module_xyz.Daily", start="2026-01-01")


# --- RangeHourly and RangeMonthly ------------------------------------------------------------


def test_range_hourly_requires_the_missing_hours_across_midnight(tmp_path: Path) -> None:
    """Hours from 22:00 to 02:00 (excluded) with 23:00 done: 3 hours are required and built."""
    (tmp_path / "2026-01-01T23.txt").write_text("old\n")
    task = RangeHourly(
        of=RgHourly, start="2026-01-01T22", stop="2026-01-02T02", of_params={"root": str(tmp_path)}
    )
    assert _required_days(task) == [H(2026, 1, 1, 22), H(2026, 1, 2, 0), H(2026, 1, 2, 1)]
    result = conveyor.build(task)
    assert result.ok, result.summary
    assert "1 of 4 hours were already complete; 3 required" in result.summary
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "2026-01-01T22.txt",
        "2026-01-01T23.txt",
        "2026-01-02T00.txt",
        "2026-01-02T01.txt",
    ]


def test_range_hourly_stop_default_and_hours_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """stop defaults to the next hour (UTC); hours_back keeps the last N hours; reverse and
    task_limit work as for days."""
    now = H(2026, 1, 2, 1, 59, 59, tzinfo=datetime.UTC)
    monkeypatch.setattr(RangeBase, "clock", FakeClock(now.timestamp()))
    task = RangeHourly(of=RgTwoDatesHourly, start="2025-01-01T00", hours_back=3)
    assert task.stop == H(2026, 1, 2, 2)
    assert task.to_str_params()["stop"] == "2026-01-02T02"
    assert _required_days(task, "at") == [H(2026, 1, 1, 23), H(2026, 1, 2, 0), H(2026, 1, 2, 1)]
    newest = RangeHourly(
        of=RgTwoDatesHourly, start="2025-01-01T00", hours_back=3, reverse=True, task_limit=1
    )
    assert _required_days(newest, "at") == [H(2026, 1, 2, 1)]


class RgTwoDatesHourly(conveyor.Task):
    """An hourly task whose first parameter is not the hour."""

    label = conveyor.Parameter(default="x")
    at = DateHourParameter()

    def complete(self) -> bool:
        """Never complete."""
        return False


def test_range_monthly_requires_the_missing_months(tmp_path: Path) -> None:
    """Months from 2025-11 to 2026-03 (excluded) with 2025-12 done: 3 required and built."""
    (tmp_path / "2025-12.txt").write_text("old\n")
    task = RangeMonthly(
        of=RgMonthly, start="2025-11", stop="2026-03", of_params={"root": str(tmp_path)}
    )
    assert _required_days(task) == [D(2025, 11, 1), D(2026, 1, 1), D(2026, 2, 1)]
    result = conveyor.build(task)
    assert result.ok, result.summary
    assert "1 of 4 months were already complete; 3 required" in result.summary
    assert (tmp_path / "2026-02.txt").read_text() == "new\n"


def test_range_monthly_stop_default_rolls_over_the_year(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In December stop defaults to January 1st of the next year; months_back counts back."""
    now = H(2026, 12, 15, 12, tzinfo=datetime.UTC)
    monkeypatch.setattr(RangeBase, "clock", FakeClock(now.timestamp()))
    task = RangeMonthly(
        of=RgMonthly, start="2020-01", months_back=14, of_params={"root": str(tmp_path)}
    )
    assert task.stop == D(2027, 1, 1)
    assert task.to_str_params()["stop"] == "2027-01"
    months = _required_days(task)
    assert months[0] == D(2025, 11, 1) and months[-1] == D(2026, 12, 1) and len(months) == 14


# --- the command line ------------------------------------------------------------------------


def test_range_daily_from_the_cli(
    run_cli: RunCli, task_module: WriteModule, tmp_path: Path
) -> None:
    """``conveyor run conveyor.RangeDaily --of mod.Daily --start ...`` backfills the missing
    days and prints the count of complete ones in the summary."""
    module = task_module(
        """
        import conveyor


        class Daily(conveyor.Task):
            day = conveyor.DateParameter()
            root = conveyor.PathParameter(significant=False)

            def output(self):
                return conveyor.LocalTarget(self.root / f"{self.day}.txt")

            def run(self):
                with self.output().open("w") as out:
                    out.write("new\\n")
        """
    )
    data = tmp_path / "data"
    data.mkdir()
    _prepare(data, COMPLETE)
    proc = run_cli(
        "run",
        "conveyor.RangeDaily",
        "--of",
        f"{module}.Daily",
        "--start",
        "2026-01-01",
        "--stop",
        "2026-01-11",
        "--of-params",
        json.dumps({"root": str(data)}),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "3 of 10 days were already complete; 7 required" in proc.stdout
    assert sorted(p.name for p in data.iterdir() if p.read_text() == "new\n") == [
        f"{d}.txt" for d in MISSING
    ]
