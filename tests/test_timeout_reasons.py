"""A timeout says whether it fired before ``run()`` started, and what the attempt's process was
still doing then (its start-up, or checking the task's dependencies), with real processes.

The attempts are held where each case needs them, never raced against the clock: a task module
that blocks at import inside an attempt process (so its start-up cannot end before a 1 s
timeout, however fast the machine is), a dependency whose ``complete()`` blocks there, and a
``run()`` that blocks until it is killed. Each blocks until a file appears that no test
creates, so the timeout's kill is what ends it.

The two cases after start-up use the ``fork`` executor, whose children are forked from a fork
server that has the task's module imported already: they reach their blocking point at once,
and the 5 s timeout is a wide margin, not a measurement.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import conveyor
from conveyor.executors.base import Outcome
from conveyor.executors.channel import AttemptStage, Stage, decode, encode
from conveyor.protocol import AttemptOutcome

WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

BLOCKING = '''
import os
import time

import conveyor

NEVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "never-created")


def block_in_attempts(where):
    """Block until NEVER exists, inside an attempt's process only (the worker and the test
    import this module too); say where first, in a file next to NEVER."""
    if not os.environ.get("CONVEYOR_ATTEMPT_MARK"):
        return
    with open(NEVER + "." + where, "w") as mark:
        mark.write(str(os.getpid()))
    while not os.path.exists(NEVER):
        time.sleep(0.05)


if os.environ.get("BLOCK_AT_IMPORT"):
    block_in_attempts("import")


class SlowImport(conveyor.Task):
    """Its module blocks at import in the attempt's process: start-up never ends."""

    worker_timeout = 1

    def complete(self):
        return False

    def run(self):
        pass


class HangingCheck(conveyor.Task):
    """Complete for the worker's walk; its complete() blocks in an attempt's process."""

    def complete(self):
        block_in_attempts("check")
        return True


class NeedsHangingCheck(conveyor.Task):
    """Its dependency check (before run()) never ends."""

    worker_timeout = 5

    def requires(self):
        return HangingCheck()

    def complete(self):
        return False

    def run(self):
        pass


class HangsInRun(conveyor.Task):
    """run() starts, then blocks until killed."""

    worker_timeout = 5

    def complete(self):
        return False

    def run(self):
        block_in_attempts("run")


class Both(conveyor.WrapperTask):
    def requires(self):
        return [NeedsHangingCheck(), HangsInRun()]
'''


def _build(task: conveyor.Task, executor: str, workers: int) -> conveyor.RunResult:
    return conveyor.build(
        task, executor=executor, workers=workers, kill_grace=1, install_signal_handlers=False
    )


def _failed_lines(summary: str) -> dict[str, str]:
    """Label → reason, for each line under the summary's ``failed`` heading."""
    lines = summary.splitlines()
    start = lines.index(next(line for line in lines if line.endswith(" failed:")))
    found = {}
    for line in lines[start + 1 :]:
        if not line.startswith("    - "):
            break
        label, _, reason = line.removeprefix("    - ").partition(": ")
        found[label] = reason
    return found


def test_a_timeout_during_interpreter_start_up_says_run_had_not_started(
    tmp_path: Path, task_module: WriteModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``subprocess``, an attempt whose task module is still importing when its 1 s
    timeout fires is explained as timed out before run() started (interpreter start-up)."""
    module = __import__(task_module(BLOCKING))
    monkeypatch.setenv("BLOCK_AT_IMPORT", "1")  # (for the attempt's fresh interpreter)
    task = module.SlowImport()
    result = _build(task, "subprocess", 1)
    assert result.exit_code == 1
    assert _failed_lines(result.summary) == {
        "SlowImport": "timed out after 1 s, before run() started (interpreter start-up)"
    }
    assert result.errors[task.task_id] == (
        "timed out after 1 s, before run() started (interpreter start-up); "
        "its process tree was killed"
    )


def test_a_timeout_says_whether_run_had_started_or_dependencies_were_being_checked(
    tmp_path: Path, task_module: WriteModule
) -> None:
    """Under ``fork``, a task whose dependency check hangs times out 'before run() started
    (checking completeness and dependencies)'; one whose run() hangs just 'timed out after
    5 s'."""
    module = __import__(task_module(BLOCKING))
    result = _build(module.Both(), "fork", 2)
    never = Path(module.NEVER)
    assert Path(f"{never}.check").exists() and Path(f"{never}.run").exists()  # both got there
    assert result.exit_code == 1
    assert _failed_lines(result.summary) == {
        "HangsInRun": "timed out after 5 s",
        "NeedsHangingCheck": "timed out after 5 s, before run() started (checking "
        "completeness and dependencies)",
    }
    assert result.errors[module.HangsInRun().task_id] == (
        "timed out after 5 s; its process tree was killed"
    )


def test_stages_and_the_before_run_explanation_travel_as_json_lines() -> None:
    """The channel carries an attempt's stages and a timeout's ``before_run`` as JSON (what a
    remote supervisor, the Dask plugin's, sends back in an outcome's line)."""
    line = encode(Stage(AttemptStage.RUNNING))
    assert json.loads(line) == {"message": "stage", "stage": "running"}  # (protocol's codec)
    assert decode(line, "T_1") == Stage(AttemptStage.RUNNING)
    timed_out = Outcome("T_1", AttemptOutcome.TIMED_OUT, before_run="interpreter start-up")
    decoded = decode(encode(timed_out), "T_1")
    assert isinstance(decoded, Outcome) and decoded.before_run == "interpreter start-up"
