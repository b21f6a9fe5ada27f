"""The worker's lifecycle hooks (conveyor_configure / conveyor_unconfigure) and the fields of
the events that end an attempt (attempt, executor, duration), SPEC §10, on real Workers."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor import events

RunCli = Callable[..., Any]  # the run_cli fixture (conftest.py)
WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

ENDINGS = {
    "conveyor_task_succeeded",
    "conveyor_task_failed",
    "conveyor_task_timed_out",
    "conveyor_task_process_died",
}
FLUSH_TIMEOUT = 2.5


class Recorder:
    """Records the lifecycle calls and every attempt event, in order, as ``(hook, value)``."""

    def __init__(self, name: str = "lifecycle-recorder") -> None:
        """Start with no records."""
        self.name = name
        self.records: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    def _add(self, hook: str, value: Any) -> None:
        with self._lock:
            self.records.append((hook, value))

    def hooks(self) -> list[str]:
        """The hook names recorded, in order."""
        return [hook for hook, _ in self.records]

    def values(self, hook: str) -> list[Any]:
        """What each call of ``hook`` received, in order."""
        return [value for name, value in self.records if name == hook]

    @conveyor.hookimpl
    def conveyor_configure(self, config: conveyor.Config) -> None:
        """Record the call."""
        self._add("conveyor_configure", config)

    @conveyor.hookimpl
    def conveyor_unconfigure(self, flush_timeout: float) -> None:
        """Record the call."""
        self._add("conveyor_unconfigure", flush_timeout)

    @conveyor.hookimpl
    def conveyor_worker_started(self, event: events.WorkerStarted) -> None:
        """Record the call."""
        self._add(event.hook, event)

    @conveyor.hookimpl
    def conveyor_worker_stopped(self, event: events.WorkerStopped) -> None:
        """Record the call."""
        self._add(event.hook, event)

    @conveyor.hookimpl
    def conveyor_task_complete_checked(self, event: events.CompleteChecked) -> None:
        """Record the call."""
        self._add(event.hook, event)

    @conveyor.hookimpl
    def conveyor_task_started(self, event: events.TaskStarted) -> None:
        """Record the call."""
        self._add(event.hook, event)

    @conveyor.hookimpl
    def conveyor_task_dependencies_discovered(self, event: events.DependenciesDiscovered) -> None:
        """Record the call."""
        self._add(event.hook, event)

    @conveyor.hookimpl
    def conveyor_task_succeeded(self, event: events.TaskSucceeded) -> None:
        """Record the call."""
        self._add(event.hook, event)

    @conveyor.hookimpl
    def conveyor_task_failed(self, event: events.TaskFailed) -> None:
        """Record the call."""
        self._add(event.hook, event)

    @conveyor.hookimpl
    def conveyor_task_timed_out(self, event: events.TaskTimedOut) -> None:
        """Record the call."""
        self._add(event.hook, event)

    @conveyor.hookimpl
    def conveyor_task_process_died(self, event: events.ProcessDied) -> None:
        """Record the call."""
        self._add(event.hook, event)

    def attempts(self, task_id: str) -> list[tuple[events.TaskStarted, Any]]:
        """Each attempt of ``task_id``: its TaskStarted and the event that ended it."""
        pairs: list[tuple[events.TaskStarted, Any]] = []
        started: events.TaskStarted | None = None
        for hook, value in self.records:
            if getattr(value, "task_id", None) != task_id:
                continue
            if hook == "conveyor_task_started":
                started = value
            elif started is not None and (
                hook in ENDINGS or (hook.endswith("dependencies_discovered") and value.dynamic)
            ):
                pairs.append((started, value))
                started = None
        return pairs


class Raising:
    """A plugin whose configure and unconfigure raise."""

    name = "raising"

    @conveyor.hookimpl
    def conveyor_configure(self) -> None:
        """Fail."""
        raise RuntimeError("configure went wrong")

    @conveyor.hookimpl
    def conveyor_unconfigure(self) -> None:
        """Fail."""
        raise RuntimeError("unconfigure went wrong")


# --- task classes (names unique to this file) ----------------------------------------------


class LcBase(conveyor.Task):
    """A task whose output is ``<root>/<Family>-<tag>.out``."""

    root = conveyor.Parameter()
    tag = conveyor.Parameter(default="0")

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, f"{type(self).__name__}-{self.tag}"))

    def finish(self) -> None:
        with self.output().open("w") as out:
            out.write("x")


class LcOk(LcBase):
    """Succeeds."""

    def run(self) -> None:
        self.finish()


class LcFails(LcBase):
    """Raises."""

    def run(self) -> None:
        raise ValueError("no")


class LcSlow(LcBase):
    """Runs far past its half-second timeout (it is killed)."""

    worker_timeout = 0.5

    def run(self) -> None:
        time.sleep(120)
        self.finish()


class LcExits(LcBase):
    """Leaves its process without reporting anything."""

    def run(self) -> None:
        os._exit(3)


class LcDyn(LcBase):
    """Yields a dependency, so its second attempt is the one that succeeds."""

    def run(self) -> Iterator[conveyor.Task]:
        yield LcOk(root=self.root, tag="dyn")
        self.finish()


def make_config(directory: Path, **worker: Any) -> conveyor.Config:
    """A worker.toml with these ``[worker]`` keys and ``[notifiers] flush_timeout``."""
    lines = ["[worker]", *(f"{key} = {json.dumps(value)}" for key, value in worker.items())]
    lines += ["[notifiers]", f"flush_timeout = {FLUSH_TIMEOUT}"]
    path = directory / "worker-lifecycle.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return conveyor.load_config(path)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in tmp_path, so no ./worker.toml is found."""
    monkeypatch.chdir(tmp_path)


