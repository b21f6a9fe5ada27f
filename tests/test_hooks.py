"""The hooks a worker fires, observed with conveyor.testing.RecordingPlugin and small plugins."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

import conveyor
from conveyor import events
from conveyor.protocol import encode
from conveyor.testing import Recorded, RecordingPlugin, hook_names

_LOCK = threading.Lock()
RUN_THREADS: dict[str, int] = {}

_config_ids = itertools.count()

TERMINAL = {
    "conveyor_task_succeeded",
    "conveyor_task_failed",
    "conveyor_task_timed_out",
    "conveyor_task_process_died",
}
# The worker's observer hooks of a task's life (each receives an event): neither the lifecycle
# pair, which take config / flush_timeout, nor the attempt's own hooks (which answer or run where
# the attempt runs: tests/test_attempt_plugins.py), nor the notifier dispatch's (no notifier
# here: tests/test_notify_dispatch.py), nor the central server's hooks.
NOT_TASK_OBSERVERS = {
    "conveyor_configure",
    "conveyor_unconfigure",
    "conveyor_attempt_environment",
    "conveyor_attempt_begin",
    "conveyor_attempt_end",
    "conveyor_notification_sent",
}
WORKER_OBSERVERS = [
    name
    for name in hook_names()
    if name not in NOT_TASK_OBSERVERS and not name.startswith("conveyor_scheduler_")
]
# Only process executors (not installed yet) can time out or lose their process.
NOT_FIRED_BY_INLINE_OR_THREAD = {"conveyor_task_timed_out", "conveyor_task_process_died"}


def make_config(directory: Path, **worker: Any) -> conveyor.Config:
    """Write a worker.toml with these ``[worker]`` keys into ``directory`` and load it."""

    def toml(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return json.dumps(value)

    path = directory / f"test-hooks-{next(_config_ids)}.toml"
    lines = ["[worker]", *(f"{key} = {toml(value)}" for key, value in worker.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return conveyor.load_config(path)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in tmp_path (no ./worker.toml discovery) with empty thread records."""
    monkeypatch.chdir(tmp_path)
    RUN_THREADS.clear()
    yield
    RUN_THREADS.clear()


def write(target: conveyor.LocalTarget) -> None:
    """Write something to ``target``."""
    with target.open("w") as out:
        out.write("x")


# --- task classes (names unique to this file) --------------------------------------------------


class HkLeaf(conveyor.Task):
    """A leaf that writes ``root/name``."""

    root = conveyor.Parameter()
    name = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, f"{self.name}.txt"))

    def run(self) -> None:
        with _LOCK:
            RUN_THREADS[self.task_id] = threading.get_ident()
        write(self.output())


class HkReporter(conveyor.Task):
    """Needs a leaf; publishes a status message, progress and a tracking URL."""

    root = conveyor.Parameter()
    count = conveyor.IntParameter(default=3)

    def requires(self) -> Any:
        return HkLeaf(root=self.root, name="reporter-input")

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "reporter.txt"))

    def run(self) -> None:
        with _LOCK:
            RUN_THREADS[self.task_id] = threading.get_ident()
        self.set_status_message("halfway there")
        self.set_progress_percentage(50)
        self.set_tracking_url("http://tracker.example/job/7")
        write(self.output())


class HkFails(conveyor.Task):
    """run() raises."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "fails.txt"))

    def run(self) -> None:
        raise RuntimeError("hook test failure")


class HkDynamic(conveyor.Task):
    """Yields a dynamic dependency."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "dynamic.txt"))

    def run(self) -> Any:
        yield HkLeaf(root=self.root, name="dynamic-dep")
        write(self.output())


class HkBroken(conveyor.Task):
    """complete() returns a non-bool: a scheduling error."""

    root = conveyor.Parameter()

    def complete(self) -> Any:
        return 1


class HkMixed(conveyor.WrapperTask):
    """A graph with a success, a failure, a dynamic dependency and (optionally) a broken task."""

    root = conveyor.Parameter()
    broken = conveyor.BoolParameter(default=False)

    def requires(self) -> Any:
        tasks: list[conveyor.Task] = [
            HkReporter(root=self.root),
            HkFails(root=self.root),
            HkDynamic(root=self.root),
        ]
        if self.broken:
            tasks.append(HkBroken(root=self.root))
        return tasks


