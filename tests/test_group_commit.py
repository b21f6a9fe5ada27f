"""Group commit: calls that wait for the service's lock while another call holds it are
committed together, in one transaction, and none of them returns before that commit.

The store is SQLite on disk (real). To make the calls meet for certain, the first call is held
inside its policy call (after the service has decided how to commit it) until every other
caller waits for the lock (polled, bounded); each test then checks what each caller got and
what the file holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from commit_support import CALLERS, asks, running, served, stored_statuses
from conveyor.errors import StaleReport
from conveyor.protocol import GetWork, TaskDone
from conveyor.server.app import NotLeader, SchedulerService
from conveyor.server.stores import Deposed, Unstored
from conveyor.testing.processes import wait_for

pytestmark = pytest.mark.timeout(60)


def _together(
    service: SchedulerService,
    requests: list[Any],
    others: Callable[[Any], Any] | None = None,
) -> list[Any]:
    """Run each request in a thread of its own: the first one is held inside the lock until
    all the others wait for it; the others go through ``others`` (default the scheduler's own
    dispatcher). What each returned or raised, in order."""
    results: list[Any] = [None] * len(requests)
    inside = threading.Event()
    core_call = service.core.call

    def held(request: Any) -> Any:
        inside.set()
        wait_for(lambda: service._entering >= len(requests) - 1, 30, "every caller queued", 0.005)
        return core_call(request)

    def one(i: int) -> None:
        try:
            results[i] = service.call(held if i == 0 else others or core_call, requests[i])
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    threads[0].start()
    assert inside.wait(30), "the first caller never got in"
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a caller never returned"
    return results


def _assert_only_running(service: SchedulerService, tmp_path: Path, task_id: str) -> None:
    """``task_id`` is the one RUNNING task, in the state file and in the scheduler alike."""
    assert running(service, tmp_path) == [task_id]


def test_queued_calls_are_committed_in_one_transaction_and_each_gets_its_own_answer(
    tmp_path: Path,
) -> None:
    service, store = served(tmp_path)
    try:
        results = _together(service, asks())
        handed = [r.work.task_id for r in results]
        assert sorted(handed) == sorted(f"t{i}" for i in range(CALLERS + 1))  # one each
        # the set-up, the first call alone, then the six queued ones in one commit
        assert len(store.saves) == 3, store.saves
        assert store.saves[2] >= CALLERS  # (their six tasks, at least)
        stored = stored_statuses(tmp_path / "state.db")
        assert all(stored[t] == "RUNNING" for t in handed)
    finally:
        store.close()


def test_a_failed_group_commit_acknowledges_none_of_its_calls(tmp_path: Path) -> None:
    service, store = served(tmp_path, fail_from=2)  # the first call's commit succeeds
    try:
        results = _together(service, asks())
        first, rest = results[0], results[1:]
        assert first.work is not None  # committed alone, before the failure
        assert all(isinstance(r, Unstored) for r in rest), rest
        assert all("disk is full" in str(r) for r in rest)
        # nothing of theirs is stored, and the state in memory was put back to the file's
        _assert_only_running(service, tmp_path, first.work.task_id)
    finally:
        store.close()


def test_a_refused_report_in_a_group_is_raised_to_its_caller_alone(tmp_path: Path) -> None:
    service, store = served(tmp_path)
    try:
        requests: list[Any] = asks()[:CALLERS]
        requests.append(TaskDone("w0", "t0", attempt=12345))  # never handed out: refused
        results = _together(service, requests)
        assert isinstance(results[-1], StaleReport)
        assert all(r.work is not None for r in results[:-1])
        assert len(store.saves) == 3, store.saves
    finally:
        store.close()


def test_a_fault_in_one_call_of_a_group_answers_the_others_unstored(tmp_path: Path) -> None:
    """The group's last call (nobody waiting behind it) raises half way: the whole state is
    put back to the file's, so the calls grouped before it, whose changes went with it, are
    not acknowledged either."""
    service, store = served(tmp_path)
    faulted: list[int] = []

    def last_one_faults(request: Any) -> Any:
        if service._entering == 0 and not faulted:  # (under the lock: the chain's last call)
            faulted.append(threading.get_ident())
            raise RuntimeError("a bug half way")
        return service.core.call(request)

    try:
        results = _together(service, asks(), last_one_faults)
        first, rest = results[0], results[1:]
        assert first.work is not None  # committed alone, first
        assert sum(isinstance(r, RuntimeError) for r in rest) == 1
        grouped = [r for r in rest if not isinstance(r, RuntimeError)]
        assert len(grouped) == CALLERS - 1
        assert all(isinstance(r, Unstored) for r in grouped), grouped
        _assert_only_running(service, tmp_path, first.work.task_id)
    finally:
        store.close()


def test_a_group_deposed_at_its_commit_is_told_not_leader_with_a_leader_field(
    tmp_path: Path,
) -> None:
    service, store = served(tmp_path, fail_from=2, fail_with=Deposed("another server leads"))
    try:
        results = _together(service, asks())
        assert results[0].work is not None
        for refused in results[1:]:
            assert isinstance(refused, NotLeader), refused
            assert refused.leader == ""  # (a URL or nothing: never the message itself)
    finally:
        store.close()


def test_a_save_interrupted_by_system_exit_acknowledges_nothing(tmp_path: Path) -> None:
    """A store that raises SystemExit (outside Exception) mid-commit: the grouped calls are
    not acknowledged, and the next call first reloads what the file holds."""
    service, store = served(tmp_path, fail_from=2, fail_with=SystemExit(3))
    try:
        results = _together(service, asks())
        first, rest = results[0], results[1:]
        assert first.work is not None
        assert any(isinstance(r, SystemExit) for r in rest)  # (the one that made the commit)
        assert all(isinstance(r, (SystemExit, Unstored)) for r in rest), rest
        store.fail_from = None
        running = [t for t, s in stored_statuses(tmp_path / "state.db").items() if s == "RUNNING"]
        assert running == [first.work.task_id]
        service.call(service.core.call, GetWork("later", assistant=True))  # reloads, then asks
        running_now = {i.task_id for i in service.core.task_list() if i.status == "RUNNING"}
        assert first.work.task_id in running_now and len(running_now) == 2
    finally:
        store.close()
