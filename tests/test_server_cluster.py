"""Several processes around one central scheduler (SPEC §4.2, §6, §7), tested black-box.

A real ``python -m conveyor scheduler`` runs on a free loopback port with a token; workers are
real ``conveyor run`` / ``conveyor worker`` processes given the token through
``CONVEYOR_SCHEDULER__TOKEN``. Task classes live in a module written into tmp_path (the
``task_module`` fixture) and talk to the tests through files in their ``root`` directory: each
run appends the task id to ``ran.log`` (opened O_APPEND, so concurrent writers never mix
lines), blocking tasks wait for a file the test creates, and tasks write their pid. Tests poll
the server's task list with deadlines; nothing is synchronised by sleeping. Every process a test
starts carries a per-test marker in its environment and is killed, with its tree, afterwards.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.protocol import AddTasks
from conveyor.scheduler import TaskSpec
from conveyor.testing.processes import (
    SchedulerProcess,
    kill_marked,
    kill_tree,
    wait_for,
)
from conveyor.testing.processes import child_env as processes_env
from conveyor.transports.http import HttpTransport

WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

LOOPBACK = "127.0.0.1"
TOKEN = "s3cret-token"
MARKER_VARIABLE = "SERVERTEST_MARKER"  # not CONVEYOR_*: those are configuration overrides
RIDE_OUT_OUTAGES = {
    "CONVEYOR_SCHEDULER__RPC_RETRIES": "30",
    "CONVEYOR_SCHEDULER__RPC_RETRY_WAIT": "0.1",
    "CONVEYOR_SCHEDULER__RPC_RETRY_MAX_WAIT": "0.5",
}

TASKS = '''
import os
import time

import conveyor
from conveyor.testing.processes import append_line, put, wait_file






class Base(conveyor.Task):
    """A task whose files live in ``root``."""

    root = conveyor.Parameter()

    def path(self, name):
        return os.path.join(self.root, name)

    def finish(self):
        """Record the side effect (once per run) and write the output."""
        append_line(self.path("ran.log"), self.task_id)
        with self.output().open("w") as f:
            f.write(str(os.getpid()))


class Leaf(Base):
    """With ``free`` >= 0, only the first ``free`` leaves to start run before ``gate`` exists."""

    n = conveyor.IntParameter()
    free = conveyor.IntParameter(default=-1)

    def output(self):
        return conveyor.LocalTarget(self.path(f"leaf-{self.n}.out"))

    def run(self):
        if self.free >= 0:
            append_line(self.path("started.log"), self.task_id)
            with open(self.path("started.log"), encoding="utf-8") as f:
                position = f.read().split().index(self.task_id)
            if position >= self.free and not wait_file(self.path("gate"), 60):
                raise RuntimeError("the gate never opened")
        self.finish()


class Root(Base):
    """Needs ``count - 1`` leaves."""

    count = conveyor.IntParameter()
    free = conveyor.IntParameter(default=-1)

    def requires(self):
        return [Leaf(root=self.root, n=n, free=self.free) for n in range(self.count - 1)]

    def output(self):
        return conveyor.LocalTarget(self.path("root.out"))

    def run(self):
        self.finish()


class Blocker(Base):
    """Writes ``<tag>.pid``, waits (bounded) for ``<tag>.go``, then finishes."""

    tag = conveyor.Parameter(default="b")

    def output(self):
        return conveyor.LocalTarget(self.path(f"{self.tag}.out"))

    def run(self):
        put(self.path(f"{self.tag}.pid"), str(os.getpid()))
        if not wait_file(self.path(f"{self.tag}.go"), 60):
            raise RuntimeError("never released")
        self.finish()
'''

FORBIDDEN = """
import conveyor

open({marker!r}, "w").close()  # importing this module is what the test must never see


class Evil(conveyor.Task):
    root = conveyor.Parameter()

    def run(self):
        open({marker!r} + ".ran", "w").close()
"""


# --- helpers -------------------------------------------------------------------------------------


def child_env(directory: Path, marker: str, **extra: str) -> dict[str, str]:
    """Our environment without CONVEYOR_* variables, ``directory`` on PYTHONPATH, the marker."""
    return processes_env(directory, MARKER_VARIABLE, marker, **extra)


def read(path: Path) -> str:
    """A file's text, or '' if it does not exist."""
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


