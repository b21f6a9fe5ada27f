"""Tests for the scheduling policy (SchedulerCore) and the in-process conveyor.Scheduler."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.protocol import encode
from conveyor.scheduler import Scheduler, TaskSpec, policy
from conveyor.scheduler.policy import SchedulerCore
from conveyor.testing import FakeClock

RETRY_DELAY = 10.0
DISABLE_WINDOW = 100.0
DISABLE_PERSIST = 1000.0
DISCONNECT = 60.0
TASK_LIST_KEYS = {
    "task_id",
    "family",
    "params",
    "status",
    "worker",
    "priority",
    "dependencies",
    "status_message",
    "progress",
    "tracking_url",
    "explanation",  # an addition to SPEC §7's keys: the last failure's explanation
    "waiting",  # another: why a ready task no live worker can take waits
    "submitted_by",  # another: who submitted it (conveyor submit), "" if nobody did
}

MakeCore = Callable[..., SchedulerCore]


def spec(task_id: str, **fields: Any) -> TaskSpec:
    """A TaskSpec whose family and params are derived from its id."""
    return TaskSpec(
        task_id=task_id,
        family="Fam",
        module="tests.fake_tasks",
        params={"id": task_id},
        **fields,
    )


def specs(*task_ids: str, **fields: Any) -> list[TaskSpec]:
    """One TaskSpec per id, with the same extra fields."""
    return [spec(task_id, **fields) for task_id in task_ids]


def handed_out(core: SchedulerCore, worker: str, limit: int = 1000) -> list[str]:
    """Ask for work until None; return the ids handed out, in order."""
    got = []
    while (work := core.get_work(worker)) is not None:
        got.append(work.task_id)
        assert len(got) <= limit
    return got


def status(core: SchedulerCore, task_id: str) -> str:
    """The scheduler's status of one task."""
    return core.statuses([task_id])[task_id]


@pytest.fixture
def clock() -> FakeClock:
    """A manual clock."""
    return FakeClock()


@pytest.fixture
def make(clock: FakeClock) -> MakeCore:
    """Build a SchedulerCore on the fake clock with short, distinct policy durations."""

    def build(**settings: Any) -> SchedulerCore:
        defaults: dict[str, Any] = {
            "retry_delay": RETRY_DELAY,
            "retry_count": 3,
            "disable_window": DISABLE_WINDOW,
            "disable_persist": DISABLE_PERSIST,
            "worker_disconnect_delay": DISCONNECT,
        }
        return SchedulerCore(clock=clock, **(defaults | settings))

    return build


@pytest.fixture
def core(make: MakeCore) -> SchedulerCore:
    """A SchedulerCore with the default test settings and no declared resources."""
    return make()


# --- order ---------------------------------------------------------------------------------


def test_highest_priority_is_handed_out_first(core: SchedulerCore):
    """Ready tasks come out by priority, highest first."""
    core.add_tasks(
        "w", [spec("low", priority=1), spec("high", priority=5), spec("mid", priority=3)]
    )
    assert handed_out(core, "w") == ["high", "mid", "low"]


def test_equal_priority_is_handed_out_oldest_first(core: SchedulerCore):
    """Among equal priorities, the task registered first comes out first."""
    core.add_tasks("w", specs("third-name", "first-name"))
    core.add_tasks("w", specs("a-later-one"))
    core.add_tasks("w", [spec("urgent", priority=1)])
    assert handed_out(core, "w") == ["urgent", "third-name", "first-name", "a-later-one"]


def test_dependency_inherits_its_dependents_priority(core: SchedulerCore):
    """A low-priority dependency of a high-priority task beats an unrelated medium task."""
    core.add_tasks("w", [spec("dep", priority=0), spec("medium", priority=5)])
    core.add_tasks("w", [spec("top", priority=10, deps=("dep",))])
    assert core.get_work("w").task_id == "dep"
    core.task_done("w", "dep")
    assert handed_out(core, "w") == ["top", "medium"]


def test_priority_is_inherited_through_a_chain_registered_top_down(core: SchedulerCore):
    """Registering the dependent first, its transitive dependencies still inherit its priority."""
    core.add_tasks("w", [spec("top", priority=9, deps=("mid",))])
    core.add_tasks("w", [spec("mid", deps=("bottom",)), spec("other", priority=5)])
    core.add_tasks("w", [spec("bottom")])
    assert core.get_work("w").task_id == "bottom"
    priorities = {entry["task_id"]: entry["priority"] for entry in encode(core.task_list())}
    assert priorities == {"top": 9, "mid": 9, "bottom": 9, "other": 5}


