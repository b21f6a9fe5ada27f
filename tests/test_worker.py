"""Behaviour of the worker through conveyor.build() and conveyor.Worker, with real LocalTargets."""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

import conveyor
from conveyor.config import LoggingSettings
from conveyor.log import configure_logging
from conveyor.scheduler import TaskSpec
from conveyor.testing import RecordingPlugin

# --- shared state written by the task classes below ------------------------------------------

_LOCK = threading.Lock()
CALLS: list[tuple[Any, ...]] = []
_HOLDER: dict[str, Any] = {}


def note(*item: Any) -> None:
    """Record one thing task code did (thread-safe)."""
    with _LOCK:
        CALLS.append(item)


def called(kind: str) -> list[tuple[Any, ...]]:
    """The recorded calls whose first element is ``kind``."""
    return [c for c in CALLS if c[0] == kind]


def write(target: conveyor.LocalTarget, text: str = "x") -> None:
    """Write ``text`` to ``target`` (atomically)."""
    with target.open("w") as out:
        out.write(text)


_config_ids = itertools.count()


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    return "[" + ", ".join(_toml(v) for v in value) + "]"


def make_config(directory: Path, **worker: Any) -> conveyor.Config:
    """Write a worker.toml with these ``[worker]`` keys into ``directory`` and load it."""
    path = directory / f"test-worker-{next(_config_ids)}.toml"
    lines = ["[worker]", *(f"{key} = {_toml(value)}" for key, value in worker.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return conveyor.load_config(path)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in tmp_path (no ./worker.toml discovery) with empty task records."""
    monkeypatch.chdir(tmp_path)
    CALLS.clear()
    _HOLDER.clear()
    yield
    CALLS.clear()
    _HOLDER.clear()


# --- task classes (names unique to this file) --------------------------------------------------


class WkFile(conveyor.Task):
    """A leaf that writes ``root/name``."""

    root = conveyor.Parameter()
    name = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, self.name))

    def run(self) -> None:
        note("file.run", self.name)
        write(self.output(), self.name)


class WkChain(conveyor.Task):
    """Link ``n`` of a chain: needs link ``n - 1``."""

    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def requires(self) -> Any:
        return WkChain(root=self.root, n=self.n - 1) if self.n > 0 else []

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, f"chain-{self.n}.txt"))

    def run(self) -> None:
        if self.n > 0:
            assert self.input().exists(), "dependency output missing when run() started"
        note("chain.run", self.n)
        write(self.output(), str(self.n))


class WkProbeLeaf(conveyor.Task):
    """Below a complete task: must never be asked anything."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        note("leaf.requires")
        return []

    def complete(self) -> bool:
        note("leaf.complete")
        return False

    def run(self) -> None:
        note("leaf.run")


class WkProbeMid(conveyor.Task):
    """Complete before the run (its file is made by the test); needs WkProbeLeaf."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return WkProbeLeaf(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "mid.txt"))

    def run(self) -> None:
        note("mid.run")
        write(self.output())


class WkProbeTop(conveyor.Task):
    """Needs WkProbeMid."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return WkProbeMid(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "top.txt"))

    def run(self) -> None:
        note("top.run")
        write(self.output())


class WkDynParent(conveyor.Task):
    """Yields a nested structure of tasks once, then writes its output."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "dyn-parent.txt"))

    def run(self) -> Any:
        note("parent.top")
        got = yield {
            "a": WkFile(root=self.root, name="dyn-a"),
            "bc": [WkFile(root=self.root, name="dyn-b"), WkFile(root=self.root, name="dyn-c")],
        }
        note("parent.got", got)
        write(self.output())


class WkDynChild(conveyor.Task):
    """A dynamic dependency that itself yields a dynamic dependency."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "dyn-child.txt"))

    def run(self) -> Any:
        note("child.top")
        leaf = yield WkFile(root=self.root, name="child-leaf")
        write(self.output(), leaf.path)


class WkDynSequence(conveyor.Task):
    """Yields twice in a row; the second yield is a task that yields itself."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "dyn-seq.txt"))

    def run(self) -> Any:
        note("seq.top")
        first = yield WkFile(root=self.root, name="seq-1")
        note("seq.first", first.path)
        second = yield WkDynChild(root=self.root)
        note("seq.second", second.path)
        write(self.output())


class WkVanishingDep(conveyor.Task):
    """A dependency whose output a plugin deletes between scheduling and run."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "vanishing.txt"))

    def run(self) -> None:
        note("vanishing.run")
        write(self.output())


class WkNeedsVanishing(conveyor.Task):
    """Needs WkVanishingDep."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return WkVanishingDep(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "needs-vanishing.txt"))

    def run(self) -> None:
        note("needs-vanishing.run")
        write(self.output())


class WkWritesNothing(conveyor.Task):
    """Declares an output but run() never writes it."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "never-written.txt"))

    def run(self) -> None:
        note("nothing.run")


class WkExplainedFailure(conveyor.Task):
    """Fails; on_failure() returns the explanation."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "explained.txt"))

    def run(self) -> None:
        raise RuntimeError("the disk is on fire")

    def on_failure(self, exception: BaseException) -> str | None:
        note("on_failure", type(exception).__name__, str(exception))
        return "custom explanation: disk full on /data"


class WkAlwaysFails(conveyor.Task):
    """run() raises every time."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "always-fails.txt"))

    def run(self) -> None:
        note("fails.run")
        raise RuntimeError("always fails on purpose")


class WkWithCallbacks(conveyor.Task):
    """Records on_success()."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "callbacks.txt"))

    def run(self) -> None:
        note("callbacks.run")
        write(self.output())

    def on_success(self) -> None:
        note("on_success", self.output().exists())

    def on_failure(self, exception: BaseException) -> str | None:
        note("on_failure", str(exception))
        return None


class WkFlaky(conveyor.Task):
    """Fails on its first attempt (leaving a marker), succeeds afterwards."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "flaky.txt"))

    def run(self) -> None:
        note("flaky.run")
        marker = Path(self.root, "flaky.marker")
        if not marker.exists():
            marker.write_text("failed once", encoding="utf-8")
            raise RuntimeError("first attempt fails")
        write(self.output())


class WkLateExternal(conveyor.ExternalTask):
    """External data that appears while the worker keeps running."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "late-external.txt"))


class WkNeedsLate(conveyor.Task):
    """Needs WkLateExternal."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return WkLateExternal(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "needs-late.txt"))

    def run(self) -> None:
        note("needs-late.run")
        write(self.output())


class WkMissingExternal(conveyor.ExternalTask):
    """External data that never appears."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "missing-external.txt"))


class WkNeedsMissing(conveyor.Task):
    """Needs WkMissingExternal."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return WkMissingExternal(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "needs-missing.txt"))

    def run(self) -> None:
        note("needs-missing.run")
        write(self.output())


class WkBrokenComplete(conveyor.Task):
    """complete() returns a string: a scheduling error."""

    root = conveyor.Parameter()

    def complete(self) -> Any:
        return "yes"


class WkDisabled(conveyor.Task):
    """A disabled task: never run."""

    disabled = True
    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "disabled.txt"))

    def run(self) -> None:
        note("disabled.run")
        write(self.output())


