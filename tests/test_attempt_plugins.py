"""The attempt seams (SPEC §10): ``conveyor_attempt_environment`` gives an attempt variables,
and the plugins that answered run ``conveyor_attempt_begin``/``conveyor_attempt_end`` where the
attempt runs: in its own process under ``fork``, ``subprocess`` and ``python -m
conveyor.attempt`` (an entry-point plugin loaded there), on the thread that runs it under
``inline`` and ``thread`` (the worker's own plugin objects, the worker's environment untouched).

The plugin under test is ``attemptprobe`` of tests/thirdparty-plugin, installed like any third
party's and switched on by :data:`seam_support.PROBE` (a directory): it answers
``PROBE_ATTEMPT=<task_id>:<attempt>`` and writes one line per begin/end there with its pid,
thread and what it was given. The tasks write what ``run()`` sees (pid, thread, ``PROBE_*``
variables) to their output, so both sides of an attempt are compared in one file each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import structlog

import conveyor
from conveyor import protocol as p
from conveyor.events import AttemptContext, TaskStarted, TaskSucceeded
from conveyor.testing import RecordingPlugin
from seam_support import PROBE, PROBE_SKIP, probe_records, worker_config

END_SLEEP = "CONVEYOR_TEST_ATTEMPT_PROBE_END_SLEEP"

pytestmark = pytest.mark.timeout(120)

WAIT = 60.0  # seconds a `python -m conveyor.attempt` run may take on a loaded machine

TASKS = """
import json
import os
import threading

import conveyor


class Probed(conveyor.Task):
    '''Writes what run() sees: its pid and thread, and the PROBE_* / LOCAL_* variables.'''

    root = conveyor.Parameter()
    tag = conveyor.Parameter(default="0")

    def output(self):
        name = f"{type(self).__name__}-{self.tag}.json"
        return conveyor.LocalTarget(os.path.join(self.root, name))

    def run(self):
        seen = {
            "pid": os.getpid(),
            "thread": threading.get_ident(),
            "environ": {k: v for k, v in os.environ.items() if k.startswith(("PROBE_", "LOCAL_"))},
        }
        with self.output().open("w") as out:
            json.dump(seen, out)


class Quiet(Probed):
    '''A family the probe is told to skip (it answers None for it).'''


class Timed(Probed):
    '''A quick task with a short timeout (for a plugin whose end is slow).'''

    worker_timeout = 8
"""


@pytest.fixture
def mod(process_module: Callable[[str], Any]) -> Any:
    """The task module, importable here and in every attempt's process."""
    return process_module(TASKS)


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The probe's directory, the probe switched on in this (the worker's) process."""
    directory = tmp_path / "probe"
    directory.mkdir()
    monkeypatch.setenv(PROBE, str(directory))
    yield directory
    assert "PROBE_ATTEMPT" not in os.environ  # no executor put an attempt's variables here


def _config(directory: Path, executor: str, workers: int = 1) -> conveyor.Config:
    return worker_config(directory, f'[worker]\nexecutor = "{executor}"\nworkers = {workers}\n')


def _seen(task: Any) -> dict[str, Any]:
    """What the task's run() wrote."""
    with open(task.output().path, encoding="utf-8") as f:
        seen: dict[str, Any] = json.load(f)
    return seen


class EndsFirst:
    """A local plugin that checks, when the worker hears that an attempt succeeded, whether the
    probe's end of that attempt was already written."""

    name = "ends-first"

    def __init__(self, directory: Path) -> None:
        """Read the probe's records in ``directory``."""
        self.directory = directory
        self.heard: dict[str, list[str]] = {}

    @conveyor.hookimpl
    def conveyor_task_succeeded(self, event: TaskSucceeded) -> None:
        """Note the probe's hooks already recorded for the task."""
        records = probe_records(self.directory, event.task_id)
        self.heard[event.task_id] = [r["hook"] for r in records]


