"""The scheduler's retry schedule: ``[scheduler] retry_backoff`` multiplies ``retry_delay`` per
failure, ``retry_max_delay`` caps it and ``retry_jitter`` spreads it (± a fraction), checked on
a fake clock; and the settings are validated like every other key."""

from __future__ import annotations

import pytest

import conveyor
from conveyor.errors import ConfigError
from conveyor.protocol import TaskSpec, TaskStatus
from conveyor.testing import FakeClock


def _fail(scheduler: conveyor.Scheduler, clock: FakeClock, task_id: str) -> float:
    """Hand ``task_id`` out, report it failed, wait for its retry; the seconds it waited."""
    work = scheduler.get_work("w")
    assert work is not None and work.task_id == task_id
    scheduler.task_failed("w", task_id, "boom", work.attempt)
    record = scheduler.peek(task_id)
    assert record is not None and record.status == TaskStatus.FAILED
    waited = record.wake_at - clock()
    clock.advance(waited)
    assert scheduler.statuses([task_id])[task_id] == TaskStatus.PENDING  # due now, not before
    return waited


def test_each_failure_waits_backoff_times_longer_up_to_the_cap() -> None:
    clock = FakeClock(1000.0)
    scheduler = conveyor.Scheduler(
        clock=clock,
        retry_delay=10,
        retry_backoff=2.0,
        retry_max_delay=70,
        retry_count=10,
        disable_window=100000,
    )
    scheduler.add_tasks("w", [TaskSpec("t")])
    assert [_fail(scheduler, clock, "t") for _ in range(5)] == [10, 20, 40, 70, 70]


def test_without_backoff_every_retry_waits_retry_delay() -> None:
    clock = FakeClock(1000.0)
    scheduler = conveyor.Scheduler(clock=clock, retry_delay=15, retry_count=10)
    scheduler.add_tasks("w", [TaskSpec("t")])
    assert [_fail(scheduler, clock, "t") for _ in range(3)] == [15, 15, 15]


def test_failures_outside_the_window_start_the_backoff_again() -> None:
    clock = FakeClock(1000.0)
    scheduler = conveyor.Scheduler(
        clock=clock, retry_delay=10, retry_backoff=3.0, retry_count=10, disable_window=50
    )
    scheduler.add_tasks("w", [TaskSpec("t")])
    assert [_fail(scheduler, clock, "t") for _ in range(2)] == [10, 30]
    clock.advance(100)  # both failures fall out of disable_window
    assert _fail(scheduler, clock, "t") == 10


def test_jitter_stays_within_its_fraction_and_spreads_the_retries() -> None:
    clock = FakeClock(1000.0)
    scheduler = conveyor.Scheduler(clock=clock, retry_delay=100, retry_jitter=0.2)
    ids = [f"t{i}" for i in range(200)]
    scheduler.add_tasks("w", [TaskSpec(t) for t in ids])
    waits = []
    for _ in ids:
        work = scheduler.get_work("w")
        assert work is not None
        scheduler.task_failed("w", work.task_id, "boom", work.attempt)
        record = scheduler.peek(work.task_id)
        assert record is not None
        waits.append(record.wake_at - clock())
    assert all(80 <= w <= 120 for w in waits)
    assert len({round(w, 6) for w in waits}) > 100  # spread, not one instant
    assert min(waits) < 90 and max(waits) > 110


def test_jitter_never_passes_the_cap() -> None:
    clock = FakeClock(1000.0)
    scheduler = conveyor.Scheduler(
        clock=clock, retry_delay=100, retry_jitter=0.5, retry_max_delay=100
    )
    scheduler.jitter = lambda: 0.999  # the top of the range: 150 s before the cap
    scheduler.add_tasks("w", [TaskSpec("t")])
    assert _fail(scheduler, clock, "t") == 100


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("retry_backoff", 0.5, "scheduler.retry_backoff"),
        ("retry_jitter", 1.5, "scheduler.retry_jitter"),
        ("retry_max_delay", -1, "scheduler.retry_max_delay"),
    ],
)
def test_bad_retry_settings_are_refused_naming_the_key(key: str, value: float, expected: str):
    with pytest.raises(ConfigError, match=expected):
        conveyor.Config().with_section("scheduler", **{key: value})