class Server(SchedulerProcess):
    """One ``conveyor scheduler`` subprocess on a loopback port; restartable on the same state."""

    def __init__(self, directory: Path, config: Path, marker: str) -> None:
        """Describe the server; nothing is started yet."""
        super().__init__(directory, config, child_env(directory, marker))
        self.marker = marker

    def request(
        self, method: str, path: str, body: Any = None, *, auth: bool = True
    ) -> tuple[int, Any]:
        """One request; returns the status and the JSON answer."""
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {TOKEN}"
        data = None if body is None else json.dumps(body)
        conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=15)
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            status, raw = response.status, response.read()
        finally:
            conn.close()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw

    def tasks(self) -> dict[str, dict[str, Any]]:
        """The server's task list, by task id."""
        status, answer = self.request("GET", "/api/v1/tasks")
        assert status == 200, (status, answer)
        return {t["task_id"]: t for t in answer["tasks"]}

    def statuses(self) -> dict[str, str]:
        """Task id → status, from the task list."""
        return {task_id: t["status"] for task_id, t in self.tasks().items()}

    def explanation(self, task_id: str) -> str:
        """The stored failure explanation of a task."""
        status, answer = self.request("POST", "/api/v1/explanation", {"task_id": task_id})
        assert status == 200, (status, answer)
        return str(answer["explanation"])


class Processes:
    """The CLI processes of one test: started in their own session, output to files."""

    def __init__(self, directory: Path, marker: str) -> None:
        """Processes run in ``directory`` with ``marker`` in their environment."""
        self.directory = directory
        self.marker = marker
        self.started: list[subprocess.Popen[bytes]] = []
        self.names: dict[int, str] = {}

    def start(
        self, name: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``python -m conveyor *args``; stdout/stderr go to ``<name>.stdout/.stderr``."""
        extra = {"CONVEYOR_SCHEDULER__TOKEN": TOKEN, **(env or {})}
        stdout, stderr = self.directory / f"{name}.stdout", self.directory / f"{name}.stderr"
        with stdout.open("wb") as out, stderr.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "conveyor", *args],
                cwd=self.directory,
                env=child_env(self.directory, self.marker, **extra),
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.names[proc.pid] = name
        self.started.append(proc)
        return proc

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        """What a process printed (stdout, then stderr)."""
        name = self.names[proc.pid]
        return read(self.directory / f"{name}.stdout") + read(self.directory / f"{name}.stderr")

    def wait(self, proc: subprocess.Popen[bytes], timeout: float) -> int:
        """Wait (bounded) for ``proc`` to exit; its exit code."""
        try:
            return int(proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            name, text = self.names[proc.pid], self.output(proc)[-3000:]
            raise AssertionError(f"{name} did not exit within {timeout} s: {text}") from None

    def kill_all(self) -> None:
        """Kill every process tree started here and reap it."""
        for proc in self.started:
            kill_tree(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


def ran_lines(root: Path) -> list[str]:
    """The task ids appended to ``ran.log``, one per run."""
    return read(root / "ran.log").split()


def write_config(path: Path, text: str) -> Path:
    """Write a worker.toml and return its path."""
    path.write_text(text, encoding="utf-8")
    return path


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A per-test marker; every process carrying it is killed after the test."""
    monkeypatch.chdir(tmp_path)
    value = uuid.uuid4().hex
    monkeypatch.setenv(MARKER_VARIABLE, value)
    yield value
    kill_marked(MARKER_VARIABLE, value)


@pytest.fixture
def procs(tmp_path: Path, marker: str) -> Iterator[Processes]:
    """Starts CLI processes for the test and kills them all afterwards."""
    registry = Processes(tmp_path, marker)
    try:
        yield registry
    finally:
        registry.kill_all()


@pytest.fixture
def make_server(tmp_path: Path, marker: str) -> Iterator[Callable[[str], Server]]:
    """Builds a started server from extra worker.toml text (a token is always set)."""
    servers: list[Server] = []

    def make(extra: str = "") -> Server:
        text = f'[server]\ntoken = "{TOKEN}"\n{extra}'
        server = Server(tmp_path, write_config(tmp_path / "server.toml", text), marker)
        servers.append(server)
        server.start()
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.kill()


@pytest.fixture
def mod(task_module: WriteModule) -> str:
    """The name of the task module (Root, Leaf, Blocker) importable from tmp_path."""
    return task_module(TASKS)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """The directory the tasks write into."""
    path = tmp_path / "out"
    path.mkdir()
    return path


# --- tests ---------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_two_workers_share_a_200_task_graph_and_run_each_task_once(
    make_server: Callable[[str], Server], procs: Processes, mod: str, out: Path
) -> None:
    """Two `conveyor run --workers 2` share 200 tasks: each runs once, all DONE, exit 0 or 5."""
    server = make_server("")
    args = ["run", f"{mod}.Root", "--root", str(out), "--count", "200"]
    args += ["--scheduler-url", server.url, "--workers", "2"]
    workers = [procs.start(f"worker{i}", *args) for i in (1, 2)]
    codes = [procs.wait(w, timeout=100) for w in workers]

    for worker, code in zip(workers, codes, strict=True):
        assert code in (0, 5), procs.output(worker)[-3000:]
    assert 0 in codes, codes
    statuses = server.statuses()
    assert len(statuses) == 200
    assert set(statuses.values()) == {"DONE"}, collections.Counter(statuses.values())
    runs = collections.Counter(ran_lines(out))
    assert set(runs) == set(statuses)
    assert {t: n for t, n in runs.items() if n != 1} == {}, "tasks run more than once"
    assert len(list(out.glob("leaf-*.out"))) == 199
    assert (out / "root.out").exists()
    for worker in workers:
        assert TOKEN not in procs.output(worker)


