"""Regressions found by trying conveyor as a new user would (issue 7), each with real processes
where the bug involves them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import conveyor
from conveyor.testing import RecordingPlugin

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
