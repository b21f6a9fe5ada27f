"""A long-lived worker id does not pin every task it ever ran: when ``Worker.run()`` ends the
worker releases its tasks, so finished ones are pruned ``remove_delay`` later while the worker
id lives on — with the in-process scheduler, and against a real ``conveyor scheduler``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import conveyor
from conveyor.protocol import AddTasks, Ping, Release, TaskStatus
from conveyor.scheduler import TaskSpec
from conveyor.testing import FakeClock
from conveyor.testing.processes import (
    SchedulerProcess,
    StubServer,
    child_env,
    kill_marked,
    wait_for,
)
from conveyor.transports.http import HttpTransport

MARKER = "RELEASETEST_MARKER"  # not CONVEYOR_*: those are configuration overrides
WORKER = "long-lived"


class Touch(conveyor.Task):
    """Writes one file; complete once it exists."""

    path = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.path)

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("x")


class Batch(conveyor.WrapperTask):
    """One run's work: ``n`` new files under ``root``."""

    root = conveyor.Parameter()
    n = conveyor.IntParameter(default=5)

    def requires(self) -> list[Touch]:
        return [Touch(path=f"{self.root}/t{i}") for i in range(self.n)]


def _batch(tmp_path: Path, run: int) -> Batch:
    root = tmp_path / f"run{run}"
    root.mkdir()
    return Batch(root=str(root))


def _ids(batch: Batch) -> set[str]:
    return {batch.task_id, *(dep.task_id for dep in batch.requires())}


# --- the in-process scheduler -----------------------------------------------------------------


def test_a_long_lived_worker_id_keeps_only_what_others_still_want(tmp_path: Path) -> None:
    """Five runs of new tasks by one worker id, remove_delay = 1 and the worker never gone:
    after each run and the delay only the task another live worker registered is left."""
    clock = FakeClock()
    scheduler = conveyor.Scheduler(
        conveyor.Config(), clock=clock, remove_delay=1, worker_disconnect_delay=3600
    )
    shared = Touch(path=str(tmp_path / "shared"))
    scheduler.add_tasks("other", [TaskSpec(shared.task_id)])
    for run in range(5):
        batch = _batch(tmp_path, run)
        config = conveyor.Config().with_overrides(executor="inline", log_level="warning")
        with conveyor.Worker(scheduler, config=config, worker_id=WORKER) as worker:
            assert worker.add(batch) and worker.add(shared)
            assert worker.run() is True
        clock.advance(2)
        left = {t.task_id for t in scheduler.task_list()}
        assert left == {shared.task_id}, f"run {run}: {len(left)} tasks kept"
    assert WORKER in {w["worker_id"] for w in scheduler.worker_list()}


def test_one_worker_object_run_again_and_again_stays_bounded_and_reports_success(
    tmp_path: Path,
) -> None:
    """One Worker object adding and running a new task four times, remove_delay passing between
    runs: each run() is True with exit code 0 though earlier runs' tasks were pruned meanwhile."""
    clock = FakeClock()
    scheduler = conveyor.Scheduler(
        conveyor.Config(), clock=clock, remove_delay=1, worker_disconnect_delay=3600
    )
    config = conveyor.Config().with_overrides(executor="inline", log_level="warning")
    with conveyor.Worker(scheduler, config=config, worker_id=WORKER) as worker:
        for run in range(4):
            task = Touch(path=str(tmp_path / f"once-{run}"))
            assert worker.add(task)
            assert worker.run() is True
            assert worker.report is not None and worker.report.exit_code == 0, worker.report
            clock.advance(2)
            assert [t.task_id for t in scheduler.task_list()] == []


# --- a real central scheduler --------------------------------------------------------------------


@pytest.fixture
def marker() -> Iterator[str]:
    """A marker for the processes of one test, all killed at its end."""
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER, value)


def _server(tmp_path: Path, marker: str, remove_delay: float, port: int = 0) -> SchedulerProcess:
    config = tmp_path / f"server-{remove_delay:g}.toml"
    config.write_text(
        f"[scheduler]\nremove_delay = {remove_delay}\nworker_disconnect_delay = 3600\n",
        encoding="utf-8",
    )
    return SchedulerProcess(tmp_path, config, child_env(tmp_path, MARKER, marker), port)


