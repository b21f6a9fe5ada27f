"""The attempt history of a task (SPEC §9: the task detail's start, end, outcome and worker of
each attempt), as real workers cause it and a real scheduler keeps it.

Outcomes come from real ``python -m conveyor run`` workers talking HTTP to a real
``conveyor scheduler`` subprocess, under the executors that produce them: a success, a raised
exception, a ``worker_timeout`` overrun, a task process killed by SIGKILL, a worker stopped by
SIGTERM, and a worker that goes silent (``kill -9``) so that the scheduler takes the attempt
back. The history is read where the UI reads it, ``GET /ui/api/task``. The bound on its length
is checked on :class:`~conveyor.scheduler.policy.SchedulerCore` directly with a fake clock, and
the row format by :mod:`conveyor.scheduler.persist`. Every process a test starts carries a
marker and is killed afterwards; every wait polls with a deadline.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.protocol import AttemptEnd, TaskSpec, TaskStatus
from conveyor.scheduler.persist import RowError, from_row, to_row
from conveyor.scheduler.policy import ATTEMPT_HISTORY, Attempt, SchedulerCore, TaskRecord
from conveyor.testing import FakeClock
from conveyor.testing.processes import (
    SchedulerProcess,
    child_env,
    http_request,
    kill_marked,
    kill_tree,
    put,
    wait_for,
)

MARKER_VARIABLE = "ATTEMPTHISTORY_MARKER"  # not CONVEYOR_*: those are configuration overrides
MODULE = "attempt_history_tasks"
HOST = socket.gethostname()
QUICK_WORKER = {
    "CONVEYOR_WORKER__WAIT_INTERVAL": "0.1",
    "CONVEYOR_WORKER__WAIT_JITTER": "0",
    "CONVEYOR_WORKER__PING_INTERVAL": "0.2",
    "CONVEYOR_WORKER__KILL_GRACE": "1",
}

TASKS = '''
import os
import signal
import time

import conveyor
from conveyor.testing.processes import put, wait_file


class _Base(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, type(self).__name__ + ".out"))

    def finish(self):
        with self.output().open("w") as out:
            out.write("ok")


class Succeeds(_Base):
    def run(self):
        self.finish()


class Raises(_Base):
    def run(self):
        raise ValueError("raised on purpose")


class Sleeps(_Base):
    """Overruns its one-second worker_timeout."""

    worker_timeout = 1

    def run(self):
        put(os.path.join(self.root, "started"), str(os.getpid()))
        time.sleep(60)
        self.finish()


class KillsItself(_Base):
    def run(self):
        os.kill(os.getpid(), signal.SIGKILL)


class Gated(_Base):
    """Runs until the file ``gate`` exists in ``root`` (bounded)."""

    def run(self):
        put(os.path.join(self.root, "started"), str(os.getpid()))
        if not wait_file(os.path.join(self.root, "gate"), 50):
            raise RuntimeError("the gate never opened")
        self.finish()


class FailsOnce(_Base):
    """Fails the first time it runs (leaving a mark), succeeds after."""

    def run(self):
        mark = os.path.join(self.root, "failed-once")
        if not os.path.exists(mark):
            put(mark, "x")
            raise RuntimeError("the first attempt fails")
        self.finish()
'''


# --- helpers -------------------------------------------------------------------------------------


class Server(SchedulerProcess):
    """A ``conveyor scheduler`` subprocess (no token) with the reads these tests need."""

    def __init__(self, directory: Path, config_text: str, marker: str) -> None:
        """Describe the server (config written into ``directory``); nothing is started yet."""
        config = directory / "server.toml"
        config.write_text(config_text, encoding="utf-8")
        super().__init__(directory, config, child_env(directory, MARKER_VARIABLE, marker))

    def get(self, path: str) -> Any:
        """GET ``path``; its JSON (asserting 200)."""
        reply = http_request(self.port, "GET", path)
        assert reply.status == 200, (path, reply)
        return reply.json()

    def task_id(self, family: str, root: Path) -> str:
        """The id of the registered ``family`` task whose root parameter is ``root``."""
        found = [
            t["task_id"]
            for t in self.get("/api/v1/tasks")["tasks"]
            if t["family"] == family and t["params"].get("root") == str(root)
        ]
        assert len(found) == 1, (family, root, found)
        return str(found[0])

    def detail(self, task_id: str) -> dict[str, Any]:
        """The task detail the web UI shows."""
        from urllib.parse import quote

        task: dict[str, Any] = self.get(f"/ui/api/task?id={quote(task_id)}")["task"]
        return task


def conveyor_run(
    server: Server, family: str, root: Path, marker: str, *flags: str
) -> subprocess.Popen[str]:
    """Start ``conveyor run <family> --root <root>`` against ``server`` as a real worker."""
    root.mkdir(parents=True, exist_ok=True)
    args = [
        *(sys.executable, "-m", "conveyor", "run", f"{MODULE}.{family}"),
        *("--root", str(root), "--scheduler-url", server.url, *flags),
    ]
    env = child_env(server.directory, MARKER_VARIABLE, marker, **QUICK_WORKER)
    return subprocess.Popen(
        args,
        cwd=server.directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 40) -> tuple[int, str]:
    """Wait (bounded) for a worker to end; its exit code and everything it printed."""
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def worker_of(proc: subprocess.Popen[str]) -> str:
    """The prefix of the worker ids a ``conveyor run`` process uses: ``host-pid-``."""
    return f"{HOST}-{proc.pid}-"


def check_attempt(entry: dict[str, Any], outcome: str, proc: subprocess.Popen[str]) -> None:
    """One finished attempt: the outcome, the worker of ``proc``, a sane start and end."""
    assert set(entry) == {"attempt", "started", "ended", "outcome", "worker"}, entry
    assert entry["outcome"] == outcome, entry
    assert entry["worker"].startswith(worker_of(proc)), (entry, proc.pid)
    assert isinstance(entry["attempt"], int) and entry["attempt"] > 0, entry
    assert entry["ended"] is not None, entry
    assert entry["started"] <= entry["ended"] <= time.time() + 1, entry


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def marker() -> Iterator[str]:
    """A per-test marker: every process carrying it is killed when the test ends."""
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER_VARIABLE, value)


def _write_tasks(directory: Path) -> None:
    (directory / f"{MODULE}.py").write_text(TASKS, encoding="utf-8")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A scheduler shared by the tests that only add tasks of their own (distinct roots)."""
    directory = tmp_path_factory.mktemp("attempts")
    _write_tasks(directory)
    value = uuid.uuid4().hex
    server = Server(directory, "[scheduler]\nretry_delay = 3600\n", value)
    try:
        server.start()
        yield server
    finally:
        server.kill()
        kill_marked(MARKER_VARIABLE, value)


