"""The worker's lean path to the in-process scheduler (issue 25: ``bench_graph --warm``).

A worker whose transport is conveyor's own in-process :class:`conveyor.Scheduler` calls its
``get_work`` and ``task_done`` directly (no request values, nothing carried with ``get_work``);
a scheduler whose class or instance replaces one of the protocol's methods is spoken to through
``call``, as any transport, so that what it overrides still sees every request.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, ClassVar

import pytest

import conveyor
from conveyor import protocol as p
from conveyor.protocol import TaskStatus
from conveyor.scheduler.policy import SchedulerCore

pytestmark = pytest.mark.timeout(60)


class HotLeaf(conveyor.Task):
    """Complete once it ran (in this process)."""

    i = conveyor.IntParameter()
    ran: ClassVar[set[str]] = set()

    def complete(self) -> bool:
        return self.task_id in HotLeaf.ran

    def run(self) -> None:
        HotLeaf.ran.add(self.task_id)


class HotRoot(HotLeaf):
    """Needs ``n`` leaves."""

    n = conveyor.IntParameter()

    def requires(self) -> list[conveyor.Task]:
        return [HotLeaf(i=self.i * 100 + k) for k in range(self.n)]


def _config() -> conveyor.Config:
    return conveyor.Config().with_overrides(executor="inline", log_level="warning")


class _SeenAtSuccess:
    """A plugin noting, for each task_succeeded event, the scheduler's status of the task."""

    def __init__(self, scheduler: SchedulerCore) -> None:
        self.scheduler = scheduler
        self.statuses: dict[str, TaskStatus] = {}

    @conveyor.hookimpl
    def conveyor_task_succeeded(self, event: Any) -> None:
        self.statuses[event.task_id] = self.scheduler.statuses([event.task_id])[event.task_id]


def test_the_in_process_scheduler_says_a_worker_may_call_it_directly() -> None:
    """``in_process`` is True for conveyor's own scheduler, False once a subclass or the
    instance replaces ``call``, ``get_work`` or ``task_done``."""

    class OwnGetWork(conveyor.Scheduler):
        def get_work(self, *args: Any, **kwargs: Any) -> Any:
            return super().get_work(*args, **kwargs)

    class OwnCall(conveyor.Scheduler):
        def call(self, request: Any) -> Any:
            return super().call(request)

    class OwnPing(conveyor.Scheduler):  # (not a method the worker calls directly)
        def ping(self, worker_id: str) -> Any:
            return super().ping(worker_id)

    assert conveyor.Scheduler().in_process is True
    assert OwnPing().in_process is True
    assert OwnGetWork().in_process is False
    assert OwnCall().in_process is False
    patched = conveyor.Scheduler()
    patched.task_done = lambda *args, **kwargs: None  # type: ignore[method-assign]
    assert patched.in_process is False


def test_a_run_on_the_in_process_scheduler_reports_each_success_at_once() -> None:
    """Directly called, the scheduler has a task DONE before the task's success hook fires
    (nothing waits to be carried by the next get_work), and the run ends as any run does."""
    scheduler = conveyor.Scheduler()
    seen = _SeenAtSuccess(scheduler)
    root = HotRoot(i=-1, n=5)
    with conveyor.Worker(scheduler, config=_config(), plugins=[seen]) as worker:
        assert worker.add(root)
        assert worker.run() is True
    assert worker.report is not None and worker.report.ok
    leaves = {HotLeaf(i=-100 + k).task_id for k in range(5)}
    assert set(seen.statuses) == {root.task_id, *leaves}
    assert set(seen.statuses.values()) == {TaskStatus.DONE}
    assert scheduler.statuses([root.task_id]) == {root.task_id: TaskStatus.DONE}


def test_a_scheduler_that_overrides_call_sees_every_request_of_a_run() -> None:
    """A subclass replacing ``call`` is not called directly: its ``call`` sees every request
    of the run, each success carried by a get_work once the scheduler said it takes them."""
    requests: list[Any] = []

    class Recording(conveyor.Scheduler):
        def call(self, request: Any) -> Any:
            requests.append(request)
            return super().call(request)

    scheduler = Recording()
    root = HotRoot(i=-2, n=3)
    with conveyor.Worker(scheduler, config=_config()) as worker:
        assert worker.add(root)
        assert worker.run() is True
    asks = [r for r in requests if isinstance(r, p.GetWork)]
    carried = {done.task_id for ask in asks for done in ask.done}
    # (a carried report is applied through call too, by the scheduler's get_work)
    reported = {r.task_id for r in requests if isinstance(r, p.TaskDone)}
    leaves = {HotLeaf(i=-200 + k).task_id for k in range(3)}
    assert reported == {root.task_id, *leaves}
    assert carried and carried <= reported  # (once the first answer said it takes them)
    assert scheduler.statuses([root.task_id]) == {root.task_id: TaskStatus.DONE}


