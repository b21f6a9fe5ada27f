"""The process executors ``fork`` and ``subprocess`` (SPEC §3, §4.1, §6), tested black-box.

Task classes live in a module written into tmp_path at test time (the ``task_module`` fixture);
tmp_path is also put on ``PYTHONPATH`` so that a fresh interpreter (the ``subprocess`` executor,
the ``conveyor run`` CLI) can import them by name. Tasks talk to the tests through files in their
``root`` directory: a task writes its pid, the test waits for the file (a poll bounded by a
deadline), acts on the process, and releases the task by creating another file.

Every process a test starts directly or indirectly inherits a per-test environment marker; an
autouse fixture kills whatever still carries it (and any child of the test process) after the
test, so that a failing test leaves no orphans behind.

Nothing here depends on the machine's speed. A timeout's clock includes the attempt's start-up
(an interpreter start under ``subprocess``: seconds on a loaded 2-core machine), so a test that
needs run() to get somewhere before the timeout fires gives it :data:`SET_UP` seconds, and a
run() that must be stopped by the timeout waits until it is killed. Deadlines of waits only
bound a failure, so they are generous.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import conveyor
from conveyor.protocol import encode
from conveyor.testing import RecordingPlugin
from conveyor.testing.processes import alive, gone_within, wait_for

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the run_cli fixture (conftest.py)
WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

PROCESS_EXECUTORS = ["fork", "subprocess"]
SET_UP = 10  # seconds: a timeout that must not fire before run() has set itself up (see above)
MARKER_VARIABLE = "PROCTEST_MARKER"  # not CONVEYOR_*: those are configuration overrides

TASKS = (
    f"SET_UP = {SET_UP}\n"
    + '''
import logging
import os
import signal
import subprocess
import sys
import time

import structlog

import conveyor
from conveyor.testing.processes import put, wait_file



class Base(conveyor.Task):
    """A task whose files live in ``root``; its output is ``<root>/<Family>-<tag>.out``."""

    root = conveyor.Parameter()
    tag = conveyor.Parameter(default="0")

    def path(self, name):
        return os.path.join(self.root, name)

    def output(self):
        return conveyor.LocalTarget(self.path(f"{type(self).__name__}-{self.tag}.out"))

    def finish(self, text="ok"):
        with self.output().open("w") as f:
            f.write(text)


class Leaf(Base):
    """Writes its output at once."""

    def run(self):
        self.finish(self.tag)


class Group(conveyor.WrapperTask):
    """Requires ``Leaf`` for each tag in ``tags``."""

    root = conveyor.Parameter()
    tags = conveyor.ListParameter()

    def requires(self):
        return [Leaf(root=self.root, tag=t) for t in self.tags]


class Many(conveyor.WrapperTask):
    """Requires ``count`` trivial leaves."""

    root = conveyor.Parameter()
    count = conveyor.IntParameter()

    def requires(self):
        return [Leaf(root=self.root, tag=str(n)) for n in range(self.count)]


class Victim(Base):
    """Writes its pid, then waits (bounded) for a file that the test never creates."""

    def run(self):
        put(self.path("victim.pid"), str(os.getpid()))
        wait_file(self.path("never"), 30)
        self.finish()


class Sibling(Base):
    """Announces it is running, then waits for ``release`` (bounded) and finishes."""

    def run(self):
        put(self.path("sibling.started"), str(os.getpid()))
        wait_file(self.path("release"), 30)
        self.finish()


class KillScene(conveyor.WrapperTask):
    """A victim, a sibling running at the same time, and three plain leaves."""

    root = conveyor.Parameter()

    def requires(self):
        leaves = [Leaf(root=self.root, tag=t) for t in ("a", "b", "c")]
        return [Victim(root=self.root), Sibling(root=self.root), *leaves]


class ExitsEarly(Base):
    """Leaves through os._exit(code) without reporting anything."""

    code = conveyor.IntParameter()

    def run(self):
        put(self.path("exit.time"), repr(time.time()))
        os._exit(self.code)


class IgnoresTerm(Base):
    """Has a SET_UP-second timeout, ignores SIGTERM and sleeps until it is killed (bounded)."""

    worker_timeout = SET_UP

    def run(self):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        put(self.path("ignores.pid"), str(os.getpid()))
        time.sleep(600)
        self.finish()


# shells (no interpreter start-up to wait for): the child ignores SIGTERM (and so does what it
# starts, `sleep` and the grandchild too), writes its pid to $1, starts the grandchild ($3, which
# writes its pid to $2), then becomes `sleep`
CHILD_CODE = (
    'trap "" TERM; echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; sh -c "$3" grand "$2" & exec sleep 600'
)
GRANDCHILD_CODE = 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 600'


class SpawnsTree(Base):
    """Starts a child and a grandchild that ignore SIGTERM, then sleeps ignoring SIGTERM too."""

    marker = conveyor.Parameter()

    def run(self):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        put(self.path("tree-task.pid"), str(os.getpid()))
        env = {**os.environ, "CONVEYOR_TEST_MARKER": self.marker}
        child, grandchild = self.path("tree-child.pid"), self.path("tree-grandchild.pid")
        args = ["sh", "-c", CHILD_CODE, "child", child, grandchild, GRANDCHILD_CODE]
        subprocess.Popen(args, env=env)
        wait_file(child, 60)
        wait_file(grandchild, 60)
        put(self.path("tree.built"), "yes")
        time.sleep(600)
        self.finish()


class TermNoticer(Base):
    """Times out after SET_UP s; on SIGTERM it writes ``got-term`` and lives on until the worker
    has reported AfterGrace succeeded (``AfterGrace-succeeded``, written by the test's plugin;
    bounded), so the grace period provably overlaps AfterGrace whatever the load."""

    worker_timeout = SET_UP

    def run(self):
        noticed_at = []

        def noticed(signum, frame):
            # (once: the tree is signalled by group and by pid, so a second SIGTERM can come
            # while this one writes, and put's rename would then find its file gone)
            if not noticed_at:
                noticed_at.append(time.time())
                put(self.path("got-term"), repr(noticed_at[0]))

        signal.signal(signal.SIGTERM, noticed)
        deadline = time.time() + 120
        while not os.path.exists(self.path("AfterGrace-succeeded")) and time.time() < deadline:
            time.sleep(0.05)


class WaitsForTerm(Base):
    """Waits (bounded) until TermNoticer got its SIGTERM."""

    def run(self):
        wait_file(self.path("got-term"), 120)
        self.finish()


class AfterGrace(Base):
    """Can only start once TermNoticer is in its kill grace period."""

    def requires(self):
        return WaitsForTerm(root=self.root)

    def run(self):
        self.finish()


class GraceScene(conveyor.WrapperTask):
    """TermNoticer next to the chain that runs during its grace period."""

    root = conveyor.Parameter()

    def requires(self):
        return [TermNoticer(root=self.root), AfterGrace(root=self.root)]


class Reporter(Base):
    """Reports a status message, progress and a tracking URL, and yields a dynamic dependency."""

    def run(self):
        self.set_status_message("half way")
        self.set_progress_percentage(50)
        self.set_tracking_url("http://tracking.invalid/job/7")
        dynamic = yield Leaf(root=self.root, tag="dyn")
        with dynamic.open("r") as f:
            text = f.read()
        self.set_status_message("all done")
        self.set_progress_percentage(100)
        self.finish(text + "+reporter")


class Logs(Base):
    """Logs ``message`` through the standard logging module and through structlog."""

    message = conveyor.Parameter()

    def run(self):
        logging.getLogger("proctest.task").warning("%s via stdlib", self.message)
        structlog.get_logger().warning(f"{self.message} via structlog")
        self.finish()


class WithTimeout(Base):
    """Has a 1.5-second timeout and sleeps until it is killed (bounded)."""

    worker_timeout = 1.5

    def run(self):
        time.sleep(600)
        self.finish()


class HugeError(Base):
    """Raises with a 20 MB message."""

    def run(self):
        raise RuntimeError("x" * 20_000_000)


class HugeExplanation(Base):
    """Fails; on_failure() explains it with 20 MB of text."""

    def run(self):
        raise RuntimeError("short")

    def on_failure(self, exception):
        return "y" * 20_000_000


class HugeStatus(Base):
    """Sets a 20 MB status message, then succeeds."""

    def run(self):
        self.set_status_message("z" * 20_000_000)
        self.finish()


class Blocking(Base):
    """Writes its pid, waits (bounded) for ``go`` and finishes."""

    def run(self):
        put(self.path("blocking.pid"), str(os.getpid()))
        wait_file(self.path("go"), 50)
        self.finish()


class AfterBlocking(Base):
    """Needs Blocking."""

    def requires(self):
        return Blocking(root=self.root)

    def run(self):
        self.finish()


class ForeignLoaded(Base):
    """Rebuilt in its attempt's process by a task loader that is not installed."""

    task_loader = "no-such-loader"

    def run(self):
        self.finish()
