"""The ``dask`` executor (SPEC §4.1), on real clusters on loopback with two Dask workers.

Task classes live in :mod:`dask_tasks_for_tests` (importable on the Dask workers through
``PYTHONPATH``, see conftest.py). Tasks talk to the tests through files: each run appends a
line ``<pid> <ppid>`` to its ``.runs`` file (so "exactly once" is a line count and the parent
pid names the Dask worker process that ran it), writes pid files, and waits for files the test
creates. Most tests join the session's external cluster (``dask scheduler`` / ``dask worker``);
the conformance check and the 50-task graph start their own LocalCluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
import psutil
import pytest
from conveyor.backends import build_backend
from conveyor.config import load_config
from conveyor.errors import ConfigError
from conveyor.executors.base import ExecutorContext
from conveyor.testing import RecordingPlugin
from conveyor.testing.executors import ATTEMPT_MARK, check_executor
from conveyor.testing.processes import gone_within, marked, put, wait_for

import dask_tasks_for_tests as dt
from conveyor_dask import DaskExecutor
from dask_cluster_for_tests import MARKER_VARIABLE, DaskCluster, write_config

SIGTERM_EXIT = 143


# --- helpers -------------------------------------------------------------------------------------


def runs_of(task: dt.Base) -> list[tuple[int, int]]:
    """The ``(pid, ppid)`` of every run of ``task`` (one line each in its ``.runs`` file)."""
    path = Path(task.path(f"{type(task).__name__}-{task.tag}.runs"))
    if not path.exists():
        return []
    return [(int(a), int(b)) for a, b in (line.split() for line in path.read_text().splitlines())]


def read_pid(path: Path, timeout: float = 60) -> psutil.Process:
    """Wait (bounded) for a pid file a task writes; that process."""
    text = wait_for(lambda: path.exists() and path.read_text().strip(), timeout, str(path))
    return psutil.Process(int(text))


class Helper:
    """Runs ``action`` in a thread while the worker runs; keeps what it raised."""

    def __init__(self, action: Callable[[], None]) -> None:
        self.problems: list[BaseException] = []

        def run() -> None:
            try:
                action()
            except BaseException as exc:  # reported by the test
                self.problems.append(exc)

        self.thread = threading.Thread(target=run, name="test-helper", daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the helper thread is stuck"
        assert not self.problems, self.problems


def joining(cluster: DaskCluster, tmp_path: Path, **dask: Any) -> Path:
    """A worker config joining ``cluster``: two slots, a 1 s kill grace (and the default
    900 s retry delay: conveyor itself never runs a failed attempt again within a test)."""
    return write_config(
        tmp_path,
        {"executor": "dask", "workers": 2, "kill_grace": 1},
        {"address": cluster.address, **dask},
    )


def run_worker(config: Path, task: conveyor.Task, rec: RecordingPlugin) -> Any:
    """Run ``task`` on a Worker with ``config`` and ``rec``; its report."""
    with conveyor.Worker(config=config, plugins=[rec]) as worker:
        assert worker.add(task)
        worker.run()
    assert worker.report is not None
    return worker.report


# --- conformance and a LocalCluster -------------------------------------------------------------


@pytest.mark.timeout(180)
def test_conformance_check_passes(tmp_path: Path) -> None:
    """conveyor.testing's executor check passes for dask, the timeout scenario included."""
    names = check_executor(DaskExecutor, workdir=tmp_path)
    assert names == ["success", "failure", "incomplete", "dynamic", "timeout"]


