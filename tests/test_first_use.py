"""Regressions found by trying conveyor as a new user would (issue 7), each with real processes
where the bug involves them."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.testing import RecordingPlugin, timeless

RunCli = Callable[..., subprocess.CompletedProcess[str]]
WriteModule = Callable[..., str]

EXECUTORS = [("inline", 1), ("thread", 2), ("fork", 2), ("subprocess", 2)]


BASE_EXCEPTIONS = '''
import os
import sys

import conveyor


class Custom(BaseException):
    """A BaseException that is not an Exception."""


class Healthy(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "healthy"))

    def run(self):
        with self.output().open("w") as out:
            out.write("ok")


class Exits(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "exits"))

    def run(self):
        sys.exit(3)


class RaisesCustom(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "custom"))

    def run(self):
        raise Custom("not an Exception")


class All(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Exits(root=self.root), RaisesCustom(root=self.root), Healthy(root=self.root)]
'''


def _config(**worker: object) -> conveyor.Config:
    return conveyor.Config().with_overrides(**worker)


@pytest.mark.parametrize(("executor", "workers"), EXECUTORS)
def test_base_exceptions_fail_only_their_task(
    executor: str,
    workers: int,
    tmp_path: Path,
    task_module: WriteModule,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SystemExit(3) and a custom BaseException fail their own task, under every executor; the
    explanation names the exception, the hooks say failed, and the healthy sibling runs."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    module = __import__(task_module(BASE_EXCEPTIONS))
    root = str(tmp_path / "out")
    recorder = RecordingPlugin()
    with conveyor.Worker(
        config=_config(executor=executor, workers=workers), plugins=[recorder]
    ) as worker:
        assert worker.add(module.All(root=root))
        assert worker.run() is False  # two of the tasks it ran failed
    report = worker.report
    assert report is not None
    exits, custom = module.Exits(root=root), module.RaisesCustom(root=root)
    assert report.states[module.Healthy(root=root).task_id] == "DONE"
    assert report.states[exits.task_id] == "FAILED"
    assert report.states[custom.task_id] == "FAILED"
    assert "SystemExit: 3" in report.errors[exits.task_id]
    assert "Custom: not an Exception" in report.errors[custom.task_id]
    failed = {e.task_id: e for e in recorder.events("task_failed")}
    assert failed[exits.task_id].exception_type == "SystemExit"
    assert failed[custom.task_id].exception_type == "Custom"
    assert not recorder.events("task_process_died")
    assert report.exit_code == 1
    assert "SystemExit: 3" in report.summary


BROKEN_SIBLING = """
import os

import conveyor


class Good(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "good"))

    def run(self):
        with self.output().open("w") as out:
            out.write("ok")


class BadComplete(conveyor.Task):
    def complete(self):
        raise RuntimeError("complete() is broken")


