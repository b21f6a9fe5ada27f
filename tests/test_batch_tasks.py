"""Batch tasks (Luigi's ``batch_method`` and ``max_batch_size``; issue 25, item 6).

Pending tasks of a family that differ only in their batched parameters are handed to one
worker as one batch: one attempt runs the task made of them (each batched parameter combined by
its ``batch_method``), and each member ends with it. In-process under every executor, and
against a real ``conveyor scheduler`` over HTTP with the UI's task detail naming the members.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import pytest

import conveyor
from conveyor.errors import TaskDefinitionError
from conveyor.protocol import (
    BatchMember,
    BatchSpec,
    TaskDetail,
    TaskSpec,
    TaskStatus,
    Work,
    decode,
    encode,
    encode_request,
)
from conveyor.scheduler import Scheduler
from conveyor.scheduler.persist import from_row, to_row
from conveyor.task import batch_key, batch_task
from conveyor.testing.processes import SchedulerProcess
from seam_support import plain_scheduler, worker_config

TASKS = """
import os

import conveyor


def _runs(root):
    return os.path.join(root, "runs.log")


class Joined(conveyor.Task):
    root = conveyor.Parameter()
    group = conveyor.Parameter(default="g")
    item = conveyor.Parameter(batch_method=",".join)

    def items(self):
        return self.item.split(",")

    def complete(self):
        root, group = self.root, self.group
        return all(os.path.exists(os.path.join(root, f"{group}-{i}")) for i in self.items())

    def run(self):
        with open(_runs(self.root), "a", encoding="utf-8") as out:
            out.write(f"{self.task_family} {self.group} {self.item}\\n")
        if os.path.exists(os.path.join(self.root, "fail")):
            raise RuntimeError("the batch fails on purpose")
        for i in self.items():
            with open(os.path.join(self.root, f"{self.group}-{i}"), "w", encoding="utf-8") as f:
                f.write("ok")


class Sized(Joined):
    max_batch_size = 20


def _explode(values):
    raise ValueError("these items do not combine")


class Exploding(conveyor.Task):
    root = conveyor.Parameter()
    item = conveyor.Parameter(batch_method=_explode)

    def complete(self):
        return False

    def run(self):
        with open(_runs(self.root), "a", encoding="utf-8") as out:
            out.write(f"{self.task_family} {self.item}\\n")


class AllExploding(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Exploding(root=self.root, item=str(i)) for i in range(3)]


class Latest(conveyor.Task):
    root = conveyor.Parameter()
    day = conveyor.IntParameter(batch_method=max)

    def complete(self):
        path = os.path.join(self.root, "latest")
        return os.path.exists(path) and int(open(path, encoding="utf-8").read()) >= self.day

    def run(self):
        with open(_runs(self.root), "a", encoding="utf-8") as out:
            out.write(f"Latest {self.day}\\n")
        with open(os.path.join(self.root, "latest"), "w", encoding="utf-8") as f:
            f.write(str(self.day))


class Plain(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, f"plain-{self.n}"))

    def run(self):
        with open(_runs(self.root), "a", encoding="utf-8") as out:
            out.write(f"Plain {self.n}\\n")
        with self.output().open("w") as f:
            f.write("ok")


class All(conveyor.WrapperTask):
    root = conveyor.Parameter()
    family = conveyor.Parameter(default="Joined")
    n = conveyor.IntParameter(default=50)
    groups = conveyor.IntParameter(default=1)

    def requires(self):
        cls = globals()[self.family]
        out = []
        for i in range(self.n):
            group = f"g{i % self.groups}"
            if cls is Latest:
                out.append(Latest(root=self.root, day=i))
            elif cls is Plain:
                out.append(Plain(root=self.root, n=i))
            else:
                out.append(cls(root=self.root, group=group, item=f"{i:03d}"))
        return out
"""


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The task module above, importable by name (so process executors rebuild its tasks)."""
    name = f"batchtasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(TASKS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    yield __import__(name)
    sys.modules.pop(name, None)