@pytest.fixture
def own_server(tmp_path: Path, marker: str) -> Iterator[Any]:
    """Build a scheduler of this test alone from its config text (started, killed after)."""
    _write_tasks(tmp_path)
    servers: list[Server] = []

    def build(config_text: str) -> Server:
        server = Server(tmp_path, config_text, marker)
        servers.append(server)
        server.start()
        return server

    yield build
    for server in servers:
        server.kill()


# --- each outcome, caused by a real worker ----------------------------------------------------


@pytest.mark.parametrize(
    ("family", "executor", "outcome", "code"),
    [
        ("Succeeds", "inline", "succeeded", 0),
        ("Succeeds", "fork", "succeeded", 0),
        ("Raises", "inline", "failed", 1),
        ("Raises", "subprocess", "failed", 1),
        ("Sleeps", "fork", "timed_out", 1),
        ("Sleeps", "subprocess", "timed_out", 1),
        ("KillsItself", "fork", "process_died", 1),
        ("KillsItself", "subprocess", "process_died", 1),
    ],
    ids=lambda v: str(v),
)
def test_each_outcome_appears_in_the_history_with_its_worker(
    shared: Server, marker: str, tmp_path: Path, family: str, executor: str, outcome: str, code: int
) -> None:
    """One run of a task that succeeds, raises, overruns worker_timeout or is SIGKILLed leaves
    one attempt in its history: that outcome, on the worker that ran it, started <= ended."""
    before = time.time()
    proc = conveyor_run(shared, family, tmp_path / "out", marker, "--executor", executor)
    returncode, printed = finish(proc)
    assert returncode == code, printed[-3000:]
    task = shared.detail(shared.task_id(family, tmp_path / "out"))
    assert len(task["attempts"]) == 1, task["attempts"]
    (entry,) = task["attempts"]
    check_attempt(entry, outcome, proc)
    assert entry["started"] >= before - 1, (entry, before)
    assert task["status"] == ("DONE" if outcome == "succeeded" else "FAILED"), task
    assert task["failures"] == (0 if outcome == "succeeded" else 1), task
    workers = {w["worker_id"] for w in shared.get("/ui/api/workers")["workers"]}
    assert entry["worker"] in workers, (entry, workers)