class WkNeedsDisabled(conveyor.Task):
    """Needs WkDisabled."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return WkDisabled(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "needs-disabled.txt"))

    def run(self) -> None:
        note("needs-disabled.run")
        write(self.output())


class WkPrioritized(conveyor.Task):
    """A leaf whose priority is its ``level`` parameter."""

    root = conveyor.Parameter()
    level = conveyor.IntParameter()

    @property
    def priority(self) -> int:  # type: ignore[override]
        return self.level

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, f"prio-{self.level}.txt"))

    def run(self) -> None:
        note("prio.run", self.level)
        write(self.output())


class WkAll(conveyor.WrapperTask):
    """Groups the leaves named in ``kind`` (see requires())."""

    root = conveyor.Parameter()
    kind = conveyor.Parameter()

    def requires(self) -> Any:
        if self.kind == "priority":
            return [WkPrioritized(root=self.root, level=level) for level in (1, 10, 5)]
        if self.kind == "db":
            return [WkUsesDb(root=self.root, name=name) for name in ("db-1", "db-2")]
        if self.kind == "barrier":
            return [WkMeetsAtBarrier(root=self.root, name=name) for name in ("b-1", "b-2")]
        raise AssertionError(f"unknown kind {self.kind}")


class WkUsesDb(conveyor.Task):
    """Needs one unit of the ``db`` resource; records when it is inside run()."""

    resources = {"db": 1}
    root = conveyor.Parameter()
    name = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, f"{self.name}.txt"))

    def run(self) -> None:
        with _LOCK:
            _HOLDER["inside"] = _HOLDER.get("inside", 0) + 1
            _HOLDER["most"] = max(_HOLDER.get("most", 0), _HOLDER["inside"])
            CALLS.append(("db.enter", self.name))
        # Stay inside until the worker has asked for more work and been refused (or 10 s).
        _HOLDER["scheduler"].refused.wait(timeout=10)
        with _LOCK:
            _HOLDER["inside"] -= 1
            CALLS.append(("db.exit", self.name))
        write(self.output())


class WkMeetsAtBarrier(conveyor.Task):
    """Both instances must be inside run() at the same time to pass the barrier."""

    root = conveyor.Parameter()
    name = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, f"{self.name}.txt"))

    def run(self) -> None:
        _HOLDER["barrier"].wait()
        note("barrier.passed", self.name)
        write(self.output())


class WkShared(conveyor.Task):
    """Node ``n`` of a 50-node binary tree; counts how often its run() executes."""

    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def requires(self) -> Any:
        return [WkShared(root=self.root, n=c) for c in (2 * self.n + 1, 2 * self.n + 2) if c < 50]

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, f"shared-{self.n}.txt"))

    def run(self) -> None:
        with _LOCK:
            counts = _HOLDER.setdefault("counts", {})
            counts[self.n] = counts.get(self.n, 0) + 1
        write(self.output())


class WkSignalSender(conveyor.Task):
    """Sends SIGUSR1 to its own process from inside run(), then finishes."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "signal-sender.txt"))

    def run(self) -> None:
        os.kill(os.getpid(), signal.SIGUSR1)
        note("sender.run")
        write(self.output())


class WkAfterSignal(conveyor.Task):
    """Needs WkSignalSender; must not start after SIGUSR1."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return WkSignalSender(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "after-signal.txt"))

    def run(self) -> None:
        note("after-signal.run")
        write(self.output())


class WkWithTimeout(conveyor.Task):
    """Has a worker_timeout."""

    worker_timeout = 30.0
    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "with-timeout.txt"))

    def run(self) -> None:
        note("timeout.run")
        write(self.output())


class WkLogs(conveyor.Task):
    """Logs through stdlib logging and structlog from inside run()."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "logs.txt"))

    def run(self) -> None:
        logging.getLogger("wk.tasklog").info("stdlib line from task")
        structlog.get_logger("wk.tasklog").info("structlog line from task")
        write(self.output())


class WkFailsOnceThenDisabled(conveyor.Task):
    """Fails; its own retry_count of 1 disables it after that one failure."""

    retry_count = 1
    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "fails-once.txt"))

    def run(self) -> None:
        note("fails-once.run")
        raise RuntimeError("fails and is disabled")


class WkNeedsFailing(conveyor.Task):
    """Needs WkAlwaysFails."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return WkAlwaysFails(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "needs-failing.txt"))

    def run(self) -> None:
        note("needs-failing.run")
        write(self.output())


class WkBlocking(conveyor.Task):
    """Signals that it started, then waits to be released."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "blocking.txt"))

    def run(self) -> None:
        note("blocking.run")
        _HOLDER["started"].set()
        assert _HOLDER["release"].wait(timeout=30), "never released"
        write(self.output())


# --- plugins used by the tests -----------------------------------------------------------------


class DeleteOnStart:
    """Deletes a file whenever a task of ``family`` starts, at most ``times`` times."""

    name = "test-worker.delete-on-start"

    def __init__(self, family: str, path: str, times: int) -> None:
        self.family = family
        self.path = path
        self.left = times

    @conveyor.hookimpl
    def conveyor_task_started(self, event: Any) -> None:
        if event.family == self.family and self.left > 0:
            self.left -= 1
            os.remove(self.path)


class SetOnFailure:
    """Sets ``event`` when a task of ``family`` fails."""

    name = "test-worker.set-on-failure"

    def __init__(self, family: str) -> None:
        self.family = family
        self.event = threading.Event()

    @conveyor.hookimpl
    def conveyor_task_failed(self, event: Any) -> None:
        if event.family == self.family:
            self.event.set()