class Root(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Good(root=self.root), BadComplete()]
"""


def test_run_is_true_when_everything_it_ran_succeeded(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """A broken sibling makes add() False, but run() is True when the healthy branch it ran
    succeeded (Luigi's semantics); the CLI still exits 3 for the scheduling error."""
    name = task_module(BROKEN_SIBLING)
    module = __import__(name)
    root = str(tmp_path / "out")
    with conveyor.Worker(config=conveyor.Config()) as worker:
        assert worker.add(module.Root(root=root)) is False
        assert worker.run() is True
    assert os.path.exists(os.path.join(root, "good"))
    assert worker.report is not None and worker.report.exit_code == 3
    result = run_cli("run", f"{name}.Root", "--root", root + "-cli", cwd=tmp_path)
    assert result.returncode == 3, result.stderr


def test_run_without_a_task_is_a_usage_error(tmp_path: Path, run_cli: RunCli) -> None:
    """``conveyor run`` alone prints run's usage on stderr and exits 2; --help exits 0."""
    result = run_cli("run", cwd=tmp_path)
    assert result.returncode == 2
    assert "usage: conveyor run" in result.stderr
    assert result.stdout == ""
    helped = run_cli("run", "--help", cwd=tmp_path)
    assert helped.returncode == 0
    assert "usage: conveyor run" in helped.stdout


OUTCOMES = """
import os
import time

import conveyor


class Fine(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "fine"))

    def run(self):
        with self.output().open("w") as out:
            out.write("ok")


class Fails(conveyor.Task):
    root = conveyor.Parameter()
    api_token = conveyor.Parameter(default="hunter2-secret-value")

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "fails"))

    def run(self):
        raise ValueError(f"bad input near {self.api_token}")


class Slow(conveyor.Task):
    root = conveyor.Parameter()
    worker_timeout = 0.5

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "slow"))

    def run(self):
        time.sleep(60)


class Dies(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "dies"))

    def run(self):
        os._exit(4)


class Broken(conveyor.Task):
    def complete(self):
        raise RuntimeError("cannot tell")


class All(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [
            Fine(root=self.root),
            Fails(root=self.root),
            Slow(root=self.root),
            Dies(root=self.root),
            Broken(),
        ]
"""


def _json_lines(text: str) -> list[dict[str, object]]:
    import json

    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_each_transition_is_one_log_event_at_a_fitting_level(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """A failure, a timeout, a dead process and a broken task are each one error event (the
    failure's with its explanation, secrets hidden); a success is one info event."""
    name = task_module(OUTCOMES)
    result = run_cli(
        "run", f"{name}.All", "--root", str(tmp_path / "out"), "--workers", "2",
        "--executor", "fork", "--log-format", "json", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    records = _json_lines(result.stderr)

    def about(family: str) -> list[dict[str, object]]:
        return [r for r in records if r.get("family") == family]

    ends = {"task_succeeded", "task_failed", "task_timed_out", "task_process_died", "task_broken"}
    expected = {
        "Fine": ("task_succeeded", "info"),
        "Fails": ("task_failed", "error"),
        "Slow": ("task_timed_out", "error"),
        "Dies": ("task_process_died", "error"),
        "Broken": ("task_broken", "error"),
    }
    for family, (event, level) in expected.items():
        ending = [r for r in about(family) if r["event"] in ends]
        assert [(r["event"], r["level"]) for r in ending] == [(event, level)], family
        assert all(r["state"] and r["worker_id"] and r["task_id"] for r in ending)
    failed = next(r for r in about("Fails") if r["event"] == "task_failed")
    assert "ValueError: bad input near ***" in str(failed["error"])
    assert "hunter2-secret-value" not in result.stderr
    assert "cannot tell" in str(next(r for r in about("Broken"))["error"])
    assert not any(r["event"] in ("task failed", "task broken") for r in records)


def test_summary_says_how_each_failed_task_ended(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """Failed, timed-out and dead tasks each get one line in the summary saying how they ended
    and, for a failure, the line naming its error, with secrets hidden."""
    name = task_module(OUTCOMES)
    result = run_cli(
        "run", f"{name}.All", "--root", str(tmp_path / "out"), "--workers", "2",
        "--executor", "fork", "--log-level", "critical", cwd=tmp_path,
    )  # fmt: skip
    lines = result.stdout.splitlines()
    assert "* 3 failed:" in lines
    assert "    - Dies(root=" in result.stdout
    assert any(
        line.startswith("    - Dies(") and line.endswith("): process died with exit code 4")
        for line in lines
    )
    assert any(
        line.startswith("    - Slow(") and line.endswith("): timed out after 0.5 s")
        for line in lines
    )
    assert any(
        line.startswith("    - Fails(")
        and line.endswith("): failed: ValueError: bad input near ***")
        for line in lines
    )
    assert "hunter2-secret-value" not in result.stdout


def test_console_logs_show_tracebacks_as_lines_and_json_keeps_one_string(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """In console format a failure's traceback is printed as readable lines after the log line;
    in JSON it stays one string field."""
    name = task_module(OUTCOMES)
    root = str(tmp_path / "out")
    console = run_cli(
        "run", f"{name}.Fails", "--root", root, "--log-format", "console", cwd=tmp_path
    )  # fmt: skip
    lines = console.stderr.splitlines()
    assert "Traceback (most recent call last):" in lines
    assert "ValueError: bad input near ***" in lines
    failed = next(line for line in lines if "task_failed" in line)
    assert "error='ValueError: bad input near ***'" in failed
    assert "\\n" not in failed
    as_json = run_cli("run", f"{name}.Fails", "--root", root, "--log-format", "json", cwd=tmp_path)
    record = next(r for r in _json_lines(as_json.stderr) if r["event"] == "task_failed")
    error = str(record["error"])
    assert error.startswith("Traceback (most recent call last):")
    assert "\n" in error


def _screen(raw: str) -> list[str]:
    """What a terminal shows after ``raw``: carriage returns, erase-line and newlines applied,
    colour codes dropped (a minimal emulator of the sequences conveyor writes)."""

    lines = [""]
    col = 0
    for token in re.findall(r"\x1b\[[0-9;]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", raw):
        line = lines[-1]
        if token == "\r":
            col = 0
        elif token == "\n":
            lines.append("")
            col = 0
        elif token == "\x1b[K":
            lines[-1] = line[:col]
        elif token.startswith("\x1b["):
            continue
        else:
            lines[-1] = line[:col].ljust(col) + token + line[col + len(token) :]
            col += len(token)
    return lines


def test_screen_emulator_applies_clears() -> None:
    """The emulator used below overwrites after a carriage return and erases with ESC[K."""
    assert _screen("abc\r\x1b[Kxy\nnext") == ["xy", "next"]
    assert _screen("status\rlog") == ["logtus"]


LOGGING_TASKS = """
import os

import structlog

import conveyor


class Noisy(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, f"noisy-{self.n}"))

    def run(self):
        structlog.get_logger("tasks").warning("inside run", n=self.n)
        if self.n % 2:
            raise RuntimeError(f"odd {self.n}")
        with self.output().open("w") as out:
            out.write("ok")


class Many(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Noisy(root=self.root, n=n) for n in range(8)]
"""


@pytest.mark.parametrize(("executor", "workers"), [("inline", 1), ("fork", 2), ("subprocess", 2)])
def test_progress_line_never_shares_a_line_with_a_log_line(
    executor: str, workers: int, tmp_path: Path, task_module: WriteModule
) -> None:
    """On a terminal (a pty), every log line — the worker's and the tasks' own, from child
    processes too — is on a line of its own, and the progress line ends the output."""
    import pty
    import sys
    import threading

    name = task_module(LOGGING_TASKS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["PYTHONPATH"] = str(tmp_path)
    args = [
        sys.executable, "-m", "conveyor", "run", f"{name}.Many", "--root", str(tmp_path / "o"),
        "--executor", executor, "--workers", str(workers), "--log-level", "warning",
    ]  # fmt: skip
    primary, secondary = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc = subprocess.run(
            args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=secondary, timeout=60,
            check=False,
        )  # fmt: skip
        os.close(secondary)
        reader.join(timeout=10)
    finally:
        os.close(primary)
    assert proc.returncode == 1
    raw = b"".join(chunks).decode()
    assert "\nconveyor: " in raw  # the status line is drawn again right after a log line
    screen = [line for line in _screen(raw) if line.strip()]
    logs = [line for line in screen if "[warning" in line or "[error" in line]
    assert len([line for line in logs if "inside run" in line]) == 8
    assert len([line for line in logs if "task_failed" in line]) == 4
    for line in logs:
        assert "conveyor: " not in line, screen
        assert line.count("[warning") + line.count("[error") == 1, screen
    assert screen[-1].startswith("conveyor: 4/9 done (44%) · 0 running · 1 pending · 4 failed · ")


README = Path(__file__).resolve().parent.parent / "README.md"


def _readme_plugin() -> tuple[str, str]:
    """The README's plugin example (the code block after 'Extend it with a plugin') and the
    ``[plugins] local`` entry the README tells people to write."""

    text = README.read_text(encoding="utf-8")
    block = re.search(r"Extend it with a plugin:\s*```python\n(.*?)```", text, re.S)
    entry = re.search(r'`\[plugins\] local = \["([^"]+)"\]`', text)
    assert block is not None and entry is not None
    return block.group(1), entry.group(1)


def test_readme_plugin_example_works_when_copied_literally(tmp_path: Path, run_cli: RunCli) -> None:
    """The README's Durations plugin, saved as mymodule.py and named in [plugins] local as the
    README says, prints a duration for each task that succeeds."""
    code, entry = _readme_plugin()
    (tmp_path / "mymodule.py").write_text("import conveyor\n\n" + code, encoding="utf-8")
    (tmp_path / "tasks_rd.py").write_text(
        "import conveyor, os\n"
        "class T(conveyor.Task):\n"
        "    def output(self):\n"
        "        return conveyor.LocalTarget('t.out')\n"
        "    def run(self):\n"
        "        self.output().open('w').close()\n",
        encoding="utf-8",
    )
    (tmp_path / "worker.toml").write_text(f'[plugins]\nlocal = ["{entry}"]\n', encoding="utf-8")
    result = run_cli("run", "tasks_rd.T", "--log-level", "warning", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("T_") for line in result.stdout.splitlines()), result.stdout
    assert "no hook implementation" not in result.stderr


def test_local_plugin_module_without_hooks_is_a_warning_naming_the_class(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """``local = ["mymodule"]`` for a module whose hooks are methods of a class warns, names
    'mymodule:Durations', and ``conveyor plugins`` marks the entry."""
    code, _ = _readme_plugin()
    (tmp_path / "mymodule.py").write_text("import conveyor\n\n" + code, encoding="utf-8")
    (tmp_path / "worker.toml").write_text('[plugins]\nlocal = ["mymodule"]\n', encoding="utf-8")
    (tmp_path / "tasks_nh.py").write_text(
        "import conveyor\nclass W(conveyor.WrapperTask):\n    pass\n", encoding="utf-8"
    )
    result = run_cli("run", "tasks_nh.W", "--log-level", "warning", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "local plugin 'mymodule' defines no hook implementation" in result.stderr
    assert "'mymodule:Durations'" in result.stderr
    listed = run_cli("plugins", cwd=tmp_path)
    row = next(line for line in listed.stdout.splitlines() if " mymodule " in f" {line} ")
    assert "(local)" in row
    assert "WARNING:" in row and "'mymodule:Durations'" in row
    as_json = run_cli("plugins", "--json", cwd=tmp_path)
    import json

    entry = next(p for p in json.loads(as_json.stdout) if p["name"] == "mymodule")
    assert entry["loads"] is True and "mymodule:Durations" in entry["warning"]


HELP_TASKS = '''
import enum

import conveyor


class Color(enum.Enum):
    red = 1
    blue = 2


class Good(conveyor.Task):
    """Makes something good."""

    region = conveyor.ChoiceParameter(choices=["eu", "us"], default="eu", description="where")
    color = conveyor.EnumParameter(enum=Color)
    api_key = conveyor.Parameter(default="very-secret-default")
    dry = conveyor.BoolParameter()
'''


def test_run_help_describes_every_option_and_keeps_the_module(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """``conveyor run --help`` describes every option with its allowed values, and after TASK
    the usage line names the task as it is typed (module.Family) and lists its parameters."""
    from conveyor.cli import _RUN_OPTIONS

    general = run_cli("run", "--help", cwd=tmp_path)
    assert general.returncode == 0
    after_options = run_cli("run", "--workers", "2", "--help", cwd=tmp_path)
    assert after_options.returncode == 0 and after_options.stdout == general.stdout
    for flag in _RUN_OPTIONS:
        line = next(line for line in general.stdout.splitlines() if line.strip().startswith(flag))
        assert len(line.split()) > 2, f"{flag} has no description: {line!r}"
    flat = " ".join(general.stdout.split())
    assert "inline, thread, fork, subprocess" in flat
    assert "debug, info, warning, error or critical" in flat
    assert "Exit codes:" in flat
    name = task_module(HELP_TASKS)
    for args in (("run", f"{name}.Good", "--help"), ("run", "Good", "--module", name, "-h")):
        task_help = run_cli(*args, cwd=tmp_path)
        assert task_help.returncode == 0, task_help.stderr
        text = " ".join(task_help.stdout.split())
        assert text.startswith(f"usage: conveyor run {name}.Good [--region {{eu,us}}]")
        assert "where; one of: eu, us; default: 'eu'" in text
        assert "one of: red, blue; required" in text
        assert "--dry, --no-dry" in text
        assert "default: ***" in text and "very-secret-default" not in text
        assert "Makes something good." in text


LONG_SECRET = """
import os

import conveyor


class Leaky(conveyor.Task):
    api_token = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(os.environ["LEAKY_ROOT"], "leaky"))

    def run(self):
        raise PermissionError("x" * 150 + " denied for token " + self.api_token)
"""


def test_a_secret_cut_by_the_summary_line_limit_is_still_hidden(
    tmp_path: Path, task_module: WriteModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary line is cut after secrets are hidden, so no start of a secret shows."""
    monkeypatch.setenv("LEAKY_ROOT", str(tmp_path))
    module = __import__(task_module(LONG_SECRET))
    secret = "hunter2-0123456789abcdef"
    result = conveyor.build(module.Leaky(api_token=secret))
    assert "hunter2" not in result.summary
    assert "PermissionError: xxx" in result.summary


class _InterruptOnStart:
    """Interrupts the worker as soon as ``count`` attempts have started."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.worker: conveyor.Worker | None = None

    @conveyor.hookimpl
    def conveyor_task_started(self, event: object) -> None:
        self.count -= 1
        if self.count == 0 and self.worker is not None:
            self.worker.interrupt("SIGTERM")


class _InterruptOnMessages:
    """Interrupts the worker once ``count`` running attempts have sent a status message, then
    opens ``gate`` so that they can finish (so both surely run at the interruption)."""

    def __init__(self, count: int, gate: Any) -> None:
        self.count = count
        self.gate = gate
        self.worker: conveyor.Worker | None = None

    @conveyor.hookimpl
    def conveyor_task_status_message(self, event: object) -> None:
        self.count -= 1
        if self.count == 0 and self.worker is not None:
            self.worker.interrupt("SIGTERM")
            self.gate.set()


SLOW_PAIR = """
import os
import threading

import conveyor

GATE = threading.Event()  # set by the test once the worker is interrupted


class Slow(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, f"slow-{self.n}"))

    def run(self):
        self.set_status_message("running")
        if not GATE.wait(30):
            raise RuntimeError("the gate never opened")
        with self.output().open("w") as out:
            out.write("ok")


class Pair(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Slow(root=self.root, n=0), Slow(root=self.root, n=1)]
"""


def test_interrupted_thread_attempts_are_said_to_be_left_to_finish(
    tmp_path: Path, task_module: WriteModule
) -> None:
    """Thread attempts cannot be stopped: the verdict says they were running and left to
    finish, not that no task was running."""
    module = __import__(task_module(SLOW_PAIR))
    trigger = _InterruptOnMessages(2, module.GATE)
    config = conveyor.Config().with_overrides(
        executor="thread", workers=2, install_signal_handlers=False
    )
    with conveyor.Worker(config=config, plugins=[trigger]) as worker:
        trigger.worker = worker
        worker.add(module.Pair(root=str(tmp_path)))
        worker.run()
    assert worker.report is not None and worker.report.exit_code == 143
    assert timeless(worker.report.summary.splitlines()[-1]) == (
        "Verdict: interrupted by SIGTERM - 2 task(s) were running: 0 stopped and reported "
        "failed, 2 left to finish."
    )


@pytest.mark.parametrize(("executor", "workers"), [("inline", 1), ("fork", 2)])
def test_an_interruption_while_an_attempt_is_set_up_stops_it_before_it_runs(
    executor: str, workers: int, tmp_path: Path, task_module: WriteModule
) -> None:
    """SIGTERM arriving between the hand-out and the executor's start (here: in the
    task_started hook) fails the attempt as interrupted; run() is never entered."""
    module = __import__(task_module(SLOW_PAIR))
    trigger = _InterruptOnStart(1)
    recorder = RecordingPlugin()
    config = conveyor.Config().with_overrides(
        executor=executor, workers=workers, install_signal_handlers=False
    )
    with conveyor.Worker(config=config, plugins=[trigger, recorder]) as worker:
        trigger.worker = worker
        worker.add(module.Slow(root=str(tmp_path), n=7))
        worker.run()
    assert not (tmp_path / "slow-7").exists()
    [failed] = recorder.events("task_failed")
    assert failed.exception_type == "Interrupted"
    assert worker.report is not None and worker.report.exit_code == 143
    assert timeless(worker.report.summary.splitlines()[-1]) == (
        "Verdict: interrupted by SIGTERM - 1 running task(s) were stopped and reported failed."
    )


def test_conveyor_plugins_lists_plugins_even_with_a_broken_worker_toml(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """A worker.toml that does not validate does not stop ``conveyor plugins`` from listing
    what is installed; it warns that the local plugins were not listed."""
    (tmp_path / "worker.toml").write_text('[worker]\nworkers = "lots"\n', encoding="utf-8")
    result = run_cli("plugins", cwd=tmp_path)
    assert "conveyor.executors" in result.stdout
    assert "warning: [plugins] local not listed" in result.stderr
    assert result.returncode in (0, 1)
