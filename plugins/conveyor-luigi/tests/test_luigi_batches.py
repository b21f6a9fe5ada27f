"""Luigi's batch tasks under conveyor (issue 25, item 6): a Luigi class with a ``batch_method``
parameter runs its pending tasks as batches, one attempt each, as Luigi's own worker does,
under every executor and through a real ``conveyor scheduler`` over HTTP.

The tasks are in :mod:`luigi_batch_tasks_for_tests` (the real ``luigi`` package).
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any
from urllib.parse import quote

import conveyor
import luigi.task
import pytest
from conveyor.testing.processes import SchedulerProcess, child_env

import luigi_batch_tasks_for_tests as bt
from conveyor_luigi.adapter import _max_batch_size, adapted
from conveyor_luigi.events import KNOWN
from luigi_marker_for_tests import MARKER_VARIABLE

pytestmark = pytest.mark.timeout(180)


def runs(root: Path) -> list[str]:
    """The lines the attempts noted (one per ``run()``)."""
    path = root / "runs.log"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def members(top: Any) -> list[str]:
    """The task ids of ``top``'s members, as Luigi computes them."""
    return [task.task_id for task in top.requires()]


def build(top: Any, executor: str = "inline") -> conveyor.RunResult:
    """``conveyor.build(top)`` with one worker of ``executor``."""
    return conveyor.build(top, executor=executor, workers=1)


def test_the_batch_key_and_the_batch_task() -> None:
    """Members differing only in their batched parameter share a key (with Luigi's
    ``max_batch_size``: 0 for infinity); another group, or a class without a batched
    parameter, does not batch; the batch task is Luigi's ``from_str_params`` of the lists."""
    first, second = (adapted(bt.Shard(root="r", item=i)) for i in ("a", "b"))
    other = adapted(bt.Shard(root="r", group="h", item="a"))
    assert first.task_batch_key() == second.task_batch_key()
    assert first.task_batch_key() is not None and first.task_batch_key()[1] == 0
    assert other.task_batch_key() != first.task_batch_key()
    sized = adapted(bt.SizedShard(root="r", item="a")).task_batch_key()
    assert sized is not None and sized[1] == 20
    assert adapted(bt.AllShards(root="r")).task_batch_key() is None
    batch = first.task_batch([first, second])
    assert batch.luigi_task == bt.Shard.from_str_params({"root": "r", "item": ["a", "b"]})
    assert batch.task_params["item"] == "a,b"
    latest = [adapted(bt.Latest(root="r", day=d)) for d in (3, 9, 4)]
    assert latest[0].task_batch(latest).luigi_task == bt.Latest(root="r", day=9)


def test_what_luigi_asks_of_each_task_is_asked_of_each_task() -> None:
    """A task whose ``batchable`` says no runs alone; tasks needing other resources never
    share a key; ``max_batch_size`` is read from the task (a property may give it)."""
    assert adapted(bt.NotBatchable(root="r", item="a")).task_batch_key() is None
    cheap, also_cheap, dear = (adapted(bt.Costly(root="r", item=i)) for i in ("001", "002", "007"))
    assert cheap.task_batch_key() == also_cheap.task_batch_key() != dear.task_batch_key()
    asked = adapted(bt.AskedSize(root="r", item="a")).task_batch_key()
    assert asked is not None and asked[1] == 7


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (None, 0),
        (math.inf, 0),
        (20, 20),
        (2.5, 3),  # (Luigi's scheduler adds a member while the batch holds fewer)
        (1, 1),
        (0, 1),
        (-3, 1),
        (math.nan, 1),
        (-math.inf, 1),
        (Fraction(5, 2), 3),
        ("5", 1),
        (True, 1),
    ],
)
def test_luigis_max_batch_size_as_conveyors(size: object, expected: int) -> None:
    """Infinity (Luigi's default) or None: no limit (0); a number: what Luigi's scheduler
    puts in a batch, at least 1; anything else: 1."""
    assert _max_batch_size(size) == expected


def test_a_batch_task_with_a_members_id_leaves_the_member_its_events() -> None:
    """With Luigi's instance cache off, the batch of ``batch_method=max`` is a new object with
    the largest member's id: the member's own adapter stays the one its worker-side events
    fire on (``KNOWN``)."""
    luigi.task.Register.disable_instance_cache()
    try:
        members = [adapted(bt.Latest(root="r", day=d)) for d in (3, 9)]
        batch = members[0].task_batch(members)
        assert batch is not members[1] and batch.task_id == members[1].task_id
        assert KNOWN[members[1].task_id] is members[1]
    finally:
        luigi.task.Register.clear_instance_cache()


def test_a_task_that_is_not_batchable_runs_alone(tmp_path: Path) -> None:
    """Four members whose ``batchable`` is False: four attempts, as under Luigi."""
    result = build(bt.AllShards(root=str(tmp_path), kind="NotBatchable", n=4))
    assert result.ok, result.summary
    assert len(runs(tmp_path)) == 4