class RefusalNoticingScheduler(conveyor.Scheduler):
    """The real in-process scheduler; ``refused`` is set once get_work() hands out nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused = threading.Event()

    def get_work(self, worker_id: str, assistant: bool = False, running: Any = None) -> Any:
        work = super().get_work(worker_id, assistant, running)
        if work is None:
            self.refused.set()
        return work


# --- running a graph -----------------------------------------------------------------------------


def test_chain_runs_in_dependency_order(tmp_path: Path) -> None:
    """A three-link chain runs each link once, dependencies first, and every output exists."""
    result = conveyor.build(WkChain(root=str(tmp_path), n=2))
    assert result.ok
    assert called("chain.run") == [("chain.run", 0), ("chain.run", 1), ("chain.run", 2)]
    assert all((tmp_path / f"chain-{n}.txt").exists() for n in range(3))


def test_already_complete_tasks_are_not_run_and_reported_done(tmp_path: Path) -> None:
    """Tasks whose outputs exist are not run and appear as DONE in the result."""
    (tmp_path / "chain-1.txt").write_text("made earlier", encoding="utf-8")
    root = WkChain(root=str(tmp_path), n=2)
    result = conveyor.build(root)
    assert called("chain.run") == [("chain.run", 2)]
    middle = WkChain(root=str(tmp_path), n=1)
    assert result.states[middle.task_id] == "DONE"
    assert result.states[root.task_id] == "DONE"
    assert middle.task_id in result.tasks
    assert (tmp_path / "chain-1.txt").read_text(encoding="utf-8") == "made earlier"


def test_fully_complete_graph_runs_nothing(tmp_path: Path) -> None:
    """When the requested task is already complete nothing runs and the run succeeds."""
    (tmp_path / "chain-0.txt").write_text("made earlier", encoding="utf-8")
    result = conveyor.build(WkChain(root=str(tmp_path), n=0))
    assert CALLS == []
    assert result.ok
    assert result.exit_code == 0
    assert "already complete" in result.summary


def test_walk_does_not_descend_below_a_complete_task(tmp_path: Path) -> None:
    """The dependencies of a complete task are never asked for requires() or complete()."""
    (tmp_path / "mid.txt").write_text("made earlier", encoding="utf-8")
    result = conveyor.build(WkProbeTop(root=str(tmp_path)))
    assert result.ok
    assert called("leaf.requires") == []
    assert called("leaf.complete") == []
    assert called("leaf.run") == []
    assert called("mid.run") == []
    assert called("top.run") == [("top.run",)]
    assert WkProbeLeaf(root=str(tmp_path)).task_id not in result.states


# --- dynamic dependencies ------------------------------------------------------------------------


@pytest.mark.parametrize(("executor", "workers"), [("inline", 1), ("thread", 2)])
def test_dynamic_dependencies_run_and_run_resumes_in_process(
    tmp_path: Path, executor: str, workers: int
) -> None:
    """Yielded tasks run, and under inline and thread the suspended run() is resumed (the code
    before the yield runs once), the yield giving their outputs; each resumption is a new
    attempt (SPEC §2.1, §3)."""
    rec = RecordingPlugin()
    parent = WkDynParent(root=str(tmp_path))
    cfg = make_config(tmp_path, executor=executor, workers=workers)
    with conveyor.Worker(config=cfg, plugins=[rec]) as worker:
        assert worker.add(parent)
        assert worker.run()
    assert len(called("parent.top")) == 1
    assert sorted(c[1] for c in called("file.run")) == ["dyn-a", "dyn-b", "dyn-c"]
    assert CALLS.index(("parent.top",)) < CALLS.index(("file.run", "dyn-a"))
    [(_, got)] = called("parent.got")
    assert isinstance(got, dict)
    assert set(got) == {"a", "bc"}
    assert isinstance(got["a"], conveyor.LocalTarget)
    assert got["a"].path == os.path.join(str(tmp_path), "dyn-a")
    assert isinstance(got["bc"], list)
    assert [t.path for t in got["bc"]] == [
        os.path.join(str(tmp_path), "dyn-b"),
        os.path.join(str(tmp_path), "dyn-c"),
    ]
    assert [e.attempt for e in rec.events("task_started", parent.task_id)] == [1, 2]
    assert (tmp_path / "dyn-parent.txt").exists()


def test_sequential_and_nested_yields(tmp_path: Path) -> None:
    """Two yields in a row and a yielded task that yields itself all resolve, attempt by attempt."""
    rec = RecordingPlugin()
    seq = WkDynSequence(root=str(tmp_path))
    child = WkDynChild(root=str(tmp_path))
    with conveyor.Worker(config=make_config(tmp_path), plugins=[rec]) as worker:
        worker.add(seq)
        assert worker.run()
    assert [e.attempt for e in rec.events("task_started", seq.task_id)] == [1, 2, 3]
    assert [e.attempt for e in rec.events("task_started", child.task_id)] == [1, 2]
    assert len(called("seq.top")) == 1  # resumed after each yield, never re-run from the top
    assert called("seq.second") == [("seq.second", os.path.join(str(tmp_path), "dyn-child.txt"))]
    leaf_path = os.path.join(str(tmp_path), "child-leaf")
    assert (tmp_path / "dyn-child.txt").read_text(encoding="utf-8") == leaf_path
    assert (tmp_path / "dyn-seq.txt").exists()


# --- unfulfilled dependencies at run time --------------------------------------------------------


def test_dependency_deleted_before_run_is_rescheduled(tmp_path: Path) -> None:
    """A dependency gone at run time fails as unfulfilled, is rebuilt, and the task then works."""
    root = str(tmp_path)
    (tmp_path / "vanishing.txt").write_text("made earlier", encoding="utf-8")
    rec = RecordingPlugin()
    deleter = DeleteOnStart("WkNeedsVanishing", str(tmp_path / "vanishing.txt"), times=1)
    top = WkNeedsVanishing(root=root)
    with conveyor.Worker(config=make_config(tmp_path), plugins=[rec, deleter]) as worker:
        worker.add(top)
        assert worker.run()
    [failure] = rec.events("task_failed", top.task_id)
    assert "unfulfilled" in failure.error.lower()
    assert "WkVanishingDep" in failure.error
    assert called("vanishing.run") == [("vanishing.run",)]
    assert [e.attempt for e in rec.events("task_started", top.task_id)] == [1, 2]
    assert len(rec.events("task_succeeded", top.task_id)) == 1
    assert worker.report is not None
    assert worker.report.states[top.task_id] == "DONE"


@pytest.mark.parametrize("max_reschedules", [0, 2])
def test_reschedules_are_bounded(tmp_path: Path, max_reschedules: int) -> None:
    """A dependency that vanishes before every attempt reschedules at most max_reschedules times."""
    root = str(tmp_path)
    (tmp_path / "vanishing.txt").write_text("made earlier", encoding="utf-8")
    rec = RecordingPlugin()
    deleter = DeleteOnStart("WkNeedsVanishing", str(tmp_path / "vanishing.txt"), times=100)
    top = WkNeedsVanishing(root=root)
    cfg = make_config(tmp_path, max_reschedules=max_reschedules)
    with conveyor.Worker(config=cfg, plugins=[rec, deleter]) as worker:
        worker.add(top)
        assert not worker.run()
    assert len(rec.events("task_started", top.task_id)) == max_reschedules + 1
    assert called("needs-vanishing.run") == []
    assert worker.report is not None
    assert worker.report.states[top.task_id] == "FAILED"
    assert "unfulfilled" in worker.report.errors[top.task_id].lower()
    assert worker.report.exit_code == 1


# --- completeness after run and callbacks --------------------------------------------------------


def test_run_that_writes_nothing_fails(tmp_path: Path) -> None:
    """With check_complete_on_run (the default) a run() that leaves no output is FAILED."""
    task = WkWritesNothing(root=str(tmp_path))
    result = conveyor.build(task)
    assert called("nothing.run") == [("nothing.run",)]
    assert result.states[task.task_id] == "FAILED"
    assert "not complete" in result.errors[task.task_id]
    assert "WkWritesNothing" in result.errors[task.task_id]
    assert result.exit_code == 1
    assert not result.ok


def test_run_that_writes_nothing_is_done_without_the_check(tmp_path: Path) -> None:
    """With check_complete_on_run = false the same task is DONE."""
    task = WkWritesNothing(root=str(tmp_path))
    result = conveyor.build(task, config=make_config(tmp_path, check_complete_on_run=False))
    assert called("nothing.run") == [("nothing.run",)]
    assert result.states[task.task_id] == "DONE"
    assert result.errors == {}
    assert result.exit_code == 0


def test_on_failure_text_is_the_failure_explanation(tmp_path: Path) -> None:
    """on_failure()'s text is RunResult.errors, the failed hook's error and the scheduler's."""
    rec = RecordingPlugin()
    scheduler = conveyor.Scheduler()
    task = WkExplainedFailure(root=str(tmp_path))
    with conveyor.Worker(scheduler, config=make_config(tmp_path), plugins=[rec]) as worker:
        worker.add(task)
        assert not worker.run()
    text = "custom explanation: disk full on /data"
    assert called("on_failure") == [("on_failure", "RuntimeError", "the disk is on fire")]
    [failed] = rec.events("task_failed", task.task_id)
    assert failed.error == text
    assert failed.exception_type == "RuntimeError"
    assert worker.report is not None
    assert worker.report.errors[task.task_id] == text
    assert scheduler.explanation(task.task_id) == text
    result = conveyor.build(WkExplainedFailure(root=str(tmp_path)))
    assert result.errors[task.task_id] == text


