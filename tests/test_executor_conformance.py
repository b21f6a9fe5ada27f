"""Every built-in executor passes the conformance check shipped in conveyor.testing."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor.backends import load_backend
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