def _runs(root: Path) -> list[str]:
    path = root / "runs.log"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _run(
    tasks: ModuleType, root: Path, executor: str = "inline", **params: Any
) -> tuple[bool, Scheduler, Any]:
    """Run ``All(root, **params)`` with a worker of ``executor`` on an in-process scheduler."""
    scheduler = Scheduler()
    config = worker_config(root.parent, f'[worker]\nexecutor = "{executor}"\n')
    top = tasks.All(root=str(root), **params)
    with conveyor.Worker(scheduler, config=config, worker_id="bw") as worker:
        assert worker.add(top)
        ok = worker.run()
    return ok, scheduler, top


def _member_statuses(scheduler: Scheduler, top: Any) -> set[TaskStatus]:
    ids = [t.task_id for t in top.requires()]
    return set(scheduler.statuses(ids).values())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    return out


# --- the task side -------------------------------------------------------------------------------


def test_batch_method_and_max_batch_size_are_checked_at_class_definition() -> None:
    """A batched parameter must be significant; ``max_batch_size`` is a whole number >= 1 or
    None; a batch_method that is not callable is refused."""
    with pytest.raises(TaskDefinitionError, match="max_batch_size"):

        class Zero(conveyor.Task):
            max_batch_size = 0
            item = conveyor.Parameter(batch_method=",".join)

    with pytest.raises(TaskDefinitionError, match="not significant"):

        class Hidden(conveyor.Task):
            item = conveyor.Parameter(batch_method=",".join, significant=False)

    with pytest.raises(conveyor.ParameterError, match="batch_method"):
        conveyor.IntParameter(batch_method=3)  # type: ignore[call-overload]
    assert conveyor.DateParameter(batch_method=max).batch_method is max
    assert "batch_method" in repr(conveyor.IntParameter(batch_method=max))


def test_the_batch_key_and_the_batch_task(tasks: ModuleType) -> None:
    """Tasks equal but for batched values share a key; a non-batched difference does not;
    the batch task combines the values by each batch_method."""
    a, b = tasks.Joined(root="r", item="1"), tasks.Joined(root="r", item="2")
    other = tasks.Joined(root="r", group="h", item="1")
    assert batch_key(a) == batch_key(b) != batch_key(other)
    assert batch_key(a) is not None and batch_key(a)[1] == 0  # type: ignore[index]
    assert batch_key(tasks.Sized(root="r", item="1"))[1] == 20  # type: ignore[index]
    assert batch_key(tasks.Plain(root="r", n=1)) is None
    assert batch_task([a, b]).param_kwargs["item"] == "1,2"
    days = [tasks.Latest(root="r", day=d) for d in (3, 9, 5)]
    assert batch_task(days) == days[1]


def test_a_task_without_batch_parameters_registers_and_is_handed_out_as_before() -> None:
    """No ``batch`` in its registration's JSON, none in its hand-out."""
    assert "batch" not in encode_request(TaskSpec("A", "Fam"))
    scheduler = Scheduler()
    scheduler.add_tasks("w", [TaskSpec("A", "Fam"), TaskSpec("B", "Fam")])
    work = scheduler.get_work("w", batches=True)
    assert isinstance(work, Work) and work.batch == ()
    spec = TaskSpec("C", "Fam", batch=BatchSpec("k", 2))
    assert decode(TaskSpec, encode_request(spec)) == spec


# --- the scheduler -------------------------------------------------------------------------------


def _batchable(n: int, key: str = "T", size: int = 0) -> list[TaskSpec]:
    return [
        TaskSpec(f"{key}{i:03d}", "Fam", "m", {"i": str(i)}, batch=BatchSpec(key, size))
        for i in range(n)
    ]