def test_failure_without_explanation_reports_the_traceback(tmp_path: Path) -> None:
    """When on_failure() returns None the explanation is the traceback of the exception."""
    task = WkAlwaysFails(root=str(tmp_path))
    result = conveyor.build(task)
    assert "RuntimeError" in result.errors[task.task_id]
    assert "always fails on purpose" in result.errors[task.task_id]
    assert "Traceback" in result.errors[task.task_id]


def test_on_success_is_called_after_run(tmp_path: Path) -> None:
    """on_success() is called once, after run() made the output, and on_failure() is not."""
    result = conveyor.build(WkWithCallbacks(root=str(tmp_path)))
    assert result.ok
    assert [c[0] for c in CALLS] == ["callbacks.run", "on_success"]
    assert called("on_success") == [("on_success", True)]


# --- worker settings -----------------------------------------------------------------------------


def test_task_limit_leaves_the_root_pending(tmp_path: Path) -> None:
    """With task_limit = 1 only one task is scheduled: nothing runs, the root is PENDING, exit 5."""
    root = WkChain(root=str(tmp_path), n=1)
    result = conveyor.build(root, task_limit=1)
    assert result.states[root.task_id] == "PENDING"
    assert result.exit_code == 5
    assert not result.ok
    assert called("chain.run") == []


def test_keep_alive_retries_a_task_that_failed_once(tmp_path: Path) -> None:
    """With keep_alive and a short retry_delay, a task that failed once runs again and succeeds."""
    rec = RecordingPlugin()
    scheduler = conveyor.Scheduler(retry_delay=0.1)
    task = WkFlaky(root=str(tmp_path))
    cfg = make_config(tmp_path, keep_alive=True, wait_interval=0.05, wait_jitter=0)
    with conveyor.Worker(scheduler, config=cfg, plugins=[rec]) as worker:
        worker.add(task)
        assert worker.run() is True
    assert len(called("flaky.run")) == 2
    assert [
        r.hook for r in rec.for_task(task.task_id) if "succeeded" in r.hook or "failed" in r.hook
    ] == [
        "conveyor_task_failed",
        "conveyor_task_succeeded",
    ]
    assert worker.report is not None
    assert worker.report.states[task.task_id] == "DONE"
    assert worker.report.exit_code == 0


def test_retry_external_tasks_rechecks_data_that_appears_later(tmp_path: Path) -> None:
    """With retry_external_tasks and keep_alive, an external task that appears later is found."""
    external = WkLateExternal(root=str(tmp_path))
    top = WkNeedsLate(root=str(tmp_path))
    signal_plugin = SetOnFailure("WkLateExternal")
    rec = RecordingPlugin()

    def create_later() -> None:
        if signal_plugin.event.wait(timeout=30):
            write(external.output(), "arrived")

    creator = threading.Thread(target=create_later, name="test-create-external")
    creator.start()
    scheduler = conveyor.Scheduler(retry_delay=0.1, retry_count=100)
    cfg = make_config(
        tmp_path, keep_alive=True, retry_external_tasks=True, wait_interval=0.05, wait_jitter=0
    )
    try:
        with conveyor.Worker(scheduler, config=cfg, plugins=[signal_plugin, rec]) as worker:
            worker.add(top)
            worker.run()
    finally:
        signal_plugin.event.set()
        creator.join(timeout=30)
    checks = rec.events("task_complete_checked", external.task_id)
    assert checks[0].complete is False
    assert len(rec.events("task_failed", external.task_id)) >= 1
    assert len(rec.events("task_succeeded", external.task_id)) == 1
    assert worker.report is not None
    assert worker.report.states[external.task_id] == "DONE"
    assert worker.report.states[top.task_id] == "DONE"
    assert called("needs-late.run") == [("needs-late.run",)]
    assert worker.report.exit_code == 0


