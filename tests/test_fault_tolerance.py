"""Faults found by the fault-injection campaign (issue 9), on the worker's side: cycles
through a task itself, a yielded dependency that never completes, plugins that exit at import.

Each test reproduces the fault with real components (the CLI as a subprocess, real process
executors) and fails on the code before the fix.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import conveyor
from conveyor.task import load_task_class
from conveyor.testing.processes import (
    SchedulerProcess,
    StubServer,
    child_env,
    kill_marked,
    wait_for,
)
from conveyor.worker.report import RunReport

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the run_cli fixture (conftest.py)
WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)


def _run(task: conveyor.Task, config: conveyor.Config) -> RunReport:
    """Add and run ``task`` on a Worker (not build(): logging stays as the test session has it)."""
    with conveyor.Worker(config=config) as worker:
        worker.add(task)
        worker.run()
    assert worker.report is not None
    return worker.report


SELF_CYCLES = """
import conveyor


class SelfRequiring(conveyor.Task):
    def requires(self):
        return SelfRequiring()

    def complete(self):
        return False


class SelfYielding(conveyor.Task):
    def run(self):
        yield SelfYielding()

    def complete(self):
        return False
"""


@pytest.mark.parametrize("family", ["SelfRequiring", "SelfYielding"])
def test_a_task_that_needs_itself_is_a_cycle_exit_3(
    family: str, task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """Requiring or yielding itself is the cycle ``A -> A``: reported, exit 3, no traceback
    (requiring itself crashed with InvalidTransition; yielding itself ended with exit 5)."""
    module = task_module(SELF_CYCLES)
    proc = run_cli("run", f"{module}.{family}", "--log-level", "error", cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"dependency cycle: {family} -> {family}" in proc.stderr
    assert "Traceback" not in proc.stderr and "InvalidTransition" not in proc.stderr


@pytest.mark.parametrize("executor", ["inline", "fork"])
def test_a_task_yielding_itself_is_broken_under_every_executor(
    executor: str, task_module: WriteModule, tmp_path: Path
) -> None:
    """The same through the API, in process and through a forked child."""
    module = task_module(SELF_CYCLES)
    task = load_task_class(module, "SelfYielding")()
    config = conveyor.Config().with_overrides(executor=executor)
    result = _run(task, config)
    assert result.exit_code == 3
    assert result.states == {task.task_id: "UNKNOWN"}
    assert "SelfYielding -> SelfYielding" in result.errors[task.task_id]


NEVER_COMPLETE = """
import pathlib

import conveyor

LOG = pathlib.Path({log!r})


def note(what):
    with LOG.open("a") as out:
        out.write(what + "\\n")


class Hollow(conveyor.Task):
    '''Runs "successfully" without ever making its output.'''

    def run(self):
        note("hollow")

    def complete(self):
        return False


class Parent(conveyor.Task):
    def run(self):
        note("parent")
        yield Hollow()

    def complete(self):
        return False
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("executor", "max_reschedules"), [("inline", 1), ("fork", 2)])
def test_a_yielded_dependency_that_never_completes_is_given_up(
    executor: str, max_reschedules: int, task_module: WriteModule, tmp_path: Path
) -> None:
    """With check_complete_on_run = false a dependency that runs but never completes used to
    make its parent loop forever; after max_reschedules extra rounds the parent fails with an
    explanation naming the dependency."""
    log = tmp_path / "runs.log"
    module = task_module(NEVER_COMPLETE.format(log=str(log)))
    parent = load_task_class(module, "Parent")()
    config = conveyor.Config().with_overrides(
        executor=executor, check_complete_on_run=False, max_reschedules=max_reschedules
    )
    result = _run(parent, config)
    assert result.exit_code == 1
    assert result.states[parent.task_id] == "FAILED"
    error = result.errors[parent.task_id]
    assert "Hollow()" in error and f"max_reschedules = {max_reschedules}" in error
    runs = log.read_text().splitlines()
    assert runs.count("hollow") == max_reschedules + 1
    # in process the paused run() is resumed; a process executor runs it from the top
    assert runs.count("parent") == (1 if executor == "inline" else max_reschedules + 2)


