"""A summary people can read: broken tasks named with their reason, natural order, short
labels, the run's duration, the progress line's total/percentage/elapsed/ETA, and the console
level of ``conveyor run`` on a terminal (warning under the progress line, info one flag away)."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import conveyor
from conveyor.core.summary import format_duration, natural_key
from conveyor.log import resolve_level
from conveyor.progress import ProgressPlugin, progress_line
from conveyor.testing import FakeClock

WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)


def _run(*tasks: conveyor.Task, clock: FakeClock | None = None) -> conveyor.Worker:
    """Run ``tasks`` with one inline worker (optionally on a fake clock) and return it."""
    config = conveyor.Config().with_overrides(executor="inline", install_signal_handlers=False)
    with conveyor.Worker(config=config, clock=clock or FakeClock()) as worker:
        for task in tasks:
            worker.add(task)
        worker.run()
    return worker


def _section(summary: str, heading: str) -> list[str]:
    """The lines listed under the summary heading that ends with ``heading``."""
    lines = summary.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith(f" {heading}:"))
    listed = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        listed.append(line.strip())
    return listed


# --- broken tasks: the right one, with its reason ---------------------------------------------


class SaysYes(conveyor.Task):
    """complete() answers a string instead of a bool."""

    def complete(self) -> bool:
        return "yes"  # type: ignore[return-value]


class ShareDown(conveyor.Task):
    """complete() raises."""

    def complete(self) -> bool:
        raise OSError("share down")


class BadRequires(conveyor.Task):
    """requires() raises."""

    def complete(self) -> bool:
        return False

    def requires(self) -> list[conveyor.Task]:
        raise ValueError("no way")


class Inner(conveyor.WrapperTask):
    """A wrapper over the task that answers 'yes'."""

    def requires(self) -> list[conveyor.Task]:
        return [SaysYes()]


class Outer(conveyor.WrapperTask):
    """A wrapper over a wrapper over the broken task."""

    def requires(self) -> conveyor.Task:
        return Inner()


class OverRaising(conveyor.WrapperTask):
    """A wrapper over a task whose complete() raises."""

    def requires(self) -> list[conveyor.Task]:
        return [ShareDown()]


def test_the_broken_task_under_wrappers_is_named_with_its_reason_and_they_stay_pending() -> None:
    """A non-bool complete() two wrappers down is reported broken with the value it returned,
    and the wrappers above it as left pending because of it (exit code 3)."""
    worker = _run(Outer())
    report = worker.report
    assert report is not None
    assert report.exit_code == 3
    assert _section(report.summary, "failed scheduling") == [
        "- SaysYes: broken: complete() returned 'yes' (str); expected a bool (True or False)"
    ]
    assert _section(report.summary, "were left pending because an upstream task failed") == [
        "- 1 Inner: Inner",
        "- 1 Outer: Outer",
    ]
    assert report.states[Outer().task_id] == "PENDING"
    assert report.states[SaysYes().task_id] == "UNKNOWN"


def test_a_raising_complete_below_a_wrapper_is_blamed_on_its_own_task() -> None:
    """A complete() that raises below a wrapper makes that task broken, not the wrapper, and
    its line gives the exception."""
    worker = _run(OverRaising())
    report = worker.report
    assert report is not None and report.exit_code == 3
    assert _section(report.summary, "failed scheduling") == [
        "- ShareDown: broken: complete() raised OSError: share down"
    ]
    assert report.states[OverRaising().task_id] == "PENDING"


def test_a_raising_requires_is_given_as_the_reason() -> None:
    """A requires() that raises is listed with the exception it raised."""
    report = _run(BadRequires()).report
    assert report is not None and report.exit_code == 3
    assert _section(report.summary, "failed scheduling") == [
        "- BadRequires: broken: requires() raised ValueError: no way"
    ]


# --- natural order, short labels, secrets ------------------------------------------------------


class Numbered(conveyor.Task):
    """Done when run; fails when ``fail`` is set."""

    n = conveyor.IntParameter()
    fail = conveyor.BoolParameter(default=False)

    def complete(self) -> bool:
        return self.task_id in RAN

    def run(self) -> None:
        if self.fail:
            raise RuntimeError(f"number {self.n}")
        RAN.add(self.task_id)


RAN: set[str] = set()  # ids of the tasks whose run() succeeded


class Many(conveyor.WrapperTask):
    """Numbered tasks, in a scrambled order, some of them failing."""

    def requires(self) -> list[conveyor.Task]:
        return [Numbered(n=n, fail=n % 2 == 0) for n in (10, 2, 11, 1, 3, 20)]


def test_failed_and_done_lists_are_in_natural_order() -> None:
    """n=2 is listed before n=10 in the failed lines and in a family's done line."""
    RAN.clear()
    summary = _run(Many()).report.summary  # type: ignore[union-attr]
    failed = _section(summary, "failed")
    assert [re.sub(r":.*", "", line) for line in failed] == [
        "- Numbered(n=2, fail=true)",
        "- Numbered(n=10, fail=true)",
        "- Numbered(n=20, fail=true)",
    ]
    assert failed[0].endswith(": failed: RuntimeError: number 2")