class HkSimple(conveyor.WrapperTask):
    """Two leaves and a reporter; everything succeeds."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return [
            HkLeaf(root=self.root, name="simple-a"),
            HkLeaf(root=self.root, name="simple-b"),
            HkReporter(root=self.root),
        ]


# --- plugins -----------------------------------------------------------------------------------


class ThreadRecorder:
    """Records the hook name and the thread each event arrived on."""

    name = "test-hooks.thread-recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []


def _thread_recorder(hook: str) -> Any:
    def record(self: ThreadRecorder, event: Any) -> None:
        self.calls.append((hook, threading.get_ident()))

    record.__name__ = hook
    return conveyor.hookimpl(record)


class ExplodingPlugin:
    """Every hook implementation raises after counting the call."""

    name = "test-hooks.exploding"

    def __init__(self) -> None:
        self.calls: list[str] = []


def _exploder(hook: str) -> Any:
    def explode(self: ExplodingPlugin, event: Any) -> None:
        self.calls.append(hook)
        raise RuntimeError(f"plugin exploded in {hook}")

    explode.__name__ = hook
    return conveyor.hookimpl(explode)


for _hook in WORKER_OBSERVERS:
    setattr(ThreadRecorder, _hook, _thread_recorder(_hook))
    setattr(ExplodingPlugin, _hook, _exploder(_hook))


def run_worker(
    directory: Path,
    root: conveyor.Task,
    plugins: list[object],
    scheduler: conveyor.Scheduler | None = None,
    **worker: Any,
) -> tuple[conveyor.Worker, bool, int]:
    """Add ``root`` to a fresh worker, run it; return the worker, run()'s value and #add events."""
    with conveyor.Worker(scheduler, config=make_config(directory, **worker), plugins=plugins) as w:
        w.add(root)
        first = plugins[0] if plugins else None
        added = len(first.records) if isinstance(first, RecordingPlugin) else 0
        ok = w.run()
    return w, ok, added


def task_hooks(rec: RecordingPlugin, task_id: str) -> list[str]:
    """The hook names one task received, in order."""
    return [r.hook for r in rec.for_task(task_id)]


# --- tests -------------------------------------------------------------------------------------


def test_every_hook_fires_and_worker_events_bracket_the_run(tmp_path: Path) -> None:
    """Every task hook fires; worker_started opens run() and worker_stopped closes it."""
    rec = RecordingPlugin()
    root = HkMixed(root=str(tmp_path), broken=True)
    worker, ok, added = run_worker(tmp_path, root, [rec])
    fired = set(rec.hooks())
    assert set(WORKER_OBSERVERS) - NOT_FIRED_BY_INLINE_OR_THREAD <= fired
    during_run = rec.records[added:]
    assert during_run[0].hook == "conveyor_worker_started"
    assert rec.hooks().count("conveyor_worker_started") == 1
    assert rec.records[-1].hook == "conveyor_worker_stopped"
    assert rec.hooks().count("conveyor_worker_stopped") == 1
    before_run = {r.hook for r in rec.records[:added]}
    assert before_run <= {
        "conveyor_task_complete_checked",
        "conveyor_task_dependencies_discovered",
        "conveyor_task_broken",
    }
    [broken] = rec.events("task_broken", HkBroken(root=str(tmp_path)).task_id)
    assert broken.phase == "complete"
    assert "returned 1" in broken.error
    stopped = rec.records[-1].event
    assert worker.report is not None
    assert stopped.ok is ok is False
    assert stopped.summary == worker.report.summary
    assert "Verdict" in stopped.summary.strip().splitlines()[-1]


def test_worker_stopped_reports_success(tmp_path: Path) -> None:
    """On a fully successful run worker_stopped carries ok=True and the summary."""
    rec = RecordingPlugin()
    worker, ok, _ = run_worker(tmp_path, HkSimple(root=str(tmp_path)), [rec])
    [stopped] = rec.events("worker_stopped")
    [started] = rec.events("worker_started")
    assert ok is True
    assert stopped.ok is True
    assert worker.report is not None
    assert stopped.summary == worker.report.summary
    assert started.worker_id == stopped.worker_id == worker.id
    assert started.task_id == "" and dict(started.params) == {}


def test_per_task_transition_order(tmp_path: Path) -> None:
    """A task's hooks arrive as checked, dependencies, started, notes, succeeded."""
    rec = RecordingPlugin()
    reporter = HkReporter(root=str(tmp_path))
    leaf = HkLeaf(root=str(tmp_path), name="reporter-input")
    run_worker(tmp_path, reporter, [rec])
    assert task_hooks(rec, reporter.task_id) == [
        "conveyor_task_complete_checked",
        "conveyor_task_dependencies_discovered",
        "conveyor_task_started",
        "conveyor_task_status_message",
        "conveyor_task_progress",
        "conveyor_task_tracking_url",
        "conveyor_task_succeeded",
    ]
    assert task_hooks(rec, leaf.task_id) == [
        "conveyor_task_complete_checked",
        "conveyor_task_dependencies_discovered",
        "conveyor_task_started",
        "conveyor_task_succeeded",
    ]
    [deps] = rec.events("task_dependencies_discovered", reporter.task_id)
    assert deps.dependencies == (leaf.task_id,)
    assert deps.dynamic is False
    [checked] = rec.events("task_complete_checked", reporter.task_id)
    assert checked.complete is False