def test_the_scheduler_hands_out_one_batch_under_one_attempt() -> None:
    """All ready tasks of a key in one hand-out (the handed one first), each RUNNING under
    the same attempt id; each member's report of that attempt is accepted."""
    scheduler = Scheduler()
    scheduler.add_tasks("w", _batchable(50) + _batchable(3, key="other"))
    work = scheduler.get_work("w", batches=True)
    assert isinstance(work, Work)
    ids = [m.task_id for m in work.batch]
    assert len(ids) == 50 and ids[0] == work.task_id and len(set(ids)) == 50
    assert all(m.params == {"i": m.task_id[1:].lstrip("0") or "0"} for m in work.batch)
    assert set(scheduler.statuses(ids).values()) == {TaskStatus.RUNNING}
    for task_id in ids:
        scheduler.task_done("w", task_id, work.attempt)
    assert set(scheduler.statuses(ids).values()) == {TaskStatus.DONE}
    rest = scheduler.get_work("w", batches=True)
    assert isinstance(rest, Work) and len(rest.batch) == 3


def test_max_batch_size_limits_a_batch_and_old_workers_get_single_tasks() -> None:
    """50 ready with a size of 20: batches of 20, 20 and 10; a worker that does not ask for
    batches is handed one task at a time."""
    scheduler = Scheduler()
    scheduler.add_tasks("w", _batchable(50, size=20))
    sizes = []
    for _ in range(3):
        work = scheduler.get_work("w", batches=True)
        assert isinstance(work, Work)
        sizes.append(len(work.batch))
    assert sizes == [20, 20, 10]
    scheduler.add_tasks("v", _batchable(2, key="v"))
    single = scheduler.get_work("v")
    assert isinstance(single, Work) and single.batch == ()


def test_a_batch_takes_only_what_the_worker_may_run() -> None:
    """Tasks of the key registered only by another worker stay for that one."""
    scheduler = Scheduler()
    scheduler.add_tasks("w", _batchable(3))
    scheduler.add_tasks("x", [TaskSpec("X1", "Fam", "m", {"i": "x"}, batch=BatchSpec("T"))])
    work = scheduler.get_work("w", batches=True)
    assert isinstance(work, Work) and {m.task_id for m in work.batch} == {"T000", "T001", "T002"}
    assert scheduler.statuses(["X1"]) == {"X1": TaskStatus.PENDING}


def test_members_hold_their_resources_within_the_capacity() -> None:
    """Each member holds its resources like any running task: with a capacity of 2 and each
    task needing 1, a batch has two members, and the next ask gets the next two."""
    scheduler = Scheduler(resources={"db": 2})
    specs = [replace(spec, resources={"db": 1}) for spec in _batchable(10)]
    scheduler.add_tasks("w", specs)
    work = scheduler.get_work("w", batches=True)
    assert isinstance(work, Work) and len(work.batch) == 2
    assert scheduler.get_work("w", batches=True) is None  # (db is taken up)
    for member in work.batch:
        scheduler.task_done("w", member.task_id, work.attempt)
    again = scheduler.get_work("w", batches=True)
    assert isinstance(again, Work) and len(again.batch) == 2


def test_ready_sets_are_let_go_with_their_tasks() -> None:
    """A batchable task that stops being ready other than by a hand-out (found done, here)
    leaves its key's ready set, so nothing of it stays once it is gone."""
    scheduler = Scheduler()
    scheduler.add_tasks("w", _batchable(5, key="K"))
    scheduler.add_tasks("w", [replace(spec, status=TaskStatus.DONE) for spec in _batchable(5, "K")])
    assert scheduler._batch_ready == {}  # (the scheduler's index of ready tasks per key)


def test_a_batch_that_cannot_be_made_fails_the_run(tasks: ModuleType, root: Path) -> None:
    """A batch_method that raises: every member fails with why, nothing runs, and the run
    says it failed."""
    scheduler = Scheduler()
    config = worker_config(root.parent, '[worker]\nexecutor = "inline"\n')
    top = tasks.AllExploding(root=str(root))
    with conveyor.Worker(scheduler, config=config, worker_id="bw") as worker:
        assert worker.add(top)
        assert worker.run() is False
    assert _runs(root) == []
    for task in top.requires():
        assert "could not be made" in scheduler.explanation(task.task_id)
        assert "these items do not combine" in scheduler.explanation(task.task_id)