def test_task_is_handed_out_only_when_every_dependency_is_done(core: SchedulerCore):
    """A task waits until all its dependencies are DONE, not merely running."""
    core.add_tasks("w", [*specs("b", "c"), spec("a", deps=("b", "c"))])
    assert sorted(handed_out(core, "w")) == ["b", "c"]
    core.task_done("w", "b")
    assert core.get_work("w") is None
    core.task_done("w", "c")
    assert core.get_work("w").task_id == "a"


def test_failed_dependency_keeps_its_dependent_pending(core: SchedulerCore):
    """While a dependency is FAILED its dependent is never handed out."""
    core.add_tasks("w", [spec("dep"), spec("top", deps=("dep",))])
    assert core.get_work("w").task_id == "dep"
    core.task_failed("w", "dep", "boom")
    assert core.get_work("w") is None
    assert core.statuses(["dep", "top"]) == {"dep": "FAILED", "top": "PENDING"}


def test_dependency_registered_done_does_not_block(core: SchedulerCore):
    """A dependency registered as already DONE counts as met."""
    core.add_tasks("w", [spec("dep", status="DONE", runnable=False), spec("top", deps=("dep",))])
    assert handed_out(core, "w") == ["top"]


def test_dynamic_dependencies_send_the_running_task_back_to_wait(make: MakeCore):
    """Re-registering a running task PENDING with new deps frees its resources until they finish."""
    core = make(resources={"db": 1})
    core.add_tasks("w", [spec("parent", resources={"db": 1})])
    assert core.get_work("w").task_id == "parent"
    core.add_tasks("w", [spec("parent", deps=("child",), resources={"db": 1}), spec("child")])
    assert status(core, "parent") == "PENDING"
    core.add_tasks("w", [spec("other-db", resources={"db": 1})])
    assert handed_out(core, "w") == ["child", "other-db"]
    core.task_done("w", "child")
    core.task_done("w", "other-db")
    assert core.get_work("w").task_id == "parent"


# --- resources -----------------------------------------------------------------------------


def test_resource_capacity_is_respected(make: MakeCore):
    """No more tasks run on a resource than its capacity; the next starts when one finishes."""
    core = make(resources={"db": 2})
    core.add_tasks("w", specs("q1", "q2", "q3", resources={"db": 1}))
    assert handed_out(core, "w") == ["q1", "q2"]
    core.task_done("w", "q1")
    assert handed_out(core, "w") == ["q3"]


def test_undeclared_resource_has_capacity_one(core: SchedulerCore):
    """A resource missing from the configuration admits one task at a time."""
    core.add_tasks("w", specs("g1", "g2", resources={"gpu": 1}))
    core.add_tasks("w", specs("plain"))
    assert handed_out(core, "w") == ["g1", "plain"]
    core.task_failed("w", "g1", "boom")
    assert handed_out(core, "w") == ["g2"]


def test_task_needing_several_units_waits_for_all_of_them(make: MakeCore):
    """A task needing 2 units of a capacity-2 resource waits until nothing else holds it."""
    core = make(resources={"db": 2})
    core.add_tasks("w", [spec("small", resources={"db": 1})])
    core.add_tasks("w", [spec("big", resources={"db": 2})])
    assert handed_out(core, "w") == ["small"]
    core.task_done("w", "small")
    assert handed_out(core, "w") == ["big"]


def test_resources_are_shared_across_workers(make: MakeCore):
    """Capacity is global: a second worker cannot exceed it either."""
    core = make(resources={"db": 1})
    core.add_tasks("w1", specs("a", resources={"db": 1}))
    core.add_tasks("w2", specs("b", resources={"db": 1}))
    assert core.get_work("w1").task_id == "a"
    assert core.get_work("w2") is None
    core.task_done("w1", "a")
    assert core.get_work("w2").task_id == "b"


# --- one running instance ------------------------------------------------------------------


def test_one_running_instance_per_task_id(core: SchedulerCore):
    """Two workers registering the same task: only the first to ask runs it."""
    core.add_tasks("w1", specs("shared"))
    core.add_tasks("w2", specs("shared"))
    assert core.get_work("w1").task_id == "shared"
    assert core.get_work("w2") is None
    core.task_done("w1", "shared")
    assert core.get_work("w2") is None
    assert status(core, "shared") == "DONE"


def test_second_worker_gets_a_different_task(core: SchedulerCore):
    """A worker whose best task runs elsewhere gets its next task instead."""
    core.add_tasks("w1", specs("shared"))
    core.add_tasks("w2", [spec("shared", priority=5), spec("own")])
    assert core.get_work("w1").task_id == "shared"
    assert core.get_work("w2").task_id == "own"


# --- failures, retries, disabling -----------------------------------------------------------


