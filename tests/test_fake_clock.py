"""A FakeClock drives a whole Worker + Scheduler run: retry_delay, retry_count within
disable_window, worker_disconnect_delay and keep_alive waits are tested without sleeping."""

from __future__ import annotations

import os
from pathlib import Path

import conveyor
from conveyor.testing import FakeClock, RecordingPlugin


class FcFlaky(conveyor.Task):
    """Fails the first ``failures`` times it runs, then writes its output."""

    root = conveyor.Parameter()
    failures = conveyor.IntParameter(default=1)
    runs: dict[str, int] = {}

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, f"flaky-{self.failures}"))

    def run(self) -> None:
        count = FcFlaky.runs[self.task_id] = FcFlaky.runs.get(self.task_id, 0) + 1
        if count <= self.failures:
            raise RuntimeError(f"failure {count}")
        with self.output().open("w") as out:
            out.write("ok")


def _worker(
    scheduler: conveyor.Scheduler, clock: FakeClock, recorder: RecordingPlugin, **worker: object
) -> conveyor.Worker:
    config = conveyor.Config().with_overrides(wait_jitter=0, **worker)
    return conveyor.Worker(scheduler, config=config, plugins=[recorder], clock=clock)


def test_keep_alive_waits_out_retry_delay_on_the_fake_clock(tmp_path: Path) -> None:
    """With keep_alive, a task that failed is run again once retry_delay has passed on the
    fake clock; the worker's waits advance the clock instead of sleeping."""
    clock = FakeClock()
    scheduler = conveyor.Scheduler(clock=clock, retry_delay=300, retry_count=5)
    recorder = RecordingPlugin()
    task = FcFlaky(root=str(tmp_path), failures=1)
    start = clock.now
    with _worker(scheduler, clock, recorder, keep_alive=True, wait_interval=10) as worker:
        worker.add(task)
        assert worker.run() is True
    assert FcFlaky.runs[task.task_id] == 2
    assert worker.report is not None and worker.report.states[task.task_id] == "DONE"
    started = [e.timestamp for e in recorder.events("task_started", task.task_id)]
    assert len(started) == 2
    assert started[1] - started[0] >= 300  # the second attempt waited for retry_delay
    assert 300 <= clock.now - start < 300 + 2 * 10  # and not much longer (wait_interval steps)


def test_retry_count_within_disable_window_disables_on_the_fake_clock(tmp_path: Path) -> None:
    """A task failing retry_count times within disable_window is DISABLED and never run again;
    keep_alive then has nothing to wait for, and the run ends with exit code 1."""
    clock = FakeClock()
    scheduler = conveyor.Scheduler(clock=clock, retry_delay=60, retry_count=3, disable_window=3600)
    recorder = RecordingPlugin()
    task = FcFlaky(root=str(tmp_path), failures=100)
    with _worker(scheduler, clock, recorder, keep_alive=True, wait_interval=5) as worker:
        worker.add(task)
        assert worker.run() is False
    assert FcFlaky.runs[task.task_id] == 3
    assert scheduler.statuses([task.task_id]) == {task.task_id: "DISABLED"}
    assert worker.report is not None and worker.report.exit_code == 1
    assert len(recorder.events("task_failed", task.task_id)) == 3


def test_retries_spread_beyond_disable_window_never_disable(tmp_path: Path) -> None:
    """Failures further apart than disable_window do not add up to retry_count."""
    clock = FakeClock()
    scheduler = conveyor.Scheduler(clock=clock, retry_delay=100, retry_count=2, disable_window=50)
    recorder = RecordingPlugin()
    task = FcFlaky(root=str(tmp_path), failures=3)
    with _worker(scheduler, clock, recorder, keep_alive=True, wait_interval=20) as worker:
        worker.add(task)
        assert worker.run() is True
    assert FcFlaky.runs[task.task_id] == 4


def test_a_silent_workers_task_is_run_after_worker_disconnect_delay(tmp_path: Path) -> None:
    """A task handed to a worker that then falls silent fails after worker_disconnect_delay
    and, after retry_delay, runs on the keep_alive worker that was waiting for it."""
    clock = FakeClock()
    scheduler = conveyor.Scheduler(
        clock=clock, retry_delay=30, retry_count=5, worker_disconnect_delay=120
    )
    recorder = RecordingPlugin()
    task = FcFlaky(root=str(tmp_path), failures=0)
    start = clock.now
    with _worker(scheduler, clock, recorder, keep_alive=True, wait_interval=10) as worker:
        worker.add(task)
        work = scheduler.get_work("ghost", assistant=True)  # then never heard of again
        assert work is not None and work.task_id == task.task_id
        assert worker.run() is True
    assert FcFlaky.runs[task.task_id] == 1
    [started] = recorder.events("task_started", task.task_id)
    assert started.timestamp - start >= 120 + 30
    assert worker.report is not None and worker.report.states[task.task_id] == "DONE"


def test_without_keep_alive_a_task_running_elsewhere_ends_the_run_at_once(tmp_path: Path) -> None:
    """Without keep_alive the worker does not wait for a task another worker runs: exit 5,
    and no fake time passes."""
    clock = FakeClock()
    scheduler = conveyor.Scheduler(clock=clock)
    recorder = RecordingPlugin()
    task = FcFlaky(root=str(tmp_path), failures=0)
    start = clock.now
    with _worker(scheduler, clock, recorder) as worker:
        worker.add(task)
        assert scheduler.get_work("other", assistant=True) is not None
        worker.run()
    assert worker.report is not None and worker.report.exit_code == 5
    assert clock.now == start
    assert not recorder.events("task_started")