def test_a_local_plugin_raising_system_exit_at_import_is_fatal_exit_2(
    task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """A [plugins] local module that raises SystemExit at import stops the worker with exit 2
    and one line naming it and the SystemExit (it used to exit 3 with no output at all, then
    was skipped; a local entry is asked for by name, so it is fatal now)."""
    plugin = task_module("raise SystemExit(3)\n")
    tasks = task_module("import conveyor\n\n\nclass Hello(conveyor.Task):\n    pass\n")
    (tmp_path / "worker.toml").write_text(f'[plugins]\nlocal = ["{plugin}"]\n', encoding="utf-8")
    proc = run_cli("run", f"{tasks}.Hello", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    reports = [line for line in proc.stderr.splitlines() if "failed to load" in line]
    assert len(reports) == 1 and plugin in reports[0] and "SystemExit: 3" in reports[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_a_required_plugin_raising_system_exit_is_fatal_exit_2(
    task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """The same plugin listed in [plugins] required stops the worker: exit 2, one line."""
    plugin = task_module("raise SystemExit(3)\n")
    tasks = task_module("import conveyor\n\n\nclass Hello(conveyor.Task):\n    pass\n")
    (tmp_path / "worker.toml").write_text(
        f'[plugins]\nlocal = ["{plugin}"]\nrequired = ["{plugin}"]\n', encoding="utf-8"
    )
    proc = run_cli("run", f"{tasks}.Hello", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"required plugin {plugin!r} is unavailable" in proc.stderr
    assert "SystemExit: 3" in proc.stderr and "Traceback" not in proc.stderr


def test_an_entry_point_plugin_raising_system_exit_is_skipped(
    task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """An installed plugin whose import raises SystemExit is reported with its distribution and
    skipped; the other installed plugins still load (``conveyor plugins`` lists them ok)."""
    tasks = task_module("import conveyor\n\n\nclass Hello(conveyor.Task):\n    pass\n")
    env = {"CONVEYOR_BREAK_FRAGILE_PLUGIN": "exit"}
    proc = run_cli("run", f"{tasks}.Hello", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = [line for line in proc.stderr.splitlines() if "fragile" in line]
    assert len(reports) == 1 and "conveyor-recorder-plugin" in reports[0], proc.stderr
    assert "SystemExit: 3" in reports[0]
    listed = run_cli("plugins", cwd=tmp_path, env=env)
    rows = {tuple(line.split()[:2]): line for line in listed.stdout.splitlines()[1:]}
    assert rows[("conveyor.plugins", "recorder")].endswith("ok")
    assert "SystemExit" in rows[("conveyor.plugins", "fragile")]


# --- a scheduler that answers garbage ----------------------------------------------------------


def _garbage_scheduler(answer: object) -> StubServer:
    """A real HTTP server on loopback that accepts registrations and pings but answers
    ``get_work`` with ``answer``; records the requests' paths."""
    return StubServer(lambda path: (200, answer if path.endswith("/get_work") else {"ok": True}))


@pytest.mark.parametrize(
    "answer",
    [{"work": "lots"}, {"work": {"task_id": 5}}, [], {}],
    ids=["str", "int", "list", "empty"],
)
def test_a_wrong_shaped_answer_is_retried_then_exit_2_naming_the_route(
    answer: object, task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """``conveyor run`` against a scheduler whose get_work answers do not fit the protocol
    retries them like a 5xx, then exits 2 with a verdict naming the route and what was wrong;
    no traceback."""
    tasks = task_module("import conveyor\n\n\nclass Hello(conveyor.Task):\n    pass\n")
    server = _garbage_scheduler(answer)
    try:
        (tmp_path / "worker.toml").write_text(
            f'[scheduler]\ntransport = "http"\nurl = "{server.url}"\n'
            "rpc_retries = 3\nrpc_retry_wait = 0.01\n",
            encoding="utf-8",
        )
        proc = run_cli("run", f"{tasks}.Hello", "--log-level", "critical", cwd=tmp_path)
    finally:
        server.close()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    verdict = proc.stdout.strip().splitlines()[-1]
    assert verdict.startswith("Verdict: failed in ")  # (the run's duration follows)
    assert " s - the scheduler stopped answering" in verdict
    assert "/api/v1/get_work" in verdict and "does not fit the protocol" in verdict
    assert server.asked.count("/api/v1/get_work") == 3
    assert "Traceback" not in proc.stderr


# --- registration sized to the server's limit ---------------------------------------------------

BIG_PARAMS = """
import conveyor


class Wide(conveyor.Task):
    '''A task with a large parameter.'''

    i = conveyor.IntParameter()
    payload = conveyor.Parameter()

    def complete(self):
        return False


class Fan(conveyor.WrapperTask):
    '''Needs ``n`` Wide tasks whose payload is ``size`` characters.'''

    n = conveyor.IntParameter()
    size = conveyor.IntParameter()

    def requires(self):
        return [Wide(i=i, payload="x" * self.size) for i in range(self.n)]
"""


StartServer = Callable[[str], SchedulerProcess]


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """Start a real ``conveyor scheduler`` configured by a TOML text; killed at teardown."""
    marker = uuid.uuid4().hex
    started: list[SchedulerProcess] = []

    def start(toml: str) -> SchedulerProcess:
        config = tmp_path / "server.toml"
        config.write_text(toml, encoding="utf-8")
        proc = SchedulerProcess(tmp_path, config, child_env(tmp_path, "FT_MARKER", marker))
        started.append(proc)
        proc.start()
        return proc

    yield start
    for proc in started:
        proc.kill()
    kill_marked("FT_MARKER", marker)


@pytest.fixture
def small_server(start_server: StartServer) -> SchedulerProcess:
    """A real ``conveyor scheduler`` that accepts request bodies of at most 40,000 bytes."""
    return start_server("[server]\nmax_request_bytes = 40000\n")


def test_registration_is_batched_under_the_servers_request_limit(
    small_server: SchedulerProcess, task_module: WriteModule
) -> None:
    """8 tasks of 15 KB each (120 KB) are registered in requests under the server's 40 KB
    limit, learnt from /health (one request of 500 tasks used to fail the run with 413)."""
    from conveyor.transports.http import HttpTransport

    module = task_module(BIG_PARAMS)
    fan = load_task_class(module, "Fan")(n=8, size=15_000)
    config = conveyor.Config().with_overrides(scheduler_url=small_server.url)
    with conveyor.Worker(config=config) as worker:
        assert worker.add(fan)
    listed = HttpTransport(config).task_list()
    assert len(listed) == 9
    wide = [info for info in listed if info.family == "Wide"]
    assert {len(info.params["payload"]) for info in wide} == {15_000}


def test_a_task_with_more_dependencies_than_one_request_holds_is_registered_in_parts(
    small_server: SchedulerProcess, task_module: WriteModule
) -> None:
    """A wrapper of 2,000 tasks: its registration (about 49 KB of dependency ids) is over the
    server's 40 KB limit, so it is sent in parts the scheduler merges; every dependency is
    there, in order (it used to be refused as a task too large to register)."""
    from conveyor.transports.http import HttpTransport

    module = task_module(BIG_PARAMS)
    fan = load_task_class(module, "Fan")(n=2000, size=1)
    config = conveyor.Config().with_overrides(scheduler_url=small_server.url)
    with conveyor.Worker(config=config) as worker:
        assert worker.add(fan)
    [root] = [info for info in HttpTransport(config).task_list() if info.family == "Fan"]
    assert list(root.dependencies) == [dep.task_id for dep in fan.requires()]


def test_a_task_too_large_to_register_is_named_and_nothing_is_registered(
    small_server: SchedulerProcess, task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """A single task whose registration alone exceeds the limit is a clear error naming it,
    raised before any request: exit 2, one line, and the server holds nothing."""
    from conveyor.transports.http import HttpTransport

    module = task_module(BIG_PARAMS)
    args = ["--n", "3", "--size", "50000", "--scheduler-url", small_server.url]
    proc = run_cli("run", f"{module}.Fan", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("conveyor: error:")]
    assert "task Wide_" in line and "cannot be registered" in line
    assert "max_request_bytes = 40000" in line
    assert "Traceback" not in proc.stderr
    config = conveyor.Config().with_overrides(scheduler_url=small_server.url)
    assert HttpTransport(config).task_list() == []


# --- processes that escape the attempt's process group -------------------------------------

ESCAPING = """
import pathlib
import subprocess
import time

import conveyor


class Escaper(conveyor.Task):
    '''Starts a helper in a session of its own (outside the attempt's process group).

    Its 10 s timeout, which includes the attempt's start-up (an interpreter start under
    subprocess), must not fire before the helper is started, whatever the machine's load.'''

    pidfile = conveyor.Parameter()
    hang = conveyor.BoolParameter()
    worker_timeout = 10

    def run(self):
        # a daemon: its own session, and its parent gone at once (so no longer a descendant)
        script = f"sleep 600 & echo $! > {self.pidfile}.tmp && mv {self.pidfile}.tmp {self.pidfile}"
        subprocess.run(["setsid", "sh", "-c", script], check=True)
        while not pathlib.Path(self.pidfile).exists():
            time.sleep(0.01)
        if self.hang:
            time.sleep(600)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("executor", "hang"), [("fork", False), ("subprocess", False), ("fork", True)]
)
def test_a_helper_that_escapes_with_setsid_is_killed_after_the_attempt(
    executor: str, hang: bool, task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """A daemon the task starts (own session, parent gone: neither in the attempt's process
    group nor among its descendants) survives neither a successful attempt nor a timed-out
    one; the leak is logged with its command line."""

    module = task_module(ESCAPING)
    pidfile = tmp_path / "helper.pid"
    args = ["--pidfile", str(pidfile), "--executor", executor]
    proc = run_cli("run", f"{module}.Escaper", *args, *(["--hang"] if hang else []), cwd=tmp_path)
    assert proc.returncode == (1 if hang else 0), proc.stdout + proc.stderr
    helper_pid = int(pidfile.read_text())

    wait_for(lambda: not _pid_alive(helper_pid), 30, "the escaped helper to be killed")
    leaks = [line for line in proc.stderr.splitlines() if "left a process behind" in line]
    assert len(leaks) == 1 and "sleep 600" in leaks[0] and str(helper_pid) in leaks[0]


# --- one running instance, and reports that count once (a real server, a faulty network) -----


def _health(server: SchedulerProcess) -> dict[str, object]:
    import json
    import urllib.request

    with urllib.request.urlopen(server.url + "/health", timeout=5) as answer:
        health: dict[str, object] = json.load(answer)
    return health


def _statuses(server: SchedulerProcess) -> dict[str, str]:
    from conveyor.transports.http import HttpTransport

    config = conveyor.Config().with_overrides(scheduler_url=server.url)
    return {info.task_id: info.status for info in HttpTransport(config).task_list()}


FAILING = """
import conveyor


class Fails(conveyor.Task):
    def run(self):
        raise ValueError("boom")
"""


@pytest.mark.timeout(90)
def test_a_lost_answer_to_task_failed_counts_the_failure_once(
    task_module: WriteModule, run_cli: RunCli, tmp_path: Path, start_server: StartServer
) -> None:
    """The server applies a failure report whose answer the network then loses; the worker
    sends it again. With retry_count = 2 the task must be FAILED after one failed run, not
    DISABLED (the retried report is acknowledged without counting). The report rides with the
    worker's next get_work (the server's answers say batched), so the request lost is the one
    carrying the failure's text."""
    from conveyor.testing.proxy import FaultyProxy

    server = start_server("[scheduler]\nretry_count = 2\n")
    with FaultyProxy(server.port) as proxy:
        module = task_module(FAILING)
        (tmp_path / "worker.toml").write_text(
            "[scheduler]\nrpc_retry_wait = 0.05\nrpc_timeout = 5\n", encoding="utf-8"
        )
        proxy.drop_answer(b"boom")
        proc = run_cli("run", f"{module}.Fails", "--scheduler-url", proxy.url, cwd=tmp_path)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert proxy.requests(b"boom") == 2  # the answer was lost once
    assert list(_statuses(server).values()) == ["FAILED"]


SLOW = """
import os
import pathlib
import time

import conveyor

ROOT = pathlib.Path({root!r})


class Slow(conveyor.Task):
    '''Records who runs it; waits for the test's go-ahead; says whether another ran at once.'''

    def run(self):
        who = os.environ["FT_WHO"]
        others = [int(p.read_text()) for p in ROOT.glob("*.pid")]
        alive = [pid for pid in others if _alive(pid)]
        (ROOT / f"{{who}}.pid").write_text(str(os.getpid()))
        (ROOT / f"{{who}}.overlap").write_text(str(bool(alive)))
        while not (ROOT / f"{{who}}.go").exists():
            time.sleep(0.05)
        with (ROOT / "finished").open("a") as out:
            out.write(who + "\\n")

    def output(self):
        return conveyor.LocalTarget(str(ROOT / "slow.out"))

    def complete(self):
        return (ROOT / "finished").exists()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with open(f"/proc/{{pid}}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"
"""


@pytest.mark.timeout(120)
def test_a_partitioned_worker_fences_itself_and_its_late_report_is_refused(
    task_module: WriteModule, tmp_path: Path, start_server: StartServer
) -> None:
    """Worker A runs a task; its traffic is black-holed past worker_disconnect_delay. A stops
    its attempt before the scheduler hands the task to B (never two running instances), B
    runs it, and when A's network is back its report of the old attempt is refused (409):
    the task ends DONE, run once to its end, and the server counts one stale report."""
    import os
    import subprocess
    import sys

    from conveyor.testing.proxy import FaultyProxy

    server = start_server("[scheduler]\nworker_disconnect_delay = 6\nretry_delay = 0\n")
    root = tmp_path / "run"
    root.mkdir()
    module = task_module(SLOW.format(root=str(root)))
    worker_toml = tmp_path / "worker.toml"
    worker_toml.write_text(
        "[worker]\nexecutor = 'fork'\nping_interval = 0.5\nkill_grace = 1\nkeep_alive = true\n"
        "wait_interval = 0.2\nwait_jitter = 0\n"
        "[scheduler]\nrpc_timeout = 1\nrpc_retries = 2\nrpc_retry_wait = 0.1\n",
        encoding="utf-8",
    )

    def start(who: str, url: str) -> subprocess.Popen[str]:
        env = {**os.environ, "FT_WHO": who, "PYTHONPATH": str(tmp_path)}
        env.pop("CONVEYOR_CONFIG", None)
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "conveyor", "run", f"{module}.Slow"),
                *("--scheduler-url", url, "--config", str(worker_toml), "--log-format", "json"),
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    workers: list[subprocess.Popen[str]] = []
    try:
        with FaultyProxy(server.port) as proxy:
            a = start("A", proxy.url)
            workers.append(a)
            wait_for((root / "A.pid").exists, 30, "worker A's attempt to start")
            a_pid = int((root / "A.pid").read_text())
            proxy.blackhole()
            b = start("B", server.url)
            workers.append(b)
            wait_for((root / "B.pid").exists, 40, "worker B to be handed the task")
            assert (root / "B.overlap").read_text() == "False"  # A's attempt was gone
            assert not (root / "A.overlap").exists() or (root / "A.overlap").read_text() == "False"
            (root / "B.go").write_text("go")
            (root / "A.go").write_text("go")  # too late for A: its attempt was killed
            _, b_err = b.communicate(timeout=40)
            assert b.returncode == 0, b_err
            proxy.restore()
            _, a_err = a.communicate(timeout=60)
        assert (root / "finished").read_text() == "B\n"
        assert not _pid_alive(a_pid)
        assert "stopping running attempts" in a_err, a_err
        assert "refused a stale report" in a_err, a_err
        assert list(_statuses(server).values()) == ["DONE"]
        assert _health(server)["stale_reports"] == 1
    finally:
        for proc in workers:
            proc.kill()


def _pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(90)
def test_a_long_lived_server_forgets_what_gone_workers_finished(
    task_module: WriteModule, run_cli: RunCli, tmp_path: Path, start_server: StartServer
) -> None:
    """remove_delay after a worker is gone (or its run ended and released them), the tasks only
    it needed are removed from the server and from its SQLite state: a restarted server does
    not bring them back."""
    server = start_server("[scheduler]\nworker_disconnect_delay = 1\nremove_delay = 1\n")
    module = task_module(
        "import conveyor\n\n\nclass Hello(conveyor.Task):\n    n = conveyor.IntParameter()\n"
    )
    for n in range(3):
        proc = run_cli(
            "run", f"{module}.Hello", "--n", str(n), "--scheduler-url", server.url, cwd=tmp_path
        )
        assert proc.returncode == 0, proc.stderr
        assert "1 ran successfully" in proc.stdout, proc.stdout  # (registered at the server)
    wait_for(lambda: not _statuses(server), 30, "the finished tasks to be removed")
    server.kill()
    server.start()
    assert _statuses(server) == {}


def test_fencing_is_off_when_a_healthy_worker_could_look_out_of_reach() -> None:
    """A worker stops its attempts early enough for TERM and kill_grace to fit in the lease,
    but never sooner than a healthy worker can go without an answer (a ping interval plus a
    call's timeout): then fencing is off rather than killing the attempts of a worker that is
    fine."""
    from conveyor.worker.loop import fence_after

    assert fence_after(60, 5, 1, 10) == 54
    assert fence_after(6, 1, 0.5, 1) == 4
    assert fence_after(4, 1, 2.5, 1) is None  # a ping every 2.5 s cannot keep up with it
    assert fence_after(60, 5, 50, 10) is None


LEAKERS = """
import os
import pathlib
import subprocess
import time

import conveyor

ROOT = pathlib.Path({root!r})


class Marked(conveyor.Task):
    '''Complete once its run() has written its marker.'''

    def complete(self):
        return (ROOT / f"{{type(self).__name__}}.ok").exists()

    def done(self):
        (ROOT / f"{{type(self).__name__}}.ok").write_text("ok")


class Quick(Marked):
    def run(self):
        (ROOT / "quick.pid").write_text(str(os.getpid()))
        self.done()


class Leaky(Marked):
    '''Ends just after Quick (so the sweep at Quick's end is recent) and leaves a daemon.'''

    def run(self):
        while not (ROOT / "Quick.ok").exists():
            time.sleep(0.01)
        quick = int((ROOT / "quick.pid").read_text())
        while os.path.exists(f"/proc/{{quick}}"):  # until the worker has reaped Quick
            time.sleep(0.01)
        pid = ROOT / "daemon.pid"
        script = f"sleep 600 & echo $! > {{pid}}.tmp && mv {{pid}}.tmp {{pid}}"
        subprocess.run(["setsid", "sh", "-c", script], check=True)
        while not pid.exists():
            time.sleep(0.01)
        self.done()


class Long(Marked):
    '''Keeps the executor busy until the test says so.'''

    def run(self):
        while not (ROOT / "release").exists():
            time.sleep(0.02)
        self.done()


class All(conveyor.WrapperTask):
    def requires(self):
        return [Quick(), Leaky(), Long()]
"""


@pytest.mark.timeout(60)
def test_a_sweep_put_off_while_others_run_still_happens(
    task_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt that ends within SWEEP_EVERY of the last sweep, while another attempt keeps
    running, still gets its leftovers killed SWEEP_EVERY later (not only when the executor
    goes idle)."""
    import threading

    from conveyor.executors import supervisor

    monkeypatch.setattr(supervisor, "SWEEP_EVERY", 2.0)
    root = tmp_path / "run"
    root.mkdir()
    module = task_module(LEAKERS.format(root=str(root)))
    config = conveyor.Config().with_overrides(executor="fork", workers=3)
    outcome: list[RunReport] = []
    runner = threading.Thread(
        target=lambda: outcome.append(_run(load_task_class(module, "All")(), config))
    )
    runner.start()
    try:
        wait_for((root / "daemon.pid").exists, 30, "the daemon to be started")
        daemon = int((root / "daemon.pid").read_text())
        wait_for(lambda: not _pid_alive(daemon), 30, "the daemon to be killed while Long runs")
        assert not (root / "release").exists()
    finally:
        (root / "release").write_text("go")
        runner.join(timeout=30)
    assert outcome and outcome[0].exit_code == 0