def _listed(server: SchedulerProcess) -> set[str]:
    reply = server.request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply
    return {task["task_id"] for task in reply.json()["tasks"]}


def _none_listed(server: SchedulerProcess, ids: set[str]) -> Callable[[], bool]:
    return lambda: not _listed(server) & ids


def _http_run(server: SchedulerProcess, batch: Batch) -> None:
    config = conveyor.Config().with_overrides(
        executor="inline", log_level="warning", scheduler_url=server.url
    )
    with conveyor.Worker(config=config, worker_id=WORKER) as worker:
        assert worker.add(batch)
        assert worker.run() is True


def test_the_server_forgets_each_run_of_a_live_worker_after_remove_delay(
    tmp_path: Path, marker: str
) -> None:
    """Three runs by one worker id against `conveyor scheduler` with remove_delay = 1: after
    each, GET /api/v1/tasks loses that run's tasks, and the worker is still listed."""
    server = _server(tmp_path, marker, remove_delay=1)
    server.start()
    try:
        for run in range(3):
            batch = _batch(tmp_path, run)
            _http_run(server, batch)
            wait_for(_none_listed(server, _ids(batch)), 30, f"run {run} to be pruned")
            workers = server.request("GET", "/api/v1/workers").json()["workers"]
            assert WORKER in {w["worker_id"] for w in workers}
    finally:
        server.kill()


def test_a_release_survives_a_server_restart(tmp_path: Path, marker: str) -> None:
    """A release is committed like any transition: a server killed after it and started again
    (remove_delay now 1) prunes the released tasks though the worker is still known."""
    first = _server(tmp_path, marker, remove_delay=3600)
    first.start()
    batch = _batch(tmp_path, 0)
    try:
        _http_run(first, batch)
        assert _ids(batch) <= _listed(first)  # not before remove_delay
    finally:
        first.kill()
    second = _server(tmp_path, marker, remove_delay=1, port=first.port)
    second.start()
    try:
        wait_for(_none_listed(second, _ids(batch)), 30, "the released tasks to go")
    finally:
        second.kill()


def _old_server() -> StubServer:
    """A real HTTP server that predates ``release``: it answers that route 404 with the JSON
    error a conveyor server gives for any unknown route, and ``{"ok": true}`` to the rest."""
    return StubServer(
        lambda path: (
            (404, {"error": "Not Found"}) if path.endswith("/release") else (200, {"ok": True})
        )
    )


def test_release_to_a_server_that_predates_it_is_silent_and_asked_once() -> None:
    """The http transport's release to a server answering 404 raises nothing, is not retried,
    and is not sent again; other calls still work."""
    old = _old_server()
    try:
        config = conveyor.Config().with_overrides(scheduler_url=old.url)
        transport = HttpTransport(config)
        transport.call(Release(WORKER))
        transport.call(Release(WORKER))
        transport.call(Ping(WORKER))
    finally:
        old.close()
    assert old.asked == ["/api/v1/release", "/api/v1/ping"]


# --- runs sharing one worker id ------------------------------------------------------------------


class After(conveyor.Task):
    """Writes one file once ``gate`` is complete."""

    path = conveyor.Parameter()
    gate = conveyor.Parameter()

    def requires(self) -> Touch:
        return Touch(path=self.gate)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.path)

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("x")