def test_external_task_missing_without_retry(tmp_path: Path) -> None:
    """Without retry_external_tasks a missing external task stays PENDING: missing data, exit 4."""
    top = WkNeedsMissing(root=str(tmp_path))
    result = conveyor.build(top)
    assert result.states[WkMissingExternal(root=str(tmp_path)).task_id] == "PENDING"
    assert result.states[top.task_id] == "PENDING"
    assert called("needs-missing.run") == []
    assert result.exit_code == 4
    assert "missing external data" in result.summary


def test_disabled_task_is_never_run(tmp_path: Path) -> None:
    """A disabled task is DISABLED and never runs; its dependent stays PENDING; exit code 1."""
    top = WkNeedsDisabled(root=str(tmp_path))
    result = conveyor.build(top)
    assert result.states[WkDisabled(root=str(tmp_path)).task_id] == "DISABLED"
    assert result.states[top.task_id] == "PENDING"
    assert CALLS == []
    assert result.exit_code == 1


def test_priority_order_with_one_slot(tmp_path: Path) -> None:
    """With one slot, independent tasks run highest priority first."""
    result = conveyor.build(WkAll(root=str(tmp_path), kind="priority"), workers=1)
    assert result.ok
    assert [c[1] for c in called("prio.run")] == [10, 5, 1]


def test_resources_are_never_exceeded(tmp_path: Path) -> None:
    """Two tasks needing the only unit of "db" never run at once, even with two thread slots."""
    scheduler = RefusalNoticingScheduler()
    _HOLDER["scheduler"] = scheduler
    cfg = make_config(tmp_path, workers=2, executor="thread")
    with conveyor.Worker(scheduler, config=cfg) as worker:
        worker.add(WkAll(root=str(tmp_path), kind="db"))
        assert worker.run()
    assert _HOLDER["most"] == 1
    kinds = [c[0] for c in CALLS]
    assert kinds == ["db.enter", "db.exit", "db.enter", "db.exit"]


def test_thread_executor_runs_independent_tasks_concurrently(tmp_path: Path) -> None:
    """Two independent tasks both reach a two-party barrier: they ran at the same time."""
    _HOLDER["barrier"] = threading.Barrier(2, timeout=10)
    result = conveyor.build(WkAll(root=str(tmp_path), kind="barrier"), workers=2, executor="thread")
    assert result.ok, result.errors
    assert sorted(c[1] for c in called("barrier.passed")) == ["b-1", "b-2"]


def test_two_workers_share_one_scheduler(tmp_path: Path) -> None:
    """Two workers on one scheduler run each task of a shared 50-task graph exactly once."""
    scheduler = conveyor.Scheduler()
    cfg = make_config(tmp_path, keep_alive=True, wait_interval=0.01, wait_jitter=0)
    workers = [conveyor.Worker(scheduler, config=cfg, worker_id=f"w-{i}") for i in (1, 2)]
    for worker in workers:
        assert worker.add(WkShared(root=str(tmp_path), n=0))
    results: dict[str, bool] = {}

    def run(worker: conveyor.Worker) -> None:
        results[worker.id] = worker.run()

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=40)
    for worker in workers:
        worker.close()
    assert not any(thread.is_alive() for thread in threads)
    assert _HOLDER["counts"] == dict.fromkeys(range(50), 1)
    assert results == {"w-1": True, "w-2": True}
    for worker in workers:
        assert worker.report is not None
        assert len(worker.report.states) == 50
        assert set(worker.report.states.values()) == {"DONE"}


def test_assistant_runs_tasks_another_worker_registered(tmp_path: Path) -> None:
    """An assistant runs tasks another worker only registered, loading them from task_modules."""
    scheduler = conveyor.Scheduler()
    registrar = conveyor.Worker(scheduler, config=make_config(tmp_path), worker_id="registrar")
    root = WkChain(root=str(tmp_path), n=2)
    assert registrar.add(root)
    cfg = make_config(tmp_path, assistant=True, task_modules=[__name__])
    with conveyor.Worker(scheduler, config=cfg, worker_id="helper") as assistant:
        assert assistant.run()
    registrar.close()
    assert called("chain.run") == [("chain.run", 0), ("chain.run", 1), ("chain.run", 2)]
    ids = [WkChain(root=str(tmp_path), n=n).task_id for n in range(3)]
    assert scheduler.statuses(ids) == dict.fromkeys(ids, "DONE")


def test_an_assistant_rechecks_the_dependencies_of_a_task_it_adopts(tmp_path: Path) -> None:
    """A task an assistant never walked has its requirements read (dependencies_discovered
    is its first event) and re-checked before run(): a dependency the scheduler believes done
    but whose output is missing is found, rescheduled and run first."""
    scheduler = conveyor.Scheduler()
    registrar = conveyor.Worker(scheduler, config=make_config(tmp_path), worker_id="registrar")
    first, second = WkChain(root=str(tmp_path), n=0), WkChain(root=str(tmp_path), n=1)
    assert registrar.add(second)
    scheduler.get_work("registrar")  # hands out link 0 ...
    scheduler.task_done("registrar", first.task_id)  # ... "done", but its output never made
    rec = RecordingPlugin()
    cfg = make_config(tmp_path, assistant=True, task_modules=[__name__])
    with conveyor.Worker(scheduler, config=cfg, worker_id="helper", plugins=[rec]) as assistant:
        assert assistant.run()
    registrar.close()
    assert called("chain.run") == [("chain.run", 0), ("chain.run", 1)]
    assert scheduler.statuses([first.task_id, second.task_id]) == {
        first.task_id: "DONE",
        second.task_id: "DONE",
    }
    hooks = [r.hook for r in rec.records if r.event.task_id == second.task_id]
    assert hooks[:2] == ["conveyor_task_dependencies_discovered", "conveyor_task_started"]
    [discovered, *_] = rec.events("task_dependencies_discovered", second.task_id)
    assert discovered.dependencies == (first.task_id,) and discovered.state == "PENDING"
    [failed] = rec.events("task_failed", second.task_id)
    assert "unfulfilled dependencies" in failed.error