def run_one(task: conveyor.Task, directory: Path, **worker: Any) -> Recorder:
    """Run ``task`` on a Worker with these ``[worker]`` keys and a Recorder; return it."""
    rec = Recorder()
    with conveyor.Worker(config=make_config(directory, **worker), plugins=[rec]) as w:
        w.add(task)
        w.run()
    return rec


# --- conveyor_configure / conveyor_unconfigure ---------------------------------------------


@pytest.mark.timeout(60)
def test_configure_comes_first_once_and_unconfigure_last(tmp_path: Path) -> None:
    """configure is the worker's first hook, once, with its frozen Config; unconfigure is the
    last, once, from close(), with [notifiers] flush_timeout."""
    rec = Recorder()
    config = make_config(tmp_path, executor="inline")
    worker = conveyor.Worker(config=config, plugins=[rec])
    assert rec.hooks() == ["conveyor_configure"]
    assert rec.values("conveyor_configure") == [worker.config]
    assert rec.values("conveyor_configure")[0] is worker.config
    with worker:
        worker.add(LcOk(root=str(tmp_path)))
        assert worker.run() is True
        assert "conveyor_unconfigure" not in rec.hooks()
    worker.close()  # a second close unconfigures nothing again
    hooks = rec.hooks()
    assert hooks[0] == "conveyor_configure"
    assert hooks[1] == "conveyor_task_complete_checked"  # add()'s walk comes after
    assert hooks.count("conveyor_configure") == 1
    assert hooks[-2:] == ["conveyor_worker_stopped", "conveyor_unconfigure"]
    assert rec.values("conveyor_unconfigure") == [FLUSH_TIMEOUT]


@pytest.mark.timeout(60)
def test_a_plugin_registered_later_is_configured_when_it_joins(tmp_path: Path) -> None:
    """configure is historic: a plugin registered after the worker started gets the same Config
    once, on registration, and is unconfigured at close like the others."""
    first = Recorder("first")
    late = Recorder("late")
    with conveyor.Worker(config=make_config(tmp_path), plugins=[first]) as worker:
        worker.add(LcOk(root=str(tmp_path)))
        worker.run()
        worker.hooks.register(late, "late")
        assert late.hooks() == ["conveyor_configure"]
        assert late.values("conveyor_configure")[0] is worker.config
    assert first.values("conveyor_configure") == [worker.config]
    assert late.hooks() == ["conveyor_configure", "conveyor_unconfigure"]
    assert late.values("conveyor_unconfigure") == [FLUSH_TIMEOUT]


