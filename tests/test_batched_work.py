"""Batched hand-outs and reports carried by ``get_work`` (issue 25, item 1).

A worker asks for as many tasks as it has free slots and reports the attempts that ended since
its last call in the same request; the scheduler applies those reports first, hands out up to
that many tasks, and commits all of it in one transaction before it answers. Against a real
``conveyor scheduler`` (with a ``[plugins] local`` module recording every answered request)
and real workers over HTTP; a worker of the previous release (which never batches) is covered
by tests/test_previous_release.py.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import conveyor
from conveyor.errors import SchedulerUnavailable
from conveyor.protocol import GetWork, TaskDone, TaskFailed, TaskSpec, TaskStatus
from conveyor.scheduler import Scheduler
from conveyor.testing.processes import kill_marked
from seam_support import SEAM_MARKER, SeamServer, json_file_lines, worker_config

pytestmark = pytest.mark.timeout(120)

TOKEN = "batch-test-token"
W1 = "batch-worker-1"

RECORDER = """
import json
import os

import conveyor

OUT = os.environ["BATCHTEST_OUT"]


@conveyor.hookimpl
def conveyor_scheduler_request(event):
    with open(OUT, "a", encoding="utf-8") as out:
        out.write(json.dumps({"route": event.route, "code": event.code}) + "\\n")
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SeamServer]:
    """A started server recording each answered request's route; killed at the end."""
    marker = uuid.uuid4().hex
    out = tmp_path / "requests.jsonl"
    started = SeamServer(tmp_path, marker, {"batchrec": RECORDER}, TOKEN, BATCHTEST_OUT=str(out))
    try:
        started.start()
        yield started
    finally:
        kill_marked(SEAM_MARKER, marker)


def _routes(server: SeamServer) -> list[str]:
    return [r["route"] for r in json_file_lines(server.directory / "requests.jsonl")]


def _statuses(server: SeamServer) -> dict[str, str]:
    reply = server.request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply
    return {t["task_id"]: t["status"] for t in reply.json()["tasks"]}


def _add(server: SeamServer, ids: list[str]) -> None:
    tasks = [{"task_id": t, "family": "Fam", "params": {"p": t}} for t in ids]
    assert server.post("add_tasks", {"worker_id": W1, "tasks": tasks}).status == 200


def _ask(server: SeamServer, **fields: Any) -> dict[str, Any]:
    reply = server.post("get_work", {"worker_id": W1, **fields})
    assert reply.status == 200, reply
    answer: dict[str, Any] = reply.json()
    return answer