def test_a_records_batch_is_persisted() -> None:
    """The members of a record's latest batch survive a row round trip; an older row loads."""
    scheduler = Scheduler()
    scheduler.add_tasks("w", _batchable(2))
    work = scheduler.get_work("w", batches=True)
    assert isinstance(work, Work)
    rec = scheduler.peek(work.task_id)
    assert rec is not None and rec.batch == ("T000", "T001")
    row = to_row(rec)
    again = from_row(row)
    assert again.batch == rec.batch and again.batch_key == "T"
    for name in ("batch", "batch_key", "batch_max"):
        del row[name]
    assert from_row(row).batch == ()


# --- real workers --------------------------------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.parametrize("executor", ["inline", "thread", "fork", "subprocess"])
def test_fifty_members_run_as_one_attempt(tasks: ModuleType, root: Path, executor: str) -> None:
    """50 pending members of a ``",".join`` family: run() is called once, with every item,
    under each executor; every member is DONE."""
    ok, scheduler, top = _run(tasks, root, executor)
    assert ok is True
    runs = _runs(root)
    assert len(runs) == 1, runs
    family, group, items = runs[0].split(" ")
    assert family == "Joined" and group == "g0"
    assert sorted(items.split(",")) == [f"{i:03d}" for i in range(50)]
    assert _member_statuses(scheduler, top) == {TaskStatus.DONE}


def test_max_batch_size_makes_three_batches(tasks: ModuleType, root: Path) -> None:
    """``max_batch_size = 20`` over 50 members: three attempts (20, 20 and 10 members)."""
    ok, scheduler, top = _run(tasks, root, family="Sized")
    assert ok is True
    sizes = sorted(len(line.split(" ")[2].split(",")) for line in _runs(root))
    assert sizes == [10, 20, 20]
    assert _member_statuses(scheduler, top) == {TaskStatus.DONE}


def test_a_max_batch_runs_the_largest_member(tasks: ModuleType, root: Path) -> None:
    """``batch_method=max``: the batch is the member with the largest value, run once."""
    ok, scheduler, top = _run(tasks, root, family="Latest", n=30)
    assert ok is True
    assert _runs(root) == ["Latest 29"]
    assert _member_statuses(scheduler, top) == {TaskStatus.DONE}


def test_a_failing_batch_fails_every_member(tasks: ModuleType, root: Path) -> None:
    """The batch's failure is each member's, with its explanation."""
    (root / "fail").write_text("", encoding="utf-8")
    ok, scheduler, top = _run(tasks, root, executor="thread", n=10)
    assert ok is False
    assert len(_runs(root)) == 1
    assert _member_statuses(scheduler, top) <= {TaskStatus.FAILED, TaskStatus.DISABLED}
    for task in top.requires():
        assert "the batch fails on purpose" in scheduler.explanation(task.task_id)


def test_non_batched_differences_never_share_a_batch(tasks: ModuleType, root: Path) -> None:
    """Two groups (a parameter without batch_method): two batches, each of one group."""
    ok, _, _ = _run(tasks, root, n=20, groups=2)
    assert ok is True
    runs = sorted(_runs(root))
    assert len(runs) == 2
    for line, group in zip(runs, ("g0", "g1"), strict=True):
        _, got, items = line.split(" ")
        assert got == group
        assert {int(i) % 2 for i in items.split(",")} == {int(group[1])}
        assert len(items.split(",")) == 10


def test_a_family_without_batch_parameters_runs_each_task(tasks: ModuleType, root: Path) -> None:
    """Unchanged: one attempt per task."""
    ok, scheduler, top = _run(tasks, root, family="Plain", n=5)
    assert ok is True
    assert sorted(_runs(root)) == [f"Plain {i}" for i in range(5)]
    assert _member_statuses(scheduler, top) == {TaskStatus.DONE}