def test_a_run_sharing_its_worker_id_releases_only_its_own_tasks(tmp_path: Path) -> None:
    """Two Workers with one worker_id and one in-process scheduler: X registers A (waiting for
    G, which another worker runs); Y registers B, runs and releases. A is not pruned
    remove_delay later and, once G is done, X is handed A and runs it."""
    clock = FakeClock()
    scheduler = conveyor.Scheduler(
        conveyor.Config(), clock=clock, remove_delay=1, worker_disconnect_delay=3600
    )
    config = conveyor.Config().with_overrides(executor="inline", log_level="warning")
    gate = Touch(path=str(tmp_path / "gate"))
    scheduler.add_tasks("other", [TaskSpec(gate.task_id, "Touch", __name__, gate.task_params)])
    work = scheduler.get_work("other")
    assert work is not None and work.task_id == gate.task_id
    a = After(path=str(tmp_path / "a"), gate=gate.path)
    b = Touch(path=str(tmp_path / "b"))
    with (
        conveyor.Worker(scheduler, config=config, worker_id=WORKER) as x,
        conveyor.Worker(scheduler, config=config, worker_id=WORKER) as y,
    ):
        assert x.add(a)
        assert y.add(b)
        assert y.run() is True  # B ran; A waits for G: nothing else for WORKER yet
        clock.advance(2)
        assert a.task_id in {t.task_id for t in scheduler.task_list()}, "A pruned"
        Path(gate.path).write_text("x", encoding="utf-8")
        scheduler.task_done("other", gate.task_id, work.attempt)
        assert x.run() is True
        assert Path(a.path).exists(), "X was not handed A"
        statuses = scheduler.statuses([a.task_id])
        assert statuses[a.task_id] == TaskStatus.DONE


def test_release_names_tasks_and_keeps_the_worker_ids_others() -> None:
    """SchedulerCore.release(worker_id, task_ids) drops the stakeholding for those ids only:
    the other task stays queued for the worker and is kept; a released task still pending is
    not handed to the worker any more (its entry is stale) until it registers it again."""
    clock = FakeClock()
    scheduler = conveyor.Scheduler(
        conveyor.Config(), clock=clock, remove_delay=1, worker_disconnect_delay=3600
    )
    scheduler.add_tasks("w", [TaskSpec("A"), TaskSpec("B", priority=5)])
    scheduler.release("w", ["B", "unknown"])
    scheduler.release("w", ["B"])  # twice: nothing more
    assert scheduler.work_left("w").pending == 1
    work = scheduler.get_work("w")
    assert work is not None and work.task_id == "A"
    assert scheduler.get_work("w") is None  # B: released, not handed out
    clock.advance(2)
    assert {t.task_id for t in scheduler.task_list()} == {"A"}
    scheduler.add_tasks("w", [TaskSpec("C")])
    scheduler.release("w", ["C"])
    scheduler.add_tasks("w", [TaskSpec("C")])  # registered again: queued again
    work = scheduler.get_work("w")
    assert work is not None and work.task_id == "C"


def test_release_without_task_ids_releases_the_whole_worker_id() -> None:
    """What a worker older than task_ids asks: every task of the worker id."""
    clock = FakeClock()
    scheduler = conveyor.Scheduler(
        conveyor.Config(), clock=clock, remove_delay=1, worker_disconnect_delay=3600
    )
    scheduler.add_tasks("w", [TaskSpec("A"), TaskSpec("B")])
    scheduler.release("w")
    assert scheduler.get_work("w") is None
    clock.advance(2)
    assert scheduler.task_list() == []
    assert "w" in {w["worker_id"] for w in scheduler.worker_list()}


class _FailingRelease:
    """The in-process scheduler with a release that raises what a third-party transport may."""

    def __init__(self, scheduler: conveyor.Scheduler, error: Exception) -> None:
        self._scheduler = scheduler
        self._error = error
        self.released: list[tuple[str, object]] = []

    def call(self, request: object) -> object:
        if isinstance(request, Release):
            self.released.append((request.worker_id, request.task_ids))
            raise self._error
        return self._scheduler.call(request)


@pytest.mark.parametrize("error", [RuntimeError("boom"), OSError("gone")])
def test_a_release_that_raises_anything_does_not_escape_run(
    tmp_path: Path, error: Exception
) -> None:
    """A transport's release raising something other than ConveyorError: run() still returns
    its result and conveyor_worker_stopped fires."""
    from conveyor.testing import RecordingPlugin

    scheduler = conveyor.Scheduler(conveyor.Config())
    transport = _FailingRelease(scheduler, error)
    rec = RecordingPlugin()
    config = conveyor.Config().with_overrides(executor="inline", log_level="warning")
    task = Touch(path=str(tmp_path / "one"))
    with conveyor.Worker(transport, config=config, worker_id=WORKER, plugins=[rec]) as worker:
        assert worker.add(task)
        assert worker.run() is True
    assert transport.released == [(WORKER, (task.task_id,))]
    assert len(rec.events("worker_stopped")) == 1