'''
)


# --- helpers -------------------------------------------------------------------------------------


def read_pid(path: Path, timeout: float = 30) -> psutil.Process:
    """Wait for a pid file written by a task; return that (still existing) process."""
    text = wait_for(lambda: path.exists() and path.read_text().strip(), timeout, str(path))
    return psutil.Process(int(text))


def process_from(path: Path) -> psutil.Process | None:
    """The process whose pid a task wrote to ``path`` (after the run), or None if it is gone."""
    try:
        return psutil.Process(int(path.read_text().strip()))
    except psutil.NoSuchProcess:
        return None


def text_of(target: conveyor.LocalTarget) -> str:
    """The contents of a LocalTarget."""
    with target.open("r") as f:
        return f.read()


def with_marker(variable: str, value: str) -> list[psutil.Process]:
    """Live processes whose environment has ``variable=value`` (this process excluded)."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(variable) == value and alive(proc):
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
    return found


def kill_all(procs: list[psutil.Process]) -> None:
    """SIGKILL every process of ``procs`` that is still running, and reap our own children."""
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)


def make_config(directory: Path, **worker: Any) -> conveyor.Config:
    """Write a worker.toml with these ``[worker]`` keys into ``directory`` and load it."""
    lines = ["[worker]"]
    for key, value in worker.items():
        lines.append(f"{key} = {json.dumps(value)}")
    path = directory / f"worker-{uuid.uuid4().hex[:8]}.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return conveyor.load_config(path)


def run_worker(task: Any, rec: RecordingPlugin, directory: Path, **worker: Any) -> Any:
    """Run ``task`` on a Worker with these ``[worker]`` keys and ``rec``; return its report."""
    with conveyor.Worker(config=make_config(directory, **worker), plugins=[rec]) as w:
        w.add(task)
        w.run()
    assert w.report is not None
    return w.report


def log_events(stderr: str) -> list[dict[str, Any]]:
    """The JSON objects among the lines of ``stderr``."""
    events = []
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


VOLATILE = {"timestamp", "duration", "worker_id", "executor"}


def comparable(rec: RecordingPlugin, task_id: str) -> list[tuple[str, dict[str, Any]]]:
    """One task's hook calls with their event fields, minus those that differ run to run."""
    out = []
    for record in rec.for_task(task_id):
        fields = dataclasses.asdict(record.event)
        out.append((record.hook, {k: v for k, v in fields.items() if k not in VOLATILE}))
    return out


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run in tmp_path with a per-test marker in the environment; kill leftovers afterwards."""
    monkeypatch.chdir(tmp_path)
    marker = uuid.uuid4().hex
    monkeypatch.setenv(MARKER_VARIABLE, marker)
    yield marker
    leftovers = psutil.Process().children(recursive=True) + with_marker(MARKER_VARIABLE, marker)
    kill_all(leftovers)


@pytest.fixture
def mod(task_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The task module, imported here and importable by name in fresh interpreters."""
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    name = task_module(TASKS)
    __import__(name)
    return sys.modules[name]


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``conveyor run`` child: ours, with tmp_path on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def start_cli(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    """Start ``python -m conveyor run *args`` in its own session; output goes to files."""
    out = (tmp_path / "cli.stdout").open("wb")
    err = (tmp_path / "cli.stderr").open("wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "conveyor", "run", *args],
            cwd=tmp_path,
            env=cli_env(tmp_path, CONVEYOR_WORKER__KILL_GRACE="2"),
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    finally:
        out.close()
        err.close()


def cli_output(tmp_path: Path) -> tuple[str, str]:
    """The stdout and stderr of the process started by ``start_cli``."""
    read = lambda name: (tmp_path / name).read_text(encoding="utf-8", errors="replace")  # noqa: E731
    return read("cli.stdout"), read("cli.stderr")


def stop_cli(proc: subprocess.Popen[bytes], *others: psutil.Process | None) -> None:
    """Kill the CLI process, everything it started that we know of, and reap it."""
    procs = [p for p in others if p is not None]
    with contextlib.suppress(psutil.NoSuchProcess):
        procs += psutil.Process(proc.pid).children(recursive=True)
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    kill_all(procs)


# --- hooks and scheduler updates from child processes -------------------------------------------


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_messages_progress_urls_and_dynamic_deps_match_inline(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """Status, progress, tracking URL and dynamic deps from a child give inline's hooks and list."""
    root = tmp_path / "work"
    reporter = mod.Reporter(root=str(root))
    dynamic = mod.Leaf(root=str(root), tag="dyn")
    runs: dict[str, tuple[RecordingPlugin, list[dict[str, Any]], Any]] = {}
    for name in ("inline", executor):
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        rec = RecordingPlugin()
        scheduler = conveyor.Scheduler()
        config = make_config(tmp_path, executor=name, workers=1)
        with conveyor.Worker(scheduler, config=config, plugins=[rec]) as worker:
            assert worker.add(reporter)
            assert worker.run() is True
        runs[name] = (rec, encode(scheduler.task_list()), worker.report)
    rec, task_list, report = runs[executor]

    assert [e.executor for e in rec.events("task_started", reporter.task_id)] == [executor] * 2
    assert [e.message for e in rec.events("task_status_message", reporter.task_id)] == [
        "half way",
        "half way",
        "all done",
    ]
    assert [e.percentage for e in rec.events("task_progress", reporter.task_id)] == [50, 50, 100]
    urls = [e.url for e in rec.events("task_tracking_url", reporter.task_id)]
    assert urls == ["http://tracking.invalid/job/7"] * 2
    discovered = rec.events("task_dependencies_discovered", reporter.task_id)
    assert [(e.dependencies, e.dynamic) for e in discovered if e.dynamic] == [
        ((dynamic.task_id,), True)
    ]
    assert len(rec.events("task_succeeded", reporter.task_id)) == 1
    assert (root / "Reporter-0.out").read_text() == "dyn+reporter"
    assert report.states == {reporter.task_id: "DONE", dynamic.task_id: "DONE"}

    entries = {e["task_id"]: e for e in task_list}
    assert entries[reporter.task_id]["status"] == "DONE"
    assert entries[reporter.task_id]["status_message"] == "all done"
    assert entries[reporter.task_id]["progress"] == 100
    assert entries[reporter.task_id]["tracking_url"] == "http://tracking.invalid/job/7"
    assert entries[dynamic.task_id]["status"] == "DONE"

    inline_rec, inline_list, _ = runs["inline"]
    assert comparable(rec, dynamic.task_id) == comparable(inline_rec, dynamic.task_id)
    # a process attempt runs run() again from the top, so the three notes before the yield come
    # again after the second start; inline resumes the generator (SPEC §2.1): otherwise equal
    from_top = comparable(rec, reporter.task_id)
    second_start = [i for i, (hook, _) in enumerate(from_top) if hook == "conveyor_task_started"][1]
    replayed = from_top[second_start + 1 : second_start + 4]
    assert [hook for hook, _ in replayed] == [
        "conveyor_task_status_message",
        "conveyor_task_progress",
        "conveyor_task_tracking_url",
    ]
    resumed = from_top[: second_start + 1] + from_top[second_start + 4 :]
    assert resumed == comparable(inline_rec, reporter.task_id)
    assert [e.message for e in inline_rec.events("task_status_message", reporter.task_id)] == [
        "half way",
        "all done",
    ]

    def strip(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {e["task_id"]: {k: v for k, v in e.items() if k != "worker"} for e in entries}

    for key, entry in strip(task_list).items():
        other = strip(inline_list)[key]
        assert entry == other, {k: (entry[k], other[k]) for k in entry if entry[k] != other[k]}


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_child_log_records_carry_the_task_id(
    executor: str, mod: Any, run_cli: RunCli, tmp_path: Path
) -> None:
    """Records logged inside run() through logging and structlog carry the task's task_id."""
    message = f"hello-{uuid.uuid4().hex[:10]}"
    task = mod.Logs(root=str(tmp_path), message=message)
    args = [f"{mod.__name__}.Logs", "--root", str(tmp_path), "--message", message]
    options = ["--executor", executor, "--log-format", "json", "--log-level", "info"]
    proc = run_cli("run", *args, *options, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = log_events(proc.stderr)
    started = [e for e in events if e.get("event") == "task_started"]
    assert [e.get("executor") for e in started] == [executor]
    for via in ("stdlib", "structlog"):
        text = f"{message} via {via}"
        mine = [e for e in events if text in json.dumps(e)]
        assert mine, f"no JSON log line with {text!r} on stderr:\n{proc.stderr}"
        assert [e.get("task_id") for e in mine] == [task.task_id] * len(mine), mine


# --- executor selection --------------------------------------------------------------------------


@pytest.mark.parametrize(("workers", "expected"), [(1, "inline"), (2, "fork")])
def test_auto_executor_depends_on_workers(
    workers: int, expected: str, mod: Any, tmp_path: Path
) -> None:
    """``auto`` runs inline with one worker slot and forks with two."""
    rec = RecordingPlugin()
    group = mod.Group(root=str(tmp_path), tags=["a", "b"])
    config = make_config(tmp_path, executor="auto", workers=workers)
    with conveyor.Worker(config=config, plugins=[rec]) as worker:
        assert worker.add(group)
        assert worker.run() is True
    started = [e for e in rec.events("task_started") if e.family == "Leaf"]
    assert [e.executor for e in started] == [expected, expected]


@pytest.mark.parametrize("executor", ["inline", "thread"])
def test_timeout_under_a_non_killing_executor_is_isolated_in_a_child(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """A task with worker_timeout under inline/thread runs in a forked child and times out."""
    rec = RecordingPlugin()
    task = mod.WithTimeout(root=str(tmp_path))
    config = make_config(tmp_path, executor=executor, workers=1, kill_grace=1)
    with conveyor.Worker(config=config, plugins=[rec]) as worker:
        worker.add(task)
        assert worker.run() is False
    assert [e.executor for e in rec.events("task_started", task.task_id)] == ["fork"]
    [timed_out] = rec.events("task_timed_out", task.task_id)
    assert timed_out.timeout == pytest.approx(1.5)
    assert rec.events("task_succeeded", task.task_id) == []
    assert worker.report is not None
    assert worker.report.states[task.task_id] == "FAILED"
    assert worker.report.exit_code == 1
    # (an inline run() could not have timed out; whether run() began before the 1.5 s, which
    # include the child's start-up, depends on the machine's load, so it is not asserted)
    assert not task.output().exists()


# --- process death --------------------------------------------------------------------------------


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_sigkilled_task_process_died_and_others_succeed(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """SIGKILL of a task's process is PROCESS_DIED (signal 9); the other tasks succeed."""
    rec = RecordingPlugin()
    scene = mod.KillScene(root=str(tmp_path))
    victim = mod.Victim(root=str(tmp_path))
    sibling = mod.Sibling(root=str(tmp_path))
    killed_at: list[float] = []
    problems: list[BaseException] = []

    def killer() -> None:
        try:
            proc = read_pid(tmp_path / "victim.pid")
            wait_for((tmp_path / "sibling.started").exists, 30, "the sibling to start")
            proc.send_signal(signal.SIGKILL)
            killed_at.append(time.time())
        except BaseException as exc:  # reported by the test below
            problems.append(exc)
        finally:
            (tmp_path / "release").write_text("go")

    thread = threading.Thread(target=killer, name="test-killer")
    thread.start()
    try:
        result = run_worker(scene, rec, tmp_path, workers=2, executor=executor)
    finally:
        (tmp_path / "release").write_text("go")
        thread.join(timeout=40)
    assert not problems, problems
    assert killed_at
    [died] = rec.events("task_process_died", victim.task_id)
    assert died.signal == signal.SIGKILL
    assert died.timestamp - killed_at[0] < 2.0 + 1.0
    assert rec.events("task_succeeded", victim.task_id) == []
    assert rec.events("task_failed", victim.task_id) == []
    assert result.states[victim.task_id] == "FAILED"
    assert result.states[sibling.task_id] == "DONE"
    for tag in ("a", "b", "c"):
        assert result.states[mod.Leaf(root=str(tmp_path), tag=tag).task_id] == "DONE"
    assert result.exit_code == 1


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
@pytest.mark.parametrize("code", [0, 3])
def test_child_exiting_without_a_result_is_process_died(
    executor: str, code: int, mod: Any, tmp_path: Path
) -> None:
    """run() calling os._exit(code), 0 included, is PROCESS_DIED with that code within 2 s."""
    rec = RecordingPlugin()
    task = mod.ExitsEarly(root=str(tmp_path), code=code)
    began = time.monotonic()
    report = run_worker(task, rec, tmp_path, executor=executor, workers=1)
    assert time.monotonic() - began < 20
    [died] = rec.events("task_process_died", task.task_id)
    assert died.exitcode == code
    assert died.signal is None
    exited_at = float((tmp_path / "exit.time").read_text())
    assert died.timestamp - exited_at < 2.0 + 0.5
    assert rec.events("task_succeeded", task.task_id) == []
    assert rec.events("task_failed", task.task_id) == []
    assert report.states[task.task_id] == "FAILED"
    assert report.exit_code == 1


# --- timeouts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_timeout_kills_a_task_that_ignores_sigterm(executor: str, mod: Any, tmp_path: Path) -> None:
    """A task ignoring SIGTERM past its timeout is killed (SIGKILL after kill_grace) and
    TIMED_OUT: no sooner than the timeout, long before its run() would end by itself."""
    rec = RecordingPlugin()
    task = mod.IgnoresTerm(root=str(tmp_path))
    result = run_worker(task, rec, tmp_path, executor=executor, workers=1, kill_grace=1)
    assert (tmp_path / "ignores.pid").exists(), f"run() had not begun within {SET_UP} s"
    [started] = rec.events("task_started", task.task_id)
    [timed_out] = rec.events("task_timed_out", task.task_id)
    elapsed = timed_out.timestamp - started.timestamp
    assert SET_UP - 0.1 <= elapsed < SET_UP + 1 + 30, elapsed  # (its sleep: 600 s)
    assert timed_out.timeout == pytest.approx(SET_UP)
    assert started.executor == executor
    assert rec.events("task_succeeded", task.task_id) == []
    assert rec.events("task_process_died", task.task_id) == []
    assert result.states[task.task_id] == "FAILED"
    assert result.exit_code == 1
    assert not task.output().exists()
    process = process_from(tmp_path / "ignores.pid")
    assert process is None or not gone_within([process], 30), "the timed-out task survived"


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_timeout_kills_children_and_grandchildren_that_ignore_sigterm(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """At a ``[worker] timeout`` the whole tree dies, SIGTERM-ignoring (grand)children included."""
    marker = uuid.uuid4().hex
    rec = RecordingPlugin()
    task = mod.SpawnsTree(root=str(tmp_path), marker=marker)
    try:
        result = run_worker(
            task, rec, tmp_path, executor=executor, workers=1, timeout=SET_UP, kill_grace=1
        )
        names = ("tree-task.pid", "tree-child.pid", "tree-grandchild.pid")
        built = (tmp_path / "tree.built").exists()
        assert built, f"the tree was not built within {SET_UP} s"  # before the kill
        tree = [p for p in (process_from(tmp_path / n) for n in names) if p is not None]
        [timed_out] = rec.events("task_timed_out", task.task_id)
        assert timed_out.timeout == pytest.approx(SET_UP)
        assert result.states[task.task_id] == "FAILED"
        assert gone_within(tree, 30) == []
        assert wait_for(
            lambda: not with_marker("CONVEYOR_TEST_MARKER", marker), 30, "marked processes to end"
        )
    finally:
        kill_all(with_marker("CONVEYOR_TEST_MARKER", marker))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_worker_keeps_scheduling_during_the_kill_grace_period(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """While a timed-out task waits out its kill grace, the worker starts and finishes others.
    (TermNoticer ends once the worker has reported AfterGrace's success, not when AfterGrace's
    output appears: the report of its success then comes first whatever the machine's load.)"""

    class MarksSuccess(RecordingPlugin):
        @conveyor.hookimpl
        def conveyor_task_succeeded(self, event: Any) -> None:
            self._record(event)
            if event.family == "AfterGrace":
                (tmp_path / "AfterGrace-succeeded").touch()

    rec = MarksSuccess()
    noticer = mod.TermNoticer(root=str(tmp_path))
    after = mod.AfterGrace(root=str(tmp_path))
    result = run_worker(
        mod.GraceScene(root=str(tmp_path)),
        rec,
        tmp_path,
        executor=executor,
        workers=2,
        kill_grace=60,  # an upper bound only: TermNoticer ends itself once AfterGrace is done
    )
    [timed_out] = rec.events("task_timed_out", noticer.task_id)
    [succeeded] = rec.events("task_succeeded", after.task_id)
    got_term = float((tmp_path / "got-term").read_text())
    assert got_term < succeeded.timestamp < timed_out.timestamp
    assert result.states[after.task_id] == "DONE"
    assert result.states[noticer.task_id] == "FAILED"
    assert not noticer.output().exists()


# --- huge texts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_the_attempt_is_rebuilt_by_the_task_classs_loader(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """The attempt's process rebuilds the task with the loader its class names
    (``task_loader``, carried by AttemptSpec.loader): one that is not installed fails the
    attempt as a load error naming it, and run() is never called; the attempt's spec names
    conveyor's own loader for an ordinary task."""
    from conveyor.executors.base import AttemptRequest
    from conveyor.executors.child import attempt_spec

    rec = RecordingPlugin()
    task = mod.ForeignLoaded(root=str(tmp_path))
    result = run_worker(task, rec, tmp_path, executor=executor, workers=1)
    assert result.states[task.task_id] == "FAILED"
    assert "'no-such-loader'" in result.errors[task.task_id], result.errors
    assert not os.path.exists(task.output().path)
    assert attempt_spec(AttemptRequest(task, task.task_id, 1)).loader == "no-such-loader"
    leaf = mod.Leaf(root=str(tmp_path))
    assert attempt_spec(AttemptRequest(leaf, leaf.task_id, 1)).loader == "conveyor"


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
@pytest.mark.parametrize("family", ["HugeError", "HugeExplanation"])
def test_huge_failure_text_is_truncated(
    executor: str, family: str, mod: Any, tmp_path: Path
) -> None:
    """A 20 MB failure text neither hangs the run nor reaches the reports: it is truncated."""
    rec = RecordingPlugin()
    task = getattr(mod, family)(root=str(tmp_path))
    result = run_worker(task, rec, tmp_path, executor=executor, workers=1)
    assert result.states[task.task_id] == "FAILED"
    assert result.exit_code == 1
    [failed] = rec.events("task_failed", task.task_id)
    assert failed.exception_type == "RuntimeError"
    for text in (failed.error, result.errors[task.task_id]):
        assert 0 < len(text) < 1_000_000
        assert "truncated" in text.lower()


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_huge_status_message_is_truncated(executor: str, mod: Any, tmp_path: Path) -> None:
    """A 20 MB status message from a child arrives truncated, with a marker; the task is DONE."""
    rec = RecordingPlugin()
    scheduler = conveyor.Scheduler()
    task = mod.HugeStatus(root=str(tmp_path))
    config = make_config(tmp_path, executor=executor, workers=1)
    with conveyor.Worker(scheduler, config=config, plugins=[rec]) as worker:
        worker.add(task)
        assert worker.run() is True
    [status] = rec.events("task_status_message", task.task_id)
    assert 0 < len(status.message) < 1_000_000
    assert "truncated" in status.message.lower()
    [entry] = [e for e in encode(scheduler.task_list()) if e["task_id"] == task.task_id]
    assert len(entry["status_message"]) < 1_000_000


# --- resources -----------------------------------------------------------------------------------


def _fds_and_children() -> tuple[int, set[int]]:
    me = psutil.Process()
    return me.num_fds(), {p.pid for p in me.children(recursive=True)}


# (an interpreter start per subprocess attempt: 1000 took over 300 s on a loaded 2-core machine;
# 100 show a leak per attempt as well, in about 100 s there)
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("executor", "count"), [("fork", 1000), ("subprocess", 100)])
def test_many_tasks_leak_no_processes_or_descriptors(
    executor: str, count: int, mod: Any, tmp_path: Path
) -> None:
    """After many trivial tasks on 2 slots, children and open descriptors are back to baseline."""
    warm_up = mod.Group(root=str(tmp_path / "warm"), tags=["w1", "w2"])
    assert conveyor.build(warm_up, executor=executor, workers=2).ok
    base_fds, base_children = _fds_and_children()

    many = mod.Many(root=str(tmp_path / "many"), count=count)
    result = conveyor.build(many, executor=executor, workers=2)
    assert result.ok, dict(list(result.errors.items())[:3])
    assert sum(state == "DONE" for state in result.states.values()) == count + 1

    def settled() -> bool:
        fds, children = _fds_and_children()
        return fds <= base_fds and children <= base_children

    try:
        wait_for(settled, 30, "descriptors and children back to the baseline")
    except AssertionError:
        fds, children = _fds_and_children()
        raise AssertionError(
            f"fds {base_fds} -> {fds}; extra children {sorted(children - base_children)}"
        ) from None
    zombies = [
        p for p in psutil.Process().children(recursive=True) if p.status() == psutil.STATUS_ZOMBIE
    ]
    assert zombies == []


# --- the CLI and worker signals -------------------------------------------------------------------


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_or_sigint_to_conveyor_run_kills_the_task(
    executor: str, signum: int, code: int, mod: Any, tmp_path: Path, _isolated: str
) -> None:
    """SIGTERM / SIGINT to ``conveyor run`` kills the task tree, reports it, exits 143 / 130."""
    task = mod.Blocking(root=str(tmp_path))
    args = [f"{mod.__name__}.Blocking", "--root", str(tmp_path), "--executor", executor]
    proc = start_cli(tmp_path, *args, "--log-format", "json")
    task_proc = None
    try:
        task_proc = read_pid(tmp_path / "blocking.pid")
        assert task_proc.pid != proc.pid
        os.kill(proc.pid, signum)
        assert proc.wait(timeout=30) == code
        assert gone_within([task_proc], 30) == []
        assert wait_for(lambda: not with_marker(MARKER_VARIABLE, _isolated), 30, "no survivors")
    finally:
        stop_cli(proc, task_proc)
    stdout, stderr = cli_output(tmp_path)
    assert not task.output().exists()
    assert "interrupt" in (stdout + stderr).lower()
    assert "Blocking" in stdout
    failed = [
        e
        for e in log_events(stderr)
        if e.get("task_id") == task.task_id and e.get("state") == "FAILED"
    ]
    assert failed, stderr


def test_second_sigint_kills_at_once(mod: Any, tmp_path: Path, _isolated: str) -> None:
    """A task that ignores SIGTERM survives the first SIGINT's grace; a second SIGINT kills it."""
    args = [f"{mod.__name__}.IgnoresTerm", "--root", str(tmp_path), "--executor", "fork"]
    stderr = tmp_path / "second-sigint.stderr"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "conveyor", "run", *args, "--log-format", "json"],
            cwd=tmp_path,
            env=cli_env(tmp_path, CONVEYOR_WORKER__KILL_GRACE="60", CONVEYOR_WORKER__TIMEOUT="0"),
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    task_proc = None
    try:
        task_proc = read_pid(tmp_path / "ignores.pid")
        os.kill(proc.pid, signal.SIGINT)
        # two signals sent before the first is handled would count once: wait for the first
        wait_for(lambda: "interrupted" in stderr.read_text(), 30, "the first SIGINT handled")
        assert proc.poll() is None  # the grace period (60 s) holds the first SIGINT
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=40) == 130  # far less than the 60 s grace
        assert gone_within([task_proc], 30) == []
    finally:
        stop_cli(proc, task_proc)


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_sigusr1_lets_the_requested_task_finish_with_exit_0(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """SIGUSR1 while the requested task runs: it is not killed, it finishes, and the exit is 0."""
    task = mod.Blocking(root=str(tmp_path))
    args = [f"{mod.__name__}.Blocking", "--root", str(tmp_path), "--executor", executor]
    proc = start_cli(tmp_path, *args)
    task_proc = None
    try:
        task_proc = read_pid(tmp_path / "blocking.pid")
        os.kill(proc.pid, signal.SIGUSR1)
        (tmp_path / "go").write_text("go")
        assert proc.wait(timeout=30) == 0, cli_output(tmp_path)
    finally:
        stop_cli(proc, task_proc)
    assert text_of(task.output()) == "ok"


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_sigusr1_drains_and_leaves_the_dependent_pending_with_exit_5(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """SIGUSR1 while a dependency runs: it finishes, its dependent never starts, the exit is 5."""
    dependency = mod.Blocking(root=str(tmp_path))
    top = mod.AfterBlocking(root=str(tmp_path))
    args = [f"{mod.__name__}.AfterBlocking", "--root", str(tmp_path), "--executor", executor]
    proc = start_cli(tmp_path, *args)
    task_proc = None
    try:
        task_proc = read_pid(tmp_path / "blocking.pid")
        os.kill(proc.pid, signal.SIGUSR1)
        (tmp_path / "go").write_text("go")
        assert proc.wait(timeout=30) == 5, cli_output(tmp_path)
    finally:
        stop_cli(proc, task_proc)
    assert text_of(dependency.output()) == "ok"
    assert not top.output().exists()


@pytest.mark.parametrize("executor", PROCESS_EXECUTORS)
def test_sigkill_of_the_worker_kills_its_task_process(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """When ``conveyor run`` is SIGKILLed, its running task process dies too within 5 s."""
    args = [f"{mod.__name__}.Blocking", "--root", str(tmp_path), "--executor", executor]
    proc = start_cli(tmp_path, *args)
    task_proc = None
    try:
        task_proc = read_pid(tmp_path / "blocking.pid")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert gone_within([task_proc], 5) == [], "the task process outlived its worker"
    finally:
        stop_cli(proc, task_proc)
