"""The central scheduler never acknowledges what it has not stored (issue 20): storage faults
under a running server, a second server on the same state, a state file deleted under it, a
read-only state directory at start, and a fault of the server's own answered as JSON.

The faults are real: ``RLIMIT_FSIZE`` set on the server process (``prlimit``), a small tmpfs
filled to ENOSPC or mounted read-only where the machine allows mounting (as root, which CI
is), a second ``conveyor scheduler`` process, an ``unlink`` of the state file. Each test then
kills the server (``kill -9``), starts it again and checks that every acknowledged transition
is there and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.scheduler.policy import SchedulerCore
from conveyor.server.app import SchedulerService, create_app
from conveyor.server.hosts import OwnAddress
from conveyor.server.stores import MemoryStore, SqliteStore, StoreContext
from conveyor.testing.processes import (
    Reply,
    SchedulerProcess,
    child_env,
    free_port,
    json_lines,
    kill_marked,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

MARKER_VARIABLE = "STATEFAULTTEST_MARKER"  # not CONVEYOR_*: those are configuration overrides
WORKER = "faults-worker"
REFUSED_WRITE = "state store refused a write; refusing state changes until it takes one"


class Server(SchedulerProcess):
    """A ``conveyor scheduler`` subprocess with the calls these tests make."""

    def __init__(self, directory: Path, marker: str, state: Path | None = None) -> None:
        """Describe the server (its state at ``state``, default ``directory/state.db``)."""
        config = directory / "server.toml"
        config.write_text("", encoding="utf-8")
        super().__init__(directory, config, child_env(directory, MARKER_VARIABLE, marker))
        if state is not None:
            self.state = state

    def post(self, route: str, body: Any) -> Reply:
        """POST ``body`` to ``/api/v1/<route>``."""
        return self.request("POST", f"/api/v1/{route}", body)

    def register(self, task_ids: list[str], params: dict[str, str] | None = None) -> Reply:
        """Register ``task_ids`` (no dependencies) for :data:`WORKER`."""
        tasks = [{"task_id": t, "family": "F", "params": params or {}} for t in task_ids]
        return self.post("add_tasks", {"worker_id": WORKER, "tasks": tasks})

    def hand_out(self, count: int) -> dict[str, int]:
        """``count`` hand-outs: task id -> attempt."""
        attempts = {}
        for _ in range(count):
            reply = self.post("get_work", {"worker_id": WORKER})
            assert reply.status == 200, reply
            work = reply.json()["work"]
            attempts[work["task_id"]] = work["attempt"]
        return attempts

    def done(self, task_id: str, attempt: int) -> Reply:
        """Report ``task_id``'s attempt done."""
        return self.post("task_done", {"worker_id": WORKER, "task_id": task_id, "attempt": attempt})

    def tasks(self) -> dict[str, str]:
        """Task id -> status, from the server's task list."""
        reply = self.request("GET", "/api/v1/tasks")
        assert reply.status == 200, reply
        return {t["task_id"]: t["status"] for t in reply.json()["tasks"]}

    def refusals_logged(self) -> list[dict[str, Any]]:
        """The server's log records of a refused write."""
        text = self.stderr.read_text(encoding="utf-8", errors="replace")
        return [e for e in json_lines(text) if e.get("event") == REFUSED_WRITE]

    def start_elsewhere(self) -> subprocess.CompletedProcess[str]:
        """Another ``conveyor scheduler`` on this one's state and configuration, on another
        port, expected to stop at start-up (bounded: it is killed after 60 s)."""
        return subprocess.run(
            [
                *(sys.executable, "-m", "conveyor", "scheduler"),
                *("--port", str(free_port()), "--state-path", str(self.state)),
                *("--config", str(self.config)),
            ],
            env=self.env,
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def restart(self) -> None:
        """``kill -9`` and start again on the same port and state."""
        self.kill()
        self.start()


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run in tmp_path with a per-test marker; kill every process that carries it afterwards."""
    monkeypatch.chdir(tmp_path)
    marker = uuid.uuid4().hex
    yield marker
    kill_marked(MARKER_VARIABLE, marker)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for the test (skipped where the machine does not allow it)."""
    where = tmp_path / "mnt"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def assert_unstored(reply: Reply) -> None:
    """A 503 with ``Retry-After`` and a JSON error saying nothing was changed."""
    assert reply.status == 503, reply
    assert int(reply.headers["retry-after"]) > 0, reply.headers
    assert "nothing was changed" in reply.error(), reply


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to ENOSPC with one file; that file."""
    filler = directory / "filler"
    with filler.open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
            out.flush()
    return filler


def test_a_commit_refused_by_rlimit_fsize_is_not_acknowledged(tmp_path: Path, marker: str) -> None:
    """With the server's file size limit below its files' sizes every commit fails: a report
    answers 503 (not 500), and so does its retry (it answered 200 as a 'repeat' before the
    fix, though nothing was stored); reads go on and show what is stored; the error is
    logged once. Once the limit is lifted the retry is stored, and after ``kill -9`` and a
    restart exactly the acknowledged reports are there."""
    server = Server(tmp_path, marker)
    server.start()
    assert server.register([f"t{i}" for i in range(5)]).status == 200
    attempts = server.hand_out(5)
    assert server.done("t0", attempts["t0"]).status == 200
    assert server.proc is not None
    pid = server.proc.pid
    # a limit the log (on stderr, a file) stays under and the write-ahead log is over
    limit = 16 * 1024
    assert server.stderr.stat().st_size < limit / 2
    assert Path(f"{server.state}-wal").stat().st_size > limit
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, hard))
    try:
        for task_id in ("t1", "t2", "t3", "t4", "t1"):
            assert_unstored(server.done(task_id, attempts[task_id]))
        assert server.tasks() == {"t0": "DONE", **{f"t{i}": "RUNNING" for i in range(1, 5)}}
        health = server.request("GET", "/health").json()
        assert "cannot store changes" in health["state_store_error"], health
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
    assert server.done("t1", attempts["t1"]).status == 200
    assert server.request("GET", "/health").json()["state_store_error"] == ""
    logged = server.refusals_logged()
    assert len(logged) == 1, logged
    assert str(server.state) in logged[0]["state"], logged
    server.restart()
    assert server.tasks() == {
        "t0": "DONE",
        "t1": "DONE",
        **{t: "RUNNING" for t in ("t2", "t3", "t4")},
    }


GATED = """
import os
import pathlib
import time

import conveyor

GATE = pathlib.Path(os.environ["FAULTS_GATE"])


class Gated(conveyor.Task):
    def output(self):
        return conveyor.LocalTarget(str(GATE.parent / "gated.out"))

    def run(self):
        while not GATE.exists():  # the test opens the gate once the disk refuses writes
            time.sleep(0.05)
        with self.output().open("w") as out:
            out.write("done")
"""


def test_a_worker_rides_out_a_refused_disk_and_its_report_is_stored(
    tmp_path: Path, marker: str
) -> None:
    """A real ``conveyor run`` whose task finishes while the server's disk refuses writes:
    its report is answered 503 (Retry-After) and retried, not lost and not acknowledged
    unstored; once the disk takes writes the run ends with exit 0, and after ``kill -9`` and
    a restart the server has the task DONE."""
    (tmp_path / "faults_gated.py").write_text(GATED, encoding="utf-8")
    server = Server(tmp_path, marker)
    server.start()
    worker_toml = tmp_path / "worker.toml"
    worker_toml.write_text(
        f'[scheduler]\ntransport = "http"\nurl = "{server.url}"\nrpc_retries = 1000\n'
        "rpc_retry_wait = 0.1\nrpc_retry_max_wait = 0.5\n",
        encoding="utf-8",
    )
    env = {**server.env, "PYTHONPATH": str(tmp_path), "FAULTS_GATE": str(tmp_path / "gate")}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "conveyor",
            "run",
            "faults_gated.Gated",
            "--config",
            str(worker_toml),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: "RUNNING" in server.tasks().values(), 60, "the task to run")
        assert server.proc is not None
        pid = server.proc.pid
        assert server.stderr.stat().st_size < 1024
        _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (4096, hard))
        try:
            (tmp_path / "gate").touch()
            wait_for(server.refusals_logged, 60, "the server to refuse the report")
            assert list(server.tasks().values()) == ["RUNNING"]
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
        output, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, output
    server.restart()
    assert list(server.tasks().values()) == ["DONE"]


def test_a_full_disk_rolls_back_a_registration_until_space_is_freed(
    tmpfs: Path, tmp_path: Path, marker: str
) -> None:
    """On a tmpfs filled to ENOSPC, a registration of 200 tasks cannot be committed: it is
    answered 503 and is not in the live state either (the change was rolled back in memory,
    not just left unsaved). After the filler is removed it is stored, and it survives a
    restart, as does what was acknowledged before."""
    server = Server(tmp_path, marker, state=tmpfs / "state.db")
    server.start()
    assert server.register(["before"]).status == 200
    filler = fill(tmpfs)
    big = {"blob": "x" * 3000}  # 600 kB of rows: the write-ahead log must grow
    batch = [f"n{i}" for i in range(200)]
    assert_unstored(server.register(batch, big))
    assert server.tasks() == {"before": "PENDING"}
    assert_unstored(server.register(batch, big))
    filler.unlink()
    assert server.register(batch, big).status == 200
    assert len(server.tasks()) == 201
    server.restart()
    assert server.tasks() == {"before": "PENDING", **dict.fromkeys(batch, "PENDING")}


def test_a_second_server_on_the_same_state_exits_2_naming_the_first(
    tmp_path: Path, marker: str
) -> None:
    """Both served before the fix, each overwriting the other's hand-outs. Now the second
    stops at start-up with one line naming the first's pid and address, and the first is
    unaffected."""
    first = Server(tmp_path, marker)
    first.start()
    assert first.register(["a"]).status == 200
    second = first.start_elsewhere()
    assert second.returncode == 2, second
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("conveyor: error:"), second.stderr
    assert first.proc is not None
    assert f"pid {first.proc.pid}" in lines[0] and first.url in lines[0], lines
    assert "Traceback" not in second.stderr
    assert list(first.hand_out(1)) == ["a"]
    assert first.tasks() == {"a": "RUNNING"}


def test_a_deleted_state_file_is_noticed_and_rescued(tmp_path: Path, marker: str) -> None:
    """Before the fix the server went on acknowledging into the deleted file, and the next
    start came up empty. Now the next change is refused (503, naming the deletion and a rescue
    copy), reads go on, and the rescue copy, put back as the docs say, holds every
    acknowledged change."""
    server = Server(tmp_path, marker)
    server.start()
    assert server.register([f"t{i}" for i in range(3)]).status == 200
    attempts = server.hand_out(3)
    assert server.done("t0", attempts["t0"]).status == 200
    server.state.unlink()
    refused = server.done("t1", attempts["t1"])
    assert_unstored(refused)
    assert "deleted" in refused.error() and ".rescued-" in refused.error(), refused
    assert server.tasks() == {"t0": "DONE", "t1": "RUNNING", "t2": "RUNNING"}
    assert_unstored(server.done("t1", attempts["t1"]))  # still refused: no silent recovery
    server.kill()
    for leftover in ("state.db-wal", "state.db-shm"):
        (tmp_path / leftover).unlink(missing_ok=True)
    (rescued,) = tmp_path.glob("state.db.rescued-*")
    rescued.rename(server.state)
    server.start()
    assert server.tasks() == {"t0": "DONE", "t1": "RUNNING", "t2": "RUNNING"}


def test_a_read_only_state_directory_stops_the_start_with_one_line(
    tmpfs: Path, tmp_path: Path, marker: str
) -> None:
    """A state left by a killed server (with its -wal and -shm) on a file system mounted
    read-only: SQLite can read it, so the server started and answered every change with a
    500 and a traceback. Now it exits 2 with one line naming the path."""
    server = Server(tmp_path, marker, state=tmpfs / "state.db")
    server.start()
    assert server.register(["a"]).status == 200
    server.kill()
    remount = ["mount", "-o", "remount,ro", str(tmpfs)]
    subprocess.run(remount, check=True, capture_output=True)
    refused = server.start_elsewhere()
    assert refused.returncode == 2, refused
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert str(tmpfs) in lines[0] and "read-only" in lines[0], lines


# --- in process: what cannot be made to happen in a correct server on demand ----------------------


def _answer(
    app: Any, method: str, path: str, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One request through the ASGI ``app`` (no network): status, headers, body."""
    sent: list[dict[str, Any]] = []
    headers = [(b"host", b"127.0.0.1:8082"), (b"content-type", b"application/json")]
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [*headers, (b"content-length", str(len(body)).encode())],
        "scheme": "http",
        "server": ("127.0.0.1", 8082),
        "client": ("127.0.0.1", 5000),
        "http_version": "1.1",
        "root_path": "",
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = sent[0]
    answer = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], answer, b"".join(m.get("body", b"") for m in sent[1:])