def test_failed_task_is_pending_again_after_retry_delay(core: SchedulerCore, clock: FakeClock):
    """A FAILED task is not handed out before retry_delay, and is after it."""
    core.add_tasks("w", specs("flaky"))
    core.get_work("w")
    assert core.task_failed("w", "flaky", "boom") == "FAILED"
    clock.advance(RETRY_DELAY - 1)
    assert core.get_work("w") is None
    assert status(core, "flaky") == "FAILED"
    assert core.explanation("flaky") == "boom"
    clock.advance(1)
    assert core.get_work("w").task_id == "flaky"


def _fail_repeatedly(core: SchedulerCore, clock: FakeClock, task_id: str, times: int) -> list[str]:
    """Run and fail ``task_id`` ``times`` times, waiting retry_delay in between."""
    results = []
    for _ in range(times):
        clock.advance(RETRY_DELAY)
        work = core.get_work("w")
        assert work is not None and work.task_id == task_id
        results.append(core.task_failed("w", task_id, "boom"))
    return results


def test_task_is_disabled_after_retry_count_failures(core: SchedulerCore, clock: FakeClock):
    """The retry_count-th failure within disable_window disables the task until disable_persist."""
    core.add_tasks("w", specs("bad"))
    assert _fail_repeatedly(core, clock, "bad", 3) == ["FAILED", "FAILED", "DISABLED"]
    clock.advance(RETRY_DELAY)
    assert core.get_work("w") is None
    clock.advance(DISABLE_PERSIST - RETRY_DELAY - 1)
    assert core.get_work("w") is None
    assert status(core, "bad") == "DISABLED"
    clock.advance(1)
    assert core.get_work("w").task_id == "bad"
    assert core.task_failed("w", "bad", "boom again") == "FAILED"


def test_failures_outside_the_window_do_not_disable(core: SchedulerCore, clock: FakeClock):
    """Failures further apart than disable_window never add up to retry_count."""
    core.add_tasks("w", specs("slow-flaky"))
    results = []
    for _ in range(5):
        clock.advance(DISABLE_WINDOW + 1)
        assert core.get_work("w").task_id == "slow-flaky"
        results.append(core.task_failed("w", "slow-flaky", "boom"))
    assert results == ["FAILED"] * 5


def test_task_spec_retry_count_overrides_the_scheduler(core: SchedulerCore, clock: FakeClock):
    """A TaskSpec retry_count of 1 disables on the first failure; others keep the default."""
    core.add_tasks("w", [spec("fragile", retry_count=1, priority=1), spec("normal")])
    assert _fail_repeatedly(core, clock, "fragile", 1) == ["DISABLED"]
    assert _fail_repeatedly(core, clock, "normal", 1) == ["FAILED"]


# --- liveness --------------------------------------------------------------------------------


def test_silent_worker_loses_its_running_task(core: SchedulerCore, clock: FakeClock):
    """After worker_disconnect_delay without contact, a worker's RUNNING task becomes FAILED."""
    core.add_tasks("gone", specs("orphan"))
    core.add_tasks("alive", specs("orphan"))
    assert core.get_work("gone").task_id == "orphan"
    clock.advance(DISCONNECT + 1)
    assert core.get_work("alive") is None
    assert status(core, "orphan") == "FAILED"
    assert "gone" in core.explanation("orphan")
    clock.advance(RETRY_DELAY)
    assert core.get_work("alive").task_id == "orphan"


def test_worker_that_pings_keeps_its_running_task(core: SchedulerCore, clock: FakeClock):
    """A worker pinging more often than worker_disconnect_delay keeps its task RUNNING."""
    core.add_tasks("busy", specs("long"))
    core.add_tasks("other", specs("x"))
    core.get_work("busy")
    for _ in range(5):
        clock.advance(DISCONNECT / 2)
        core.ping("busy")
        core.get_work("other")
    assert status(core, "long") == "RUNNING"


def test_time_based_transitions_show_in_queries_without_get_work(
    core: SchedulerCore, clock: FakeClock
):
    """statuses() and task_list() reflect retry_delay and disconnects with no get_work call."""
    core.add_tasks("gone", specs("orphan", "flaky"))
    core.get_work("gone")
    core.get_work("gone")
    core.task_failed("gone", "flaky", "boom")
    clock.advance(DISCONNECT + 1)
    assert core.statuses(["orphan", "flaky"]) == {"orphan": "FAILED", "flaky": "PENDING"}
    listed = {entry["task_id"]: entry["status"] for entry in encode(core.task_list())}
    assert listed == {"orphan": "FAILED", "flaky": "PENDING"}


# --- annotations and queries ---------------------------------------------------------------