@pytest.mark.parametrize("executor", ["fork", "inline"])
def test_a_worker_stopped_by_sigterm_leaves_an_interrupted_attempt(
    shared: Server, marker: str, tmp_path: Path, executor: str
) -> None:
    """While its task runs the attempt is open (no end, no outcome); SIGTERM to the worker
    (exit 143) ends it as interrupted, on that worker."""
    root = tmp_path / "out"
    proc = conveyor_run(shared, "Gated", root, marker, "--executor", executor)
    wait_for((root / "started").exists, 30, "the gated task to start")
    task_id = shared.task_id("Gated", root)
    running = shared.detail(task_id)
    assert running["status"] == "RUNNING", running
    (open_entry,) = running["attempts"]
    assert open_entry["outcome"] is None and open_entry["ended"] is None, open_entry
    assert open_entry["worker"].startswith(worker_of(proc)), open_entry

    proc.send_signal(signal.SIGTERM)
    returncode, printed = finish(proc)
    assert returncode == 143, printed[-3000:]
    task = shared.detail(task_id)
    (entry,) = task["attempts"]
    check_attempt(entry, "interrupted", proc)
    assert entry["attempt"] == open_entry["attempt"]
    assert entry["started"] == open_entry["started"]
    assert task["status"] == "FAILED", task


def test_a_worker_that_goes_silent_leaves_a_process_died_attempt(
    own_server: Any, marker: str, tmp_path: Path
) -> None:
    """kill -9 of the worker (and its task process) while the task runs: once
    worker_disconnect_delay has passed the scheduler ends the attempt as process_died."""
    server = own_server("[scheduler]\nworker_disconnect_delay = 2\nretry_delay = 3600\n")
    root = tmp_path / "out"
    proc = conveyor_run(server, "Gated", root, marker, "--executor", "fork")
    wait_for((root / "started").exists, 30, "the gated task to start")
    task_id = server.task_id("Gated", root)
    (open_entry,) = server.detail(task_id)["attempts"]
    assert open_entry["outcome"] is None, open_entry
    killed_at = time.time()
    kill_tree(proc.pid)
    proc.wait(timeout=10)

    def taken_back() -> dict[str, Any] | None:
        task = server.detail(task_id)
        return task if task["status"] != "RUNNING" else None

    task = wait_for(taken_back, 30, "the scheduler to take the silent worker's task back")
    assert task["status"] == "FAILED", task
    (entry,) = task["attempts"]
    check_attempt(entry, "process_died", proc)
    assert entry["attempt"] == open_entry["attempt"]
    assert entry["ended"] >= killed_at, (entry, killed_at)
    assert "stopped responding" in task["explanation"], task["explanation"]


def test_several_attempts_are_kept_oldest_first(
    shared: Server, marker: str, tmp_path: Path
) -> None:
    """A task failed once and then (retried at once from the UI) succeeded: two attempts,
    oldest first, each with its own id, the second starting after the first ended."""
    root = tmp_path / "out"
    first = conveyor_run(shared, "FailsOnce", root, marker)
    assert finish(first)[0] == 1
    task_id = shared.task_id("FailsOnce", root)
    body = json.dumps({"task_ids": [task_id]})
    reply = http_request(
        shared.port, "POST", "/ui/api/retry", body, {"Content-Type": "application/json"}
    )
    assert reply.status == 200 and reply.json()["changed"] == [task_id], reply
    second = conveyor_run(shared, "FailsOnce", root, marker)
    returncode, printed = finish(second)
    assert returncode == 0, printed[-3000:]
    older, newer = shared.detail(task_id)["attempts"]
    check_attempt(older, "failed", first)
    check_attempt(newer, "succeeded", second)
    assert older["attempt"] != newer["attempt"]
    assert older["ended"] <= newer["started"], (older, newer)