def test_a_fault_of_the_server_is_a_json_500_without_a_traceback() -> None:
    """Whatever raises inside a route is answered ``{"error": ...}`` 500 as JSON (it was
    Starlette's plain-text 'Internal Server Error'), and the process goes on serving."""
    core = SchedulerCore()
    service = SchedulerService(core, MemoryStore())

    def broken(task_id: str) -> str:
        raise TypeError("a bug in the scheduler")

    core.explanation = broken  # type: ignore[method-assign]
    app = create_app(
        service, token="", max_request_bytes=1 << 20, address=OwnAddress.of("127.0.0.1", 8082)
    )
    status, headers, body = _answer(app, "POST", "/api/v1/explanation", b'{"task_id": "a"}')
    assert status == 500, body
    assert headers["content-type"] == "application/json", headers
    assert b"Traceback" not in body and b"a bug" not in body
    assert b'"error"' in body
    status, _, body = _answer(app, "POST", "/api/v1/statuses", b'{"task_ids": []}')
    assert status == 200, body
    service.store.close()


# --- the state file's size ---------------------------------------------------------------------


def _rows(count: int, size: int) -> list[dict[str, Any]]:
    from conveyor.scheduler.persist import to_row
    from conveyor.scheduler.policy import TaskRecord

    return [
        to_row(TaskRecord(f"t{i}", i, family="F", params={"blob": "x" * size}, registered=True))
        for i in range(count)
    ]