@pytest.mark.parametrize("executor", ["fork", "subprocess"])
def test_an_entry_point_plugin_runs_in_the_attempts_process(
    executor: str, mod: Any, probe: Path, tmp_path: Path
) -> None:
    """Under a process executor the variables are in os.environ of run()'s process; the
    probe's begin and end run there (its pid, not the worker's), with in_worker False, and
    end is written before the worker hears the outcome."""
    rec, ends = RecordingPlugin(), EndsFirst(probe)
    task = mod.Probed(root=str(tmp_path))
    with conveyor.Worker(config=_config(tmp_path, executor), plugins=[rec, ends]) as worker:
        assert worker.add(task)
        assert worker.run() is True
    [started] = rec.events("task_started", task.task_id)
    assert started.executor == executor
    expected = {"PROBE_ATTEMPT": f"{task.task_id}:{started.attempt}"}
    seen = _seen(task)
    assert seen["environ"] == {**expected, "PROBE_WORKER_PID": str(os.getpid())}
    assert seen["pid"] != os.getpid()
    begin, end = probe_records(probe, task.task_id)
    assert (begin["hook"], end["hook"], end["outcome"]) == ("begin", "end", "succeeded")
    for record in (begin, end):
        assert record["pid"] == seen["pid"]
        assert record["in_worker"] is False
        assert record["environ"] == expected["PROBE_ATTEMPT"]  # already in os.environ there
        assert record["env"]["PROBE_ATTEMPT"] == expected["PROBE_ATTEMPT"]
        assert record["attempt"] == started.attempt and record["family"] == "Probed"
    assert begin["thread"] == seen["thread"]
    assert ends.heard == {task.task_id: ["begin", "end"]}


@pytest.mark.parametrize("executor", ["inline", "thread"])
def test_in_process_the_variables_reach_the_hooks_only(
    executor: str, mod: Any, probe: Path, tmp_path: Path
) -> None:
    """Under inline and thread the worker's os.environ is not changed (run() sees no
    PROBE_ variable); begin/end get the variables in AttemptContext.env, in_worker True, in
    the worker's process, on the thread that runs run()."""
    rec, ends = RecordingPlugin(), EndsFirst(probe)
    task = mod.Probed(root=str(tmp_path))
    with conveyor.Worker(config=_config(tmp_path, executor), plugins=[rec, ends]) as worker:
        assert worker.add(task)
        assert worker.run() is True
    [started] = rec.events("task_started", task.task_id)
    assert started.executor == executor
    seen = _seen(task)
    assert seen["environ"] == {}
    assert seen["pid"] == os.getpid()
    begin, end = probe_records(probe, task.task_id)
    assert (begin["hook"], end["hook"], end["outcome"]) == ("begin", "end", "succeeded")
    for record in (begin, end):
        assert record["in_worker"] is True
        assert record["pid"] == os.getpid()
        assert record["thread"] == seen["thread"]
        assert record["environ"] is None
        assert record["env"] == {
            "PROBE_ATTEMPT": f"{task.task_id}:{started.attempt}",
            "PROBE_WORKER_PID": str(os.getpid()),
        }
    if executor == "thread":
        assert seen["thread"] != threading.get_ident()
    assert ends.heard == {task.task_id: ["begin", "end"]}


def _spec(task: Any, **fields: Any) -> bytes:
    spec = p.AttemptSpec(
        task.task_module, task.task_family, task.task_id, task.to_str_params(), **fields
    )
    return json.dumps(p.encode(spec)).encode()


@pytest.mark.parametrize("plugins", [("attemptprobe",), ("no-such-plugin",)])
def test_the_attempt_runner_sets_the_variables_and_loads_the_named_plugins(
    plugins: tuple[str, ...], mod: Any, probe: Path, tmp_path: Path
) -> None:
    """``python -m conveyor.attempt`` (what the Dask plugin runs) puts AttemptSpec.env in its
    os.environ and runs begin/end of the named entry-point plugins in its own process; a name
    that is no installed plugin is skipped and the attempt still runs."""
    task = mod.Probed(root=str(tmp_path))
    env = {"PROBE_ATTEMPT": "from-the-spec:7"}
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor.attempt"],
        input=_spec(task, attempt=7, env=env, plugins=plugins),
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(e for e in sys.path if e)},
        timeout=WAIT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["message"] == "succeeded"
    seen = _seen(task)
    assert seen["environ"] == env
    records = probe_records(probe, task.task_id)
    if plugins == ("no-such-plugin",):
        assert records == []
        assert "no-such-plugin" in proc.stderr.decode()
        return
    assert [(r["hook"], r["outcome"]) for r in records] == [("begin", ""), ("end", "succeeded")]
    assert {r["pid"] for r in records} == {seen["pid"]}
    assert all(r["in_worker"] is False and r["attempt"] == 7 for r in records)
    assert all(r["env"] == env and r["environ"] == env["PROBE_ATTEMPT"] for r in records)