def _attempt_violations(records: list[Recorded]) -> list[str]:
    """Break the rule 'every started attempt ends with exactly one outcome' into messages."""
    problems = []
    open_attempts: dict[str, int] = {}
    for record in records:
        task_id, hook = record.event.task_id, record.hook
        ends = hook in TERMINAL or (
            hook == "conveyor_task_dependencies_discovered" and record.event.dynamic
        )
        if hook == "conveyor_task_started":
            if task_id in open_attempts:
                problems.append(f"{task_id}: started again before its attempt ended")
            open_attempts[task_id] = record.event.attempt
        elif ends:
            if task_id not in open_attempts:
                problems.append(f"{task_id}: {hook} without an open attempt")
            open_attempts.pop(task_id, None)
    problems.extend(f"{t}: attempt {a} never ended" for t, a in open_attempts.items())
    return problems


@pytest.mark.parametrize(("executor", "workers"), [("inline", 1), ("thread", 3)])
def test_every_started_attempt_ends_exactly_once(
    tmp_path: Path, executor: str, workers: int
) -> None:
    """Over success, failure and dynamic deps, every attempt ends with exactly one outcome event."""
    rec = RecordingPlugin()
    root = HkMixed(root=str(tmp_path))
    run_worker(tmp_path, root, [rec], executor=executor, workers=workers)
    assert _attempt_violations(rec.records) == []
    started = rec.events("task_started")
    assert len(started) >= 5
    dynamic = HkDynamic(root=str(tmp_path))
    assert [e.attempt for e in rec.events("task_started", dynamic.task_id)] == [1, 2]
    assert [e.dynamic for e in rec.events("task_dependencies_discovered", dynamic.task_id)] == [
        False,
        True,
    ]
    assert len(rec.events("task_failed", HkFails(root=str(tmp_path)).task_id)) == 1


def test_events_are_frozen_and_carry_the_common_fields(tmp_path: Path) -> None:
    """Every event is frozen and carries task_id, family, params, worker_id, timestamp, state."""
    rec = RecordingPlugin()
    root = HkMixed(root=str(tmp_path), broken=True)
    before = time.time()
    worker, _, _ = run_worker(tmp_path, root, [rec])
    after = time.time()
    tasks = worker.tasks()
    assert rec.records
    for record in rec.records:
        event = record.event
        assert isinstance(event, events.Event)
        assert dataclasses.is_dataclass(event)
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.task_id = "changed"  # type: ignore[misc]
        assert event.worker_id == worker.id
        assert isinstance(event.timestamp, float)
        assert before <= event.timestamp <= after
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in event.params.items())
        if record.hook.startswith("conveyor_worker_"):
            assert event.task_id == "" and event.family == "" and dict(event.params) == {}
            continue
        task = tasks[event.task_id]
        assert event.family == task.task_family
        assert dict(event.params) == task.to_str_params()
        assert isinstance(event.state, str) and event.state


def test_event_states_name_the_state_after_the_transition(tmp_path: Path) -> None:
    """started events say RUNNING, succeeded DONE and failed FAILED."""
    rec = RecordingPlugin()
    run_worker(tmp_path, HkMixed(root=str(tmp_path)), [rec])
    assert {e.state for e in rec.events("task_started")} == {"RUNNING"}
    assert {e.state for e in rec.events("task_succeeded")} == {"DONE"}
    assert {e.state for e in rec.events("task_failed")} == {"FAILED"}


@pytest.mark.parametrize("caller", ["main", "other"])
def test_thread_executor_events_arrive_on_the_thread_that_called_run(
    tmp_path: Path, caller: str
) -> None:
    """With the thread executor every hook runs on the thread that called run()."""
    threads = ThreadRecorder()
    root = HkSimple(root=str(tmp_path))
    cfg = make_config(tmp_path, executor="thread", workers=2)
    loop_ident: list[int] = []

    def go() -> None:
        with conveyor.Worker(config=cfg, plugins=[threads]) as worker:
            worker.add(root)
            loop_ident.append(threading.get_ident())
            worker.run()

    if caller == "main":
        go()
    else:
        thread = threading.Thread(target=go, name="test-hooks-caller")
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive()
    [ident] = loop_ident
    hooks = {hook for hook, _ in threads.calls}
    assert {"conveyor_task_started", "conveyor_task_status_message"} <= hooks
    assert {t for _, t in threads.calls} == {ident}
    assert RUN_THREADS
    assert ident not in set(RUN_THREADS.values())