class WkBrokenRequires(conveyor.Task):
    """Its requires() raises (only an assistant that adopts it asks)."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        raise ValueError("no requirements today")

    def complete(self) -> bool:
        return False


def test_an_adopted_task_whose_requires_raises_is_broken(tmp_path: Path) -> None:
    """An assistant that cannot read an adopted task's requirements marks it broken, as the
    walk would: conveyor_task_broken fires, the scheduler holds it UNKNOWN with the traceback."""
    scheduler = conveyor.Scheduler()
    task = WkBrokenRequires(root=str(tmp_path))
    spec = TaskSpec(task.task_id, "WkBrokenRequires", __name__, task.to_str_params())
    scheduler.add_tasks("registrar", [spec])
    rec = RecordingPlugin()
    cfg = make_config(tmp_path, assistant=True, task_modules=[__name__])
    with conveyor.Worker(scheduler, config=cfg, worker_id="helper", plugins=[rec]) as assistant:
        assistant.run()
    assert scheduler.statuses([task.task_id]) == {task.task_id: "UNKNOWN"}
    assert "no requirements today" in scheduler.explanation(task.task_id)
    [broken] = rec.events("task_broken", task.task_id)
    assert broken.phase == "requires" and "ValueError" in broken.error
    assert not rec.events("task_started", task.task_id)
    assert assistant.report is not None and assistant.report.exit_code == 3


def test_assistant_refuses_a_task_from_another_module(tmp_path: Path, task_module: Any) -> None:
    """An assistant refuses, without importing it, a task whose module is not in task_modules."""
    marker = tmp_path / "imported.marker"
    module = task_module(
        f"""
        import pathlib
        import conveyor

        pathlib.Path({str(marker)!r}).write_text("imported")


        class ForeignTask(conveyor.Task):
            pass
        """
    )
    scheduler = conveyor.Scheduler()
    task_id = "ForeignTask_0123456789"
    spec = TaskSpec(task_id, family="ForeignTask", module=module, params={})
    scheduler.add_tasks("registrar", [spec])
    cfg = make_config(tmp_path, assistant=True, task_modules=["some_other_package"])
    with conveyor.Worker(scheduler, config=cfg, worker_id="helper") as assistant:
        assistant.run()
    assert scheduler.statuses([task_id]) == {task_id: "FAILED"}
    reason = scheduler.explanation(task_id)
    assert module in reason
    assert "task_modules" in reason
    assert module not in sys.modules
    assert not marker.exists()


@pytest.mark.parametrize("executor", ["inline", "thread"])
def test_sigusr1_lets_the_running_task_finish_and_starts_nothing(
    tmp_path: Path, executor: str
) -> None:
    """SIGUSR1 during run(): that task finishes, nothing new starts, and the exit code is 5."""
    received: list[int] = []
    # A fallback so that a missing worker handler fails this test instead of killing pytest.
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        top = WkAfterSignal(root=str(tmp_path))
        result = conveyor.build(top, workers=1, executor=executor)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert received == [], "the worker did not handle SIGUSR1 itself"
    assert called("sender.run") == [("sender.run",)]
    assert result.states[WkSignalSender(root=str(tmp_path)).task_id] == "DONE"
    assert called("after-signal.run") == []
    assert result.states[top.task_id] == "PENDING"
    assert result.exit_code == 5


def test_worker_timeout_under_inline_runs_isolated_in_a_child(tmp_path: Path) -> None:
    """A task with worker_timeout under inline runs in a forked child (which can be killed)."""
    rec = RecordingPlugin()
    task = WkWithTimeout(root=str(tmp_path))
    with conveyor.Worker(config=make_config(tmp_path, executor="inline"), plugins=[rec]) as worker:
        worker.add(task)
        worker.run()
    assert [e.executor for e in rec.events("task_started", task.task_id)] == ["fork"]
    assert worker.report is not None
    assert worker.report.states[task.task_id] == "DONE"
    assert os.path.exists(task.output().path)
    assert called("timeout.run") == []  # it ran in the child, not in this process


def test_worker_add_reports_a_broken_graph(tmp_path: Path) -> None:
    """Worker.add() is False when a complete() in the graph returns garbage, True otherwise."""
    with conveyor.Worker(config=make_config(tmp_path)) as worker:
        assert worker.add(WkFile(root=str(tmp_path), name="fine")) is True
        assert worker.add(WkBrokenComplete(root=str(tmp_path))) is False
        worker.run()
    assert worker.report is not None
    assert worker.report.states[WkBrokenComplete(root=str(tmp_path)).task_id] == "UNKNOWN"
    assert worker.report.exit_code == 3


def test_upstream_failure_leaves_dependents_pending(tmp_path: Path) -> None:
    """A failed dependency leaves its dependent PENDING, unrun, and the summary says why."""
    top = WkNeedsFailing(root=str(tmp_path))
    result = conveyor.build(top)
    assert result.states[WkAlwaysFails(root=str(tmp_path)).task_id] == "FAILED"
    assert result.states[top.task_id] == "PENDING"
    assert called("needs-failing.run") == []
    assert "upstream task failed" in result.summary
    assert result.exit_code == 1


def test_task_retry_count_overrides_the_scheduler(tmp_path: Path) -> None:
    """A task's retry_count = 1 makes its first failure disable it (state DISABLED, exit 1)."""
    task = WkFailsOnceThenDisabled(root=str(tmp_path))
    result = conveyor.build(task)
    assert called("fails-once.run") == [("fails-once.run",)]
    assert result.states[task.task_id] == "DISABLED"
    assert "fails and is disabled" in result.errors[task.task_id]
    assert result.exit_code == 1


def test_worker_returns_when_only_work_elsewhere_is_left(tmp_path: Path) -> None:
    """Without keep_alive a worker whose task runs on another worker returns: RUNNING, exit 5."""
    _HOLDER["started"], _HOLDER["release"] = threading.Event(), threading.Event()
    scheduler = conveyor.Scheduler()
    task = WkBlocking(root=str(tmp_path))
    holder = conveyor.Worker(scheduler, config=make_config(tmp_path), worker_id="holder")
    holder.add(task)
    thread = threading.Thread(target=holder.run, name="test-holder")
    thread.start()
    try:
        assert _HOLDER["started"].wait(timeout=30)
        with conveyor.Worker(scheduler, config=make_config(tmp_path), worker_id="other") as other:
            other.add(WkBlocking(root=str(tmp_path)))
            assert other.run() is True
        assert other.report is not None
        assert other.report.states[task.task_id] == "RUNNING"
        assert other.report.exit_code == 5
        assert "running on other workers" in other.report.summary
    finally:
        _HOLDER["release"].set()
        thread.join(timeout=30)
        holder.close()
    assert called("blocking.run") == [("blocking.run",)]
    assert holder.report is not None
    assert holder.report.states[task.task_id] == "DONE"


