"""What the web UI needs from the state store, beyond what the API tests see: change numbers
that are unique and never go back, reads that never wait for the writer (the memory store
included), edges that follow every change of a task's dependencies, rows that did not change
not being written again; and the attempt history corrected by a late report, and a worker that
talks to a server older than the attempt history.

Real SQLite files in tmp_path, a real HTTP server on loopback standing in for an older
scheduler; nothing is mocked.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conveyor.config import SchedulerSettings
from conveyor.errors import ConveyorError
from conveyor.protocol import (
    AttemptEnd,
    TaskEntry,
    TaskFailed,
    TaskFilters,
    TaskSpec,
    TaskStatus,
)
from conveyor.scheduler.persist import to_row
from conveyor.scheduler.policy import SchedulerCore, TaskRecord
from conveyor.server.stores import CanListIds, MemoryStore, SqliteStore, StoreContext, matches
from conveyor.testing import FakeClock
from conveyor.transports.base import TransportContext
from conveyor.transports.http import HttpTransport


def _row(task_id: str, deps: tuple[str, ...] = (), message: str = "") -> dict[str, Any]:
    record = TaskRecord(task_id=task_id, seq=1, family="F", registered=True, deps=deps)
    record.status_message = message
    return to_row(record)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    """A loaded SQLite store in tmp_path."""
    opened = SqliteStore(StoreContext(str(tmp_path / "state.db")))
    opened.load()
    yield opened
    opened.close()


def _latest(store: SqliteStore) -> int:
    return store.changes_since(0, 0).seq


def _every_entry(store: SqliteStore, limit: int) -> list[TaskEntry]:
    """The whole task list, read page by page (``limit`` a page)."""
    seen: list[TaskEntry] = []
    cursor = None
    while True:
        page = store.page(TaskFilters(), cursor, limit)
        seen += page.tasks
        if page.next is None:
            return seen
        cursor = page.next


def test_change_numbers_stay_unique_while_the_ui_reads(store: SqliteStore) -> None:
    """Saves numbered while another thread reads all the time: every row has its own change
    number, and paging the list visits every task once."""
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            store.changes_since(0, 0)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for batch in range(60):
            store.save([_row(f"T{batch}-{i}") for i in range(50)], [])
    finally:
        stop.set()
        thread.join(10)
    entries = _every_entry(store, 7)
    rows, distinct = len(entries), len({e.seq for e in entries})
    assert rows == distinct == 3000
    seen = [e.task_id for e in entries]
    assert len(seen) == len(set(seen)) == 3000


def test_the_change_number_grows_with_removals_and_across_restarts(tmp_path: Path) -> None:
    """Removing a task is a change the page must see; the highest task's removal does not
    hand its number out again, and neither does a restart."""
    path = str(tmp_path / "state.db")
    store = SqliteStore(StoreContext(path))
    store.load()
    store.save([_row("a"), _row("b")], [])
    before = _latest(store)
    store.save([], [], gone_tasks=["b"])
    after_removal = _latest(store)
    assert after_removal > before
    store.save([_row("c")], [])
    assert _latest(store) > after_removal
    last = _latest(store)
    store.close()
    again = SqliteStore(StoreContext(path))
    again.load()
    try:
        assert _latest(again) == last
        again.save([_row("d")], [])
        numbers = [e.seq for e in _every_entry(again, 500)]
        assert len(numbers) == len(set(numbers)) and max(numbers) > last
    finally:
        again.close()


def test_a_row_that_did_not_change_is_not_written_again(store: SqliteStore) -> None:
    """Saving the same row again is no change (a worker re-registering its graph); a row
    that did change is a new change."""
    store.save([_row("a", message="one")], [])
    first = _latest(store)
    store.save([_row("a", message="one")], [])
    assert _latest(store) == first
    store.save([_row("a", message="two")], [])
    assert _latest(store) == first + 1


@pytest.mark.parametrize("store_kind", ["sqlite", "memory"])
def test_a_read_never_waits_for_the_writer(tmp_path: Path, store_kind: str) -> None:
    """While a (slow) UI read is in progress on one thread, a save on another completes: the
    two do not share a lock, with either built-in store."""
    opened: SqliteStore = (
        MemoryStore()
        if store_kind == "memory"
        else SqliteStore(StoreContext(str(tmp_path / "s.db")))
    )
    opened.load()
    reading, release = threading.Event(), threading.Event()

    def slow_read() -> None:
        def hold(db: Any) -> None:
            db.execute("SELECT count(*) FROM tasks").fetchone()
            reading.set()
            release.wait(30)

        opened._read(hold)  # (the store's own connection: a read held open half way)

    thread = threading.Thread(target=slow_read)
    thread.start()
    try:
        assert reading.wait(10)
        saved = threading.Event()
        writer = threading.Thread(target=lambda: (opened.save([_row("w")], []), saved.set()))
        writer.start()
        assert saved.wait(10), "a save waited for a read"
        writer.join(10)
    finally:
        release.set()
        thread.join(10)
        opened.close()


def test_the_memory_store_leaves_nothing_behind() -> None:
    """Closing the memory store removes its database."""
    memory = MemoryStore()
    memory.load()
    memory.save([_row("x")], [])
    where = Path(memory._path).parent
    assert where.exists()
    memory.close()
    assert not where.exists()


_DEPS = "abcde"


def _edges(store: SqliteStore, task_id: str) -> set[str]:
    """The dependencies of ``task_id`` as the edges table has them, read through
    ``TaskReads``: each of :data:`_DEPS` (saved tasks) whose dependents (read from the edges
    table) name it."""
    found = set()
    for dep in _DEPS:
        detail = store.detail(dep)
        assert detail is not None, dep
        if task_id in {ref.task_id for ref in detail.dependents}:
            found.add(dep)
    return found


def test_edges_follow_every_change_of_the_dependencies(store: SqliteStore) -> None:
    """Merged (appended), replaced, reordered and emptied dependencies, and a removed task:
    the edges table always holds exactly the row's dependencies."""
    store.save([_row(dep) for dep in _DEPS], [])
    for deps in [("a",), ("a", "b", "c"), ("c", "d"), ("d", "c"), (), ("e",)]:
        store.save([_row("t", deps)], [])
        assert _edges(store, "t") == set(deps), deps
    store.save([], [], gone_tasks=["t"])
    assert _edges(store, "t") == set()


