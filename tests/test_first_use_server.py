"""Regressions found by trying the central scheduler as a new user would (issue 7): the
scheduler's start-up, idle assistants, ``conveyor tasks`` and shared-scheduler exit codes.

A real ``conveyor scheduler`` runs on a free loopback port; workers are real ``conveyor run`` /
``conveyor worker`` processes. Every process carries a per-test marker and is killed after the
test. Nothing is synchronised by sleeping: tests poll the server with deadlines.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.testing.processes import SchedulerProcess, child_env, kill_marked, put, wait_for

WriteModule = Callable[..., str]
MARKER = "FIRSTUSE_MARKER"

TASKS = '''
import os

import conveyor
from conveyor.testing.processes import wait_file


class Gated(conveyor.Task):
    """Runs until the file ``gate`` exists in ``root``."""

    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "gated.out"))

    def run(self):
        with open(os.path.join(self.root, "started"), "w") as f:
            f.write(str(os.getpid()))
        if not wait_file(os.path.join(self.root, "gate"), 60):
            raise RuntimeError("the gate never opened")
        with self.output().open("w") as out:
            out.write("ok")


class Good(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, f"good-{self.n}"))

    def run(self):
        self.set_status_message(f"good {self.n} ran")
        with self.output().open("w") as out:
            out.write("ok")


class Bad(conveyor.Task):
    root = conveyor.Parameter()
    db_password = conveyor.Parameter(default="pa55-w0rd-value")

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "bad"))

    def run(self):
        raise ValueError(f"cannot connect with {self.db_password}")


class Mixed(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Good(root=self.root, n=2), Bad(root=self.root), Good(root=self.root, n=1)]
'''


@pytest.fixture
def marker() -> Iterator[str]:
    """A per-test marker; every process carrying it is killed afterwards."""
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER, value)


@pytest.fixture
def server(tmp_path: Path, marker: str) -> Iterator[SchedulerProcess]:
    """A started scheduler (no token: loopback only) with quick retry policy."""
    config = tmp_path / "server.toml"
    config.write_text("[scheduler]\nretry_delay = 3600\n", encoding="utf-8")
    proc = SchedulerProcess(tmp_path, config, child_env(tmp_path, MARKER, marker))
    proc.start()
    yield proc
    proc.kill()


def _conveyor(*args: str) -> list[str]:
    return [sys.executable, "-m", "conveyor", *args]


def _env(tmp_path: Path, marker: str, **extra: str) -> dict[str, str]:
    quick = {
        "CONVEYOR_WORKER__WAIT_INTERVAL": "0.1",
        "CONVEYOR_WORKER__WAIT_JITTER": "0",
        "CONVEYOR_WORKER__PING_INTERVAL": "0.2",
    }
    return child_env(tmp_path, MARKER, marker, **{**quick, **extra})


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _task_list(server: SchedulerProcess) -> list[dict[str, Any]]:
    import urllib.request

    with urllib.request.urlopen(server.url + "/api/v1/tasks", timeout=5) as answer:
        tasks: list[dict[str, Any]] = json.load(answer)["tasks"]
        return tasks


def test_scheduler_on_a_busy_port_is_one_error_line_and_creates_nothing(
    tmp_path: Path, marker: str
) -> None:
    """A port already in use: exit 2, one 'conveyor: error:' line naming the address, no
    traceback, no banner and no state file left behind."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = _run(
            _conveyor("scheduler", "--port", str(port)),
            workdir,
            child_env(tmp_path, MARKER, marker),
        )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"conveyor: error: cannot listen on 127.0.0.1:{port}: the address is already in use "
        "(is another scheduler running there?)"
    ]
    assert list(workdir.iterdir()) == []