# --- RunResult and exit codes --------------------------------------------------------------------


def test_run_result_fields_on_success(tmp_path: Path) -> None:
    """A successful RunResult: ok, exit 0, a verdict line, DONE states, no errors, every task."""
    (tmp_path / "chain-0.txt").write_text("made earlier", encoding="utf-8")
    root = WkChain(root=str(tmp_path), n=2)
    result = conveyor.build(root)
    ids = {WkChain(root=str(tmp_path), n=n).task_id for n in range(3)}
    assert called("chain.run") == [("chain.run", 1), ("chain.run", 2)]
    assert result.ok is True
    assert result.exit_code == 0
    assert result.summary.strip().splitlines()[-1].lower().count("succeeded") == 1
    assert dict(result.states) == dict.fromkeys(ids, "DONE")
    assert dict(result.errors) == {}
    assert set(result.tasks) == ids
    assert all(isinstance(t, WkChain) and t.task_id == i for i, t in result.tasks.items())
    assert result.tasks[root.task_id] == root


def test_run_result_fields_on_failure(tmp_path: Path) -> None:
    """A failed RunResult: not ok, exit 1, a failing verdict, FAILED state and its error."""
    task = WkAlwaysFails(root=str(tmp_path))
    result = conveyor.build(task)
    assert result.ok is False
    assert result.exit_code == 1
    last = result.summary.strip().splitlines()[-1].lower()
    assert "fail" in last
    assert "succeeded" not in last
    assert result.states == {task.task_id: "FAILED"}
    assert set(result.errors) == {task.task_id}
    assert result.tasks[task.task_id] == task


def test_exit_code_scheduling_error_beats_failure(tmp_path: Path) -> None:
    """A broken complete() (3) wins over a failed task (1); the broken task is UNKNOWN."""
    broken = WkBrokenComplete(root=str(tmp_path))
    result = conveyor.build([broken, WkAlwaysFails(root=str(tmp_path))])
    assert result.states[broken.task_id] == "UNKNOWN"
    assert called("fails.run") == [("fails.run",)]
    assert result.exit_code == 3
    assert "'yes'" in result.errors[broken.task_id]


def test_exit_code_failure_beats_missing_data(tmp_path: Path) -> None:
    """A failed task (1) wins over missing external data (4)."""
    result = conveyor.build([WkNeedsMissing(root=str(tmp_path)), WkAlwaysFails(root=str(tmp_path))])
    assert result.exit_code == 1


def test_exit_code_missing_data_beats_incomplete(tmp_path: Path) -> None:
    """Missing external data (4) wins over a requested task left incomplete (5)."""
    (tmp_path / "chain-0.txt").write_text("made earlier", encoding="utf-8")
    result = conveyor.build(
        [WkNeedsMissing(root=str(tmp_path)), WkChain(root=str(tmp_path), n=2)], task_limit=1
    )
    assert result.exit_code == 4


def test_exit_code_zero_and_ok_when_everything_is_complete(tmp_path: Path) -> None:
    """A run where every requested task ends complete exits 0."""
    result = conveyor.build(
        [WkFile(root=str(tmp_path), name="a"), WkFile(root=str(tmp_path), name="b")]
    )
    assert result.exit_code == 0
    assert result.ok


# --- logging from task code ----------------------------------------------------------------------


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Configure JSON logging into a buffer; restore structlog and the root logger afterwards."""
    saved = structlog.get_config()
    was_configured = structlog.is_configured()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    buffer = io.StringIO()
    configure_logging(LoggingSettings(level="info", format="json"), stream=buffer)
    yield buffer
    root.handlers = handlers
    root.setLevel(level)
    if was_configured:
        structlog.configure(**saved)
    else:
        structlog.reset_defaults()


@pytest.mark.parametrize(("executor", "workers"), [("inline", 1), ("thread", 2)])
def test_task_log_records_carry_the_task_id(
    tmp_path: Path, json_log: io.StringIO, executor: str, workers: int
) -> None:
    """Log records from run() via stdlib logging and structlog carry the task's task_id."""
    task = WkLogs(root=str(tmp_path))
    result = conveyor.build(task, executor=executor, workers=workers)
    assert result.ok
    records = [json.loads(line) for line in json_log.getvalue().splitlines() if line.strip()]
    by_event = {r.get("event"): r for r in records}
    assert by_event["stdlib line from task"]["task_id"] == task.task_id
    assert by_event["structlog line from task"]["task_id"] == task.task_id
    transitions = [r for r in records if r.get("task_id") == task.task_id and "state" in r]
    assert {r["state"] for r in transitions} >= {"RUNNING", "DONE"}
    assert all(r["family"] == "WkLogs" and r.get("worker_id") for r in transitions)


class _InterruptingScheduler(conveyor.Scheduler):
    """A scheduler whose get_work hands out a task while the worker is being interrupted (the
    signal arrives while the call is on its way)."""

    worker: conveyor.Worker | None = None

    def get_work(self, *args: Any, **kwargs: Any) -> Any:
        work = super().get_work(*args, **kwargs)
        if work is not None and self.worker is not None:
            self.worker.interrupt("SIGTERM")
        return work