def test_annotations_show_in_the_task_list(core: SchedulerCore):
    """annotate() values appear in task_list(), whose entries have exactly the SPEC §7 keys."""
    core.add_tasks("w", [spec("dep"), spec("job", deps=("dep",), priority=2)])
    core.task_done("w", "dep")
    core.get_work("w")
    core.annotate("job", "status_message", "halfway")
    core.annotate("job", "progress", 50)
    core.annotate("job", "tracking_url", "http://example.invalid/job")
    entries = {entry["task_id"]: entry for entry in encode(core.task_list())}
    assert all(set(entry) == TASK_LIST_KEYS for entry in entries.values())
    assert entries["job"] == {
        "task_id": "job",
        "family": "Fam",
        "params": {"id": "job"},
        "status": "RUNNING",
        "worker": "w",
        "priority": 2,
        "dependencies": ["dep"],
        "status_message": "halfway",
        "progress": 50.0,
        "tracking_url": "http://example.invalid/job",
        "explanation": "",
        "waiting": "",
        "submitted_by": "",
    }
    assert entries["dep"]["status"] == "DONE"


def test_work_left_counts_pending_unique_and_running_elsewhere(core: SchedulerCore):
    """work_left() counts this worker's pending tasks, those only it wants, and others' runs."""
    core.add_tasks("v", specs("r"))
    assert core.get_work("v").task_id == "r"
    core.add_tasks("w", specs("p1", "p2", "s", "r"))
    core.add_tasks("v", specs("s"))
    left = core.work_left("w")
    assert (left.pending, left.unique_pending, left.running_elsewhere) == (3, 2, 1)
    assert left.last_scheduled == 2  # (v registered s after w did: s is v's last)
    assert core.work_left("v").last_scheduled == 1
    core.add_tasks("w", specs("s"))  # (registering again keeps the order, as in luigid)
    assert core.work_left("w").last_scheduled == 2
    assert core.get_work("w").task_id == "p1"
    left = core.work_left("w")
    assert (left.pending, left.unique_pending, left.running_elsewhere) == (2, 1, 1)


def test_work_left_ignores_tasks_blocked_by_a_disabled_dependency(
    core: SchedulerCore, clock: FakeClock
):
    """As in Luigi, a task whose upstream is DISABLED does not count as work left to wait for."""
    core.add_tasks("w", [spec("base", retry_count=1), spec("top", deps=("base",))])
    assert core.get_work("w").task_id == "base"
    assert core.task_failed("w", "base", "boom") == "DISABLED"
    clock.advance(RETRY_DELAY)
    assert core.get_work("w") is None
    left = core.work_left("w")
    assert (left.pending, left.unique_pending, left.running_elsewhere) == (0, 0, 0)


def test_assistant_runs_tasks_registered_by_another_worker(core: SchedulerCore):
    """An assistant gets a runnable task another worker registered; a plain worker does not."""
    core.add_tasks("owner", specs("t"))
    assert core.get_work("bystander") is None
    work = core.get_work("helper", assistant=True)
    assert work is not None and (work.task_id, work.module) == ("t", "tests.fake_tasks")
    assert encode(core.task_list())[0]["worker"] == "helper"


def test_assistant_that_arrived_first_gets_later_tasks(core: SchedulerCore):
    """An assistant already polling gets tasks registered after it joined."""
    assert core.get_work("helper", assistant=True) is None
    core.add_tasks("owner", [spec("t1"), spec("t2", priority=3)])
    assert core.get_work("helper", assistant=True).task_id == "t2"


def test_assistant_never_gets_a_task_nobody_may_run(core: SchedulerCore):
    """A task registered only as not runnable is not handed to assistants."""
    core.add_tasks("owner", specs("external", runnable=False))
    assert core.get_work("helper", assistant=True) is None


# --- conveyor.Scheduler --------------------------------------------------------------------


@pytest.fixture
def isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty directory so no stray worker.toml is discovered."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_scheduler_keyword_overrides_configure_the_policy(isolated_cwd: Path, clock: FakeClock):
    """Scheduler(retry_delay=5, resources={"db": 2}) applies both and keeps other defaults."""
    scheduler = conveyor.Scheduler(retry_delay=5, resources={"db": 2}, clock=clock)
    assert isinstance(scheduler, SchedulerCore)
    assert (scheduler.retry_delay, scheduler.capacity) == (5, {"db": 2})
    assert (scheduler.retry_count, scheduler.worker_disconnect_delay) == (3, 60)
    scheduler.add_tasks("w", specs("d1", "d2", "d3", resources={"db": 1}))
    assert handed_out(scheduler, "w") == ["d1", "d2"]
    scheduler.task_failed("w", "d1", "boom")
    assert handed_out(scheduler, "w") == ["d3"]
    scheduler.task_done("w", "d2")
    clock.advance(4)
    assert handed_out(scheduler, "w") == []
    clock.advance(1)
    assert handed_out(scheduler, "w") == ["d1"]