@pytest.mark.timeout(180)
def test_fifty_tasks_on_a_local_cluster_leave_no_process_behind(tmp_path: Path) -> None:
    """A 50-task graph on a LocalCluster of 2 workers: every output complete, every task run
    once on a Dask worker process, and no process of the cluster outlives the worker."""
    count = 48  # leaves; with the gate and the join: 50 tasks
    join = dt.GatedJoin(root=str(tmp_path), count=count)
    leaves = [dt.Leaf(root=str(tmp_path), tag=f"leaf{n}") for n in range(count)]
    gate = dt.Gate(root=str(tmp_path))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    seen: list[psutil.Process] = []

    def new_branch(proc: psutil.Process) -> bool:
        """Whether no ancestor of ``proc`` below this process was there before (a process a
        browser of the UI tests, alive in this session, starts meanwhile is not the cluster's)."""
        parent = proc.parent()
        while parent is not None and parent.pid != os.getpid():
            if parent.pid in before:
                return False
            parent = parent.parent()
        return True

    def look() -> None:  # while the gate's attempt runs, the cluster's processes are up
        read_pid(tmp_path / "gate.pid")
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):  # an attempt that just ended
                if proc.pid in before or not new_branch(proc):
                    continue
                if "resource_tracker" not in " ".join(proc.cmdline()):
                    seen.append(proc)  # (the resource tracker is Python's, not the cluster's)
        put(tmp_path / "gate.go", "go")

    config = write_config(
        tmp_path, {"executor": "dask", "workers": 2}, {"n_workers": 2, "threads_per_worker": 1}
    )
    rec = RecordingPlugin()
    helper = Helper(look)
    try:
        report = run_worker(config, join, rec)
    finally:
        put(tmp_path / "gate.go", "go")
    helper.join()

    tasks = [*leaves, gate, join]
    assert len({t.task_id for t in tasks}) == 50
    assert report.states == {t.task_id: "DONE" for t in tasks}
    assert {e.executor for e in rec.events("task_started")} == {"dask"}
    for leaf in leaves:
        with leaf.output().open("r") as f:
            tag, pid, ppid = f.read().split()
        assert tag == leaf.tag
        assert runs_of(leaf) == [(int(pid), int(ppid))]  # run exactly once, by that process
    with join.output().open("r") as f:
        assert f.read() == " ".join(leaf.tag for leaf in leaves)

    seen_pids = {p.pid for p in seen}
    parents = {ppid for t in tasks for _, ppid in runs_of(t)}
    assert len(seen) >= 2, f"expected two Dask worker processes, saw {seen}"
    assert parents <= seen_pids, "an attempt ran outside the LocalCluster's worker processes"
    assert len(parents) == 2, f"the attempts ran on {len(parents)} Dask workers, not both"
    assert gone_within(seen, 10) == [], "a process of the LocalCluster survived the worker"


# --- an existing cluster -------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_twenty_tasks_on_an_existing_cluster_run_exactly_once(
    cluster: DaskCluster, tmp_path: Path
) -> None:
    """Joining a cluster of ``dask worker`` processes: 20 tasks, each side effect once, each on
    one of the cluster's worker processes."""
    many = dt.Many(root=str(tmp_path), count=20)
    leaves = [dt.Leaf(root=str(tmp_path), tag=f"many{n}") for n in range(20)]
    rec = RecordingPlugin()
    report = run_worker(joining(cluster, tmp_path), many, rec)
    assert report.states == {t.task_id: "DONE" for t in [many, *leaves]}
    workers = set(cluster.worker_pids().values())
    for leaf in leaves:
        runs = runs_of(leaf)
        assert len(runs) == 1, f"{leaf.task_id} ran {len(runs)} times"
        assert runs[0][1] in workers, "the attempt did not run on a worker of the cluster"
        assert leaf.output().exists()
    started = [e.task_id for e in rec.events("task_started") if e.family == "Leaf"]
    assert sorted(started) == sorted(leaf.task_id for leaf in leaves)


def attempt_processes(marker: str) -> set[psutil.Process]:
    """Live attempt processes started by this session's Dask workers: those carrying the
    session's marker (see conftest.py) and an attempt mark (every attempt has one)."""
    return {p for p in marked(MARKER_VARIABLE, marker) if _has_attempt_mark(p)}


def _has_attempt_mark(proc: psutil.Process) -> bool:
    try:
        return ATTEMPT_MARK in proc.environ()
    except (psutil.Error, OSError):
        return False


@pytest.mark.timeout(90)
def test_timeout_kills_the_attempt_on_the_dask_worker(
    cluster: DaskCluster, tmp_path: Path, dask_environment: str
) -> None:
    """A task over its 1 s timeout is TIMED_OUT and no process of its attempt is left on the
    Dask worker — whether the timeout came while the attempt's interpreter was starting (as
    it may on a loaded machine: the 1 s include start-up) or while run() waited to be killed."""
    task = dt.Overtime(root=str(tmp_path))
    before = attempt_processes(dask_environment)
    rec = RecordingPlugin()
    report = run_worker(joining(cluster, tmp_path), task, rec)
    [timed_out] = rec.events("task_timed_out", task.task_id)
    assert timed_out.timeout == pytest.approx(1.0)
    assert rec.events("task_succeeded", task.task_id) == []
    assert report.states[task.task_id] == "FAILED"
    assert not task.output().exists()

    def none_left() -> bool:
        return not attempt_processes(dask_environment) - before

    wait_for(none_left, 30, "the timed-out attempt's processes on the Dask worker to be gone")
    runs = runs_of(task)
    assert len(runs) <= 1, runs  # none if the timeout came before run()
    assert {ppid for _, ppid in runs} <= set(cluster.worker_pids().values())


