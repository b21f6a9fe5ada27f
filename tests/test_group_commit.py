"""Group commit: calls that wait for the service's lock while another call holds it are
committed together, in one transaction, and none of them returns before that commit.

The store is SQLite on disk (real). To make the calls meet for certain, the store's first
save waits until every other caller is queued at the lock (polled, bounded); each test then
checks what each caller got and what the file holds.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from conveyor.errors import StaleReport
from conveyor.protocol import AddTasks, GetWork, TaskDone, TaskSpec
from conveyor.scheduler.policy import SchedulerCore
from conveyor.server.app import SchedulerService
from conveyor.server.stores import SqliteStore, StoreContext, Unstored
from conveyor.testing.processes import wait_for

pytestmark = pytest.mark.timeout(60)

CALLERS = 6


class GatedStore(SqliteStore):
    """SQLite whose first save waits until ``queued`` callers wait for the service's lock;
    ``fail_from`` makes the saves from that one on (0-based) fail as a full disk would."""

    def __init__(self, path: Path, fail_from: int | None = None) -> None:
        super().__init__(StoreContext(state_path=str(path)))
        self.service: SchedulerService | None = None
        self.queued = 0
        self.saves: list[int] = []  # rows in each save
        self.fail_from = fail_from

    def save(self, rows: Any, workers: Any, **kwargs: Any) -> None:
        rows = list(rows)
        if self.service is not None and len(self.saves) == 1:  # (0: the set-up)
            service = self.service
            wait_for(lambda: service._entering >= self.queued, 30, "every caller queued", 0.005)
        if self.fail_from is not None and len(self.saves) >= self.fail_from:
            self.saves.append(-1)
            raise sqlite3.OperationalError("database or disk is full")
        self.saves.append(len(rows))
        super().save(rows, workers, **kwargs)


def _served(tmp_path: Path, fail_from: int | None = None) -> tuple[SchedulerService, GatedStore]:
    store = GatedStore(tmp_path / "state.db", fail_from)
    core = SchedulerCore()
    service = SchedulerService(core, store)
    specs = tuple(TaskSpec(f"t{i}", family="F") for i in range(CALLERS + 1))
    service.call(core.call, AddTasks("w", specs))
    store.service = service
    store.queued = CALLERS
    return service, store


def _together(service: SchedulerService, requests: list[Any]) -> list[Any]:
    """Run each request in a thread of its own, the first one first (it holds the lock
    while the others queue); what each returned or raised, in order."""
    results: list[Any] = [None] * len(requests)

    def one(i: int) -> None:
        try:
            results[i] = service.call(service.core.call, requests[i])
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    threads[0].start()
    wait_for(service.lock.locked, 30, "the first caller in", 0.005)
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a caller never returned"
    return results


def _stored_statuses(path: Path) -> dict[str, str]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT task_id, status FROM tasks").fetchall())
    finally:
        db.close()


def test_queued_calls_are_committed_in_one_transaction_and_each_gets_its_own_answer(
    tmp_path: Path,
) -> None:
    service, store = _served(tmp_path)
    try:
        requests = [GetWork(f"w{i}", assistant=True) for i in range(CALLERS + 1)]
        results = _together(service, requests)
        handed = [r.work.task_id for r in results]
        assert sorted(handed) == sorted(f"t{i}" for i in range(CALLERS + 1))  # one each
        # the set-up, the first call alone, then the six queued ones in one commit
        assert len(store.saves) == 3, store.saves
        assert store.saves[2] >= CALLERS  # (their six tasks, at least)
        stored = _stored_statuses(tmp_path / "state.db")
        assert all(stored[t] == "RUNNING" for t in handed)
    finally:
        store.close()


def test_a_failed_group_commit_acknowledges_none_of_its_calls(tmp_path: Path) -> None:
    service, store = _served(tmp_path, fail_from=2)  # the first call's commit succeeds
    try:
        requests = [GetWork(f"w{i}", assistant=True) for i in range(CALLERS + 1)]
        results = _together(service, requests)
        first, rest = results[0], results[1:]
        assert first.work is not None  # committed alone, before the failure
        assert all(isinstance(r, Unstored) for r in rest), rest
        assert all("disk is full" in str(r) for r in rest)
        # nothing of theirs is stored, and the state in memory was put back to the file's
        stored = _stored_statuses(tmp_path / "state.db")
        running = [t for t, s in stored.items() if s == "RUNNING"]
        assert running == [first.work.task_id]
        assert [i.task_id for i in service.core.task_list() if i.status == "RUNNING"] == running
    finally:
        store.close()


def test_a_refused_report_in_a_group_is_raised_to_its_caller_alone(tmp_path: Path) -> None:
    service, store = _served(tmp_path)
    try:
        requests: list[Any] = [GetWork(f"w{i}", assistant=True) for i in range(CALLERS)]
        requests.append(TaskDone("w0", "t0", attempt=12345))  # never handed out: refused
        results = _together(service, requests)
        assert isinstance(results[-1], StaleReport)
        assert all(r.work is not None for r in results[:-1])
        assert len(store.saves) == 3, store.saves
    finally:
        store.close()
