"""Routing by labels (issue 25, item 4): ``[worker] labels`` and a task's ``labels``.

A task is handed only to a worker whose labels include all of the task's; one no live worker can
take stays PENDING, and the scheduler says why (``waiting``), which ``conveyor tasks``, the task
list and the task detail of the web UI show. In-process first (the policy itself), then a real
``conveyor scheduler`` with two real workers of different labels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import conveyor
from conveyor.errors import TaskDefinitionError
from conveyor.protocol import GetWork, TaskSpec, TaskStatus
from conveyor.scheduler import Scheduler
from conveyor.scheduler.persist import from_row, to_row
from conveyor.testing import FakeClock
from conveyor.testing.processes import SchedulerProcess, child_env, wait_for
from seam_support import plain_scheduler

MARKER = "LABELTEST_MARKER"

WAITING = "waiting for a worker with the labels gpu: no live worker that may run it has them"


def _scheduler() -> tuple[Scheduler, FakeClock]:
    clock = FakeClock()
    return Scheduler(clock=clock, worker_disconnect_delay=60), clock


def _ask(scheduler: Scheduler, worker: str, labels: tuple[str, ...] = (), **fields: Any) -> Any:
    return scheduler.call(GetWork(worker, labels=labels, max_tasks=1, **fields)).work


def test_a_task_goes_only_to_a_worker_with_all_its_labels() -> None:
    """Both workers registered the task; the one without ``gpu`` is never handed it, the one
    with ``gpu`` (and more) is. A task without labels goes to either."""
    scheduler, _ = _scheduler()
    for worker in ("plain", "gpu-box"):
        scheduler.add_tasks(worker, [TaskSpec("G", "Fam", labels=("gpu",)), TaskSpec("P", "Fam")])
    assert _ask(scheduler, "plain", ("cpu",)).task_id == "P"
    assert _ask(scheduler, "plain", ("cpu",)) is None
    assert _ask(scheduler, "gpu-box", ("gpu", "eu")).task_id == "G"


def test_an_assistant_takes_a_labelled_task_only_with_the_labels() -> None:
    """A worker that cannot run its own labelled task leaves it to assistants: one without the
    labels is not handed it, one with them is."""
    scheduler, _ = _scheduler()
    scheduler.get_work("helper-plain", assistant=True)
    scheduler.get_work("helper-gpu", assistant=True)
    scheduler.add_tasks("owner", [TaskSpec("G", "Fam", labels=("gpu",))])
    assert _ask(scheduler, "owner") is None
    assert _ask(scheduler, "helper-plain", assistant=True) is None
    assert _ask(scheduler, "helper-gpu", ("gpu",), assistant=True).task_id == "G"


def test_the_scheduler_says_why_a_ready_task_waits_until_a_worker_can_take_it() -> None:
    """With only workers lacking the labels alive, the ready task's ``waiting`` says so (in
    the task list too), and it clears when a worker with them asks; a task that is not ready
    has none."""
    scheduler, _clock = _scheduler()
    scheduler.add_tasks("plain", [TaskSpec("G", "Fam", labels=("gpu",), deps=("D",))])
    scheduler.add_tasks("plain", [TaskSpec("D", "Fam")])
    _ask(scheduler, "plain", ("cpu",))  # (D handed out: G is not ready yet)
    assert scheduler.peek("G").waiting == ""  # type: ignore[union-attr]
    scheduler.task_done("plain", "D")
    assert scheduler.peek("G").waiting == WAITING  # type: ignore[union-attr]
    [info] = [t for t in scheduler.task_list() if t.task_id == "G"]
    assert (info.status, info.waiting) == (TaskStatus.PENDING, WAITING)
    scheduler.add_tasks("gpu-box", [TaskSpec("G", "Fam", labels=("gpu",))])
    assert _ask(scheduler, "gpu-box", ("gpu",), running=()) is not None  # (taken at once)
    assert scheduler.peek("G").waiting == ""  # type: ignore[union-attr]


def test_waiting_follows_the_live_workers() -> None:
    """The reason appears when the last able worker is declared gone, and goes when one with
    the labels is seen again."""
    scheduler, clock = _scheduler()
    scheduler.add_tasks("gpu-box", [TaskSpec("G", "Fam", labels=("gpu",))])
    scheduler.add_tasks("other", [TaskSpec("G", "Fam", labels=("gpu",))])
    assert _ask(scheduler, "gpu-box", ("gpu",)).task_id == "G"
    clock.advance(61)  # gpu-box silent for longer than worker_disconnect_delay
    assert _ask(scheduler, "other", ("cpu",)) is None  # (declared gone: G failed)
    assert scheduler.peek("G").status == TaskStatus.FAILED  # type: ignore[union-attr]
    scheduler.retry_now(["G"])
    assert scheduler.peek("G").waiting == WAITING  # type: ignore[union-attr]
    assert _ask(scheduler, "gpu-box", ("gpu",)).task_id == "G"  # (back)
    assert scheduler.peek("G").waiting == ""  # type: ignore[union-attr]


def test_a_worker_id_that_stops_offering_labels_is_not_handed_labelled_tasks() -> None:
    """A later run under the same worker id without labels says so (an empty list) and is not
    handed a task needing the labels the earlier run had."""
    scheduler, _ = _scheduler()
    scheduler.add_tasks("w", [TaskSpec("G1", "Fam", labels=("gpu",))])
    assert _ask(scheduler, "w", ("gpu",)).task_id == "G1"
    scheduler.add_tasks("w", [TaskSpec("G2", "Fam", labels=("gpu",))])
    assert _ask(scheduler, "w", (), running=("G1",)) is None
    assert scheduler.peek("G2").waiting == WAITING  # type: ignore[union-attr]


def test_a_task_registered_again_without_labels_is_handed_out() -> None:
    """A runner whose queue entry was dropped for lacking the labels gets the task once a
    registration takes the labels away (a new version of the class), and the reason goes."""
    scheduler, _ = _scheduler()
    scheduler.add_tasks("plain", [TaskSpec("G", "Fam", labels=("gpu",))])
    assert _ask(scheduler, "plain", ()) is None  # (its entry dropped: it lacks gpu)
    assert scheduler.peek("G").waiting == WAITING  # type: ignore[union-attr]
    scheduler.add_tasks("other", [TaskSpec("G", "Fam")])
    assert scheduler.peek("G").waiting == ""  # type: ignore[union-attr]
    assert _ask(scheduler, "plain", ()).task_id == "G"


def test_a_worker_that_released_a_task_no_longer_counts_as_able() -> None:
    """Once the only worker with the labels released the task (its run ended), the task says
    it waits: the worker is no longer handed it."""
    scheduler, _ = _scheduler()
    scheduler.add_tasks("cpu", [TaskSpec("G", "Fam", labels=("gpu",), deps=("D",))])
    scheduler.add_tasks("cpu", [TaskSpec("D", "Fam")])
    scheduler.add_tasks("gpu-box", [TaskSpec("G", "Fam", labels=("gpu",), deps=("D",))])
    _ask(scheduler, "gpu-box", ("gpu",))  # (says its labels; D is not its own)
    assert _ask(scheduler, "cpu", ()).task_id == "D"
    scheduler.task_done("cpu", "D")
    assert scheduler.peek("G").waiting == ""  # type: ignore[union-attr]
    scheduler.release("gpu-box", ["G"])
    assert scheduler.peek("G").waiting == WAITING  # type: ignore[union-attr]


def test_labels_and_waiting_survive_a_row_round_trip() -> None:
    """The store keeps a task's labels and its reason; rows saved before labels load."""
    scheduler, _ = _scheduler()
    scheduler.add_tasks("plain", [TaskSpec("G", "Fam", labels=("gpu", "eu"))])
    _ask(scheduler, "plain")
    rec = scheduler.peek("G")
    assert rec is not None
    row = json.loads(json.dumps(to_row(rec)))
    back = from_row(row)
    assert (back.labels, back.waiting) == (("eu", "gpu"), rec.waiting) and rec.waiting
    old = {k: v for k, v in row.items() if k not in ("labels", "waiting")}
    assert (from_row(old).labels, from_row(old).waiting) == ((), "")


