"""The committer thread (``SchedulerService.call_async``, what the server's routes use): calls
queued while it works are applied and committed together, in one transaction, and each caller
gets its own answer, or what it is to raise, only once that commit is stored.

The store is SQLite on disk (real). To make calls meet for certain, the first call is held
inside its policy call until every other call is queued (polled, bounded): the committer then
takes all of them as its next batch.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from commit_support import CALLERS, CountingStore, asks, running, served
from conveyor.errors import StaleReport
from conveyor.protocol import GetWork, TaskDone, WorkAnswer
from conveyor.server.app import SchedulerService
from conveyor.server.stores import Unstored
from conveyor.testing.processes import wait_for

pytestmark = pytest.mark.timeout(60)


def _batched(
    service: SchedulerService, requests: list[Any], fn: Callable[[Any], Any] | None = None
) -> list[Any]:
    """Queue every request with ``call_async`` on one loop: the first is held inside the
    policy until all the others are queued, so they make the committer's next batch; they go
    through ``fn`` (default the scheduler's own dispatcher). What each returned or raised."""
    core_call = service.core.call
    inside = threading.Event()

    def held(request: Any) -> Any:
        inside.set()
        wait_for(lambda: service._queued.qsize() >= len(requests) - 1, 30, "all queued", 0.005)
        return core_call(request)

    async def main() -> list[Any]:
        first = asyncio.ensure_future(service.call_async(held, requests[0]))
        assert await asyncio.to_thread(inside.wait, 30), "the first call never got in"
        calls = [service.call_async(fn or core_call, request) for request in requests[1:]]
        every = asyncio.gather(first, *calls, return_exceptions=True)
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
        # the registration, the held call alone, then the other six in one save
        assert len(store.saves) == 3 and store.saves[2] >= CALLERS
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
        assert isinstance(results[0], WorkAnswer)  # (committed alone, before the batch)
        assert isinstance(results[1], Unstored)  # applied, then undone by the reload
        assert isinstance(results[2], answered) and says in str(results[2])
        after = results[3:]
        assert all(isinstance(r, WorkAnswer) and r.work is not None for r in after), after
        kept = sorted([results[0].work.task_id, *(r.work.task_id for r in after)])
        assert running(service, tmp_path) == kept
    finally:
        service.close(1)


def test_a_failed_commit_answers_every_call_of_its_batch_unstored(tmp_path: Path) -> None:
    service, store = served(tmp_path, fail_from=2)  # the held call's save works, the next not
    try:
        results = _batched(service, asks())
        assert isinstance(results[0], WorkAnswer) and results[0].work is not None
        assert all(isinstance(r, Unstored) for r in results[1:]), results
        assert "database or disk is full" in str(results[1])
        assert store.saves[-1] == -1
        assert running(service, tmp_path) == [results[0].work.task_id]  # nothing else kept
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


def test_close_answers_what_was_queued_and_refuses_later_calls(tmp_path: Path) -> None:
    """close() while calls wait in the queue: each of them is applied, committed and answered
    before the committer stops; a call after close() is refused, never left waiting."""
    service, _ = served(tmp_path)
    closing = threading.Thread(target=service.close, args=(1,))

    def close_meanwhile(request: Any) -> Any:  # (the others are queued by now: see _batched)
        if not closing.is_alive() and closing.ident is None:
            closing.start()
            wait_for(lambda: service._closed, 30, "close() began")
        return service.core.call(request)

    results = _batched(service, asks()[:4], close_meanwhile)
    closing.join(30)
    assert not closing.is_alive()
    assert all(isinstance(r, WorkAnswer) and r.work is not None for r in results), results
    handed = sorted(r.work.task_id for r in results)
    assert running(service, tmp_path) == handed  # (stored before close() went on)
    committer = service._committer
    assert committer is not None and not committer.is_alive()

    async def late() -> Any:
        return await service.call_async(service.core.call, GetWork("late", assistant=True))

    with pytest.raises(Unstored, match="shutting down"):
        asyncio.run(late())


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


def test_what_escapes_a_batch_answers_it_503_and_the_committer_goes_on(tmp_path: Path) -> None:
    """A SystemExit from the store's probe escapes the policy's error handling: its batch is
    answered 503 (nothing acknowledged) and the committer thread serves the next calls."""
    service, _ = served(tmp_path, ProbeExits(tmp_path / "state.db"))
    core = service.core

    async def ask(worker: str) -> Any:
        try:
            return await asyncio.wait_for(
                service.call_async(core.call, GetWork(worker, assistant=True)), 30
            )
        except Unstored as exc:
            return exc

    try:
        first = asyncio.run(ask("w1"))  # the save fails: 503
        assert isinstance(first, Unstored) and "disk is full" in str(first)
        second = asyncio.run(ask("w2"))  # the probe raises SystemExit: 503, not a hang
        assert isinstance(second, Unstored) and "SystemExit" in str(second)
        assert service._committer is not None and service._committer.is_alive()
        third = asyncio.run(ask("w3"))  # the probe works: the state reloaded, work handed out
        assert isinstance(third, WorkAnswer) and third.work is not None
        assert running(service, tmp_path) == [third.work.task_id]
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