def test_edges_are_right_after_a_restart(tmp_path: Path) -> None:
    """The store's memory of what the edges table holds is rebuilt by load(): a change of
    dependencies after a restart replaces the stored edges."""
    path = str(tmp_path / "state.db")
    first = SqliteStore(StoreContext(path))
    first.load()
    first.save([_row(dep) for dep in _DEPS], [])
    first.save([_row("t", ("a", "b"))], [])
    first.close()
    second = SqliteStore(StoreContext(path))
    second.load()
    try:
        second.save([_row("t", ("b", "c"))], [])
        assert _edges(second, "t") == {"b", "c"}
    finally:
        second.close()


def test_a_late_failure_report_corrects_the_history() -> None:
    """A worker declared gone has its attempt recorded process_died; when its own report of
    that attempt (timed out) arrives after all, history and explanation say so, and the
    failure is not counted twice."""
    clock = FakeClock(1000.0)
    core = SchedulerCore(worker_disconnect_delay=10, retry_delay=3600, clock=clock.time)
    core.keep_history = True  # (as the central server does)
    core.add_tasks("w1", [TaskSpec("t", "F", "m")])
    work = core.get_work("w1")
    assert work is not None
    clock.advance(30)
    core.statuses(())  # the silent worker is declared gone
    record = core._tasks["t"]
    assert record.status == TaskStatus.FAILED
    assert record.attempts is not None and record.attempts[-1].outcome == AttemptEnd.PROCESS_DIED
    failures = len(record.failures or ())
    status = core.task_failed("w1", "t", "timed out after 5 s", work.attempt, AttemptEnd.TIMED_OUT)
    assert status == TaskStatus.FAILED
    assert record.attempts[-1].outcome == AttemptEnd.TIMED_OUT
    assert record.explanation == "timed out after 5 s"
    assert len(record.failures or ()) == failures