@pytest.mark.timeout(120)
def test_kill_9_of_the_server_mid_run_loses_nothing_acknowledged(
    make_server: Callable[[str], Server], procs: Processes, mod: str, out: Path
) -> None:
    """kill -9 of the server mid-run, restart on the same state: DONE stays DONE, none re-run."""
    server = make_server("")
    args = ["run", f"{mod}.Root", "--root", str(out), "--count", "40", "--free", "10"]
    worker = procs.start(
        "worker", *args, "--scheduler-url", server.url, "--workers", "2", env=RIDE_OUT_OUTAGES
    )

    def stuck_at_the_gate() -> dict[str, str] | None:
        statuses = server.statuses()
        counts = collections.Counter(statuses.values())
        return statuses if counts["DONE"] >= 10 and counts["RUNNING"] >= 2 else None

    before = wait_for(stuck_at_the_gate, 60, "10 leaves DONE and 2 waiting at the gate")
    done_before = {t for t, s in before.items() if s == "DONE"}
    running_before = {t for t, s in before.items() if s == "RUNNING"}
    assert worker.poll() is None
    server.kill()
    server.start()

    after = server.statuses()
    assert {t: after.get(t) for t in done_before} == {t: "DONE" for t in done_before}
    assert {t: after.get(t) for t in running_before} == {t: "RUNNING" for t in running_before}
    (out / "gate").touch()
    assert procs.wait(worker, timeout=90) == 0, procs.output(worker)[-3000:]

    statuses = server.statuses()
    assert len(statuses) == 40
    assert set(statuses.values()) == {"DONE"}, collections.Counter(statuses.values())
    runs = collections.Counter(ran_lines(out))
    assert set(runs) == set(statuses)
    assert {t: n for t, n in runs.items() if n != 1} == {}, "tasks run more than once"