def test_scheduler_reads_worker_toml_and_overrides_win(isolated_cwd: Path, clock: FakeClock):
    """The [scheduler] section configures Scheduler; keyword overrides beat the file."""
    toml = "[scheduler]\nretry_delay = 7\nretry_count = 9\n[scheduler.resources]\ndb = 3\n"
    (isolated_cwd / "worker.toml").write_text(toml)
    from_file = Scheduler(clock=clock)
    assert (from_file.retry_delay, from_file.retry_count, from_file.capacity) == (7, 9, {"db": 3})
    overridden = Scheduler(clock=clock, retry_delay=1, resources={"api": 4})
    assert (overridden.retry_delay, overridden.retry_count) == (1, 9)
    assert overridden.capacity == {"api": 4}


# --- complexity (counted, never timed) -------------------------------------------------------


class CountingHeapq:
    """Stands in for the heapq module inside conveyor.scheduler.policy and counts operations."""

    def __init__(self) -> None:
        """Start with zero counts."""
        self.pops = 0
        self.pushes = 0

    def heappop(self, heap: list[Any]) -> Any:
        """Count, then delegate to heapq.heappop."""
        self.pops += 1
        return heapq.heappop(heap)

    def heappush(self, heap: list[Any], item: Any) -> None:
        """Count, then delegate to heapq.heappush."""
        self.pushes += 1
        heapq.heappush(heap, item)

    def total(self) -> int:
        """Pops plus pushes so far."""
        return self.pops + self.pushes


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingHeapq:
    """Replace the policy module's heapq with a counting wrapper."""
    counter = CountingHeapq()
    monkeypatch.setattr(policy, "heapq", counter)
    return counter


def _register_many(core: SchedulerCore, count: int, **fields: Any) -> None:
    """Register ``count`` independent tasks for worker ``w``."""
    core.add_tasks("w", (spec(f"t{i:05d}", **fields) for i in range(count)))


def _ops_per_call(counter: CountingHeapq, calls: Iterable[Callable[[], object]]) -> list[int]:
    """Heap operations spent by each call."""
    spent = []
    for call in calls:
        before = counter.total()
        call()
        spent.append(counter.total() - before)
    return spent


def test_get_work_costs_a_bounded_number_of_heap_operations(
    core: SchedulerCore, counting: CountingHeapq
):
    """With 20,000 ready tasks, each get_work and task_done does O(1) heap operations."""
    _register_many(core, 20_000)
    got: list[str] = []
    spent = _ops_per_call(
        counting, [lambda: got.append(core.get_work("w").task_id) for _ in range(200)]
    )
    assert got == [f"t{i:05d}" for i in range(200)]
    assert max(spent) <= 3
    done = _ops_per_call(counting, [lambda t=t: core.task_done("w", t) for t in got])
    assert max(done) <= 3


def test_resource_bound_queue_costs_bounded_heap_operations_per_task(
    make: MakeCore, counting: CountingHeapq
):
    """Draining 1,000 tasks through a capacity-1 resource with 2 slots costs O(1) ops per task."""
    core = make(resources={"db": 1})
    count = 1_000
    _register_many(core, count, resources={"db": 1})
    before = counting.total()
    finished = 0
    while finished < count:
        work = core.get_work("w")
        assert work is not None
        assert core.get_work("w") is None  # a second slot asks while the resource is held
        core.task_done("w", work.task_id)
        finished += 1
    assert counting.total() - before <= 20 * count


def test_many_blocked_tasks_do_not_slow_down_unrelated_ones(
    make: MakeCore, counting: CountingHeapq
):
    """Once parked, tasks blocked on a resource cost nothing to later get_work calls."""
    core = make(resources={"db": 1})
    _register_many(core, 5_000, resources={"db": 1})
    assert core.get_work("w") is not None
    assert core.get_work("w") is None
    core.add_tasks("w", specs("free-1", "free-2", "free-3"))
    spent = _ops_per_call(counting, [lambda: core.get_work("w") for _ in range(4)])
    assert max(spent) <= 3


class _CountingDict(dict[str, Any]):
    """A dict that counts item look-ups (to check an operation does not touch every task)."""

    lookups = 0

    def __getitem__(self, key: str) -> Any:
        type(self).lookups += 1
        return super().__getitem__(key)