class Chatty(conveyor.Task):
    """Succeeds; has several numbered parameters."""

    part = conveyor.Parameter()

    def complete(self) -> bool:
        return self.part in DONE

    def run(self) -> None:
        DONE.add(self.part)


DONE: set[str] = set()


class Parts(conveyor.WrapperTask):
    """Parts whose names hold numbers."""

    def requires(self) -> list[conveyor.Task]:
        return [Chatty(part=f"p{n}-v{v}") for n, v in ((10, 1), (2, 10), (2, 9), (1, 1))]


def test_a_done_family_line_lists_labels_in_natural_order() -> None:
    """Digit runs compare as numbers in every position: p2-v9 before p2-v10 before p10."""
    DONE.clear()
    summary = _run(Parts()).report.summary  # type: ignore[union-attr]
    assert "- 4 Chatty: Chatty(part=p1-v1), Chatty(part=p2-v9), Chatty(part=p2-v10), " in summary
    assert summary.count("Chatty(part=p10-v1)") == 1
    assert natural_key("n=2") < natural_key("n=10") < natural_key("n=10a")


class Wordy(conveyor.Task):
    """Fails; its parameters are long, one holds a URL with credentials, one is a secret."""

    text = conveyor.Parameter()
    url = conveyor.Parameter()
    api_token = conveyor.Parameter()

    def complete(self) -> bool:
        return False

    def run(self) -> None:
        raise RuntimeError("too long")


def test_long_values_are_cut_with_an_ellipsis_after_their_secrets_are_hidden() -> None:
    """A 100-character value shows 40 characters, … in the middle; a long URL's credentials
    and a secret parameter's value never show, not even in part."""
    url = "https://alice:hunter2hunter2@example.org/" + "a" * 80
    task = Wordy(text="x" * 100, url=url, api_token="tok-" + "s" * 60)
    summary = _run(task).report.summary  # type: ignore[union-attr]
    [line] = _section(summary, "failed")
    label = line.removeprefix("- ").split(": failed:")[0]
    assert label == (
        f"Wordy(text={'x' * 19}…{'x' * 20}, url=https://***@example…{'a' * 20}, api_token=***)"
    )
    assert "hunter" not in summary and "alice" not in summary and "sss" not in summary


# --- the verdict's duration --------------------------------------------------------------------

CLOCK = FakeClock()


class TakesTime(conveyor.Task):
    """Makes the fake clock advance by ``seconds`` while it runs."""

    seconds = conveyor.FloatParameter()

    def complete(self) -> bool:
        return self.task_id in RAN

    def run(self) -> None:
        CLOCK.advance(self.seconds)
        RAN.add(self.task_id)


def test_the_verdict_says_how_long_the_run_took() -> None:
    """The verdict gives the run's wall time, from worker_started to worker_stopped."""
    RAN.clear()
    summary = _run(TakesTime(seconds=125.2), clock=CLOCK).report.summary  # type: ignore[union-attr]
    assert summary.splitlines()[-1] == (
        "Verdict: succeeded in 2 min 5 s - every requested task is complete."
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.04, "0.0 s"), (3.24, "3.2 s"), (42.4, "42 s"), (125, "2 min 5 s"), (3725, "1 h 2 min")],
)
def test_durations_read_like_a_person_would_say_them(seconds: float, text: str) -> None:
    """Short durations keep a decimal; longer ones are minutes and seconds, then hours."""
    assert format_duration(seconds) == text


