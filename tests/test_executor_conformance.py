"""Every built-in executor passes the conformance check shipped in conveyor.testing."""

from __future__ import annotations

from pathlib import Path

import pytest

import conveyor
from conveyor.backends import load_backend
from conveyor.executors.base import ExecutorContext
from conveyor.testing import RecordingPlugin
from conveyor.testing.executors import check_executor


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("inline", ["success", "failure", "incomplete", "dynamic"]),
        ("thread", ["success", "failure", "incomplete", "dynamic"]),
        ("fork", ["success", "failure", "incomplete", "dynamic", "timeout"]),
        ("subprocess", ["success", "failure", "incomplete", "dynamic", "timeout"]),
    ],
)
def test_builtin_executor_conforms(name: str, expected: list[str], tmp_path: Path) -> None:
    """The executor registered under this entry-point name passes every scenario it should."""
    assert check_executor(load_backend("conveyor.executors", name), workdir=tmp_path) == expected


class _SwallowsFailures:
    """A broken executor: reports success even when run() raised."""

    name = "swallower"
    can_kill = False

    def __init__(self, context: object) -> None:
        self.context = context

    def start(self, request, sink):  # type: ignore[no-untyped-def]
        from conveyor.executors.attempt import run_attempt
        from conveyor.executors.base import Outcome

        outcome = run_attempt(request, sink)
        sink(Outcome(request.task_id, "succeeded", outcome.duration))

    def close(self) -> None:
        pass


def test_conformance_check_catches_a_broken_executor(tmp_path: Path) -> None:
    """An executor that turns failures into successes is rejected, naming the promise."""
    with pytest.raises(AssertionError, match="expected failed"):
        check_executor(_SwallowsFailures, workdir=tmp_path)


class _FirstProtocolExecutor:
    """An executor written to the first protocol: no interrupt, active or settings_schema."""

    name = "legacy"
    can_kill = False

    def __init__(self) -> None:
        self.started: list[str] = []

    def start(self, request, sink):  # type: ignore[no-untyped-def]
        from conveyor.executors.attempt import run_attempt

        self.started.append(request.task_id)
        sink(run_attempt(request, sink))

    def close(self) -> None:
        pass


class _Leaf(conveyor.Task):
    """Complete once it ran (in memory)."""

    n = conveyor.IntParameter()
    done: set[str] = set()

    def complete(self) -> bool:
        return self.task_id in _Leaf.done

    def run(self) -> None:
        _Leaf.done.add(self.task_id)


def test_a_ready_executor_of_the_first_protocol_runs_and_can_be_interrupted() -> None:
    """Worker(executor=obj) uses the object as it is; one lacking interrupt/active (the first
    protocol) still runs tasks, and an interruption does not fail on it."""
    executor = _FirstProtocolExecutor()
    rec = RecordingPlugin()
    config = conveyor.Config().with_overrides(install_signal_handlers=False)
    with conveyor.Worker(config=config, executor=executor, plugins=[rec]) as worker:  # type: ignore[arg-type]
        worker.add(_Leaf(n=1))
        assert worker.run() is True
        worker.interrupt("SIGTERM")  # no interrupt() on the executor: nothing to stop, no error
    assert executor.started == [_Leaf(n=1).task_id]
    assert [e.executor for e in rec.events("task_started")] == ["legacy"]


def test_worker_takes_an_executor_by_name() -> None:
    """Worker(executor="thread") selects that backend over [worker] executor."""
    rec = RecordingPlugin()
    with conveyor.Worker(config=conveyor.Config(), executor="thread", plugins=[rec]) as worker:
        worker.add(_Leaf(n=2))
        assert worker.run() is True
    assert [e.executor for e in rec.events("task_started")] == ["thread"]


def test_every_builtin_executor_declares_the_whole_protocol() -> None:
    """The built-in executors declare interrupt, active and settings_schema themselves."""
    from conveyor.executors.base import Executor

    for name in ("inline", "thread", "fork", "subprocess"):
        cls = load_backend("conveyor.executors", name)
        executor = cls(ExecutorContext())
        try:
            assert isinstance(executor, Executor), name
            assert all(hasattr(executor, m) for m in ("interrupt", "active", "settings_schema"))
        finally:
            executor.close()
