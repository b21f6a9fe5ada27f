"""How long a task waited ready before its hand-out (``SchedulerTaskChanged.waited``, the
Prometheus plugin's ``conveyor_task_queue_wait_seconds``), checked on the scheduling policy
with a fake clock: exact waits, a task that stops being ready waits again from scratch, and a
task that was ready before the state was loaded has no wait to report."""

from __future__ import annotations

from conveyor.protocol import TaskSpec, TaskStatus
from conveyor.scheduler.policy import Cause, SchedulerCore, StatusMove
from conveyor.testing import FakeClock


def _core(clock: FakeClock) -> tuple[SchedulerCore, dict[str, list[float | None]]]:
    """A core whose hand-outs record ``waited`` per task (read as the server's observer does)."""
    core = SchedulerCore(clock=clock)
    waits: dict[str, list[float | None]] = {}

    def moved(task_id: str, move: StatusMove) -> None:
        if move.cause is Cause.HANDED_OUT:
            rec = core.peek(task_id)
            assert rec is not None
            waits.setdefault(task_id, []).append(core.waited(rec))

    core.on_move = moved
    return core, waits


def _run(core: SchedulerCore, worker: str = "w") -> str:
    work = core.get_work(worker)
    assert work is not None
    core.task_done(worker, work.task_id, work.attempt)
    return work.task_id


def test_a_task_waits_from_when_its_last_dependency_is_done() -> None:
    clock = FakeClock(1000.0)
    core, waits = _core(clock)
    core.add_tasks("w", [TaskSpec("a"), TaskSpec("b", deps=("a",))])
    clock.advance(5)
    assert _run(core) == "a"  # a waited 5 s; b becomes ready now
    clock.advance(2)
    assert _run(core) == "b"
    assert waits == {"a": [5.0], "b": [2.0]}


def test_a_task_that_stops_being_ready_waits_again_from_scratch() -> None:
    """b is ready, then its dependency is registered incomplete again and runs for an hour:
    b's wait counts from when it is done, not from when b was first ready."""
    clock = FakeClock(1000.0)
    core, waits = _core(clock)
    core.add_tasks("w", [TaskSpec("a"), TaskSpec("b", deps=("a",))])
    _run(core)  # a done: b ready at 1000
    core.add_tasks("w", [TaskSpec("a", status=TaskStatus.PENDING)])  # its output vanished
    work = core.get_work("w")
    assert work is not None and work.task_id == "a"
    clock.advance(3600)
    core.task_done("w", "a", work.attempt)
    clock.advance(1)
    assert _run(core) == "b"
    assert waits["b"] == [1.0]


def test_a_retry_waits_from_when_it_is_due() -> None:
    clock = FakeClock(1000.0)
    core, waits = _core(clock)
    core.retry_delay = 60.0
    core.add_tasks("w", [TaskSpec("a")])
    work = core.get_work("w")
    assert work is not None
    core.task_failed("w", "a", "boom", work.attempt)
    clock.advance(70)  # due after 60 s: ready since then (woken on the next call)
    core.get_work("other")  # (wakes it at 1070, for nobody else to take)
    clock.advance(4)
    assert _run(core) == "a"
    assert waits["a"] == [0.0, 4.0]


def test_a_task_ready_before_the_state_was_loaded_reports_no_wait() -> None:
    clock = FakeClock(1000.0)
    core, _ = _core(clock)
    core.add_tasks("w", [TaskSpec("a"), TaskSpec("b", deps=("a",))])
    records = [core.peek("a"), core.peek("b")]
    assert all(r is not None for r in records)
    fresh, waits = _core(clock)
    fresh.restore([r for r in records if r is not None], [("w", False)])
    clock.advance(9)
    assert _run(fresh) == "a"  # ready before the load: unknown
    clock.advance(3)
    assert _run(fresh) == "b"  # ready after it: measured
    assert waits == {"a": [None], "b": [3.0]}


def test_moves_that_are_not_hand_outs_carry_no_wait() -> None:
    clock = FakeClock(1000.0)
    core = SchedulerCore(clock=clock)
    core.add_tasks("w", [TaskSpec("a")])
    rec = core.peek("a")
    assert rec is not None
    clock.advance(2)
    assert core.waited(rec) == 2.0  # ready, not yet handed out
    _run(core)
    assert core.waited(rec) is None  # done: not waiting


def test_a_task_running_when_the_state_was_loaded_waits_from_when_it_is_pending_again() -> None:
    """A record loaded RUNNING whose worker is then lost waits from that moment, measured."""
    clock = FakeClock(1000.0)
    core, _ = _core(clock)
    core.worker_disconnect_delay = 60.0
    core.add_tasks("w", [TaskSpec("a")])
    assert core.get_work("w") is not None  # running on w
    record = core.peek("a")
    assert record is not None and record.status == TaskStatus.RUNNING
    fresh, waits = _core(clock)
    fresh.worker_disconnect_delay = 60.0
    fresh.restore([record], [("w", False)])
    clock.advance(61)  # w silent: a fails (worker gone), retried after retry_delay
    fresh.retry_delay = 0.0
    fresh.get_work("x")  # (the time passes for the scheduler: w is declared gone)
    clock.advance(30)
    fresh.get_work("x")  # (a, due for a retry, is pending again now: ready for w only)
    clock.advance(2)
    fresh.add_tasks("w", [TaskSpec("a")])  # w comes back and asks
    work = fresh.get_work("w")
    assert work is not None and work.task_id == "a"
    assert waits["a"] == [2.0]