@pytest.mark.parametrize("executor", ["inline", "thread", "fork", "subprocess"])
def test_fifty_members_run_as_one_attempt(executor: str, tmp_path: Path) -> None:
    """50 pending Luigi tasks of a ``",".join`` class: ``run()`` is called once, with every
    item, under each executor; every member is DONE."""
    top = bt.AllShards(root=str(tmp_path))
    result = build(top, executor)
    assert result.ok, result.summary
    [line] = runs(tmp_path)
    family, group, items = line.split(" ")
    assert (family, group) == ("Shard", "g0")
    assert sorted(items.split(",")) == [f"{i:03d}" for i in range(50)]
    assert {result.states[m] for m in members(top)} == {"DONE"}


def test_max_batch_size_makes_three_batches(tmp_path: Path) -> None:
    """Luigi's ``max_batch_size = 20`` over 50 members: three attempts (20, 20, 10)."""
    result = build(bt.AllShards(root=str(tmp_path), kind="SizedShard"))
    assert result.ok, result.summary
    assert sorted(len(line.split(" ")[2].split(",")) for line in runs(tmp_path)) == [10, 20, 20]


def test_a_max_batch_runs_the_largest_member(tmp_path: Path) -> None:
    """``batch_method=max``: the batch is the member with the largest day, run once."""
    top = bt.AllShards(root=str(tmp_path), kind="Latest", n=30)
    result = build(top, "subprocess")
    assert result.ok, result.summary
    assert runs(tmp_path) == ["Latest 29"]
    assert {result.states[m] for m in members(top)} == {"DONE"}


def test_groups_never_share_a_batch_and_a_failing_batch_fails_each_member(
    tmp_path: Path,
) -> None:
    """Two groups (a parameter without batch_method): two batches, each of one group; when
    the batch's ``run()`` raises, every member fails with its error."""
    result = build(bt.AllShards(root=str(tmp_path), n=20, groups=2))
    assert result.ok, result.summary
    lines = sorted(runs(tmp_path))
    assert [line.split(" ")[1] for line in lines] == ["g0", "g1"]
    assert [len(line.split(" ")[2].split(",")) for line in lines] == [10, 10]
    failing = tmp_path / "failing"
    failing.mkdir()
    (failing / "fail").write_text("", encoding="utf-8")
    top = bt.AllShards(root=str(failing), n=10)
    result = build(top, "thread")
    assert not result.ok
    assert len(runs(failing)) == 1
    assert {result.states[m] for m in members(top)} <= {"FAILED", "DISABLED"}


def test_luigis_own_worker_runs_the_same_batch(tmp_path: Path) -> None:
    """The same graph under Luigi's own worker (local scheduler): one ``run()`` of all 50
    items too, so conveyor batches as Luigi does."""
    code = (
        "import luigi, sys, luigi_batch_tasks_for_tests as bt; "
        "ok = luigi.build([bt.AllShards(root=sys.argv[1])], local_scheduler=True, "
        "log_level='ERROR'); sys.exit(0 if ok else 1)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = runs(tmp_path)
    assert sorted(line.split(" ")[2].split(",")) == [f"{i:03d}" for i in range(50)]


@pytest.fixture
def server(tmp_path: Path, luigi_environment: str) -> Iterator[SchedulerProcess]:
    """A real ``conveyor scheduler`` on a free loopback port."""
    config = tmp_path / "server.toml"
    config.write_text("[scheduler]\nretry_delay = 3600\n", encoding="utf-8")
    proc = SchedulerProcess(
        tmp_path, config, child_env(tmp_path, MARKER_VARIABLE, luigi_environment)
    )
    proc.start()
    yield proc
    proc.kill()


def test_a_batch_over_http_runs_once_and_each_member_is_done(
    tmp_path: Path, server: SchedulerProcess
) -> None:
    """``conveyor run`` of the Luigi graph against a real server, attempts in subprocesses:
    one ``run()`` for the 50 members, each DONE on the server, whose UI lists the batch's
    members in a member's detail."""
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor", "run", "luigi_batch_tasks_for_tests.AllShards",
         "--root", str(out), "--scheduler-url", server.url, "--executor", "subprocess"],
        cwd=tmp_path, capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(runs(out)) == 1
    ids = members(bt.AllShards(root=str(out)))
    reply = server.request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply
    statuses = {t["task_id"]: t["status"] for t in reply.json()["tasks"]}
    assert {statuses[m] for m in ids} == {"DONE"}
    detail = server.request("GET", "/ui/api/task?id=" + quote(ids[7]))
    assert detail.status == 200, detail
    assert sorted(detail.json()["task"]["batch"]) == sorted(ids)