def test_the_history_survives_a_scheduler_restart(
    own_server: Any, marker: str, tmp_path: Path
) -> None:
    """After kill -9 of the scheduler and a start on the same state, every task's attempts are
    exactly as they were (a failed one, a succeeded one, one still open on a running task)."""
    server = own_server("[scheduler]\nretry_delay = 3600\n")
    ran = tmp_path / "ran"
    for family, code in (("Raises", 1), ("Succeeds", 0)):
        returncode, printed = finish(conveyor_run(server, family, ran, marker))
        assert returncode == code, printed[-3000:]
    gated_root = tmp_path / "gated"
    gated = conveyor_run(server, "Gated", gated_root, marker, "--executor", "fork")
    wait_for((gated_root / "started").exists, 30, "the gated task to start")
    ids = [
        server.task_id("Raises", ran),
        server.task_id("Succeeds", ran),
        server.task_id("Gated", gated_root),
    ]
    before = {t: server.detail(t)["attempts"] for t in ids}
    assert [[a["outcome"] for a in before[t]] for t in ids] == [["failed"], ["succeeded"], [None]]

    server.kill()
    server.start()
    after = {t: server.detail(t)["attempts"] for t in ids}
    assert after == before
    put(gated_root / "gate", "open")  # the worker lived on: its attempt completes
    returncode, printed = finish(gated)
    assert returncode == 0, printed[-3000:]
    (entry,) = server.detail(ids[2])["attempts"]
    check_attempt(entry, "succeeded", gated)
    assert entry["attempt"] == before[ids[2]][0]["attempt"]


# --- the bound, in process ---------------------------------------------------------------------


def test_the_history_keeps_only_the_latest_attempts() -> None:
    """More failures than ATTEMPT_HISTORY: the record keeps exactly the latest ATTEMPT_HISTORY
    attempts, oldest first, each with the time it was handed out and failed; a success after
    that still keeps the bound, and the history survives to_row / from_row."""
    clock = FakeClock()
    core = SchedulerCore(retry_delay=0, retry_count=1000, clock=clock)
    core.keep_history = True  # (as the central server does)
    core.track_changes()
    core.add_tasks("w1", [TaskSpec("t", family="F")])
    handed: list[tuple[int, float]] = []
    for n in range(ATTEMPT_HISTORY + 7):
        clock.advance(1)
        work = core.get_work("w1")
        assert work is not None and work.task_id == "t", n
        handed.append((work.attempt, clock.now))
        clock.advance(0.5)
        status = core.task_failed("w1", "t", f"failure {n}", work.attempt, AttemptEnd.TIMED_OUT)
        assert status == TaskStatus.FAILED
    clock.advance(1)
    work = core.get_work("w1")
    assert work is not None
    handed.append((work.attempt, clock.now))
    core.task_done("w1", "t", work.attempt)

    (record,) = [r for r in core.take_changes()[0] if r.task_id == "t"]
    history = record.attempts
    assert history is not None and len(history) == ATTEMPT_HISTORY
    kept = handed[-ATTEMPT_HISTORY:]
    assert [(a.attempt, a.started) for a in history] == kept
    assert [a.outcome for a in history] == [AttemptEnd.TIMED_OUT] * (ATTEMPT_HISTORY - 1) + [
        AttemptEnd.SUCCEEDED
    ]
    assert all(a.worker == "w1" and a.ended == a.started + 0.5 for a in history[:-1])
    assert history[-1].ended == history[-1].started
    again = from_row(json.loads(json.dumps(to_row(record))))
    assert again.attempts == history


def test_core_records_the_outcome_task_failed_reports() -> None:
    """task_failed's outcome (each kind a worker can report) is what the history shows; a
    hand-out still running has no end and no outcome."""
    clock = FakeClock()
    core = SchedulerCore(retry_delay=0, retry_count=1000, clock=clock)
    core.keep_history = True  # (as the central server does)
    core.track_changes()
    core.add_tasks("w1", [TaskSpec("t", family="F")])
    kinds = [AttemptEnd.FAILED, AttemptEnd.TIMED_OUT, AttemptEnd.PROCESS_DIED]
    kinds.append(AttemptEnd.INTERRUPTED)
    for kind in kinds:
        clock.advance(1)
        work = core.get_work("w1")
        assert work is not None
        core.task_failed("w1", "t", "x", work.attempt, kind)
    clock.advance(1)
    assert core.get_work("w2") is None  # (w2 may not run it)
    work = core.get_work("w1")
    assert work is not None
    record = next(r for r in core.take_changes()[0] if r.task_id == "t")
    assert [a.outcome for a in record.attempts or ()] == [*kinds, None]
    assert record.attempts is not None and record.attempts[-1].ended is None