@pytest.mark.timeout(60)
def test_a_failing_lifecycle_hook_does_not_stop_the_others(tmp_path: Path) -> None:
    """A configure or unconfigure that raises is logged; the other plugins are still called
    and the worker runs as usual."""
    rec = Recorder()
    with conveyor.Worker(config=make_config(tmp_path), plugins=[rec, Raising()]) as worker:
        worker.add(LcOk(root=str(tmp_path)))
        assert worker.run() is True
    assert rec.hooks()[0] == "conveyor_configure"
    assert rec.hooks()[-1] == "conveyor_unconfigure"


@pytest.mark.timeout(60)
def test_a_worker_that_fails_to_build_calls_neither_lifecycle_hook(tmp_path: Path) -> None:
    """A worker whose construction fails (an unknown executor) configures nothing, so
    unconfigures nothing."""
    rec = Recorder()
    with pytest.raises(conveyor.ConveyorError):
        conveyor.Worker(config=make_config(tmp_path), plugins=[rec], executor="no-such-thing")
    assert rec.records == []


class Leaver(Recorder):
    """A Recorder whose conveyor_configure returns ``answer``: ``False`` leaves the worker."""

    def __init__(self, name: str, answer: object) -> None:
        """Named ``name``; configure returns ``answer``."""
        super().__init__(name)
        self.answer = answer

    @conveyor.hookimpl
    def conveyor_configure(self, config: conveyor.Config) -> object:
        """Record the call, and answer."""
        self._add("conveyor_configure", config)
        return self.answer


@pytest.mark.timeout(60)
def test_a_plugin_whose_configure_returns_false_leaves_the_worker(tmp_path: Path) -> None:
    """configure returning False (that value only) unregisters the plugin: no other hook of it
    is called, unconfigure included; one returning None or another false value stays. The
    next Worker asks again."""
    leaver, zero, staying = Leaver("leaver", False), Leaver("zero", 0), Recorder("staying")
    config = make_config(tmp_path, executor="inline")
    with conveyor.Worker(config=config, plugins=[leaver, zero, staying]) as worker:
        names = worker.hooks.names()
        assert "leaver" not in names and {"zero", "staying"} <= set(names)
        started = worker.hooks.pm.hook.conveyor_task_started.get_hookimpls()
        assert leaver not in [impl.plugin for impl in started]
        worker.add(LcOk(root=str(tmp_path)))
        assert worker.run() is True
    assert leaver.hooks() == ["conveyor_configure"]
    for kept in (zero, staying):
        assert kept.hooks()[0] == "conveyor_configure"
        assert "conveyor_task_succeeded" in kept.hooks()
        assert kept.hooks()[-1] == "conveyor_unconfigure"
    with conveyor.Worker(config=config, plugins=[leaver]) as again:
        assert "leaver" not in again.hooks.names()
    assert leaver.hooks() == ["conveyor_configure", "conveyor_configure"]


@pytest.mark.timeout(60)
def test_a_late_plugin_that_returns_false_is_not_left_registered(tmp_path: Path) -> None:
    """A plugin registered after the worker was built whose configure returns False is
    unregistered on the spot; the worker runs on without calling it. One returning 0 (equal
    to False, but not False) stays."""
    late, zero = Leaver("late", False), Leaver("late-zero", 0)
    with conveyor.Worker(config=make_config(tmp_path)) as worker:
        generation = worker.hooks.generation
        worker.hooks.register(late, "late")
        assert "late" not in worker.hooks.names()
        assert worker.hooks.generation > generation  # (what the worker worked out is redone)
        worker.hooks.register(zero, "late-zero")
        assert "late-zero" in worker.hooks.names()
        worker.add(LcOk(root=str(tmp_path)))
        assert worker.run() is True
    assert late.hooks() == ["conveyor_configure"]
    assert "conveyor_task_succeeded" in zero.hooks()