@pytest.mark.timeout(90)
def test_os_exit_is_process_died_and_not_run_again(cluster: DaskCluster, tmp_path: Path) -> None:
    """run() calling os._exit(3) on a Dask worker is PROCESS_DIED (exit code 3), run once."""
    task = dt.Exits(root=str(tmp_path))
    rec = RecordingPlugin()
    report = run_worker(joining(cluster, tmp_path), task, rec)
    [died] = rec.events("task_process_died", task.task_id)
    assert died.exitcode == 3
    assert died.signal is None
    assert rec.events("task_succeeded", task.task_id) == []
    assert rec.events("task_failed", task.task_id) == []
    assert report.states[task.task_id] == "FAILED"
    assert len(runs_of(task)) == 1


@pytest.mark.timeout(150)
def test_dask_worker_killed_mid_attempt_is_process_died_and_not_rerun(
    doomed_cluster: DaskCluster, tmp_path: Path
) -> None:
    """SIGKILL of the Dask worker process running an attempt: PROCESS_DIED, the attempt's
    process dies with it, and Dask does not run it again on the other worker."""
    task = dt.Hangs(root=str(tmp_path), tag="victim")
    pids = doomed_cluster.worker_pids()
    killed: list[psutil.Process] = []

    def kill_its_worker() -> None:
        attempt = read_pid(tmp_path / "victim.pid")
        dask_worker = attempt.parent()
        assert dask_worker is not None and dask_worker.pid in pids.values(), (attempt, pids)
        killed.extend([attempt, dask_worker])
        dask_worker.kill()

    helper = Helper(kill_its_worker)
    rec = RecordingPlugin()
    report = run_worker(joining(doomed_cluster, tmp_path), task, rec)
    helper.join()
    [died] = rec.events("task_process_died", task.task_id)
    assert rec.events("task_succeeded", task.task_id) == []
    assert rec.events("task_failed", task.task_id) == []
    assert report.states[task.task_id] == "FAILED"
    [started] = rec.events("task_started", task.task_id)
    assert died.timestamp - started.timestamp < 30, "the lost worker took long to be noticed"
    assert gone_within(killed, 10) == [], "the attempt outlived its Dask worker"
    runs = runs_of(task)
    assert len(runs) == 1, f"the attempt ran {len(runs)} times: {runs}"
    assert not task.output().exists()


# --- notes and dynamic dependencies --------------------------------------------------------------


@pytest.mark.timeout(120)
def test_notes_reach_the_hooks_while_running_and_dynamic_deps_work(
    cluster: DaskCluster, tmp_path: Path
) -> None:
    """A status message arrives while the attempt still runs (the task waits for the test to
    see it); progress, tracking URL and a dynamic dependency come through too."""
    reporter = dt.Reporter(root=str(tmp_path))
    dynamic = dt.Leaf(root=str(tmp_path), tag="dyn")
    rec = RecordingPlugin()

    def heard() -> bool:
        messages = [e.message for e in rec.events("task_status_message", reporter.task_id)]
        return "waiting to be seen" in messages

    def release() -> None:
        wait_for(heard, 45, "the status message while the attempt runs")
        put(tmp_path / "seen", "yes")

    helper = Helper(release)
    try:
        report = run_worker(joining(cluster, tmp_path), reporter, rec)
    finally:
        put(tmp_path / "seen", "yes")
    helper.join()

    assert report.states == {reporter.task_id: "DONE", dynamic.task_id: "DONE"}
    messages = [e.message for e in rec.events("task_status_message", reporter.task_id)]
    # a process attempt runs run() again from the top after its dynamic dependency is done
    assert messages == ["waiting to be seen", "waiting to be seen", "all done"]
    progress = [e.percentage for e in rec.events("task_progress", reporter.task_id)]
    assert progress == [50, 50, 100]
    urls = [e.url for e in rec.events("task_tracking_url", reporter.task_id)]
    assert urls == ["http://tracking.invalid/dask/1"] * 2
    discovered = rec.events("task_dependencies_discovered", reporter.task_id)
    assert [(e.dependencies, e.dynamic) for e in discovered if e.dynamic] == [
        ((dynamic.task_id,), True)
    ]
    with reporter.output().open("r") as f:
        assert f.read() == "dyn+reporter"
    assert len(runs_of(reporter)) == 2  # the first attempt ended needing its dependency
    assert len(runs_of(dynamic)) == 1