@pytest.mark.timeout(120)
def test_a_sigkilled_worker_loses_its_task_which_fails_then_runs_elsewhere(
    make_server: Callable[[str], Server], procs: Processes, mod: str, out: Path
) -> None:
    """A SIGKILLed worker's task is FAILED after worker_disconnect_delay; a rerun does it.

    The delay (6 s) leaves a loaded machine time to look at the task between the kill and the
    end of the delay, and a live worker's pings (every second) time to arrive."""
    server = make_server("[scheduler]\nworker_disconnect_delay = 6\nretry_delay = 1\n")
    args = ["run", f"{mod}.Blocker", "--root", str(out), "--scheduler-url", server.url]
    first = procs.start("first", *args)
    wait_for((out / "b.pid").exists, 30, "the task to start")
    (task_id,) = wait_for(
        lambda: [t for t, s in server.statuses().items() if s == "RUNNING"], 30, "RUNNING"
    )

    os.killpg(first.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    first.wait(timeout=10)
    assert server.statuses()[task_id] == "RUNNING"  # not before worker_disconnect_delay
    wait_for(lambda: server.statuses()[task_id] == "FAILED", 60, "the task to become FAILED")
    # the last ping came at most ping_interval (1 s) before the kill; the delay is 6 s
    assert time.monotonic() - killed_at >= 4.5
    assert server.explanation(task_id)
    assert ran_lines(out) == []

    wait_for(lambda: server.statuses()[task_id] == "PENDING", 60, "the retry (retry_delay = 1)")
    (out / "b.go").touch()
    second = procs.start("second", *args)
    assert procs.wait(second, timeout=60) == 0, procs.output(second)[-3000:]
    assert server.statuses()[task_id] == "DONE"
    assert ran_lines(out) == [task_id]
    assert int(read(out / "b.pid")) != first.pid


def register(server: Server, tmp_path: Path, specs: list[TaskSpec]) -> None:
    """Register ``specs`` as worker "registrar" through the http transport."""
    registrar = write_config(
        tmp_path / "registrar.toml",
        f'[scheduler]\ntransport = "http"\nurl = "{server.url}"\ntoken = "{TOKEN}"\n',
    )
    HttpTransport(conveyor.load_config(registrar)).call(AddTasks("registrar", tuple(specs)))


def spec_of(task: conveyor.Task) -> TaskSpec:
    """What a worker registers for ``task``."""
    return TaskSpec(
        task_id=task.task_id,
        family=task.task_family,
        module=task.task_module,
        params=task.to_str_params(),
    )


def start_assistant(
    procs: Processes, server: Server, tmp_path: Path, package: str
) -> subprocess.Popen[bytes]:
    """`conveyor worker` for ``server`` allowed to load tasks from ``package``; its attempts
    run inline (in the assistant's own process, whose pid the tasks write)."""
    text = f'[worker]\ntask_modules = ["{package}"]\nexecutor = "inline"\n'
    config = write_config(tmp_path / "assistant.toml", text)
    return procs.start(
        "assistant", "worker", "--scheduler-url", server.url, "--config", str(config)
    )


@pytest.mark.timeout(120)
def test_an_assistant_runs_registered_tasks_and_refuses_modules_outside_task_modules(
    make_server: Callable[[str], Server],
    procs: Processes,
    task_module: WriteModule,
    tmp_path: Path,
    out: Path,
) -> None:
    """`conveyor worker` runs tasks another worker registered, refusing unlisted modules unseen."""
    server = make_server("")
    allowed = task_module(TASKS, package=True)  # "<package>.tasks": allowed as a submodule
    package = allowed.split(".")[0]
    forbidden = f"{package}_evil"  # shares the package's prefix, is not a submodule of it
    marker_file = tmp_path / "evil-imported"
    (tmp_path / f"{forbidden}.py").write_text(FORBIDDEN.format(marker=str(marker_file)))
    tasks_mod = importlib.import_module(allowed)
    leaves = [tasks_mod.Leaf(root=str(out), n=n) for n in range(3)]
    blocker = tasks_mod.Blocker(root=str(out))  # keeps the assistant busy until the SIGTERM
    evil_id = "Evil_refused_task"
    evil = TaskSpec(task_id=evil_id, family="Evil", module=forbidden, params={"root": str(out)})
    register(server, tmp_path, [*map(spec_of, leaves), evil, spec_of(blocker)])

    assistant = start_assistant(procs, server, tmp_path, package)
    leaf_ids = [t.task_id for t in leaves]

    def settled() -> bool:
        assert assistant.poll() is None, procs.output(assistant)[-3000:]
        statuses = server.statuses()
        return (
            statuses[evil_id] == "FAILED"
            and all(statuses[t] == "DONE" for t in leaf_ids)
            and statuses[blocker.task_id] == "RUNNING"
        )

    wait_for(settled, 60, "the leaves DONE, the foreign task FAILED, the blocker RUNNING")
    assert sorted(ran_lines(out)) == sorted(leaf_ids)
    for n in range(3):
        assert int(read(out / f"leaf-{n}.out")) == assistant.pid  # ran by the assistant
    assert not marker_file.exists(), "the refused module was imported"
    assert not Path(f"{marker_file}.ran").exists()
    assert "task_modules" in server.explanation(evil_id)

    assistant.send_signal(signal.SIGTERM)
    assert procs.wait(assistant, timeout=30) == 143, procs.output(assistant)[-3000:]
    wait_for(
        lambda: server.statuses()[blocker.task_id] == "FAILED", 10, "the interrupted task FAILED"
    )
    assert not (out / "b.out").exists()


@pytest.mark.timeout(120)
def test_an_idle_assistant_keeps_waiting_for_work_until_a_signal(
    make_server: Callable[[str], Server],
    procs: Processes,
    task_module: WriteModule,
    tmp_path: Path,
    out: Path,
) -> None:
    """An assistant started before any task exists waits, runs what comes later, exits 143."""
    server = make_server("")
    allowed = task_module(TASKS, package=True)
    package = allowed.split(".")[0]
    assistant = start_assistant(procs, server, tmp_path, package)

    def known() -> bool:
        assert assistant.poll() is None, "the assistant exited: " + procs.output(assistant)[-2000:]
        status, answer = server.request("GET", "/api/v1/workers")
        return status == 200 and any(w["assistant"] for w in answer["workers"])

    wait_for(known, 30, "the assistant to ask the server for work")
    leaf = importlib.import_module(allowed).Leaf(root=str(out), n=7)
    register(server, tmp_path, [spec_of(leaf)])
    wait_for(lambda: known() and server.statuses()[leaf.task_id] == "DONE", 60, "the leaf DONE")
    assistant.send_signal(signal.SIGTERM)
    assert procs.wait(assistant, timeout=30) == 143, procs.output(assistant)[-3000:]


@pytest.mark.timeout(120)
def test_results_wait_for_a_scheduler_that_is_down_longer_than_the_retry_budget(
    make_server: Callable[[str], Server], procs: Processes, mod: str, out: Path
) -> None:
    """A task finishing while the server is down is reported once it is back; exit 0."""
    server = make_server("")
    env = {
        "CONVEYOR_SCHEDULER__RPC_RETRIES": "2",
        "CONVEYOR_SCHEDULER__RPC_RETRY_WAIT": "0.1",
        "CONVEYOR_SCHEDULER__RPC_GIVE_UP_AFTER": "60",
        "CONVEYOR_LOGGING__FORMAT": "json",
    }
    args = ["run", f"{mod}.Blocker", "--root", str(out), "--scheduler-url", server.url]
    worker = procs.start("worker", *args, env=env)
    wait_for((out / "b.pid").exists, 30, "the task to start")
    (task_id,) = wait_for(
        lambda: [t for t, s in server.statuses().items() if s == "RUNNING"], 10, "RUNNING"
    )

    server.kill()
    (out / "b.go").touch()
    wait_for((out / "b.out").exists, 30, "the task to finish while the server is down")

    def finished_in_the_log() -> bool:
        for line in read(Path(procs.directory) / "worker.stderr").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and (event.get("task_id"), event.get("state")) == (
                    task_id,
                    "DONE",
                ):
                    return True
        return False

    # SPEC §8: the transition is logged; the report to the scheduler has failed by then
    wait_for(finished_in_the_log, 30, "the worker to log the task's success")
    assert worker.poll() is None, procs.output(worker)[-3000:]
    server.start()

    assert procs.wait(worker, timeout=60) == 0, procs.output(worker)[-3000:]
    assert server.statuses()[task_id] == "DONE"
    assert ran_lines(out) == [task_id]