@pytest.mark.timeout(60)
def test_a_server_plugin_that_returns_false_contributes_nothing(tmp_path: Path) -> None:
    """The central server configures its plugins through the same relay: one that leaves is
    asked for no route, and the scheduler's moves and workers are no longer observed for it
    (no event is built)."""
    from conveyor.scheduler.policy import SchedulerCore
    from conveyor.server.hooks import ROUTES, ServerHooks

    class ServerLeaver(Leaver):
        @conveyor.hookimpl
        def conveyor_scheduler_routes(self, server: object) -> list[object]:
            self._add(ROUTES, server)
            return []

        @conveyor.hookimpl
        def conveyor_scheduler_task_changed(self, event: events.SchedulerTaskChanged) -> None:
            self._add(event.hook, event)

        @conveyor.hookimpl
        def conveyor_scheduler_worker_seen(self, event: events.SchedulerWorkerSeen) -> None:
            self._add(event.hook, event)

    def served(answer: object) -> tuple[ServerHooks, SchedulerCore, ServerLeaver]:
        hooks, core = ServerHooks(), SchedulerCore()
        plugin = ServerLeaver("server-leaver", answer)
        hooks.relay.register(plugin, "server-leaver")
        hooks.attach(core)  # (as the service does, before the plugins are configured)
        assert core.on_move is not None and core.on_worker is not None
        hooks.configure(make_config(tmp_path))
        return hooks, core, plugin

    hooks, core, leaver = served(False)
    assert not hooks.wants(ROUTES)
    assert hooks.routes([]) == []
    assert core.on_move is None and core.on_worker is None
    assert leaver.hooks() == ["conveyor_configure"]
    hooks, core, _ = served(None)  # (one that stays is still observed)
    assert hooks.wants(ROUTES) and core.on_move is not None and core.on_worker is not None


# --- the events that end an attempt --------------------------------------------------------


def assert_ending(rec: Recorder, task_id: str, hook: str, executor: str) -> Any:
    """The task's one attempt ended with ``hook``, carrying its attempt, executor and a
    duration; return that event."""
    [(started, ended)] = rec.attempts(task_id)
    assert ended.hook == hook
    assert started.executor == executor
    assert (ended.attempt, ended.executor) == (started.attempt, started.executor) == (1, executor)
    assert ended.duration >= 0.0
    return ended


@pytest.mark.timeout(60)
@pytest.mark.parametrize("executor", ["inline", "fork"])
def test_succeeded_and_failed_carry_attempt_executor_and_duration(
    executor: str, tmp_path: Path
) -> None:
    """A success and a failure, inline and forked, name their attempt and executor."""
    ok, bad = LcOk(root=str(tmp_path)), LcFails(root=str(tmp_path))
    rec = Recorder()
    with conveyor.Worker(config=make_config(tmp_path, executor=executor), plugins=[rec]) as w:
        w.add(ok)
        w.add(bad)
        w.run()
    assert_ending(rec, ok.task_id, "conveyor_task_succeeded", executor)
    failed = assert_ending(rec, bad.task_id, "conveyor_task_failed", executor)
    assert failed.exception_type == "ValueError"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("executor", ["inline", "fork"])
def test_timed_out_carries_attempt_executor_and_duration(executor: str, tmp_path: Path) -> None:
    """A timed-out attempt names its attempt and the executor that ran it (fork, also when the
    worker's executor is inline), and its duration covers the timeout."""
    task = LcSlow(root=str(tmp_path))
    rec = run_one(task, tmp_path, executor=executor, kill_grace=1)
    ended = assert_ending(rec, task.task_id, "conveyor_task_timed_out", "fork")
    assert ended.timeout == pytest.approx(0.5)
    assert ended.duration >= 0.5


@pytest.mark.timeout(60)
def test_process_died_carries_attempt_executor_and_duration(tmp_path: Path) -> None:
    """An attempt whose process leaves with os._exit names its attempt and executor."""
    task = LcExits(root=str(tmp_path))
    rec = run_one(task, tmp_path, executor="fork")
    ended = assert_ending(rec, task.task_id, "conveyor_task_process_died", "fork")
    assert ended.exitcode == 3