# --- resources -----------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_mapped_resources_keep_two_gpu_tasks_apart(cluster: DaskCluster, tmp_path: Path) -> None:
    """With map_resources, two tasks needing gpu: 1 run on the one gpu worker, never at once —
    though conveyor's own scheduler (gpu capacity 2) and its two slots would allow it."""
    pair = dt.Pair(root=str(tmp_path))
    tasks = [dt.Gpu(root=str(tmp_path), tag=t) for t in ("a", "b")]
    config = write_config(
        tmp_path,
        {"executor": "dask", "workers": 2},
        {"address": cluster.address, "map_resources": True},
        resources={"gpu": 2},
    )
    rec = RecordingPlugin()
    report = run_worker(config, pair, rec)
    errors = [e.error for e in rec.events("task_failed")]
    assert report.states == {t.task_id: "DONE" for t in [pair, *tasks]}, errors
    gpu_worker = cluster.worker_pids()["w0"]
    for task in tasks:
        [(_, ppid)] = runs_of(task)
        assert ppid == gpu_worker, "a gpu task ran on the worker without a gpu"
    log = [line.split() for line in (tmp_path / "gpu.log").read_text().splitlines()]
    assert [kind for kind, _, _ in log] == ["start", "end", "start", "end"], log
    assert log[0][1] == log[1][1] and log[2][1] == log[3][1], log
    assert float(log[1][2]) <= float(log[2][2])


# --- interrupting the conveyor worker ------------------------------------------------------------


@pytest.mark.timeout(90)
def test_interrupt_kills_the_attempt_on_the_dask_worker(
    cluster: DaskCluster, tmp_path: Path
) -> None:
    """worker.interrupt("SIGTERM") while an attempt waits on a Dask worker: its process is
    killed there and the task is reported failed, interrupted; the exit code is 143."""
    task = dt.Hangs(root=str(tmp_path), tag="interrupted")
    victim: list[psutil.Process] = []
    rec = RecordingPlugin()
    with conveyor.Worker(config=joining(cluster, tmp_path), plugins=[rec]) as worker:
        assert worker.add(task)

        def interrupt() -> None:
            victim.append(read_pid(tmp_path / "interrupted.pid"))
            worker.interrupt("SIGTERM")

        helper = Helper(interrupt)
        worker.run()
    helper.join()
    # (stopped: its run() would wait 600 s, far past this test's timeout)
    assert gone_within(victim, 30) == [], "the interrupted attempt survived on the Dask worker"
    [(pid, ppid)] = runs_of(task)
    assert victim[0].pid == pid and ppid in set(cluster.worker_pids().values())
    assert worker.report is not None
    assert worker.report.states[task.task_id] == "FAILED"
    assert worker.report.exit_code == SIGTERM_EXIT
    [failed] = rec.events("task_failed", task.task_id)
    assert "interrupt" in f"{failed.exception_type} {failed.error}".lower(), failed
    # counted as stopped by the interruption, not as a failure of its own
    assert "1 running task(s) were stopped" in worker.report.summary, worker.report.summary
    assert rec.events("task_succeeded", task.task_id) == []
    assert not task.output().exists()