# --- the progress line -------------------------------------------------------------------------


def test_the_progress_line_shows_total_percentage_elapsed_and_eta() -> None:
    """Done of total with a percentage, the other counts, the elapsed time, and an ETA from
    the average rate of the finished tasks; no ETA before anything finished or at the end."""
    assert progress_line(3, 1, 5, 1, 40.0) == (
        "conveyor: 3/10 done (30%) · 1 running · 5 pending · 1 failed · 40 s elapsed · "
        "ETA 1 min 0 s"
    )
    assert "ETA" not in progress_line(0, 2, 8, 0, 40.0)
    assert progress_line(3, 1, 5, 1, 40.0, final=True).endswith("· 40 s elapsed")
    assert (
        progress_line(0, 0, 4, 0, None)
        == "conveyor: 0/4 done (0%) · 0 running · 4 pending · 0 failed"
    )


def test_the_progress_plugin_counts_elapsed_time_from_the_start_of_the_run() -> None:
    """Through a real run on a fake clock, the last line has the run's elapsed time and no ETA."""
    clock = FakeClock()
    stream = io.StringIO()
    RAN.clear()
    progress = ProgressPlugin(stream, min_interval=0.0, clock=clock.monotonic, tick=0)
    config = conveyor.Config().with_overrides(executor="inline", install_signal_handlers=False)
    global CLOCK
    CLOCK, before = clock, CLOCK
    try:
        with conveyor.Worker(config=config, clock=clock, plugins=[progress]) as worker:
            worker.add(TakesTime(seconds=90))
            worker.run()
    finally:
        CLOCK = before
    last = stream.getvalue().rstrip("\n").split("\r\x1b[K")[-1]
    assert (
        last == "conveyor: 1/1 done (100%) · 0 running · 0 pending · 0 failed · 1 min 30 s elapsed"
    )


# --- the console level of `conveyor run` --------------------------------------------------------


def test_level_auto_is_warning_under_the_progress_line_else_info() -> None:
    """'auto' resolves to warning where the progress line is drawn, to info elsewhere; an
    explicit level stays as it is."""
    assert resolve_level("auto", progress_line=True) == "warning"
    assert resolve_level("auto", progress_line=False) == "info"
    assert resolve_level("info", progress_line=True) == "info"
    assert conveyor.Config().logging.level == "auto"


LOGGING_TASK = """
import logging
import os

import conveyor


class Talks(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "talks.out"))

    def run(self):
        logging.getLogger("talks").info("INFO-FROM-RUN")
        logging.getLogger("talks").warning("WARNING-FROM-RUN")
        with self.output().open("w") as out:
            out.write("ok")
"""


def _run_on_a_terminal(tmp_path: Path, module: str, *extra: str) -> str:
    """``conveyor run <module>.Talks`` with stderr on a pseudo-terminal; what it showed there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["PYTHONPATH"] = str(tmp_path)
    root = tmp_path / f"out{len(extra)}"
    args = [sys.executable, "-m", "conveyor", "run", f"{module}.Talks", "--root", str(root)]
    primary, secondary = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal's other end is closed: the run is over
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc = subprocess.run(
            [*args, "--executor", "fork", *extra],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=secondary,
            timeout=60,
            check=False,
        )
        os.close(secondary)
        reader.join(timeout=10)
    finally:
        os.close(primary)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def test_conveyor_run_on_a_terminal_shows_warnings_not_info_unless_asked(
    tmp_path: Path, task_module: WriteModule
) -> None:
    """On a terminal the default level is warning: the task's warning (logged in its forked
    process) and the progress line show, its info line and the transition events do not;
    ``--log-level info`` brings them back."""
    module = task_module(LOGGING_TASK)
    screen = _run_on_a_terminal(tmp_path, module)
    assert "WARNING-FROM-RUN" in screen
    assert "INFO-FROM-RUN" not in screen and "task_started" not in screen
    assert "conveyor: 1/1 done (100%)" in screen
    verbose = _run_on_a_terminal(tmp_path, module, "--log-level", "info")
    assert "INFO-FROM-RUN" in verbose and "task_started" in verbose