class Local:
    """A Worker(plugins=[...]) plugin that answers the environment and records its begin/end
    (pid and thread) in a file, so that a call in another process would show too."""

    name = "local-answers"

    def __init__(self, directory: Path) -> None:
        """Write to ``directory``/local.jsonl."""
        self.path = directory / "local.jsonl"

    @conveyor.hookimpl
    def conveyor_attempt_environment(self, event: TaskStarted) -> Mapping[str, str]:
        """One variable of its own."""
        return {"LOCAL_ANSWER": event.family}

    def _write(self, hook: str, attempt: AttemptContext, outcome: str) -> None:
        line = {
            "hook": hook,
            "task_id": attempt.task_id,
            "in_worker": attempt.in_worker,
            "env": dict(attempt.env),
            "outcome": outcome,
            "pid": os.getpid(),
            "thread": threading.get_ident(),
        }
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    @conveyor.hookimpl
    def conveyor_attempt_begin(self, attempt: AttemptContext) -> None:
        """Record."""
        self._write("begin", attempt, "")

    @conveyor.hookimpl
    def conveyor_attempt_end(self, attempt: AttemptContext, outcome: str) -> None:
        """Record."""
        self._write("end", attempt, outcome)

    def records(self) -> list[dict[str, Any]]:
        """What it recorded, in order."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]


@pytest.mark.parametrize("executor", ["inline", "fork"])
def test_a_plugin_that_answers_none_takes_no_part(
    executor: str,
    mod: Any,
    probe: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe answers None for Quiet: its begin never runs for Quiet (in-process or in the
    attempt's process) and Quiet's run() sees none of its variables, while Probed, in the
    same run, has both."""
    monkeypatch.setenv(PROBE_SKIP, "Quiet")
    local = Local(tmp_path)
    quiet, probed = mod.Quiet(root=str(tmp_path)), mod.Probed(root=str(tmp_path))
    with conveyor.Worker(config=_config(tmp_path, executor), plugins=[local]) as worker:
        assert worker.add(quiet) and worker.add(probed)
        assert worker.run() is True
    assert probe_records(probe, quiet.task_id) == []
    assert [r["hook"] for r in probe_records(probe, probed.task_id)] == ["begin", "end"]
    quiet_seen = _seen(quiet)["environ"]
    assert "PROBE_ATTEMPT" not in quiet_seen
    if executor == "fork":
        assert quiet_seen == {"LOCAL_ANSWER": "Quiet"}  # the other plugin's answer arrives
        assert "PROBE_ATTEMPT" in _seen(probed)["environ"]
    else:  # in-process, the local plugin that answered does take part
        assert [r["hook"] for r in local.records() if r["task_id"] == quiet.task_id] == [
            "begin",
            "end",
        ]


def test_a_local_plugin_takes_part_in_process_and_is_not_loaded_in_a_child(
    mod: Any, tmp_path: Path
) -> None:
    """A Worker(plugins=[obj]) plugin that answers gets begin/end on the thread that runs the
    attempt under inline (in_worker True, the outcome given); under fork its variables arrive
    but its begin/end run nowhere (it is not loaded in the child), and the attempt runs."""
    local = Local(tmp_path)
    inline = mod.Probed(root=str(tmp_path), tag="inline")
    with conveyor.Worker(config=_config(tmp_path, "inline"), plugins=[local]) as worker:
        assert worker.add(inline)
        assert worker.run() is True
    seen = _seen(inline)
    begin, end = local.records()
    assert (begin["hook"], end["hook"], end["outcome"]) == ("begin", "end", "succeeded")
    for record in (begin, end):
        assert record["pid"] == os.getpid() and record["thread"] == seen["thread"]
        assert record["in_worker"] is True and record["env"] == {"LOCAL_ANSWER": "Probed"}
    assert seen["environ"] == {}

    forked = mod.Probed(root=str(tmp_path), tag="fork")
    with conveyor.Worker(config=_config(tmp_path, "fork"), plugins=[local]) as worker:
        assert worker.add(forked)
        assert worker.run() is True
    assert _seen(forked)["environ"] == {"LOCAL_ANSWER": "Probed"}
    assert [r["task_id"] for r in local.records()] == [inline.task_id] * 2