def test_idle_assistant_stopped_by_sigterm_says_nothing_was_running(
    tmp_path: Path, marker: str, server: SchedulerProcess
) -> None:
    """An assistant with nothing to do, stopped by SIGTERM, exits 143 and its summary says that
    no task was scheduled and none was running, instead of claiming it stopped some."""
    proc = subprocess.Popen(
        _conveyor("worker", "--scheduler-url", server.url, "--log-level", "warning"),
        cwd=tmp_path,
        env=_env(tmp_path, marker),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        import urllib.request

        def registered() -> bool:
            with urllib.request.urlopen(server.url + "/api/v1/workers", timeout=5) as answer:
                return bool(json.load(answer)["workers"])

        wait_for(registered, 30, "the assistant to reach the scheduler")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "No task was scheduled." in out
    assert "Scheduled 0 task(s)" not in out
    verdict = out.rstrip().splitlines()[-1]  # (with the run's duration: "after 1.2 s")
    assert re.fullmatch(
        r"Verdict: interrupted by SIGTERM after [\d.]+ s - no task was running\.", verdict
    ), verdict


def test_conveyor_tasks_reasons_filters_and_order(
    tmp_path: Path, marker: str, server: SchedulerProcess, task_module: WriteModule
) -> None:
    """``conveyor tasks`` shows a failed task's reason (secrets hidden), filters by state,
    family and text, and orders rows by state, family and id."""
    name = task_module(TASKS)
    root = str(tmp_path / "out")
    env = _env(tmp_path, marker)
    run = _run(
        _conveyor("run", f"{name}.Mixed", "--root", root, "--scheduler-url", server.url),
        tmp_path,
        env,
    )
    assert run.returncode == 1, run.stderr
    tasks = _run(_conveyor("tasks", "--scheduler-url", server.url), tmp_path, env)
    assert tasks.returncode == 0, tasks.stderr
    rows = [line.split()[:2] for line in tasks.stdout.splitlines()[1:]]
    states = [state for state, _ in rows]
    assert states == ["PENDING", "DONE", "DONE", "FAILED"]  # Mixed waits on Bad
    families = [task_id.split("_")[0] for _, task_id in rows]
    assert families == ["Mixed", "Good", "Good", "Bad"]
    done_ids = [task_id for state, task_id in rows if state == "DONE"]
    assert done_ids == sorted(done_ids)
    bad_line = next(line for line in tasks.stdout.splitlines() if line.startswith("FAILED"))
    assert bad_line.endswith("ValueError: cannot connect with ***")
    assert "pa55-w0rd-value" not in tasks.stdout
    assert "good 1 ran" in tasks.stdout  # a status message is shown for other states

    failed = _run(
        _conveyor("tasks", "--scheduler-url", server.url, "--state", "failed", "--json"),
        tmp_path,
        env,
    )
    [bad] = json.loads(failed.stdout)["tasks"]
    assert bad["family"] == "Bad"
    assert bad["params"]["db_password"] == "***"  # hidden in --json too
    assert "pa55-w0rd-value" not in failed.stdout
    several = _run(
        _conveyor("tasks", "--scheduler-url", server.url, "--state", "failed, Done"),
        tmp_path,
        env,
    )
    assert several.returncode == 0, several.stderr
    assert [line.split()[0] for line in several.stdout.splitlines()[1:]] == [
        "DONE",
        "DONE",
        "FAILED",
    ]
    good = _run(
        _conveyor("tasks", "--scheduler-url", server.url, "--family", "Good"), tmp_path, env
    )
    assert len(good.stdout.splitlines()) == 3 and "Bad_" not in good.stdout
    matched = _run(
        _conveyor("tasks", "--scheduler-url", server.url, "--match", "good-NOPE"), tmp_path, env
    )
    assert len(matched.stdout.splitlines()) == 1  # the header only
    by_id = _run(
        _conveyor("tasks", "--scheduler-url", server.url, "--match", "BAD_"), tmp_path, env
    )
    assert [line.split()[0] for line in by_id.stdout.splitlines()[1:]] == ["FAILED"]
    by_param = _run(
        _conveyor("tasks", "--scheduler-url", server.url, "--match", root[-12:]), tmp_path, env
    )
    assert len(by_param.stdout.splitlines()) == 1 + 4  # every task has the root parameter
    by_secret = _run(
        _conveyor("tasks", "--scheduler-url", server.url, "--match", "PA55-W0RD"), tmp_path, env
    )
    assert len(by_secret.stdout.splitlines()) == 1  # secret values are not searchable
    wrong = _run(
        _conveyor("tasks", "--scheduler-url", server.url, "--state", "broken"), tmp_path, env
    )
    assert wrong.returncode == 2
    assert wrong.stderr.strip() == (
        "conveyor: error: conveyor tasks: unknown --state BROKEN; expected one of: "
        "PENDING, RUNNING, DONE, FAILED, DISABLED, UNKNOWN"
    )


def test_shared_scheduler_run_exits_5_without_keep_alive_and_0_with_it(
    tmp_path: Path, marker: str, server: SchedulerProcess, task_module: WriteModule
) -> None:
    """While another worker runs the task, ``conveyor run`` exits 5 (Luigi's behaviour); with
    keep_alive it waits, and exits 0 once the other worker has finished the task."""
    name = task_module(TASKS)
    root = tmp_path / "out"
    root.mkdir()
    env = _env(tmp_path, marker)
    args = _conveyor("run", f"{name}.Gated", "--root", str(root), "--scheduler-url", server.url)
    first = subprocess.Popen(
        args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    waiting: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: (root / "started").exists(), 30, "the first worker to start the task")
        elsewhere = _run(args, tmp_path, env)
        assert elsewhere.returncode == 5, elsewhere.stderr
        assert "are running on other workers" in elsewhere.stdout
        waiting = subprocess.Popen(
            args,
            cwd=tmp_path,
            env={**env, "CONVEYOR_WORKER__KEEP_ALIVE": "true"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        def both_workers_seen() -> bool:
            import urllib.request

            with urllib.request.urlopen(server.url + "/api/v1/workers", timeout=5) as answer:
                return len(json.load(answer)["workers"]) >= 3

        wait_for(both_workers_seen, 30, "the keep_alive worker to reach the scheduler")
        assert waiting.poll() is None  # it waits for the other worker
        put(root / "gate", "open")
        _, first_err = first.communicate(timeout=60)
        assert first.returncode == 0, first_err
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        assert "were completed by other workers" in out
        assert [t["status"] for t in _task_list(server)] == ["DONE"]
    finally:
        for proc in (first, waiting):
            if proc is not None:
                proc.kill()
                proc.wait(timeout=10)
    assert os.path.exists(root / "gated.out")


def test_the_listener_is_a_tcp_socket_so_connections_get_nodelay() -> None:
    """bind_listener makes an IPPROTO_TCP socket: asyncio sets TCP_NODELAY on the connections it
    accepts only then (without it each keep-alive request waited ~40 ms for a delayed ACK)."""
    from conveyor.server.main import bind_listener

    listener = bind_listener("127.0.0.1", 0)
    try:
        assert listener.proto == socket.IPPROTO_TCP
        client = socket.create_connection(listener.getsockname(), timeout=5)
        accepted, _ = listener.accept()
        with client, accepted:
            assert accepted.proto == socket.IPPROTO_TCP
    finally:
        listener.close()