def _checkpointed_ids(path: Path, scratch: Path) -> set[str] | None:
    """The task ids the database file at ``path`` holds by itself, without its write-ahead
    log (what checkpoints copied into it): read from a copy of that file alone."""
    shutil.copyfile(path, scratch)
    try:
        with contextlib.closing(sqlite3.connect(scratch)) as db:
            return {row[0] for row in db.execute("SELECT task_id FROM tasks")}
    except sqlite3.Error:  # (copied half way through a checkpoint's writes: look again)
        return None
    finally:
        for leftover in (scratch, Path(f"{scratch}-wal"), Path(f"{scratch}-shm")):
            leftover.unlink(missing_ok=True)


def _checkpoint_all(path: Path) -> None:
    """Copy the whole write-ahead log of the database at ``path`` into it and empty the log,
    once the store's own checkpoint (which a TRUNCATE does not wait for) lets it."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        wait_for(
            lambda: db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0,
            30,
            "a checkpoint of the whole log",
        )


def _checkpoint_threads(path: Path) -> int:
    """The live checkpoint threads of the store of the file at ``path`` (those of stores
    other tests left open end on their own, at any time)."""
    name = f"conveyor-checkpoint {path}"
    return sum(1 for t in threading.enumerate() if t.name == name)


def test_commits_are_checkpointed_apart_and_close_leaves_no_log(tmp_path: Path) -> None:
    """The write-ahead log is copied into the database file by a thread of the store's own
    soon after a commit, however little it wrote (the commit itself no longer stops for
    that, as SQLite's automatic checkpoint at 1,000 pages did, on the event loop): the file
    alone holds the rows without any further write. Closing the store stops that thread
    and closes its connection, so the last one to close removes the log."""
    path = tmp_path / "state.db"
    store = SqliteStore(StoreContext(str(path)))
    try:
        store.load()
        store.save(_rows(3, 100), [])  # (a few pages: far below any automatic checkpoint)
        assert _checkpoint_threads(path) == 1
        wait_for(
            lambda: _checkpointed_ids(path, tmp_path / "copy.db") == {"t0", "t1", "t2"},
            30,
            "the rows checkpointed into the database file",
        )
        store.save(_rows(5, 100)[3:], [])  # (and again after the next commit)
        wait_for(
            lambda: _checkpointed_ids(path, tmp_path / "copy.db") == {f"t{i}" for i in range(5)},
            30,
            "the next rows checkpointed",
        )
    finally:
        store.close()
    assert _checkpoint_threads(path) == 0
    assert not Path(f"{path}-wal").exists()


def test_the_checkpoint_thread_ends_when_idle_and_the_next_commit_starts_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store left open with no commit keeps no thread for long (nor one dropped without
    ``close()``): the checkpoint thread ends after a while without commits, and the next
    commit starts another, whose checkpoint copies it into the file as before."""
    from conveyor.server.sqlite import store as sqlite_store

    monkeypatch.setattr(sqlite_store, "_CHECKPOINT_IDLE", 0.2)
    path = tmp_path / "state.db"
    store = SqliteStore(StoreContext(str(path)))
    try:
        store.load()
        store.save(_rows(1, 100), [])
        wait_for(lambda: _checkpoint_threads(path) == 0, 30, "the idle thread to end")
        store.save(_rows(2, 100)[1:], [])  # (only a thread started anew checkpoints it)
        wait_for(
            lambda: _checkpointed_ids(path, tmp_path / "copy.db") == {"t0", "t1"},
            30,
            "the next commit checkpointed",
        )
    finally:
        store.close()
    assert _checkpoint_threads(path) == 0


def test_a_checkpoint_thread_that_cannot_start_fails_no_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no thread can be started (a container's process limit), a commit is stored and
    acknowledged all the same (the commits checkpoint the log themselves meanwhile), and
    the store closes as usual: its lock released, the file opened again with every row."""

    class Refused(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading, "Thread", Refused)  # (for this test's few calls only)
    path = tmp_path / "state.db"
    store = SqliteStore(StoreContext(str(path)))
    try:
        store.load()
        store.save(_rows(3, 100), [])
        store.probe()
    finally:
        store.close()
    monkeypatch.undo()
    again = SqliteStore(StoreContext(str(path)))
    try:
        assert {row["task_id"] for row in again.load()[0]} == {"t0", "t1", "t2"}
    finally:
        again.close()


def _filled_then_pruned(store: SqliteStore, path: Path) -> int:
    """Load ``store`` (on the file at ``path``), save 3,000 rows of 3 KB, checkpoint them all
    into the file and remove them again (pruning); the file's size when it held them."""
    store.load()
    rows = _rows(3000, 3000)
    store.save(rows, [])
    _checkpoint_all(path)
    high = path.stat().st_size
    store.save([], [], gone_tasks=[r["task_id"] for r in rows])
    return high


def test_pruned_rows_give_their_space_back(tmp_path: Path) -> None:
    """After rows are removed (pruning), ``compact()`` gives their pages back in bounded steps
    and the file shrinks; before, the file kept its high-water size for good."""
    path = tmp_path / "state.db"
    store = SqliteStore(StoreContext(str(path)))
    try:
        high = _filled_then_pruned(store, path)
        free = store._read(lambda db: db.execute("PRAGMA freelist_count").fetchone()[0])
        assert free > 512
        assert store.compact() == 512  # one bounded step, and it really frees that much
        given = 512
        while step := store.compact():
            assert step <= 512
            given += step
        assert given >= free - 256
        store.probe()
        _checkpoint_all(path)
        assert path.stat().st_size < high / 4, (path.stat().st_size, high)
    finally:
        store.close()


def test_the_file_shrinks_after_compact_with_no_write_after_it(tmp_path: Path) -> None:
    """The pages ``compact()`` gives back leave the file once its log is checkpointed, which
    its own commit asks for: an idle server (no save after it) does not keep the file at its
    high-water size until the next write or its close."""
    path = tmp_path / "state.db"
    store = SqliteStore(StoreContext(str(path)))
    try:
        high = _filled_then_pruned(store, path)
        wait_for(  # (the deletion's own checkpoint is over: what follows needs another)
            lambda: _checkpointed_ids(path, tmp_path / "copy.db") == set(),
            30,
            "the deletion checkpointed",
        )
        while store.compact():
            pass
        wait_for(lambda: path.stat().st_size < high / 4, 30, "the file to shrink")
    finally:
        store.close()


def test_an_older_state_file_is_switched_to_incremental_vacuum(tmp_path: Path) -> None:
    """A file made without incremental vacuum (as every file before this change) is switched
    once, when it is loaded; its rows are kept."""
    path = tmp_path / "state.db"
    store = SqliteStore(StoreContext(str(path)))
    store.load()
    store.save(_rows(10, 10), [])
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA auto_vacuum=NONE")
        db.execute("VACUUM")
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    again = SqliteStore(StoreContext(str(path)))
    try:
        rows, _ = again.load()
        assert len(rows) == 10
        assert again._read(lambda db: db.execute("PRAGMA auto_vacuum").fetchone()[0]) == 2
    finally:
        again.close()


def test_the_lock_file_goes_with_the_store(tmp_path: Path) -> None:
    """The lock file exists while a store holds the state, names its holder, refuses a
    second opener in the same process too, and is removed when the store closes."""
    path = tmp_path / "state.db"
    store = SqliteStore(StoreContext(str(path), holder="http://127.0.0.1:1"))
    lock = tmp_path / "state.db.lock"
    assert f'"pid": {os.getpid()}' in lock.read_text() and "127.0.0.1:1" in lock.read_text()
    with pytest.raises(Exception, match="in use by another scheduler"):
        SqliteStore(StoreContext(str(path)))
    store.close()
    assert not lock.exists()
    SqliteStore(StoreContext(str(path))).close()


def test_a_worker_row_an_older_server_stored_with_an_empty_id_loads(tmp_path: Path) -> None:
    """Before identifiers were checked at the edge, ``ping {"worker_id": ""}`` stored such a
    row and every later start refused the file (exit 2 until --recover); it loads now."""
    path = tmp_path / "state.db"
    store = SqliteStore(StoreContext(str(path)))
    store.load()
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("INSERT INTO workers VALUES ('', 0)")
    again = SqliteStore(StoreContext(str(path)))
    try:
        assert again.load() == ([], [("", False)])
    finally:
        again.close()


def test_a_call_that_fails_half_way_is_rolled_back() -> None:
    """A fault inside a state-changing call (a bug, not a refused report) keeps nothing of
    what the call changed before it raised: it used to be committed and served."""
    core = SchedulerCore()
    service = SchedulerService(core, MemoryStore())
    try:
        service.call(core.ping, "w")

        def half_way(worker_id: str) -> None:
            core.ping(worker_id)  # a change ...
            raise RuntimeError("... then a bug")

        with pytest.raises(RuntimeError):
            service.call(half_way, "x")
        assert {w["worker_id"] for w in core.worker_list()} == {"w"}
        assert service.failure == ""
    finally:
        service.store.close()