def test_get_work_with_a_running_list_does_not_scan_the_workers_tasks() -> None:
    """get_work(running=...) touches a bounded number of records, not all 20,000 of the worker's."""
    core = SchedulerCore(clock=FakeClock())
    core.add_tasks("w", [TaskSpec(f"t{i}", deps=(f"t{i + 1}",)) for i in range(20_000)])
    core.add_tasks("w", [TaskSpec("t20000")])
    assert core.get_work("w", running=()) is not None  # t20000, the end of the chain
    core._tasks = _CountingDict(core._tasks)
    _CountingDict.lookups = 0
    core.task_done("w", "t20000")
    work = core.get_work("w", running=())
    assert work is not None and work.task_id == "t19999"
    assert _CountingDict.lookups < 50


# --- attempt ids: fencing and idempotent reports (issue 9) -----------------------------------


def test_every_hand_out_has_a_new_attempt_id_and_the_lease(core: SchedulerCore, clock: FakeClock):
    """Each hand-out of a task carries a new attempt id (a positive integer exact in JSON) and
    worker_disconnect_delay as its lease."""
    core.add_tasks("w", specs("t"))
    first = core.get_work("w")
    assert first.lease == DISCONNECT and 0 < first.attempt < 2**53
    core.task_failed("w", "t", "boom", first.attempt)
    clock.advance(RETRY_DELAY)
    assert core.get_work("w").attempt not in (0, first.attempt)


def test_a_failure_reported_twice_counts_once(make: MakeCore, clock: FakeClock):
    """A task_failed sent again (its answer was lost) is acknowledged, not counted again: with
    retry_count = 2 one failed attempt leaves the task FAILED, not DISABLED."""
    core = make(retry_count=2)
    core.add_tasks("w", specs("t"))
    work = core.get_work("w")
    assert core.task_failed("w", "t", "boom", work.attempt) == "FAILED"
    assert core.task_failed("w", "t", "boom", work.attempt) == "FAILED"
    assert status(core, "t") == "FAILED"
    clock.advance(RETRY_DELAY)
    again = core.get_work("w")
    assert core.task_failed("w", "t", "boom", again.attempt) == "DISABLED"  # the 2nd real one


def test_a_success_reported_twice_is_applied_once(core: SchedulerCore, clock: FakeClock):
    """task_done sent again is acknowledged; it changes nothing the second time."""
    core.add_tasks("w", specs("t"))
    work = core.get_work("w")
    core.task_done("w", "t", work.attempt)
    core.task_done("w", "t", work.attempt)
    assert status(core, "t") == "DONE" and core.stale_reports == 0


def test_a_report_of_a_superseded_attempt_is_refused_and_changes_nothing(
    core: SchedulerCore, clock: FakeClock
):
    """Worker A goes silent; its task is failed and handed to B (attempt 2). A's late reports of
    attempt 1 raise StaleReport, are counted, and leave B's attempt RUNNING."""
    core.add_tasks("a", specs("t"))
    core.add_tasks("b", specs("t"))
    first = core.get_work("a")
    clock.advance(DISCONNECT + 1)
    core.ping("b")
    assert status(core, "t") == "FAILED"
    clock.advance(RETRY_DELAY)
    second = core.get_work("b")
    assert first.attempt != second.attempt
    with pytest.raises(conveyor.StaleReport, match=r"attempt \d+ .* handed out again .* worker b"):
        core.task_done("a", "t", first.attempt)
    with pytest.raises(conveyor.StaleReport):
        core.task_failed("a", "t", "late", first.attempt)
    assert status(core, "t") == "RUNNING" and core.stale_reports == 2
    core.task_done("b", "t", second.attempt)
    assert status(core, "t") == "DONE"


def test_a_late_success_of_the_latest_attempt_still_counts(core: SchedulerCore, clock: FakeClock):
    """A worker that seemed gone (its task failed by the scheduler) but finished the latest
    attempt reports it DONE: nobody else ran it, so the work is not thrown away; its late
    failure, though, is not counted a second time."""
    core.add_tasks("a", specs("ok", "bad"))
    ok, bad = core.get_work("a"), core.get_work("a")
    clock.advance(DISCONNECT + 1)
    core.ping("other")
    assert status(core, "ok") == status(core, "bad") == "FAILED"
    core.task_done("a", ok.task_id, ok.attempt)
    assert core.task_failed("a", bad.task_id, "late", bad.attempt) == "FAILED"
    assert status(core, "ok") == "DONE"
    assert len(core._tasks[bad.task_id].failures or ()) == 1  # only the scheduler's own


def test_reports_without_an_attempt_id_behave_as_before(core: SchedulerCore):
    """A caller that names no attempt (0) is applied every time, as before attempt ids."""
    core.add_tasks("w", specs("t"))
    core.get_work("w")
    core.task_failed("w", "t", "boom")
    assert status(core, "t") == "FAILED"