class WkNeverRun(conveyor.Task):
    """Must not run: the worker was interrupted before starting it."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "never"))

    def run(self) -> None:
        raise AssertionError("an interrupted worker started a task")


def test_a_hand_out_that_arrives_with_an_interruption_is_not_started(tmp_path: Path) -> None:
    """If SIGTERM lands while get_work is answering, the handed-out task is not started but
    reported failed (interrupted), and the run exits 143."""
    scheduler = _InterruptingScheduler()
    config = conveyor.Config().with_overrides(install_signal_handlers=False)
    task = WkNeverRun(root=str(tmp_path))
    rec = RecordingPlugin()
    with conveyor.Worker(scheduler, config=config, plugins=[rec]) as worker:
        scheduler.worker = worker
        worker.add(task)
        worker.run()
    assert not rec.events("task_started")
    assert scheduler.statuses([task.task_id]) == {task.task_id: "FAILED"}
    assert "interrupted by SIGTERM" in scheduler.explanation(task.task_id)
    assert worker.report is not None and worker.report.exit_code == 143


BATCH_EVENTS: list[str] = []


class WkBatchLeaf(conveyor.Task):
    """A leaf kept in memory; ``fail`` makes it raise."""

    tag = conveyor.Parameter()
    n = conveyor.IntParameter()
    fail = conveyor.BoolParameter(default=False)
    done: set[str] = set()

    def complete(self) -> bool:
        return self.task_id in WkBatchLeaf.done

    def run(self) -> None:
        if self.fail:
            raise RuntimeError("leaf failed")
        WkBatchLeaf.done.add(self.task_id)


class WkBatches(conveyor.Task):
    """Yields three batches of leaves and records every step of its generator."""

    tag = conveyor.Parameter()
    fail_last = conveyor.BoolParameter(default=False)

    def complete(self) -> bool:
        return self.task_id in WkBatchLeaf.done

    def run(self) -> Any:
        BATCH_EVENTS.append("top")
        try:
            for batch in range(3):
                BATCH_EVENTS.append(f"before {batch}")
                fail = self.fail_last and batch == 2
                yield [WkBatchLeaf(tag=self.tag, n=batch * 10 + k, fail=fail) for k in range(2)]
            WkBatchLeaf.done.add(self.task_id)
        finally:
            BATCH_EVENTS.append("finally")


@pytest.mark.parametrize(("executor", "workers"), [("inline", 1), ("thread", 2)])
def test_a_run_yielding_batches_is_resumed_once_per_batch(executor: str, workers: int) -> None:
    """A run() yielding three batches resumes after each (no step runs twice), and each
    resumption is a new attempt with the next attempt number."""
    BATCH_EVENTS.clear()
    rec = RecordingPlugin()
    task = WkBatches(tag=f"ok-{executor}")
    cfg = conveyor.Config().with_overrides(executor=executor, workers=workers)
    with conveyor.Worker(config=cfg, plugins=[rec]) as worker:
        worker.add(task)
        assert worker.run() is True
    assert BATCH_EVENTS == ["top", "before 0", "before 1", "before 2", "finally"]
    assert [e.attempt for e in rec.events("task_started", task.task_id)] == [1, 2, 3, 4]
    dynamic = [e for e in rec.events("task_dependencies_discovered", task.task_id) if e.dynamic]
    assert len(dynamic) == 3


def test_a_suspended_run_that_never_resumes_is_closed_with_the_worker() -> None:
    """When a yielded dependency fails, the suspended run() never resumes; closing the worker
    finishes the generator, so its finally block runs."""
    BATCH_EVENTS.clear()
    task = WkBatches(tag="fails", fail_last=True)
    with conveyor.Worker(config=conveyor.Config()) as worker:
        worker.add(task)
        assert worker.run() is False
        assert BATCH_EVENTS[-1] == "before 2"  # suspended at the failing batch
    assert BATCH_EVENTS[-1] == "finally"
    assert BATCH_EVENTS.count("top") == 1


class WkVanishLeaf(conveyor.Task):
    """Kept in memory; a plugin deletes it once after it succeeds."""

    tag = conveyor.Parameter()
    done: set[str] = set()
    runs: list[str] = []

    def complete(self) -> bool:
        return self.task_id in WkVanishLeaf.done

    def run(self) -> None:
        WkVanishLeaf.runs.append(self.task_id)
        WkVanishLeaf.done.add(self.task_id)


class WkVanishRoot(conveyor.Task):
    """Yields one leaf, then completes."""

    tag = conveyor.Parameter()

    def complete(self) -> bool:
        return self.task_id in WkVanishLeaf.done

    def run(self) -> Any:
        yield WkVanishLeaf(tag=self.tag)
        WkVanishLeaf.done.add(self.task_id)


class _DeleteOnce:
    """Deletes the leaf's output the first time it succeeds (it vanished before the resume)."""

    def __init__(self) -> None:
        self.deleted = False

    @conveyor.hookimpl
    def conveyor_task_succeeded(self, event: Any) -> None:
        if event.family == "WkVanishLeaf" and not self.deleted:
            self.deleted = True
            WkVanishLeaf.done.discard(event.task_id)


@pytest.mark.parametrize(("executor", "workers"), [("inline", 1), ("thread", 2)])
def test_a_yielded_task_that_vanishes_before_the_resume_is_run_again(
    executor: str, workers: int
) -> None:
    """The resumed run() finds its yielded task incomplete again: the worker checks that task
    again and runs it, and the parent finishes, instead of resuming in a loop."""
    root = WkVanishRoot(tag=f"vanish-{executor}")
    rec = RecordingPlugin()
    cfg = conveyor.Config().with_overrides(executor=executor, workers=workers)
    with conveyor.Worker(config=cfg, plugins=[_DeleteOnce(), rec]) as worker:
        worker.add(root)
        assert worker.run() is True
    leaf = WkVanishLeaf(tag=root.tag)
    assert WkVanishLeaf.runs.count(leaf.task_id) == 2
    assert len(rec.events("task_started", root.task_id)) <= 4


class WkCycleMid(conveyor.Task):
    """Yields the task that requires it: a cycle through run()."""

    def complete(self) -> bool:
        return False

    def run(self) -> Any:
        yield WkCycleTop()


class WkCycleTop(conveyor.Task):
    """Requires WkCycleMid."""

    def requires(self) -> Any:
        return WkCycleMid()

    def complete(self) -> bool:
        return False


@pytest.mark.parametrize("keep_alive", [False, True])
def test_a_run_that_yields_a_task_requiring_it_is_a_cycle(keep_alive: bool) -> None:
    """Mid yields Top, which requires Mid: both are broken with the cycle named, exit 3, and
    the run ends (also with keep_alive)."""
    cfg = conveyor.Config().with_overrides(keep_alive=keep_alive, wait_interval=0.05)
    with conveyor.Worker(config=cfg) as worker:
        worker.add(WkCycleTop())
        worker.run()
    report = worker.report
    assert report is not None and report.exit_code == 3
    assert report.states[WkCycleMid().task_id] == "UNKNOWN"
    assert "cycle" in report.errors[WkCycleMid().task_id].lower()