class _OldScheduler(BaseHTTPRequestHandler):
    """An HTTP endpoint standing in for a scheduler older than the attempt history: it
    refuses a task_failed that names an outcome, the way its strict decoding did."""

    bodies: list[dict[str, Any]] = []

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        if "outcome" in body:
            status, answer = 422, {"error": "outcome: unknown field", "field": "outcome"}
        else:
            status, answer = 200, {"status": "FAILED"}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_a_worker_reports_failures_to_a_server_that_predates_outcomes() -> None:
    """A plain failure is sent without an outcome (a field at its default is left out), so
    a server older than the field takes it; a timed-out one names its outcome, which such a
    server refuses (422): the rule is that a newer worker talks to an older server while it
    uses no field the server lacks, with no retry guessed from the error's text."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OldScheduler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _OldScheduler.bodies = []
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        settings = SchedulerSettings(transport="http", url=url, rpc_retries=1)
        transport = HttpTransport(TransportContext(scheduler=settings))
        answer = transport.call(TaskFailed("w", "a", "boom", 1))
        assert answer.status == TaskStatus.FAILED
        assert "outcome" not in _OldScheduler.bodies[-1]
        with pytest.raises(ConveyorError, match="HTTP 422 outcome: unknown field"):
            transport.call(TaskFailed("w", "b", "slow", 2, AttemptEnd.TIMED_OUT))
        assert [("outcome" in b) for b in _OldScheduler.bodies] == [False, True]
    finally:
        server.shutdown()
        server.server_close()


def test_the_memory_store_of_a_killed_process_is_swept() -> None:
    """A server killed before it could close its memory store leaves its directory behind;
    the next memory store made on the machine removes it (its process is gone)."""
    import os
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(30)
    first = MemoryStore()
    where = Path(first._path).parent.parent
    first.close()
    leftover = where / f"conveyor-memory-{gone.pid}-abc123"
    leftover.mkdir()
    (leftover / "state.db").write_text("x")
    mine = where / f"conveyor-memory-{os.getpid()}-keep"
    mine.mkdir()
    try:
        second = MemoryStore()
        second.close()
        assert not leftover.exists()
        assert mine.exists()  # (a live process's store stays)
    finally:
        mine.rmdir()


def _filter_row(i: int) -> dict[str, Any]:
    """Row ``i`` of a mix: every state, three families, two workers, a public and a secret
    parameter, and every seventh unregistered."""
    states = list(TaskStatus)
    record = TaskRecord(
        task_id=f"Mix_{i}",
        seq=i + 1,
        family=f"Fam{i % 3}",
        params={"region": f"eu-{i % 4}", "password": f"eu-{i % 5}-hidden"},
        status=states[i % len(states)],
        worker=f"w{i // 4 % 2}" if i % 4 == 0 else None,
        registered=i % 7 != 0,
    )
    return to_row(record)


@pytest.mark.parametrize("store_kind", ["sqlite", "memory"])
def test_task_ids_lists_exactly_what_the_pages_list(tmp_path: Path, store_kind: str) -> None:
    """The built-in stores list every id a filter matches in one read (``CanListIds``): for
    each filter, the ids of ``matches`` over the rows, in the order paging the list gives
    (newest change first), registered tasks only; a row saved again is listed once."""
    opened = (
        SqliteStore(StoreContext(str(tmp_path / "state.db")))
        if store_kind == "sqlite"
        else MemoryStore()
    )
    try:
        assert isinstance(opened, CanListIds)
        opened.load()
        rows = [_filter_row(i) for i in range(700)]
        opened.save(rows[:400], [])
        opened.save(rows[400:], [])
        opened.save([{**rows[3], "status_message": "saved again"}], [])  # moves to the top
        grid = [
            TaskFilters(),
            TaskFilters(state=TaskStatus.FAILED),
            TaskFilters(state=TaskStatus.FAILED, family="Fam1"),
            TaskFilters(worker="w0"),
            TaskFilters(state=TaskStatus.PENDING, worker="w1", family="Fam0"),
            TaskFilters(text="EU-3"),
            TaskFilters(text="hidden"),  # a secret parameter's value is not searched
            TaskFilters(family="Nope"),
        ]
        for filters in grid:
            paged: list[str] = []
            cursor = None
            while True:
                page = opened.page(filters, cursor, 37)
                paged += (entry.task_id for entry in page.tasks)
                if page.next is None:
                    break
                cursor = page.next
            listed = opened.task_ids(filters)
            assert list(listed) == paged, filters
            expected = {row["task_id"] for row in rows if matches(row, filters)}
            assert set(listed) == expected and len(listed) == len(expected), filters
        assert len(opened.task_ids(TaskFilters(state=TaskStatus.FAILED))) == 100
        assert opened.task_ids(TaskFilters(text="hidden")) == ()
        assert opened.task_ids(TaskFilters())[0] == "Mix_3"
    finally:
        opened.close()
