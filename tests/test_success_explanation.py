"""What ``on_success()`` returns is the success's explanation (SPEC §13, Luigi's ``expl``).

It travels from the attempt (in-process, or over the attempt channel from a process executor)
to the ``conveyor_task_succeeded`` event and to the scheduler, which keeps it as the done task's
explanation; a later failure's explanation replaces it, and a success returning nothing leaves
none.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.testing import RecordingPlugin

pytestmark = pytest.mark.timeout(120)

TASKS = '''
import os

import conveyor


class Counted(conveyor.Task):
    """Writes a file; on_success says how many rows it wrote."""

    root = conveyor.Parameter()
    rows = conveyor.IntParameter(default=3)

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, f"counted-{self.rows}"))

    def run(self):
        with self.output().open("w") as out:
            out.write("x" * self.rows)

    def on_success(self):
        return f"wrote {self.rows} rows"


class Quiet(Counted):
    """on_success returns nothing."""

    def on_success(self):
        return None
'''


@pytest.fixture
def mod(process_module: Callable[[str], Any]) -> Any:
    """The task module, importable here and (through PYTHONPATH) in an attempt's process."""
    return process_module(TASKS)


@pytest.mark.parametrize("executor", ["inline", "subprocess", "fork"])
def test_on_success_text_reaches_the_event_and_the_scheduler(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """The returned text is the event's explanation and the scheduler's stored one."""
    counted = mod.Counted(root=str(tmp_path), rows=7)
    quiet = mod.Quiet(root=str(tmp_path), rows=2)
    scheduler = conveyor.Scheduler()
    recorder = RecordingPlugin()
    config = conveyor.Config()
    with conveyor.Worker(scheduler, config=config, executor=executor, plugins=[recorder]) as w:
        assert w.add(counted) and w.add(quiet)
        assert w.run()
    [done] = recorder.events("conveyor_task_succeeded", counted.task_id)
    assert done.explanation == "wrote 7 rows"
    [silent] = recorder.events("conveyor_task_succeeded", quiet.task_id)
    assert silent.explanation == ""
    assert scheduler.explanation(counted.task_id) == "wrote 7 rows"
    assert scheduler.explanation(quiet.task_id) == ""
    infos = {info.task_id: info for info in scheduler.task_list()}
    assert infos[counted.task_id].explanation == "wrote 7 rows"


def test_a_success_text_goes_when_the_task_leaves_done() -> None:
    """A DONE task's text is about that success: registered again and run again, or
    disabled by a registration, the task does not carry it as a failure reason."""
    from conveyor.protocol import TaskSpec, TaskStatus

    scheduler = conveyor.Scheduler()
    scheduler.add_tasks("w", [TaskSpec("T_1", "T", "m", {})])
    work = scheduler.get_work("w")
    assert work is not None
    scheduler.task_done("w", "T_1", work.attempt, "wrote 3 rows")
    assert scheduler.explanation("T_1") == "wrote 3 rows"
    scheduler.add_tasks("w", [TaskSpec("T_1", "T", "m", {})])  # (runnable PENDING: run again)
    assert scheduler.statuses(["T_1"]) == {"T_1": TaskStatus.PENDING}
    assert scheduler.explanation("T_1") == ""
    work = scheduler.get_work("w")
    assert work is not None
    scheduler.task_done("w", "T_1", work.attempt, "wrote 4 rows")
    scheduler.add_tasks("w", [TaskSpec("T_1", "T", "m", {}, status=TaskStatus.DISABLED)])
    assert scheduler.statuses(["T_1"]) == {"T_1": TaskStatus.DISABLED}
    assert scheduler.explanation("T_1") == ""
    scheduler.add_tasks(
        "w", [TaskSpec("T_1", "T", "m", {}, status=TaskStatus.DISABLED, explanation="off")]
    )
    assert scheduler.explanation("T_1") == "off"