@pytest.mark.timeout(60)
def test_the_ending_event_names_the_attempt_it_ends(tmp_path: Path) -> None:
    """A run() that yields a dependency ends attempt 1 with dependencies_discovered; attempt 2's
    success says attempt=2, as its TaskStarted did."""
    task = LcDyn(root=str(tmp_path))
    rec = run_one(task, tmp_path, executor="inline")
    (first, yielded), (second, succeeded) = rec.attempts(task.task_id)
    assert (first.attempt, yielded.dynamic) == (1, True)
    assert (second.attempt, succeeded.attempt) == (2, 2)
    assert succeeded.executor == second.executor == "inline"


def test_third_party_construction_without_the_new_fields_still_works() -> None:
    """An event built by a third party without attempt/executor/duration gets the defaults."""
    died = events.ProcessDied(task_id="t", exitcode=1, signal=None)
    timed_out = events.TaskTimedOut(task_id="t", timeout=2.0)
    failed = events.TaskFailed(task_id="t", error="e", exception_type="E", duration=1.0)
    assert (died.attempt, died.executor, died.duration) == (0, "", 0.0)
    assert (timed_out.attempt, timed_out.duration) == (0, 0.0)
    assert (failed.attempt, failed.executor, failed.duration) == (0, "", 1.0)


# --- from the command line -----------------------------------------------------------------

PLUGIN = """
import json
import os

import conveyor


def _write(hook, **fields):
    with open(os.environ["LC_RECORD"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"hook": hook, **fields}) + "\\n")


class Plugin:
    @conveyor.hookimpl
    def conveyor_configure(self, config):
        _write("configure", source=config.source, workers=config.worker.workers)

    @conveyor.hookimpl
    def conveyor_task_started(self, event):
        _write("started", attempt=event.attempt, executor=event.executor)

    @conveyor.hookimpl
    def conveyor_task_succeeded(self, event):
        _write(
            "succeeded", attempt=event.attempt, executor=event.executor, duration=event.duration
        )

    @conveyor.hookimpl
    def conveyor_task_failed(self, event):
        _write("failed", attempt=event.attempt, executor=event.executor, duration=event.duration)

    @conveyor.hookimpl
    def conveyor_unconfigure(self, flush_timeout):
        _write("unconfigure", flush_timeout=flush_timeout)
"""

TASK = """
import os

import conveyor


class Done(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "done"))

    def run(self):
        with self.output().open("w") as out:
            out.write("x")
"""


@pytest.mark.timeout(120)
def test_conveyor_run_configures_and_unconfigures_a_local_plugin(
    run_cli: RunCli, task_module: WriteModule, tmp_path: Path
) -> None:
    """`conveyor run` with a [plugins] local plugin: configure first with the worker.toml's
    Config, the success with attempt/executor/duration, unconfigure last with flush_timeout."""
    plugin, tasks = task_module(PLUGIN), task_module(TASK)
    (tmp_path / "worker.toml").write_text(
        f'[worker]\nexecutor = "fork"\n[notifiers]\nflush_timeout = 3\n'
        f'[plugins]\nlocal = ["{plugin}:Plugin"]\n',
        encoding="utf-8",
    )
    record = tmp_path / "record.jsonl"
    args = ("run", f"{tasks}.Done", "--root", str(tmp_path))
    proc = run_cli(*args, cwd=tmp_path, env={"LC_RECORD": str(record)})
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    assert [line["hook"] for line in lines] == ["configure", "started", "succeeded", "unconfigure"]
    assert lines[0]["source"].endswith("worker.toml")
    assert lines[1] == {"hook": "started", "attempt": 1, "executor": "fork"}
    succeeded = lines[2]
    assert (succeeded["attempt"], succeeded["executor"]) == (1, "fork")
    assert succeeded["duration"] >= 0.0
    assert lines[3] == {"hook": "unconfigure", "flush_timeout": 3.0}