def test_raising_hook_is_isolated_and_logged(tmp_path: Path) -> None:
    """A raising hook is logged with its plugin's name; other plugins and the run go on."""
    before, after = RecordingPlugin(), RecordingPlugin()
    before.name = "test-hooks.recorder-before"  # type: ignore[misc]
    after.name = "test-hooks.recorder-after"  # type: ignore[misc]
    exploding = ExplodingPlugin()
    root = HkSimple(root=str(tmp_path))
    with structlog.testing.capture_logs() as logs:
        worker, ok, _ = run_worker(tmp_path, root, [before, exploding, after])
    assert ok is True
    assert worker.report is not None
    assert worker.report.exit_code == 0
    assert (tmp_path / "reporter.txt").exists()
    assert exploding.calls == before.hooks() == after.hooks()
    assert "conveyor_worker_stopped" in exploding.calls
    assert "conveyor_task_succeeded" in exploding.calls
    failures = [e for e in logs if e.get("plugin") == "test-hooks.exploding"]
    assert len(failures) == len(exploding.calls)
    assert {e["log_level"] for e in failures} == {"error"}
    assert {e.get("hook") for e in failures} == set(exploding.calls)
    assert all("plugin exploded" in str(e.get("error", "")) for e in failures)


@pytest.mark.parametrize(("executor", "workers"), [("inline", 1), ("thread", 2)])
def test_status_progress_and_tracking_url_reach_hooks_and_scheduler(
    tmp_path: Path, executor: str, workers: int
) -> None:
    """set_status_message/progress/tracking_url reach the hooks and the scheduler's task_list()."""
    rec = RecordingPlugin()
    scheduler = conveyor.Scheduler()
    reporter = HkReporter(root=str(tmp_path))
    _, ok, _ = run_worker(
        tmp_path, reporter, [rec], scheduler=scheduler, executor=executor, workers=workers
    )
    assert ok
    [message] = rec.events("task_status_message", reporter.task_id)
    [progress] = rec.events("task_progress", reporter.task_id)
    [url] = rec.events("task_tracking_url", reporter.task_id)
    assert message.message == "halfway there"
    assert progress.percentage == 50.0
    assert url.url == "http://tracker.example/job/7"
    [entry] = [t for t in encode(scheduler.task_list()) if t["task_id"] == reporter.task_id]
    assert entry["status_message"] == "halfway there"
    assert entry["progress"] == 50.0
    assert entry["tracking_url"] == "http://tracker.example/job/7"
    assert entry["status"] == "DONE"


@pytest.mark.parametrize(
    ("executor", "workers", "expected"),
    [
        ("inline", 1, "inline"),
        ("thread", 1, "thread"),
        ("thread", 3, "thread"),
        ("auto", 1, "inline"),
    ],
)
def test_started_event_names_the_executor_used(
    tmp_path: Path, executor: str, workers: int, expected: str
) -> None:
    """The executor field of task_started names the executor that actually ran the attempt."""
    rec = RecordingPlugin()
    run_worker(tmp_path, HkSimple(root=str(tmp_path)), [rec], executor=executor, workers=workers)
    started = rec.events("task_started")
    assert len(started) == 5
    assert {e.executor for e in started} == {expected}
    assert {e.attempt for e in started} == {1}


class _ParamsVandal:
    """Tries to change every event's params, and remembers whether it could."""

    name = "vandal"

    def __init__(self) -> None:
        self.refused = 0

    @conveyor.hookimpl
    def conveyor_task_complete_checked(self, event: Any) -> None:
        try:
            event.params["x"] = "changed"  # type: ignore[index]
        except TypeError:
            self.refused += 1
            raise


class _ParamsWitness:
    """Records the params every later plugin sees."""

    name = "witness"

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    @conveyor.hookimpl
    def conveyor_task_complete_checked(self, event: Any) -> None:
        self.seen.append(dict(event.params))


def test_a_plugin_cannot_change_what_others_see_through_event_params(tmp_path: Path) -> None:
    """Event params are read-only: a plugin's write fails, and neither the scheduler, the task
    nor another plugin sees a change."""
    vandal, witness = _ParamsVandal(), _ParamsWitness()
    scheduler = conveyor.Scheduler()
    task = HkLeaf(root=str(tmp_path), name="immutable")
    with conveyor.Worker(scheduler, config=conveyor.Config(), plugins=[vandal, witness]) as w:
        w.add(task)
        assert w.run() is True
    assert vandal.refused >= 1
    assert witness.seen and all("x" not in seen for seen in witness.seen)
    [entry] = [t for t in scheduler.task_list() if t.task_id == task.task_id]
    assert dict(entry.params) == task.to_str_params()
    assert "x" not in entry.params