class Raises:
    """Raises from conveyor_attempt_environment."""

    name = "env-raises"

    @conveyor.hookimpl
    def conveyor_attempt_environment(self, event: TaskStarted) -> Mapping[str, str]:
        """Fail on purpose."""
        raise RuntimeError("no variables today")


class NotStrings:
    """Answers a mapping whose value is not a string."""

    name = "env-not-strings"

    @conveyor.hookimpl
    def conveyor_attempt_environment(self, event: TaskStarted) -> Any:
        """An int value."""
        return {"PROBE_BAD": 1}


class NotAMapping:
    """Answers a list."""

    name = "env-not-a-mapping"

    @conveyor.hookimpl
    def conveyor_attempt_environment(self, event: TaskStarted) -> Any:
        """A list."""
        return ["PROBE_LIST=1"]


class BadName:
    """Answers a variable no environment can hold (a name with ``=``): under a process
    executor, setting it would have killed the attempt's process."""

    name = "env-bad-name"

    @conveyor.hookimpl
    def conveyor_attempt_environment(self, event: TaskStarted) -> Mapping[str, str]:
        """``A=B`` as a name."""
        return {"PROBE_A=B": "x"}


@pytest.mark.parametrize("executor", ["fork", "inline"])
def test_a_bad_environment_answer_is_logged_and_the_attempt_runs(
    executor: str, mod: Any, probe: Path, tmp_path: Path
) -> None:
    """An implementation that raises, or answers something other than a str-to-str mapping, is
    logged with its plugin's name; the attempt runs with the others' variables (and the
    probe, which answered, still takes part)."""
    task = mod.Probed(root=str(tmp_path))
    plugins: list[Any] = [Raises(), NotStrings(), NotAMapping(), BadName()]
    config = _config(tmp_path, executor)
    with (
        structlog.testing.capture_logs() as logs,
        conveyor.Worker(config=config, plugins=plugins) as worker,
    ):
        assert worker.add(task)
        assert worker.run() is True
    raised = [
        r
        for r in logs
        if r["event"] == "hook implementation raised"
        and r.get("hook") == "conveyor_attempt_environment"
    ]
    assert sorted(r["plugin"] for r in raised) == sorted(p.name for p in plugins)
    assert all(r["task_id"] == task.task_id for r in raised)
    [begin, end] = probe_records(probe, task.task_id)
    assert set(begin["env"]) == {"PROBE_ATTEMPT", "PROBE_WORKER_PID"} == set(end["env"])
    expected = begin["env"] if executor == "fork" else {}
    assert _seen(task)["environ"] == expected


def test_a_spec_whose_variables_cannot_be_set_fails_the_attempt_with_the_reason(
    mod: Any, tmp_path: Path
) -> None:
    """An AttemptSpec (from another worker, or an old one) naming a variable the environment
    cannot hold fails its attempt with a message naming it: not a dead process, no traceback."""
    task = mod.Probed(root=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor.attempt"],
        input=_spec(task, env={"A=B": "x"}),
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(e for e in sys.path if e)},
        timeout=WAIT,
        check=False,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["message"] == "failed", proc.stderr.decode()
    assert "'A=B'" in lines[-1]["error"]
    assert "Traceback" not in proc.stderr.decode()
    assert not os.path.exists(task.output().path)


@pytest.mark.timeout(120)
def test_the_end_hook_counts_against_neither_the_timeout_nor_the_duration(
    mod: Any, probe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In an attempt's own process the plugins' end (a tracing plugin flushing to a slow
    collector) runs after the outcome is sent: an attempt whose end takes longer than its
    timeout still succeeds, and its duration is run()'s."""
    monkeypatch.setenv(END_SLEEP, "10")  # longer than the timeout, shorter than the kill grace
    rec = RecordingPlugin()
    task = mod.Timed(root=str(tmp_path))  # worker_timeout = 8: ample for a fork and a write
    config = worker_config(tmp_path, '[worker]\nexecutor = "fork"\nkill_grace = 20\n')
    with conveyor.Worker(config=config, plugins=[rec]) as worker:
        assert worker.add(task)
        assert worker.run() is True
    [succeeded] = rec.events("task_succeeded", task.task_id)
    assert succeeded.duration < 8
    assert rec.events("task_timed_out", task.task_id) == []
    records = probe_records(probe, task.task_id)
    assert [(r["hook"], r["outcome"]) for r in records] == [("begin", ""), ("end", "succeeded")]