@pytest.mark.timeout(90)
def test_a_killed_conveyor_worker_leaves_no_attempt_running_on_the_cluster(
    cluster: DaskCluster, tmp_path: Path
) -> None:
    """SIGKILL of `conveyor run` while its attempt waits on a Dask worker: the client's
    connection closes, the scheduler releases the task, and the Dask worker stops the attempt
    within the documented bound (0.5 s after it notices, plus kill_grace = 1 s)."""
    config = joining(cluster, tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "run", "dask_tasks_for_tests.Hangs",
         "--root", str(tmp_path), "--tag", "orphan", "--config", str(config),
         "--log-level", "warning"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        attempt = read_pid(tmp_path / "orphan.pid")
        proc.kill()
        proc.wait(10)
        killed_at = time.monotonic()
        assert gone_within([attempt], 20) == [], "the attempt outlived its conveyor worker"
        # (generous for a loaded machine; the bound itself is about 1.5 s)
        assert time.monotonic() - killed_at < 20
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- settings and registration -------------------------------------------------------------------


def build(config_path: Path) -> Any:
    """Build the dask executor from a config file, as the worker does."""
    config = load_config(config_path)
    return build_backend(
        "conveyor.executors", "dask", config, lambda s: ExecutorContext(settings=s)
    )


def test_address_and_scheduler_file_together_are_a_config_error(tmp_path: Path) -> None:
    """Both ways of joining a cluster at once: ConfigError (nothing is started or joined)."""
    dask = {"address": "tcp://127.0.0.1:1", "scheduler_file": str(tmp_path / "s.json")}
    config = write_config(tmp_path, {"executor": "dask", "workers": 2}, dask)
    with pytest.raises(ConfigError, match="scheduler_file"):
        build(config)
    with pytest.raises(ConfigError, match="scheduler_file"):
        conveyor.Worker(config=config)


@pytest.mark.timeout(60)
def test_an_unreachable_cluster_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    """`conveyor run` with an address nothing listens on: exit 2, one line naming the key and
    the address, no traceback, after connect_timeout."""
    from conveyor.testing.processes import free_port

    address = f"tcp://127.0.0.1:{free_port()}"
    config = write_config(
        tmp_path, {"executor": "dask", "workers": 2}, {"address": address, "connect_timeout": 1}
    )
    result = subprocess.run(
        [sys.executable, "-m", "conveyor", "run", "dask_tasks_for_tests.Leaf",
         "--root", str(tmp_path), "--config", str(config)],
        cwd=tmp_path, capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"executors.dask.address: cannot reach the Dask scheduler at {address}" in (
        result.stderr
    )


@pytest.mark.timeout(90)
def test_an_interrupt_also_stops_attempts_still_queued_on_the_cluster(
    cluster: DaskCluster, tmp_path: Path
) -> None:
    """Three waiting attempts on two single-threaded Dask workers: one is queued in Dask when
    the interrupt comes. None of the three runs on: the queued one never starts its task."""
    config = write_config(
        tmp_path,
        {"executor": "dask", "workers": 3, "kill_grace": 1},
        {"address": cluster.address},
    )
    tasks = [dt.Hangs(root=str(tmp_path), tag=f"q{i}") for i in range(3)]
    rec = RecordingPlugin()
    with conveyor.Worker(config=config, plugins=[rec]) as worker:
        for task in tasks:
            assert worker.add(task)

        def interrupt() -> None:
            wait_for(lambda: len(list(tmp_path.glob("q*.pid"))) == 2, 60, "two attempts running")
            worker.interrupt("SIGTERM")

        helper = Helper(interrupt)
        worker.run()
    helper.join()
    # (stopped: their run() would wait 600 s, far past this test's timeout)
    for task in tasks:
        [failed] = rec.events("task_failed", task.task_id)
        assert failed.exception_type == "Interrupted", failed
    assert len(list(tmp_path.glob("q*.pid"))) == 2  # the queued one never started its run()


def test_a_missing_scheduler_file_is_exit_2_after_connect_timeout(tmp_path: Path) -> None:
    """distributed waits forever for a scheduler file; the executor gives up after
    connect_timeout, naming the key."""
    config = write_config(
        tmp_path,
        {"executor": "dask", "workers": 2},
        {"scheduler_file": str(tmp_path / "none.json"), "connect_timeout": 0.5},
    )
    with pytest.raises(ConfigError, match=r"executors\.dask\.scheduler_file"):
        build(config)


def test_a_bad_memory_limit_is_a_config_error_naming_it(tmp_path: Path) -> None:
    """memory_limit must be "auto" or a size Dask understands."""
    config = write_config(tmp_path, {"executor": "dask", "workers": 2}, {"memory_limit": "lots"})
    with pytest.raises(ConfigError, match=r"executors\.dask\.memory_limit"):
        build(config)


def test_unknown_key_is_a_config_error_naming_it(tmp_path: Path) -> None:
    """A misspelt key in [executors.dask] is a ConfigError naming the key."""
    config = write_config(tmp_path, {"executor": "dask", "workers": 2}, {"n_worker": 2})
    with pytest.raises(ConfigError, match="n_worker"):
        build(config)
    with pytest.raises(ConfigError, match="n_worker"):
        conveyor.Worker(config=config)


def test_plugins_json_lists_dask_as_an_executor(tmp_path: Path) -> None:
    """``conveyor plugins --json`` lists dask in conveyor.executors, loading fine."""
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor", "plugins", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    entries = [
        e
        for e in json.loads(proc.stdout)
        if e["group"] == "conveyor.executors" and e["name"] == "dask"
    ]
    assert len(entries) == 1, proc.stdout
    [entry] = entries
    assert entry["distribution"] == "conveyor-dask"
    assert entry["loads"] is True and entry["error"] == "", entry