def _handed(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return ([answer["work"]] if answer["work"] else []) + answer["more"]


def test_one_request_reports_and_is_handed_up_to_max_tasks(server: SeamServer) -> None:
    """Four asked of six: four handed out, batched. The next request carries two successes
    and a failure (applied) and asks for three: the two left are handed out."""
    _add(server, [f"T{i}" for i in range(6)])
    first = _ask(server, max_tasks=4, running=[])
    assert first["batched"] is True
    handed = _handed(first)
    assert len(handed) == 4 and len({w["task_id"] for w in handed}) == 4
    assert all(w["attempt"] > 0 for w in handed)
    a, b, c, d = handed
    done = [{"worker_id": W1, "task_id": w["task_id"], "attempt": w["attempt"]} for w in (a, b)]
    failed = [{**{"worker_id": W1, "task_id": c["task_id"], "attempt": c["attempt"]}}]
    failed[0]["explanation"] = "it broke"
    second = _ask(server, max_tasks=3, running=[d["task_id"]], done=done, failed=failed)
    assert second["batched"] is True and second["refused"] == []
    rest = _handed(second)
    assert len(rest) == 2  # (only two were left)
    statuses = _statuses(server)
    assert statuses[a["task_id"]] == statuses[b["task_id"]] == "DONE"
    assert statuses[c["task_id"]] == "FAILED"
    assert statuses[d["task_id"]] == "RUNNING"  # (listed as running: not reclaimed)
    assert {statuses[w["task_id"]] for w in rest} == {"RUNNING"}


def test_a_stale_report_is_named_and_the_rest_applied(server: SeamServer) -> None:
    """A carried report of an attempt that is not the latest does not refuse the request: it
    is listed in ``refused`` (with the route it stands for) and the others are applied."""
    _add(server, ["S1", "S2"])
    one, two = _handed(_ask(server, max_tasks=2))
    stale = {"worker_id": W1, "task_id": one["task_id"], "attempt": one["attempt"] + 1}
    good = {"worker_id": W1, "task_id": two["task_id"], "attempt": two["attempt"]}
    answer = _ask(server, max_tasks=1, running=[one["task_id"]], done=[stale, good])
    assert [(r["route"], r["task_id"]) for r in answer["refused"]] == [
        ("task_done", one["task_id"])
    ]
    assert "was refused" in answer["refused"][0]["error"]
    statuses = _statuses(server)
    assert statuses[two["task_id"]] == "DONE"
    assert statuses[one["task_id"]] == "RUNNING"


def test_a_report_of_another_worker_is_refused_and_not_applied(server: SeamServer) -> None:
    """Reports ride only with their own worker's request: another's is listed in ``refused``
    (why, with its route) and not applied; the rest of the request is."""
    _add(server, ["X1", "X2"])
    (work,) = _handed(_ask(server, max_tasks=1))
    other = {"worker_id": "someone-else", "task_id": work["task_id"], "attempt": work["attempt"]}
    answer = _ask(server, max_tasks=1, running=[work["task_id"]], done=[other])
    assert [(r["route"], r["task_id"]) for r in answer["refused"]] == [
        ("task_done", work["task_id"])
    ]
    assert "must be of the asking worker batch-worker-1" in answer["refused"][0]["error"]
    assert len(_handed(answer)) == 1  # (the other task, handed out as asked)
    statuses = _statuses(server)
    assert statuses[work["task_id"]] == "RUNNING"
    assert list(statuses.values()) == ["RUNNING", "RUNNING"]


def test_the_old_single_hand_out_is_unchanged(server: SeamServer) -> None:
    """Without ``max_tasks`` (a worker of an older release) one task is handed out and the
    answer is not ``batched``, so such a worker keeps reporting by its own routes."""
    _add(server, ["O1", "O2"])
    answer = _ask(server)
    assert answer["work"] is not None
    assert answer["more"] == [] and answer["batched"] is False


def test_the_scheduler_applies_carried_reports_before_reclaiming() -> None:
    """In-process: a task reported done in the request is not "missing from running" (which
    would put it back to PENDING): reports are applied first."""
    scheduler = Scheduler()
    scheduler.add_tasks("w", [TaskSpec("A", "Fam"), TaskSpec("B", "Fam")])
    first = scheduler.call(GetWork("w", max_tasks=2, running=()))
    a, b = first.work, first.more[0]
    answer = scheduler.call(
        GetWork(
            "w",
            running=(),
            max_tasks=2,
            done=(TaskDone("w", a.task_id, a.attempt),),
            failed=(TaskFailed("w", b.task_id, "boom", b.attempt),),
        )
    )
    assert answer.batched and answer.work is None
    assert scheduler.statuses(["A", "B"]) == {
        a.task_id: TaskStatus.DONE,
        b.task_id: TaskStatus.FAILED,
    }


# --- real workers over HTTP -----------------------------------------------------------------------

TASKS = """
import conveyor


class Leaf(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/leaf-{self.n}")

    def run(self):
        if self.n == 3:
            raise RuntimeError("leaf 3 fails on purpose")
        with self.output().open("w") as f:
            f.write("ok")


class Top(conveyor.WrapperTask):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def requires(self):
        return [Leaf(root=self.root, n=i) for i in range(self.n)]
"""


@pytest.mark.parametrize("slots", [1, 4])
def test_a_worker_reports_with_its_next_ask(
    server: SeamServer, tmp_path: Path, slots: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real worker (thread executor, ``slots`` slots) runs 24 leaves over HTTP: every result
    reaches the server inside a ``get_work`` (no ``task_done`` / ``task_failed`` request), and
    the server stored each leaf's outcome."""
    module = f"batchtasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(TASKS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    tasks = __import__(module)
    root = tmp_path / "out"
    root.mkdir()
    config = worker_config(
        tmp_path,
        f'[scheduler]\ntransport = "http"\nurl = "{server.url}"\ntoken = "{TOKEN}"\n'
        f'[worker]\nworkers = {slots}\nexecutor = "thread"\n',
    )
    n = 24
    with conveyor.Worker(config=config, worker_id=f"batch-{slots}") as worker:
        assert worker.add(tasks.Top(root=str(root), n=n))
        assert worker.run() is False  # (leaf 3 failed)
    routes = _routes(server)
    assert routes.count("task_done") == 0 and routes.count("task_failed") == 0
    # one slot: every ask but the first carries the one result that freed the slot; more
    # slots: an answer with fewer tasks than asked for may be followed by an empty ask
    assert routes.count("get_work") <= (n + 2 if slots == 1 else 2 * n + 2)
    statuses = _statuses(server)
    leaves = {t: s for t, s in statuses.items() if t.startswith("Leaf")}
    assert len(leaves) == n
    assert sorted(leaves.values()).count("DONE") == n - 1
    assert list(leaves.values()).count("FAILED") + list(leaves.values()).count("DISABLED") == 1
    assert len(os.listdir(root)) == n - 1


BIG = """
import collections
import threading

import conveyor

BARRIER = threading.Barrier(4)
RUNS = collections.Counter()


class Big(conveyor.Task):
    n = conveyor.IntParameter()

    def complete(self):
        return False

    def run(self):
        RUNS[self.n] += 1
        BARRIER.wait(60)  # (all four end together: their results are held at once)
        raise RuntimeError("\\U0001F600" * 70000)


class Top(conveyor.WrapperTask):
    def requires(self):
        return [Big(n=i) for i in range(4)]
"""


def test_long_explanations_never_make_a_request_too_large(
    server: SeamServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four failures of 70,000 emoji each (about 840 kB each once escaped in JSON) end
    together: one ask carries no more than fits, so no request is refused as too large (413),
    the server stores all four failures, and none is run again (the results held back for the
    next ask are listed as running, so the scheduler does not take their tasks back)."""
    module = f"bigtasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(BIG, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    tasks = __import__(module)
    config = worker_config(
        tmp_path,
        f'[scheduler]\ntransport = "http"\nurl = "{server.url}"\ntoken = "{TOKEN}"\n'
        '[worker]\nworkers = 4\nexecutor = "thread"\n',
    )
    with conveyor.Worker(config=config, worker_id="big-w") as worker:
        assert worker.add(tasks.Top())
        assert worker.run() is False
    codes = {(r["route"], r["code"]) for r in json_file_lines(server.directory / "requests.jsonl")}
    assert not any(code == 413 for _, code in codes), codes
    big = {t: s for t, s in _statuses(server).items() if t.startswith("Big")}
    assert sorted(big.values()) == ["FAILED"] * 4
    # results held back for the next ask are of attempts the scheduler did not take back
    assert tasks.RUNS == {0: 1, 1: 1, 2: 1, 3: 1}


class _Flaky:
    """The in-process scheduler, out of reach for the two calls after the first that carries
    a result (a short outage, well within ``rpc_give_up_after``)."""

    def __init__(self) -> None:
        self.scheduler = Scheduler()
        self.down = 0
        self.went_down = False
        self.calls: list[str] = []

    def call(self, request: Any) -> Any:
        carrying = isinstance(request, GetWork) and (request.done or request.failed)
        if carrying and not self.went_down:
            self.went_down, self.down = True, 2
        name = type(request).__name__
        if self.down:
            self.down -= 1
            self.calls.append(f"{name}: unavailable")
            raise SchedulerUnavailable("down for a moment")
        self.calls.append(name)
        return self.scheduler.call(request)


class OneShot(conveyor.Task):
    """Complete once it ran (in this process)."""

    ran: ClassVar[bool] = False

    def complete(self) -> bool:
        return type(self).ran

    def run(self) -> None:
        type(self).ran = True


def test_a_short_outage_while_the_last_result_is_carried_is_ridden_out(tmp_path: Path) -> None:
    """The get_work carrying the run's last result does not reach the scheduler: the result
    goes to the outbox, which sends it again (by its own route) once the scheduler is back,
    and the run succeeds with the task DONE, as it did before results were carried."""
    transport = _Flaky()
    config = worker_config(
        tmp_path,
        '[worker]\nexecutor = "inline"\n[scheduler]\nrpc_retry_wait = 0.01\n'
        "rpc_retry_max_wait = 0.05\nrpc_give_up_after = 60\n",
    )
    task = OneShot()
    with conveyor.Worker(transport, config=config) as worker:
        assert worker.add(task)
        assert worker.run() is True, transport.calls
    assert transport.scheduler.statuses([task.task_id]) == {task.task_id: TaskStatus.DONE}
    assert "GetWork: unavailable" in transport.calls and "TaskDone" in transport.calls