class _MethodStyle:
    """A transport of the earlier method-style protocol: the scheduler's named methods, no
    ``call()``; ``release`` is the one given (None: it has none)."""

    def __init__(self, scheduler: conveyor.Scheduler, release: object = None) -> None:
        self._scheduler = scheduler
        self._release = release

    def __getattr__(self, name: str) -> object:
        if name == "call" or (name == "release" and self._release is None):
            raise AttributeError(name)
        if name == "release":
            return self._release
        return getattr(self._scheduler, name)


def test_a_method_style_release_names_the_runs_tasks_or_the_worker_id_alone(
    tmp_path: Path,
) -> None:
    """A transport of the earlier method-style protocol (wrapped in MethodTransport) has its
    release called with the run's task ids; one whose release predates task_ids is called with
    the worker id alone (as the previous release did); one with no release at all fails to
    release (logged, as any release failure): the run's result stands and the tasks are left
    to be pruned when the worker is gone."""
    config = conveyor.Config().with_overrides(executor="inline", log_level="warning")
    calls: list[tuple[str, object]] = []

    def current(worker_id: str, task_ids: object = None) -> None:
        calls.append((worker_id, task_ids))

    def old(worker_id: str) -> None:
        calls.append((worker_id, "old"))

    tasks = [Touch(path=str(tmp_path / f"t{n}")) for n in range(3)]
    for n, release in enumerate((current, old, None)):
        transport = _MethodStyle(conveyor.Scheduler(conveyor.Config()), release)
        if n == 0:  # (warned once per class)
            with pytest.warns(DeprecationWarning, match="has no call"):
                worker = conveyor.Worker(transport, config=config, worker_id=WORKER)
        else:
            worker = conveyor.Worker(transport, config=config, worker_id=WORKER)
        with worker:
            assert worker.add(tasks[n])
            assert worker.run() is True
        assert tasks[n].output().exists()
    assert calls == [(WORKER, (tasks[0].task_id,)), (WORKER, "old")]


def test_the_http_release_is_one_attempt_when_the_server_is_gone() -> None:
    """No server at the end of a run: the http release fails at once, without backoff."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = conveyor.Config().with_overrides(scheduler_url=f"http://127.0.0.1:{port}")
    transport = HttpTransport(config)
    slept: list[float] = []
    transport.sleep = slept.append
    with pytest.raises(conveyor.SchedulerUnavailable):
        transport.call(Release(WORKER, tuple(f"t{i}" for i in range(3))))
    assert slept == []
    transport.call(Release(WORKER, ()))  # nothing named: nothing sent
    with pytest.raises(conveyor.SchedulerUnavailable):
        transport.call(Ping(WORKER))  # the other calls still retry
    assert slept


def test_the_http_release_names_the_runs_tasks(tmp_path: Path, marker: str) -> None:
    """Against `conveyor scheduler`: a release naming one task leaves the other registered
    under the same worker id listed after remove_delay; the legacy body releases the rest."""
    server = _server(tmp_path, marker, remove_delay=1)
    server.start()
    try:
        config = conveyor.Config().with_overrides(scheduler_url=server.url)
        transport = HttpTransport(config)
        transport.call(AddTasks(WORKER, (TaskSpec("keep-A"), TaskSpec("drop-B"))))
        transport.call(Release(WORKER, ("drop-B",)))
        wait_for(lambda: "drop-B" not in _listed(server), 30, "B to be pruned")
        assert "keep-A" in _listed(server)
        reply = server.request("POST", "/api/v1/release", {"worker_id": WORKER})
        assert reply.status == 200, reply
        wait_for(lambda: "keep-A" not in _listed(server), 30, "A to be pruned")
    finally:
        server.kill()
