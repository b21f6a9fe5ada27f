"""Edge cases found in review: re-checks that break, external data, wrappers, ordering."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.testing import RecordingPlugin

CHECKS: list[str] = []


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in tmp_path with a fresh check log."""
    monkeypatch.chdir(tmp_path)
    CHECKS.clear()
    yield
    CHECKS.clear()


class EcSource(conveyor.Task):
    """Complete during the walk, gone just before its dependent runs, then broken."""

    def complete(self) -> bool:
        CHECKS.append("source")
        if len(CHECKS) == 1:
            return True
        if len(CHECKS) == 2:
            return False  # vanished: the dependent's attempt fails and is rescheduled
        raise RuntimeError("storage is unreachable")  # the reschedule's re-check


class EcUser(conveyor.Task):
    """Needs EcSource."""

    root = conveyor.Parameter()

    def requires(self) -> EcSource:
        return EcSource()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "user"))

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("x")


def test_recheck_that_raises_marks_the_task_broken_instead_of_crashing(tmp_path: Path) -> None:
    """A dependency whose complete() raises when re-checked for a reschedule becomes UNKNOWN."""
    result = conveyor.build(EcUser(root=str(tmp_path)))
    assert CHECKS == ["source", "source", "source"]
    assert result.states[EcSource().task_id] == "UNKNOWN"
    assert result.exit_code == 3
    assert "storage is unreachable" in result.errors[EcSource().task_id]


class EcData(conveyor.ExternalTask):
    """External data that never arrives."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "never"))


def test_external_task_is_checked_even_without_check_complete_on_run(tmp_path: Path) -> None:
    """With retry_external_tasks and check_complete_on_run off, missing data is not 'done'."""
    task = EcData(root=str(tmp_path))
    result = conveyor.build(task, retry_external_tasks=True, check_complete_on_run=False)
    assert result.states[task.task_id] != "DONE"


def test_missing_external_data_is_exit_4_even_when_retried(tmp_path: Path) -> None:
    """A re-checked external task that is still missing is 'missing data' (4), not a failure."""
    task = EcData(root=str(tmp_path))
    result = conveyor.build(task, retry_external_tasks=True)
    assert result.exit_code == 4
    assert "missing external data" in result.summary


class _Wrapper:
    name = "wrapping"

    @conveyor.hookimpl(wrapper=True)
    def conveyor_task_started(self, event: Any) -> Any:
        return (yield)


def test_hook_wrappers_are_refused_with_a_clear_error() -> None:
    """A hook wrapper would be silently skipped by isolated dispatch, so it is refused."""
    with pytest.raises(conveyor.PluginError, match=r"wrapping.*conveyor_task_started.*wrapper"):
        conveyor.Worker(plugins=[_Wrapper()])


class EcLeaf(conveyor.Task):
    """A leaf that records its run order."""

    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, f"leaf-{self.n}"))

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("x")


class EcYields(conveyor.Task):
    """Yields three leaves at once."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "yields"))

    def run(self) -> Iterator[list[EcLeaf]]:
        yield [EcLeaf(root=self.root, n=n) for n in (1, 2, 3)]
        with self.output().open("w") as out:
            out.write("x")


def test_dynamic_dependencies_run_in_the_order_they_were_yielded(tmp_path: Path) -> None:
    """Equal-priority dynamic dependencies are registered, and so run, in yield order."""
    rec = RecordingPlugin()
    with conveyor.Worker(plugins=[rec]) as worker:
        worker.add(EcYields(root=str(tmp_path)))
        worker.run()
    leaves = [e.params["n"] for e in rec.events("task_started") if e.family == "EcLeaf"]
    assert leaves == ["1", "2", "3"]


class EcOff(conveyor.Task):
    """Disabled on its class."""

    disabled = True

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget("never-made")


def test_disabled_task_has_an_explanation() -> None:
    """RunResult.errors says why a disabled task did not run."""
    result = conveyor.build(EcOff())
    assert "disabled" in result.errors[EcOff().task_id]


def test_required_plugin_with_autoload_off_names_the_reason(tmp_path: Path) -> None:
    """A required plugin missing because autoload is off says so, not 'not installed'."""
    config = tmp_path / "w.toml"
    config.write_text('[plugins]\nrequired = ["recorder"]\n')
    os.environ["CONVEYOR_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        with pytest.raises(conveyor.PluginError, match="AUTOLOAD"):
            conveyor.Worker(config=conveyor.load_config(config))
    finally:
        del os.environ["CONVEYOR_DISABLE_PLUGIN_AUTOLOAD"]