# --- pruning: remove_delay (issue 9) -----------------------------------------------------------

REMOVE = 50.0


def _gone(core: SchedulerCore, clock: FakeClock, seconds: float) -> None:
    """Let ``seconds`` pass, then make the scheduler look (as the server's tick does)."""
    clock.advance(seconds)
    core.ping("bystander")
    core.statuses(())


def test_tasks_of_a_gone_worker_are_removed_after_remove_delay(make: MakeCore, clock: FakeClock):
    """DONE tasks that only a gone worker registered are removed remove_delay after it was
    declared gone (dependents first, then what they needed), and so is what is kept about it."""
    core = make(remove_delay=REMOVE)
    core.add_tasks("w", [spec("a"), spec("b", deps=("a",))])
    for task_id in handed_out(core, "w"):
        core.task_done("w", task_id)
    _gone(core, clock, DISCONNECT + 1)
    assert set(core.statuses(["a", "b"])) == {"a", "b"}  # gone, but not for remove_delay yet
    _gone(core, clock, REMOVE)
    assert core.statuses(["a", "b"]) == {} and core.task_list() == []
    assert "w" not in core._by_worker and "w" not in core._heaps


def test_a_task_a_live_worker_needs_is_kept(make: MakeCore, clock: FakeClock):
    """A task another live worker registered stays, and so does a dependency of a task kept;
    once the last worker is gone too, both go."""
    core = make(remove_delay=REMOVE)
    core.add_tasks("w1", [spec("d"), spec("x", deps=("d",))])
    core.add_tasks("w2", [spec("x", deps=("d",))])  # w2 registered x only
    _gone(core, clock, DISCONNECT / 2)
    core.ping("w2")
    _gone(core, clock, DISCONNECT / 2 + 1)  # w1 is gone now; w2 is not
    core.ping("w2")
    _gone(core, clock, REMOVE)
    core.ping("w2")
    assert set(core.statuses(["d", "x"])) == {"d", "x"}
    _gone(core, clock, DISCONNECT + 1)  # w2 is gone too
    _gone(core, clock, REMOVE)
    assert core.statuses(["d", "x"]) == {}


def test_a_worker_that_comes_back_keeps_its_tasks(make: MakeCore, clock: FakeClock):
    """A worker declared gone that calls again before remove_delay keeps what it registered."""
    core = make(remove_delay=REMOVE)
    core.add_tasks("w", specs("t"))
    _gone(core, clock, DISCONNECT + 1)
    core.ping("w")
    _gone(core, clock, REMOVE)
    core.ping("w")
    assert core.statuses(["t"]) == {"t": "PENDING"}
    assert core.get_work("w").task_id == "t"


def test_removals_are_reported_to_the_state_store_and_a_comeback_is_not(
    make: MakeCore, clock: FakeClock
):
    """With persistence on, removed task and worker ids are taken once; a task registered
    again after its removal is saved, not deleted."""
    core = make(remove_delay=REMOVE)
    core.track_changes()
    core.add_tasks("w", specs("t", "u"))
    core.take_changes()
    _gone(core, clock, DISCONNECT + 1)
    _gone(core, clock, REMOVE)
    assert core.take_removals() == (["t", "u"], ["w"])
    assert core.take_removals() == ([], [])
    core.take_changes()
    core.add_tasks("w", specs("u"))
    records, workers = core.take_changes()
    assert [r.task_id for r in records] == ["u"] and workers == [("w", False)]
    assert core.take_removals() == ([], [])


def test_stakeholders_alone_are_taken_apart_or_as_changed_records(make: MakeCore, clock: FakeClock):
    """A second worker's registration that changes nothing else, and a release, change only
    a task's stakeholders (and runners): take_changes_apart gives those apart, and the
    records only of tasks that changed otherwise too; take_changes gives them as changed
    records, for a store that writes whole rows. A registration that changes nothing is no
    change at all."""
    core = make(remove_delay=REMOVE)
    core.track_changes()
    core.add_tasks("w1", specs("t", "u", "v"))
    core.take_changes()
    core.add_tasks("w1", specs("t"))  # (nothing new)
    assert core.take_changes_apart() == ([], [], [])
    core.add_tasks("w2", specs("t", "u"))
    core.add_tasks("w2", [TaskSpec("v", family="T", priority=5)])  # (its priority rose too)
    core.release("w1", ["t"])
    records, _, apart = core.take_changes_apart()
    assert [r.task_id for r in records] == ["v"]
    assert sorted(apart) == [("t", ("w2",), ("w1", "w2")), ("u", ("w1", "w2"), ("w1", "w2"))]
    assert core.take_changes_apart() == ([], [], [])
    core.release("w2", ["t"])
    records, _ = core.take_changes()
    assert [(r.task_id, r.stakeholders) for r in records] == [("t", ())]
    assert core.take_changes_apart() == ([], [], [])
    # a first runner is a change the UI shows (nobody could run it): the whole row
    core.add_tasks("w1", specs("x", runnable=False))
    core.take_changes()
    core.add_tasks("w2", specs("x"))
    records, _, apart = core.take_changes_apart()
    assert [(r.task_id, r.runners) for r in records] == [("x", ("w2",))] and apart == []


