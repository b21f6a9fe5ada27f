"""Group commit on the event loop (``SchedulerService.call_async``, what the server's routes
use): the calls a loop queues in one turn are applied and committed together, in one
transaction, and each caller gets its own answer, or what it is to raise, only once that commit
is stored.

The store is SQLite on disk (real). The calls of a test are started together (tasks made in one
turn of the loop: each queues its call in the next turn), so they make one batch for certain.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from commit_support import CALLERS, CountingStore, asks, running, served
from conveyor.errors import StaleReport
from conveyor.protocol import AddTasks, GetWork, Release, TaskDone, TaskSpec, WorkAnswer
from conveyor.server.app import GROUP_MAX, SchedulerService, _saves_stakeholders
from conveyor.server.stores import MemoryStore, Unstored
from conveyor.testing.processes import wait_for

pytestmark = pytest.mark.timeout(60)


def _batched(
    service: SchedulerService, requests: list[Any], fn: Callable[[Any], Any] | None = None
) -> list[Any]:
    """Queue every request with ``call_async`` in one turn of one loop, through ``fn``
    (default the scheduler's own dispatcher): they make one batch. What each returned or
    raised."""

    async def main() -> list[Any]:
        calls = [service.call_async(fn or service.core.call, request) for request in requests]
        every = asyncio.gather(*calls, return_exceptions=True)
        return await asyncio.wait_for(every, 30)

    return asyncio.run(main())


def test_queued_calls_are_committed_in_one_transaction_each_with_its_own_answer(
    tmp_path: Path,
) -> None:
    service, store = served(tmp_path)
    try:
        results = _batched(service, asks())
        assert all(isinstance(r, WorkAnswer) and r.work is not None for r in results), results
        handed = [r.work.task_id for r in results]
        assert len(set(handed)) == len(handed)  # (each caller its own task)
        # the registration, then every call in one save
        assert len(store.saves) == 2 and store.saves[1] >= CALLERS + 1
        assert running(service, tmp_path) == sorted(handed)
    finally:
        service.close(1)


@pytest.mark.parametrize(
    ("raised", "answered", "says"),
    [
        (RuntimeError("a fault half way"), RuntimeError, "a fault half way"),
        (SystemExit(1), Unstored, "interrupted (SystemExit)"),
    ],
    ids=["exception", "system-exit"],
)
def test_a_fault_in_a_batch_undoes_the_calls_before_it_and_not_those_after(
    tmp_path: Path, raised: BaseException, answered: type[Exception], says: str
) -> None:
    """A call that raises half way is undone, and so are the calls applied before it in its
    batch (the state is reloaded: they are answered 503); the calls after it are kept. An
    exception is the call's own answer (500); a SystemExit is not the loop's to raise: 503."""
    service, _ = served(tmp_path)
    requests = asks()
    faulty = requests[2]

    def dispatch(request: Any) -> Any:
        answer = service.core.call(request)
        if request is faulty:
            raise raised
        return answer

    try:
        results = _batched(service, requests, dispatch)
        before = results[:2]
        assert all(isinstance(r, Unstored) for r in before), before  # undone by the reload
        assert isinstance(results[2], answered) and says in str(results[2])
        after = results[3:]
        assert all(isinstance(r, WorkAnswer) and r.work is not None for r in after), after
        assert running(service, tmp_path) == sorted(r.work.task_id for r in after)
    finally:
        service.close(1)


def test_a_failed_commit_answers_every_call_of_its_batch_unstored(tmp_path: Path) -> None:
    service, store = served(tmp_path, fail_from=1)  # the registration is saved, the batch not
    try:
        results = _batched(service, asks())
        assert all(isinstance(r, Unstored) for r in results), results
        assert "database or disk is full" in str(results[0])
        assert store.saves == [CALLERS + 1, -1]
        assert running(service, tmp_path) == []  # nothing kept
    finally:
        service.close(1)


def test_a_stale_report_in_a_batch_is_raised_to_its_sender_alone(tmp_path: Path) -> None:
    service, _ = served(tmp_path)
    try:
        first = service.call(service.core.call, GetWork("w0", assistant=True))
        assert isinstance(first, WorkAnswer) and first.work is not None
        stale = TaskDone("w0", first.work.task_id, attempt=first.work.attempt + 1)
        results = _batched(service, [GetWork("w1", assistant=True), stale, *asks()[2:]])
        assert isinstance(results[1], StaleReport)
        others = [results[0], *results[2:]]
        assert all(isinstance(r, WorkAnswer) and r.work is not None for r in others), others
        assert first.work.task_id in running(service, tmp_path)  # (the report changed nothing)
    finally:
        service.close(1)


def test_close_lets_the_batch_in_hand_finish_then_refuses_later_calls(tmp_path: Path) -> None:
    """close() while a batch is being applied: the whole batch is committed and answered
    before the store is closed; a call made after close() is refused (503). (A call queued
    before close() whose batch begins after it: the next test.)"""
    service, _ = served(tmp_path)
    closing = threading.Thread(target=service.close, args=(1,))

    def close_meanwhile(request: Any) -> Any:  # (the first call of the batch)
        if closing.ident is None:
            closing.start()
            wait_for(lambda: service._closed, 30, "close() began")
        return service.core.call(request)

    results = _batched(service, asks()[:4], close_meanwhile)
    closing.join(30)
    assert not closing.is_alive()
    assert all(isinstance(r, WorkAnswer) and r.work is not None for r in results), results
    handed = sorted(r.work.task_id for r in results)
    assert running(service, tmp_path) == handed  # (stored before close() closed the store)

    async def late() -> Any:
        return await service.call_async(service.core.call, GetWork("late", assistant=True))

    with pytest.raises(Unstored, match="shutting down"):
        asyncio.run(late())


def test_a_call_queued_before_close_and_applied_after_is_refused(tmp_path: Path) -> None:
    service, _ = served(tmp_path)

    async def main() -> Any:
        call = asyncio.ensure_future(
            service.call_async(service.core.call, GetWork("w0", assistant=True))
        )
        await asyncio.sleep(0)  # (the call is queued in this turn: its batch runs in the next)
        assert service._queued, "the call was not queued"
        service.close(1)
        return await asyncio.wait_for(asyncio.gather(call, return_exceptions=True), 30)

    (answer,) = asyncio.run(main())
    assert isinstance(answer, Unstored) and "shutting down" in str(answer)


class ProbeExits(CountingStore):
    """A store whose first probe (after a failed save) raises SystemExit, as a store plugin
    may, and which then works again."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, fail_from=1)
        self.probes = 0

    def probe(self) -> None:
        self.probes += 1
        if self.probes == 1:
            raise SystemExit(3)
        self.fail_from = None  # (writable again)
        super().probe()


def test_what_escapes_a_batch_answers_it_503_and_the_loop_goes_on(tmp_path: Path) -> None:
    """A SystemExit from the store's probe escapes the policy's error handling: its batch is
    answered 503 (nothing acknowledged), and the next calls are served."""
    service, _ = served(tmp_path, ProbeExits(tmp_path / "state.db"))
    core = service.core

    async def ask(worker: str) -> Any:
        try:
            return await asyncio.wait_for(
                service.call_async(core.call, GetWork(worker, assistant=True)), 30
            )
        except Unstored as exc:
            return exc

    async def three() -> list[Any]:  # (one after the other, on one loop)
        return [await ask(worker) for worker in ("w1", "w2", "w3")]

    try:
        first, second, third = asyncio.run(three())
        assert isinstance(first, Unstored) and "disk is full" in str(first)  # the save fails
        # the probe raises SystemExit: 503, not a hang
        assert isinstance(second, Unstored) and "SystemExit" in str(second)
        # the probe works: the state reloaded, work handed out
        assert isinstance(third, WorkAnswer) and third.work is not None
        assert running(service, tmp_path) == [third.work.task_id]
    finally:
        service.close(1)


def test_while_another_thread_holds_the_lock_a_thread_applies_the_calls_not_the_loop(
    tmp_path: Path,
) -> None:
    """The loop never waits for the lock: while another thread holds it (a web UI action, the
    tick), the turn's calls go to a thread of the pool, the loop goes on serving, and the
    calls are committed and answered once the lock is free."""
    service, store = served(tmp_path)
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with service.lock:
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()

    async def main() -> tuple[list[Any], int]:
        calls = asyncio.ensure_future(
            asyncio.gather(
                *(service.call_async(service.core.call, request) for request in asks()[:3])
            )
        )
        turns = 0
        while turns < 50:  # (the loop turns while the calls wait: it is not blocked)
            await asyncio.sleep(0)
            turns += 1
        assert not calls.done()  # (the lock is still held: nothing answered yet)
        release.set()
        return await asyncio.wait_for(calls, 30), turns

    try:
        assert held.wait(30)
        results, turns = asyncio.run(main())
        assert turns == 50
        assert all(isinstance(r, WorkAnswer) and r.work is not None for r in results), results
        assert running(service, tmp_path) == sorted(r.work.task_id for r in results)
        assert len(store.saves) == 2  # (the registration, then the three in one save)
    finally:
        release.set()
        thread.join(30)
        service.close(1)


def test_more_calls_in_a_turn_than_a_batch_takes_are_all_committed_and_answered(
    tmp_path: Path,
) -> None:
    service, store = served(tmp_path)
    many = [GetWork(f"x{i}", assistant=True) for i in range(GROUP_MAX + 3)]
    try:
        results = _batched(service, many)
        assert sum(isinstance(r, WorkAnswer) for r in results) == len(many), results
        assert len(store.saves) == 3  # (the registration, then 16 calls and 3 in two saves)
        handed = [r.work.task_id for r in results if r.work is not None]
        assert len(handed) == CALLERS + 1  # (every task, each once)
        assert running(service, tmp_path) == sorted(handed)
    finally:
        service.close(1)


def test_a_call_that_raises_stop_iteration_is_answered_and_so_are_the_others(
    tmp_path: Path,
) -> None:
    """StopIteration, which an asyncio future cannot hold, reaches its caller as a
    RuntimeError; the other calls of its turn, in its batch and after, are answered."""
    service, _ = served(tmp_path)
    many = [GetWork(f"x{i}", assistant=True) for i in range(GROUP_MAX + 3)]
    odd = many[1]

    def dispatch(request: Any) -> Any:
        if request is odd:
            raise StopIteration("nothing left")
        return service.core.call(request)

    try:
        results = _batched(service, many, dispatch)
        assert isinstance(results[1], RuntimeError) and "StopIteration" in str(results[1])
        assert isinstance(results[0], Unstored)  # (applied before it, undone by the reload)
        rest = results[2:]
        assert all(isinstance(r, WorkAnswer) for r in rest), rest
    finally:
        service.close(1)


class ReloadExits(CountingStore):
    """A store whose reload raises SystemExit while ``exit_on_load`` is set."""

    exit_on_load = False

    def load_records(self) -> Any:
        if self.exit_on_load:
            raise SystemExit(3)
        return super().load_records()


def test_after_a_reload_that_failed_half_way_nothing_is_answered_from_memory(
    tmp_path: Path,
) -> None:
    """A call interrupted half way whose undoing reload is interrupted too: its batch is
    answered 503, and until a reload succeeds even a read is refused rather than answered
    from a memory that holds the half-made change; then both agree again."""
    store = ReloadExits(tmp_path / "state.db")
    service, _ = served(tmp_path, store)
    core = service.core

    def interrupted(request: Any) -> Any:
        core.call(request)  # (hands out a task in memory)
        store.exit_on_load = True
        raise SystemExit(1)

    async def ask(fn: Callable[[Any], Any]) -> Any:
        try:
            return await service.call_async(fn, GetWork("w1", assistant=True))
        except Unstored as exc:
            return exc

    try:
        answer = asyncio.run(ask(interrupted))
        assert isinstance(answer, Unstored)
        with pytest.raises(Unstored):
            service.query(core.statuses, [f"t{i}" for i in range(CALLERS + 1)])
        store.exit_on_load = False
        later = asyncio.run(ask(core.call))  # reloads first, then hands out
        assert isinstance(later, WorkAnswer) and later.work is not None
        assert running(service, tmp_path) == [later.work.task_id]
    finally:
        service.close(1)


class WhereCalled(CountingStore):
    """A store that fails its first batch's save (after the registration), then works, and
    records the thread each probe and reload runs on."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, fail_from=1)
        self.calls: list[tuple[str, str]] = []

    def probe(self) -> None:
        self.calls.append(("probe", threading.current_thread().name))
        self.fail_from = None  # (writable again)
        super().probe()

    def load_records(self) -> Any:
        self.calls.append(("load", threading.current_thread().name))
        return super().load_records()


def test_while_the_store_refuses_writes_the_probe_and_the_reload_are_not_on_the_loop(
    tmp_path: Path,
) -> None:
    """A commit that fails on the loop is rolled back there (documented); the next call, which
    must probe the store and reload the state first, goes to a thread of the pool."""
    store = WhereCalled(tmp_path / "state.db")
    service, _ = served(tmp_path, store)
    core = service.core

    async def ask(worker: str) -> Any:
        try:
            return await service.call_async(core.call, GetWork(worker, assistant=True))
        except Unstored as exc:
            return exc

    async def both() -> tuple[Any, Any, str]:
        first = await ask("w1")  # (its commit fails: rolled back on the loop)
        second = await ask("w2")
        return first, second, threading.current_thread().name

    try:
        first, second, loop_thread = asyncio.run(both())
        assert isinstance(first, Unstored) and "disk is full" in str(first)
        assert isinstance(second, WorkAnswer) and second.work is not None
        probes = [thread for kind, thread in store.calls if kind == "probe"]
        assert probes and loop_thread not in probes, store.calls
        assert store.calls[0] == ("load", loop_thread)  # (the rollback of the failed commit)
        assert [kind for kind, _ in store.calls].count("load") == 2, store.calls
        assert store.calls[-1][1] != loop_thread, store.calls  # (the recovery's reload)
        assert running(service, tmp_path) == [second.work.task_id]
    finally:
        service.close(1)


def test_a_turn_larger_than_a_batch_handed_to_a_thread_is_applied_in_order(
    tmp_path: Path,
) -> None:
    """While another thread holds the lock, a turn of more calls than a batch takes goes to a
    thread as a whole: every call is answered, the batches committed one after the other, in
    the order the calls came (the first calls get the tasks)."""
    service, store = served(tmp_path)
    many = [GetWork(f"x{i}", assistant=True) for i in range(GROUP_MAX + 3)]

    async def main() -> list[Any]:
        calls = asyncio.gather(*(service.call_async(service.core.call, r) for r in many))
        gathered = asyncio.ensure_future(calls)
        for _ in range(3):  # (the turn that queues them, the one that hands them over)
            await asyncio.sleep(0)
        assert not service._queued and not gathered.done()  # (handed over, waiting)
        service.lock.release()  # (taken below, before the loop started)
        return await asyncio.wait_for(gathered, 30)

    try:
        service.lock.acquire()
        results = asyncio.run(main())
        assert all(isinstance(r, WorkAnswer) for r in results), results
        got = [i for i, r in enumerate(results) if r.work is not None]
        assert got == list(range(CALLERS + 1)), got
        assert len(store.saves) == 3  # (the registration, then two batches)
    finally:
        service.close(1)


def test_turns_that_wait_for_the_lock_share_one_thread_and_keep_their_order(
    tmp_path: Path,
) -> None:
    """While another thread holds the lock for long (a reload at a take-over), each turn's
    calls go to the one thread already waiting with the earlier turns', not to a thread each:
    with a pool of two threads and nine such turns, a function sent to the pool meanwhile
    still runs (the plugins' deliveries and the web UI's poll for changes share that pool).
    Once the lock is free every call is answered, in the order the turns came (the first get
    the tasks)."""
    service, _ = served(tmp_path)
    many = [GetWork(f"x{i}", assistant=True) for i in range(CALLERS + 3)]

    async def main() -> tuple[list[Any], str]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(2))
        waiting = []
        for request in many:  # (a turn each: queued, then handed over)
            waiting.append(asyncio.ensure_future(service.call_async(service.core.call, request)))
            for _ in range(3):
                await asyncio.sleep(0)
        assert not any(call.done() for call in waiting)
        meanwhile = await asyncio.wait_for(asyncio.to_thread(lambda: "ran"), 60)
        service.lock.release()  # (taken below, before the loop started)
        return await asyncio.wait_for(asyncio.gather(*waiting), 60), meanwhile

    try:
        service.lock.acquire()
        results, meanwhile = asyncio.run(main())
        assert meanwhile == "ran"
        assert all(isinstance(r, WorkAnswer) for r in results), results
        got = [i for i, r in enumerate(results) if r.work is not None]
        assert got == list(range(CALLERS + 1)), got
        assert not service._handed  # (the thread let go once it had nothing left)
    finally:
        service.close(1)


def test_a_stale_report_in_a_batch_whose_commit_fails_is_answered_unstored(
    tmp_path: Path,
) -> None:
    """A refused report's answer stands only once what it saw is stored: when its batch's
    commit fails, its sender is answered 503 like the others."""
    service, store = served(tmp_path)
    try:
        first = service.call(service.core.call, GetWork("w0", assistant=True))
        assert isinstance(first, WorkAnswer) and first.work is not None
        stale = TaskDone("w0", first.work.task_id, attempt=first.work.attempt + 1)
        store.fail_from = len(store.saves)  # (the batch's save fails)
        results = _batched(service, [GetWork("w1", assistant=True), stale])
        assert all(isinstance(r, Unstored) for r in results), results
    finally:
        service.close(1)


def test_a_turn_that_cannot_be_handed_to_a_thread_is_answered_unstored(tmp_path: Path) -> None:
    """While the lock is held and the loop's pool refuses work (it is shutting down), the
    turn's calls are answered 503, never left waiting."""
    service, _ = served(tmp_path)

    def refuse(*_: Any) -> Any:
        raise RuntimeError("Executor shutdown has been called")

    async def main() -> list[Any]:
        asyncio.get_running_loop().run_in_executor = refuse  # type: ignore[method-assign]
        calls = (service.call_async(service.core.call, r) for r in asks()[:3])
        every = asyncio.gather(*calls, return_exceptions=True)
        return await asyncio.wait_for(every, 30)

    try:
        with service.lock:
            results = asyncio.run(main())
        assert all(isinstance(r, Unstored) for r in results), results
    finally:
        service.close(1)


def test_a_hand_over_that_fails_otherwise_leaves_the_next_turns_served(tmp_path: Path) -> None:
    """When handing a turn to a thread fails with another error than the pool's shutting down
    (a MemoryError, say), that turn's calls are answered 503 and nothing of the hand-over is
    left behind: the next turn, the lock free, is applied and answered as usual instead of
    waiting for a thread that never came."""
    service, _ = served(tmp_path)
    failed: list[str] = []

    async def main() -> tuple[Any, Any]:
        loop = asyncio.get_running_loop()
        real = loop.run_in_executor

        def once(*args: Any) -> Any:
            if not failed:
                failed.append("once")
                raise MemoryError("no memory for a thread")
            return real(*args)

        loop.run_in_executor = once  # type: ignore[method-assign]
        loop.set_exception_handler(lambda *_: None)  # (the MemoryError is the loop's to log)
        first = asyncio.gather(service.call_async(service.core.call, asks()[0]))
        (refused,) = await asyncio.wait_for(asyncio.gather(first, return_exceptions=True), 30)
        service.lock.release()  # (taken below, before the loop started)
        served_next = await asyncio.wait_for(service.call_async(service.core.call, asks()[1]), 30)
        return refused, served_next

    try:
        service.lock.acquire()
        refused, served_next = asyncio.run(main())
        assert failed == ["once"]
        assert isinstance(refused, Unstored), refused
        assert isinstance(served_next, WorkAnswer) and served_next.work is not None
        assert not service._handed
    finally:
        service.close(1)


def test_a_store_that_overrides_save_sees_stakeholder_changes_there(tmp_path: Path) -> None:
    """A subclass of the SQLite store that overrides ``save`` alone (to count, or to fail) is
    given a second worker's registration and a release as whole rows through it, not through
    the ``save_stakeholders`` it inherits: failing there, they are refused, not acknowledged."""
    service, store = served(tmp_path, fail_from=1)
    try:
        specs = tuple(TaskSpec(f"t{i}", family="F") for i in range(CALLERS + 1))
        with pytest.raises(Unstored, match="database or disk is full"):
            service.call(service.core.call, AddTasks("w2", specs))
        with pytest.raises(Unstored, match="database or disk is full"):
            service.call(service.core.call, Release("w", ("t0",)))
        assert store.saves[0] == CALLERS + 1 and store.saves[1:] and set(store.saves[1:]) == {-1}
    finally:
        service.close(1)


def test_which_stores_are_given_stakeholders_apart(tmp_path: Path) -> None:
    """Only a store whose class sets stakeholders in place, below or beside its own save, is
    given them apart; a subclass overriding save alone, a save set on the object, and a proxy
    that has the methods of another through __getattr__ (its save may check a lease the
    other does not know) are given whole rows through their save."""

    class Proxy:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def save(self, *args: Any, **kwargs: Any) -> None:
            self.inner.save(*args, **kwargs)

    plain = MemoryStore()
    patched = MemoryStore()
    patched.save = plain.save  # type: ignore[method-assign]
    counting = CountingStore(tmp_path / "state.db")
    try:
        assert _saves_stakeholders(plain) is plain
        assert _saves_stakeholders(counting) is None
        assert _saves_stakeholders(patched) is None
        assert _saves_stakeholders(Proxy(plain)) is None  # type: ignore[arg-type]
    finally:
        for store in (plain, patched, counting):
            store.close()