def test_labels_are_checked_where_the_class_is_defined() -> None:
    """A string or a non-string label is a definition error naming the class."""
    with pytest.raises(TaskDefinitionError, match=r"Bad\.labels = 'gpu'; expected a list"):

        class Bad(conveyor.Task):
            labels = "gpu"

    class Good(conveyor.Task):
        labels = ("gpu", "eu", "gpu")

    assert Good().task_policy().labels == ("eu", "gpu")


# --- a real server, two real workers ------------------------------------------------------------

TASKS = """
import conveyor


class Plain(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/plain")

    def run(self):
        with self.output().open("w") as f:
            f.write("ok")


class NeedsGpu(conveyor.Task):
    root = conveyor.Parameter()
    labels = ["gpu"]

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/gpu")

    def run(self):
        with self.output().open("w") as f:
            f.write("ok")


class Top(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Plain(root=self.root), NeedsGpu(root=self.root)]
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SchedulerProcess]:
    """A started ``conveyor scheduler`` (no token: its web UI answers without signing in)."""
    with plain_scheduler(tmp_path, "[scheduler]\nworker_disconnect_delay = 60\n") as started:
        yield started


def _tasks(server: SchedulerProcess) -> dict[str, dict[str, Any]]:
    reply = server.request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply
    return {t["family"]: t for t in reply.json()["tasks"]}


def _spawn(tmp_path: Path, name: str, toml: str, *args: str) -> subprocess.Popen[bytes]:
    config = tmp_path / f"{name}.toml"
    config.write_text(toml, encoding="utf-8")
    env = child_env(tmp_path, MARKER, tmp_path.name)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "conveyor", *args, "--config", str(config)]
    return subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=(tmp_path / f"{name}.out").open("wb"),
        stderr=(tmp_path / f"{name}.err").open("wb"),
    )


@pytest.mark.timeout(180)
def test_two_workers_of_different_labels(server: SchedulerProcess, tmp_path: Path) -> None:
    """A ``cpu`` worker runs the graph's plain task; the ``gpu`` task waits, and
    ``conveyor tasks``, the UI's list and detail say why, until an assistant with ``gpu``
    joins and runs it; then the first worker's run ends successfully."""
    module = f"labeltasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(TASKS, encoding="utf-8")
    root = tmp_path / "out"
    root.mkdir()
    cpu = _spawn(
        tmp_path,
        "cpu",
        '[worker]\nlabels = ["cpu"]\nkeep_alive = true\nwait_interval = 0.2\nwait_jitter = 0\n',
        "run",
        f"{module}.Top",
        "--root",
        str(root),
        "--scheduler-url",
        server.url,
    )
    gpu: subprocess.Popen[bytes] | None = None
    try:
        wait_for(
            lambda: (
                _tasks(server).get("Plain", {}).get("status") == "DONE"
                and _tasks(server).get("NeedsGpu", {}).get("waiting") == WAITING
            ),
            90,
            "the plain task done and the gpu task waiting, with why",
        )
        assert _tasks(server)["NeedsGpu"]["status"] == "PENDING"
        listed = subprocess.run(
            [sys.executable, "-m", "conveyor", "tasks", "--scheduler-url", server.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0, listed.stderr
        assert WAITING in listed.stdout, listed.stdout
        gpu_id = _tasks(server)["NeedsGpu"]["task_id"]
        detail = server.request("GET", f"/ui/api/task?id={quote(gpu_id)}").json()["task"]
        assert (detail["labels"], detail["waiting"]) == (["gpu"], WAITING)
        rows = server.request("GET", "/ui/api/tasks?limit=50").json()["tasks"]
        assert {r["task_id"]: r["reason"] for r in rows}[gpu_id] == WAITING
        gpu = _spawn(
            tmp_path,
            "gpu",
            f'[worker]\nlabels = ["gpu"]\ntask_modules = ["{module}"]\nwait_interval = 0.2\n'
            "wait_jitter = 0\n",
            "worker",
            "--scheduler-url",
            server.url,
        )
        assert cpu.wait(timeout=120) == 0, (tmp_path / "cpu.err").read_text()
        tasks = _tasks(server)
        assert {f: t["status"] for f, t in tasks.items()} == {
            "Plain": "DONE",
            "NeedsGpu": "DONE",
            "Top": "DONE",
        }
        ran_on = {
            family: server.request(
                "GET", f"/ui/api/task?id={quote(tasks[family]['task_id'])}"
            ).json()["task"]["attempts"][-1]["worker"]
            for family in ("Plain", "NeedsGpu")
        }
        assert ran_on["NeedsGpu"] != ran_on["Plain"], ran_on  # (the gpu assistant ran it)
        assert tasks["NeedsGpu"]["waiting"] == ""
        assert (root / "gpu").read_text() == "ok"
    finally:
        for proc in (cpu, gpu):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