def test_a_task_removed_and_known_again_in_one_commit(make: MakeCore, clock: FakeClock):
    """A task pruned, then known again before the store took the changes: named as a
    dependency only, its old row is deleted (a task nobody registered has none); registered
    again, its new row is written and not deleted after."""
    core = make(remove_delay=REMOVE)
    core.track_changes()
    core.add_tasks("w1", specs("t", "v"))
    core.take_changes()
    _gone(core, clock, DISCONNECT + 1)
    _gone(core, clock, REMOVE)  # (their worker gone long enough: pruned)
    assert core.peek("t") is None and core.peek("v") is None
    core.add_tasks("w2", [*specs("u", deps=("t",)), *specs("v")])
    records, _ = core.take_changes()
    assert {r.task_id: r.registered for r in records} == {"u": True, "v": True}
    assert core.take_removals()[0] == ["t"]


@pytest.mark.timeout(30)
def test_a_remove_delay_of_zero_does_not_hang_a_task_kept_for_assistants(
    make: MakeCore, clock: FakeClock
):
    """With ``remove_delay`` 0, a released task that live assistants may still run is looked
    at again a second later, not again and again at once (which held the lock for ever)."""
    core = make(remove_delay=0.0)
    core.get_work("helper", assistant=True)
    core.add_tasks("w1", specs("t"))
    core.release("w1", ["t"])
    clock.advance(1.0)
    assert core.statuses(["t"]) == {"t": "PENDING"}


def test_an_old_report_cannot_hit_a_task_registered_again_after_it_was_removed(
    make: MakeCore, clock: FakeClock
):
    """A's attempt of T is pending in its outbox while T is pruned and registered again by B:
    attempt ids are unique across records, so A's report is still refused and B's applied."""
    core = make(remove_delay=REMOVE)
    core.add_tasks("a", specs("t"))
    old = core.get_work("a")
    _gone(core, clock, DISCONNECT + 1)
    _gone(core, clock, REMOVE)
    assert core.statuses(["t"]) == {}
    core.add_tasks("b", specs("t"))
    new = core.get_work("b")
    with pytest.raises(conveyor.StaleReport):
        core.task_failed("a", "t", "late", old.attempt)
    core.task_done("b", "t", new.attempt)
    assert status(core, "t") == "DONE"


def test_a_worker_gone_twice_keeps_its_tasks_until_remove_delay_after_the_last_time(
    make: MakeCore, clock: FakeClock
):
    """A worker that is declared gone, comes back and is declared gone again keeps its tasks
    until remove_delay after the second departure, not the first."""
    core = make(remove_delay=REMOVE)
    core.add_tasks("w", specs("t"))
    _gone(core, clock, DISCONNECT + 1)  # first departure
    core.ping("w")  # back
    _gone(core, clock, DISCONNECT + 1)  # second departure
    _gone(core, clock, REMOVE - DISCONNECT)  # the first departure's remove_delay is over
    assert core.statuses(["t"]) == {"t": "PENDING"}
    _gone(core, clock, DISCONNECT + 1)
    assert core.statuses(["t"]) == {}


def test_pending_work_stays_while_an_assistant_may_run_it(make: MakeCore, clock: FakeClock):
    """Tasks of a gone worker that a live assistant could still run are kept (as in Luigi),
    and so is one the assistant is running; both go once the assistant is gone too."""
    core = make(remove_delay=REMOVE)
    core.add_tasks("w", specs("t1", "t2"))
    core.get_work("helper", assistant=True)  # the assistant runs t1
    _gone(core, clock, DISCONNECT / 2)
    core.ping("helper")
    _gone(core, clock, DISCONNECT / 2 + 1)  # w is gone
    core.ping("helper")
    for _ in range(3):
        _gone(core, clock, REMOVE / 2)
        core.ping("helper")
    assert set(core.statuses(["t1", "t2"])) == {"t1", "t2"}
    assert core.get_work("helper", assistant=True).task_id == "t2"
    _gone(core, clock, DISCONNECT + 1)  # the assistant is gone: t1 and t2 fail
    for _ in range(4):
        _gone(core, clock, REMOVE)
    assert core.statuses(["t1", "t2"]) == {}