@pytest.mark.parametrize("executor", ["thread", "subprocess"])
def test_an_assistant_runs_another_workers_tasks_as_one_batch(
    tasks: ModuleType, root: Path, executor: str
) -> None:
    """Tasks only registered by one worker: an assistant (allowed their module) is handed
    them as one batch, rebuilds each member, and runs them in one attempt."""
    scheduler = Scheduler()
    registrar = conveyor.Worker(
        scheduler, config=worker_config(root.parent, "[worker]\n"), worker_id="registrar"
    )
    top = tasks.All(root=str(root), n=12)
    assert registrar.add(top)
    config = worker_config(
        root.parent,
        f'[worker]\nassistant = true\nexecutor = "{executor}"\n'
        f'task_modules = ["{tasks.__name__}"]\n',
    )
    with conveyor.Worker(scheduler, config=config, worker_id="helper") as assistant:
        assert assistant.run() is True
    registrar.close()
    runs = _runs(root)
    assert len(runs) == 1 and len(runs[0].split(" ")[2].split(",")) == 12, runs
    assert _member_statuses(scheduler, top) == {TaskStatus.DONE}


def test_an_assistant_is_handed_a_batch_of_another_workers_tasks() -> None:
    """In the scheduler: an assistant is handed, as one batch, the ready tasks of a key that
    only another worker registered; that worker then has nothing left."""
    scheduler = Scheduler()
    scheduler.add_tasks("a", [], assistant=True)
    scheduler.add_tasks("w", _batchable(4, key="K"))
    work = scheduler.get_work("a", assistant=True, batches=True)
    assert isinstance(work, Work)
    assert sorted(m.task_id for m in work.batch) == ["K000", "K001", "K002", "K003"]
    assert scheduler.get_work("w", batches=True) is None


# --- over HTTP -----------------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SchedulerProcess]:
    """A started ``conveyor scheduler`` (no token: its web UI answers without signing in)."""
    with plain_scheduler(tmp_path, "[scheduler]\nworker_disconnect_delay = 60\n") as started:
        yield started


@pytest.mark.timeout(180)
def test_a_batch_over_http_runs_once_and_the_ui_lists_its_members(
    tasks: ModuleType, root: Path, server: SchedulerProcess
) -> None:
    """A real worker on a real server: one run() for 50 members, each DONE in
    ``/api/v1/tasks``; the UI's task detail of a member lists all 50."""
    config = worker_config(
        root.parent,
        f'[scheduler]\ntransport = "http"\nurl = "{server.url}"\n'
        '[worker]\nexecutor = "subprocess"\n',
    )
    top = tasks.All(root=str(root))
    with conveyor.Worker(config=config, worker_id="http-bw") as worker:
        assert worker.add(top)
        assert worker.run() is True
    assert len(_runs(root)) == 1
    reply = server.request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply
    statuses = {t["task_id"]: t["status"] for t in reply.json()["tasks"]}
    members = [t.task_id for t in top.requires()]
    assert {statuses[m] for m in members} == {"DONE"}
    detail = server.request("GET", f"/ui/api/task?id={quote(members[7])}")
    assert detail.status == 200, detail
    shown = detail.json()["task"]
    assert set(TaskDetail.__dataclass_fields__) >= {"batch"}
    assert sorted(shown["batch"]) == sorted(members)


def test_work_with_a_batch_encodes_and_an_older_answer_decodes() -> None:
    """A Work's batch travels as a list of members; an answer without it reads as ()."""
    work = Work("A", "Fam", "m", {}, 7, batch=(BatchMember("A", {"i": "1"}),))
    assert decode(Work, encode(work)) == work
    data = encode(work)
    del data["batch"]
    assert decode(Work, data).batch == ()