# --- the row format ----------------------------------------------------------------------------


def _record_with_history() -> TaskRecord:
    return TaskRecord(
        task_id="t",
        seq=1,
        family="F",
        module="m",
        registered=True,
        attempt=7,
        reported=6,
        attempts=[
            Attempt(6, 10.0, "w1", 12.5, AttemptEnd.FAILED),
            Attempt(7, 13.0, "w2", None, None),
        ],
    )


def test_to_row_and_from_row_keep_the_attempts() -> None:
    """The attempts (finished and running) survive to_row -> JSON -> from_row unchanged."""
    record = _record_with_history()
    row = json.loads(json.dumps(to_row(record)))
    assert row["attempts"] == [
        {"attempt": 6, "started": 10.0, "ended": 12.5, "outcome": "failed", "worker": "w1"},
        {"attempt": 7, "started": 13.0, "ended": None, "outcome": None, "worker": "w2"},
    ]
    again = from_row(row)
    assert again.attempts == record.attempts
    assert to_row(again) == to_row(record)


def test_a_row_without_attempts_gets_an_empty_history() -> None:
    """A row saved before the history existed (no 'attempts' field) reads back with none."""
    row = json.loads(json.dumps(to_row(_record_with_history())))
    del row["attempts"]
    assert from_row(row).attempts == []


def _good_attempt(**changes: Any) -> dict[str, Any]:
    entry = {"attempt": 1, "started": 1.0, "ended": 2.0, "outcome": "failed", "worker": "w"}
    entry.update(changes)
    return entry


MALFORMED_ATTEMPTS: list[Any] = [
    None,
    "failed",
    {"attempt": 1},
    ["not an object"],
    [_good_attempt(outcome="exploded")],
    [_good_attempt(outcome="SUCCEEDED")],
    [_good_attempt(started="yesterday")],
    [_good_attempt(started=None)],
    [_good_attempt(ended="later")],
    [_good_attempt(attempt=-1)],
    [_good_attempt(attempt=True)],
    [_good_attempt(attempt=1.5)],
    [_good_attempt(worker=None)],
    [_good_attempt(worker=3)],
    [_good_attempt(extra="field")],
    [{k: v for k, v in _good_attempt().items() if k != "worker"}],
    [{k: v for k, v in _good_attempt().items() if k != "ended"}],
]


def test_a_stored_history_longer_than_the_bound_keeps_its_latest() -> None:
    """A row holding more than ATTEMPT_HISTORY attempts (saved when the bound was larger) is
    usable: the latest ATTEMPT_HISTORY are kept."""
    row = json.loads(json.dumps(to_row(_record_with_history())))
    row["attempts"] = [_good_attempt(attempt=n + 1) for n in range(ATTEMPT_HISTORY + 5)]
    history = from_row(row).attempts
    assert history is not None
    assert [a.attempt for a in history] == list(range(6, ATTEMPT_HISTORY + 6))


@pytest.mark.parametrize("attempts", MALFORMED_ATTEMPTS, ids=range(len(MALFORMED_ATTEMPTS)))
def test_a_malformed_attempts_field_is_a_row_error_naming_it(attempts: Any) -> None:
    """Any attempts value to_row cannot have written is a RowError whose field is 'attempts'
    and whose message names it."""
    row = json.loads(json.dumps(to_row(_record_with_history())))
    row["attempts"] = attempts
    with pytest.raises(RowError) as caught:
        from_row(row)
    assert caught.value.field == "attempts"
    assert "'attempts'" in str(caught.value)


def test_non_finite_attempt_times_are_a_row_error() -> None:
    """NaN or infinite start or end times (which JSON text cannot carry) are refused too."""
    for changes in ({"started": float("nan")}, {"ended": float("inf")}):
        row = to_row(_record_with_history())
        row["attempts"] = [_good_attempt(**changes)]
        with pytest.raises(RowError) as caught:
            from_row(row)
        assert caught.value.field == "attempts", changes