def test_a_stale_success_reported_directly_is_dropped_and_the_run_goes_on() -> None:
    """A success the in-process scheduler refuses as stale (the task was taken back and
    handed out again while it ran) is dropped, as the outbox drops one: the run goes on, and
    the task's next hand-out finds it complete."""
    scheduler = conveyor.Scheduler()
    ran = threading.Event()

    class HotStale(conveyor.Task):
        def complete(self) -> bool:
            return ran.is_set()

        def run(self) -> None:
            # the worker asks without listing this attempt as running (as if its answer had
            # been lost): the scheduler takes it back and hands the task out again
            again = scheduler.call(p.GetWork("stale-w", running=())).work
            assert again is not None and again.task_id == self.task_id
            ran.set()

    task = HotStale()
    with conveyor.Worker(scheduler, config=_config(), worker_id="stale-w") as worker:
        assert worker.add(task)
        assert worker.run() is True
    assert ran.is_set()
    assert scheduler.stale_reports == 1
    assert scheduler.statuses([task.task_id]) == {task.task_id: TaskStatus.DONE}


class _DownOnce:
    """The in-process scheduler behind ``call`` alone, out of reach for the first get_work
    that carries a result and the call after it; counts how often each result reached it."""

    def __init__(self) -> None:
        self.scheduler = conveyor.Scheduler()
        self.down = 0
        self.went_down = False
        self.delivered: Counter[str] = Counter()

    def call(self, request: Any) -> Any:
        carrying = isinstance(request, p.GetWork) and (request.done or request.failed)
        if carrying and not self.went_down:
            self.went_down, self.down = True, 2
        if self.down:
            self.down -= 1
            raise conveyor.errors.SchedulerUnavailable("down for a moment")
        answer = self.scheduler.call(request)
        if isinstance(request, p.GetWork):
            self.delivered.update(r.task_id for r in request.done)
            self.delivered.update(r.task_id for r in request.failed)
        elif isinstance(request, (p.TaskDone, p.TaskFailed)):
            self.delivered[request.task_id] += 1
        return answer


def test_a_result_whose_get_work_did_not_get_through_is_delivered_once() -> None:
    """The get_work that carried a result did not reach the scheduler: the result goes by its
    own route once it is back, and the request is never sent again as it was (an unchanged
    ask is reused only when it carried nothing), so each result arrives exactly once."""
    transport = _DownOnce()
    config = _config().with_section(
        "scheduler", rpc_retry_wait=0.01, rpc_retry_max_wait=0.05, rpc_give_up_after=60
    )
    root = HotRoot(i=-3, n=3)
    with conveyor.Worker(transport, config=config) as worker:
        assert worker.add(root)
        assert worker.run() is True
    leaves = {HotLeaf(i=-300 + k).task_id for k in range(3)}
    assert transport.went_down
    assert dict(transport.delivered) == {t: 1 for t in {root.task_id, *leaves}}
    assert transport.scheduler.stale_reports == 0


def test_a_wrapper_that_passes_attributes_on_to_a_scheduler_sees_every_request() -> None:
    """A transport of its own (a ``call`` that counts) which passes other attribute lookups on
    to the scheduler it wraps is not the in-process scheduler: its ``call`` sees the hand-outs
    too (it used to be bypassed, since ``in_process`` read through it)."""

    class Counting:
        def __init__(self, inner: conveyor.Scheduler) -> None:
            self.inner = inner
            self.seen: Counter[str] = Counter()

        def call(self, request: Any) -> Any:
            self.seen[type(request).__name__] += 1
            return self.inner.call(request)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    wrapper = Counting(conveyor.Scheduler())
    assert wrapper.in_process is True  # (read through: the trap)
    root = HotRoot(i=-5, n=3)
    with conveyor.Worker(wrapper, config=_config()) as worker:  # type: ignore[arg-type]
        assert worker.add(root)
        assert worker.run() is True
    assert wrapper.seen["GetWork"] >= 4  # (the root and its three leaves handed out)
