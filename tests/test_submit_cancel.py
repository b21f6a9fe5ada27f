"""Submit and cancel (issue 26, items 1 and 2): ``POST /api/v1/submit`` and ``/cancel``, the
``conveyor submit`` and ``conveyor cancel`` commands, and what the scheduler and its assistants
do with them.

In-process first (the policy: :meth:`SchedulerCore.submit` and :meth:`SchedulerCore.cancel`,
and the rows the state store keeps), then a real ``conveyor scheduler`` with real assistants
(``conveyor worker``) running real ``fork`` attempts.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import conveyor
from control_support import (
    FORBIDDEN,
    client_config,
    detail,
    run_cli,
    runs,
    scheduler,
    spawn,
    stop,
    task_rows,
    wait_status,
    write_tasks,
)
from conveyor.errors import UnknownTask
from conveyor.protocol import GetWork, Ping, TaskSpec, TaskStatus
from conveyor.scheduler import Scheduler
from conveyor.scheduler.persist import from_row, to_row
from conveyor.scheduler.policy import CANCELLED, SchedulerCore
from conveyor.testing import FakeClock
from conveyor.testing.processes import SchedulerProcess, gone_within, wait_for
from conveyor.worker.walk import task_spec

PENDING, RUNNING, DONE = TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.DONE
FAILED, DISABLED, UNKNOWN = TaskStatus.FAILED, TaskStatus.DISABLED, TaskStatus.UNKNOWN


# --- the policy, in-process ----------------------------------------------------------------------


def _core() -> tuple[Scheduler, FakeClock]:
    clock = FakeClock()
    core = Scheduler(clock=clock, worker_disconnect_delay=60, retry_count=5)
    core.keep_history = True
    return core, clock


def _spec(task_id: str, *deps: str) -> TaskSpec:
    return TaskSpec(task_id, "Fam", "somewhere", {"n": task_id}, deps=deps)


def _status(core: SchedulerCore, task_id: str) -> TaskStatus:
    rec = core.peek(task_id)
    assert rec is not None, task_id
    return rec.status


def test_a_submitted_task_is_walked_by_an_assistant_then_run() -> None:
    """A task new to the scheduler is queued for assistants only, with ``submitted_by``; the
    first hand-out says walk; the assistant's registration ends that hand-out, and the task is
    handed out again (to run) once what it needs is done."""
    core, _ = _core()
    answer = core.submit(_spec("T"), by="alice via API token")
    assert (answer.task_id, answer.status) == ("T", PENDING)
    rec = core.peek("T")
    assert rec is not None and rec.submitted_by == "alice via API token"
    assert core.get_work("plain") is None  # (not an assistant: never handed a submitted task)
    work = core.get_work("helper", assistant=True)
    assert work is not None and (work.task_id, work.walk, work.params) == ("T", True, {"n": "T"})
    core.add_tasks("helper", [_spec("T", "D"), _spec("D")], assistant=True)
    assert (_status(core, "T"), _status(core, "D")) == (PENDING, PENDING)
    dep = core.get_work("helper", assistant=True)
    assert dep is not None and (dep.task_id, dep.walk) == ("D", False)
    assert core.get_work("helper", assistant=True) is None  # (T waits for D)
    core.task_done("helper", "D", dep.attempt)
    again = core.get_work("helper", assistant=True)
    assert again is not None and (again.task_id, again.walk) == ("T", False)
    core.task_done("helper", "T", again.attempt)
    assert _status(core, "T") == DONE
    assert core.peek("T").submitted_by == "alice via API token"  # type: ignore[union-attr]


def test_submit_without_a_name_records_anonymous() -> None:
    """The policy records somebody for every submission (the server always says how)."""
    core, _ = _core()
    core.submit(_spec("T"))
    assert core.peek("T").submitted_by == "anonymous"  # type: ignore[union-attr]


def _put_in(core: SchedulerCore, status: TaskStatus) -> None:
    """Make the registered task ``T`` have ``status``."""
    core.add_tasks("w", [_spec("T")])
    if status == PENDING:
        return
    if status == UNKNOWN:
        core.add_tasks("w", [TaskSpec("T", "Fam", status=UNKNOWN, runnable=False)])
        return
    work = core.get_work("w")
    assert work is not None and work.task_id == "T"
    if status == DONE:
        core.task_done("w", "T", work.attempt)
    elif status == FAILED:
        core.task_failed("w", "T", "boom", work.attempt)
    elif status == DISABLED:
        core.cancel("T")
    assert _status(core, "T") == status


@pytest.mark.parametrize("status", [DONE, FAILED, DISABLED, UNKNOWN])
def test_submit_makes_a_settled_task_pending_again(status: TaskStatus) -> None:
    """``DONE``, ``FAILED``, ``DISABLED`` (a cancelled one too: no longer cancelled, its
    failures forgotten) and ``UNKNOWN`` become ``PENDING``; the task keeps its dependencies and
    is handed out to run, not to walk (a worker registered it), except a broken one, which an
    assistant walks afresh."""
    core, _ = _core()
    _put_in(core, status)
    answer = core.submit(_spec("T"), by="bob via API token")
    assert answer.status == PENDING
    rec = core.peek("T")
    assert rec is not None
    assert (rec.status, rec.submitted_by, rec.cancelled) == (PENDING, "bob via API token", False)
    assert rec.failures is None or status == FAILED
    if status == UNKNOWN:  # broken when walked: walked afresh, by an assistant
        assert core.get_work("w") is None
        work = core.get_work("helper", assistant=True)
        assert work is not None and (work.task_id, work.walk) == ("T", True)
        return
    work = core.get_work("w")
    assert work is not None and (work.task_id, work.walk) == ("T", False)


@pytest.mark.parametrize("status", [PENDING, RUNNING])
def test_submit_leaves_a_pending_or_running_task_as_it_is(status: TaskStatus) -> None:
    """Only who submitted it changes; a running attempt runs on."""
    core, _ = _core()
    _put_in(core, status)
    attempt = core.peek("T").attempt  # type: ignore[union-attr]
    assert core.submit(_spec("T"), by="carol").status == status
    rec = core.peek("T")
    assert rec is not None and (rec.status, rec.attempt, rec.submitted_by) == (
        status,
        attempt,
        "carol",
    )


def test_cancel_of_a_pending_task_disables_it_for_good() -> None:
    """DISABLED with the explanation "cancelled"; time does not enable it again (unlike a
    task disabled by its failures), and nothing is handed out."""
    core, clock = _core()
    core.add_tasks("w", [_spec("T")])
    answer = core.cancel("T", by="dave via API token")
    assert (answer.cancelled, answer.stopping, answer.kept) == (("T",), (), ())
    rec = core.peek("T")
    assert rec is not None and (rec.status, rec.explanation, rec.cancelled) == (
        DISABLED,
        CANCELLED,
        True,
    )
    clock.advance(10 * 86400)  # past disable_persist
    assert core.get_work("w") is None
    assert _status(core, "T") == DISABLED
    assert core.cancel("T").cancelled == ("T",)  # (again: no error, nothing else)


def test_cancel_of_a_running_attempt_tells_its_worker_and_keeps_the_reason() -> None:
    """The attempt ends at once on the scheduler (history: interrupted); the worker's pings
    and get_work answers name it until the worker reports it, and that late failure report
    does not replace the explanation; the stop is then forgotten."""
    core, _ = _core()
    core.add_tasks("w", [_spec("T"), _spec("U")])
    work = core.get_work("w")
    assert work is not None
    stopped = work.task_id
    answer = core.cancel(stopped)
    assert (answer.cancelled, answer.stopping) == ((stopped,), (stopped,))
    rec = core.peek(stopped)
    assert rec is not None and rec.attempts is not None
    assert (rec.attempts[-1].attempt, rec.attempts[-1].outcome) == (work.attempt, "interrupted")
    assert rec.worker is None  # (its slot is free)
    told = core.call(Ping("w"))
    assert [(s.task_id, s.attempt) for s in told.stop] == [(stopped, work.attempt)]
    assert core.call(Ping("other")).stop == ()
    handed = core.call(GetWork("w", max_tasks=1, running=(stopped,)))
    assert [(s.task_id, s.attempt) for s in handed.stop] == [(stopped, work.attempt)]
    assert handed.work is not None and handed.work.task_id != stopped  # (the worker goes on)
    status = core.task_failed("w", stopped, "interrupted by a cancel", work.attempt)
    assert status == DISABLED
    assert core.peek(stopped).explanation == CANCELLED  # type: ignore[union-attr]
    assert core.call(Ping("w")).stop == ()


def test_a_success_reported_after_the_cancel_counts() -> None:
    """An attempt an in-process executor could not stop finishes: the work is done."""
    core, _ = _core()
    core.add_tasks("w", [_spec("T")])
    work = core.get_work("w")
    assert work is not None
    core.cancel("T")
    core.task_done("w", "T", work.attempt)
    assert _status(core, "T") == DONE


def test_cancel_downstream_disables_what_needs_the_task_and_keeps_done_ones() -> None:
    """A <- B <- C and A <- K (K done before A was registered again), D apart: A, B, C are
    cancelled, K is kept, D is untouched; without ``downstream`` only the task itself."""
    core, _ = _core()
    core.add_tasks("w", [_spec("A"), _spec("K", "A"), _spec("D")])
    while (work := core.get_work("w")) is not None:
        core.task_done("w", work.task_id, work.attempt)
    assert {t: _status(core, t) for t in "AKD"} == dict.fromkeys("AKD", DONE)
    core.add_tasks("w", [_spec("A"), _spec("B", "A"), _spec("C", "B")])  # (A: not done now)
    assert _status(core, "A") == PENDING
    only = core.cancel("B")
    assert (only.cancelled, _status(core, "C")) == (("B",), PENDING)
    answer = core.cancel("A", downstream=True)
    assert set(answer.cancelled) == {"A", "B", "C"} and answer.kept == ("K",)
    assert answer.cancelled[0] == "A"
    assert {t: _status(core, t) for t in "ABCKD"} == {
        "A": DISABLED,
        "B": DISABLED,
        "C": DISABLED,
        "K": DONE,
        "D": DONE,
    }


def test_cancel_of_an_unknown_task_changes_nothing() -> None:
    """UnknownTask (HTTP 404), also for an id known only as another task's dependency."""
    core, _ = _core()
    core.add_tasks("w", [_spec("T", "nobody-registered-me")])
    with pytest.raises(UnknownTask, match="'nope'"):
        core.cancel("nope")
    with pytest.raises(UnknownTask):
        core.cancel("nobody-registered-me")
    assert _status(core, "T") == PENDING


def test_a_submitted_task_is_kept_until_done() -> None:
    """Pruning: a submitted task nobody registered is kept while it is not DONE (an assistant
    may still take it), and may go once it is; an unsubmitted one like it may go at once."""
    core, clock = _core()
    core.submit(_spec("S"))
    core.add_tasks("w", [_spec("P")])
    core.release("w", ["P"])
    now = clock()
    s_rec, p_rec = core.peek("S"), core.peek("P")
    assert s_rec is not None and p_rec is not None
    assert core._kept_by(s_rec, now) != ""
    assert core._kept_by(p_rec, now) == ""
    work = core.get_work("helper", assistant=True)
    assert work is not None and work.task_id == "S"
    core.task_done("helper", "S", work.attempt)
    assert core._kept_by(s_rec, now) == ""


def test_submitted_by_and_cancelled_survive_a_row_round_trip() -> None:
    """The state store's rows keep both; a row saved before them loads with neither."""
    core, _ = _core()
    core.submit(_spec("T"), by="erin via API token")
    core.cancel("T")
    rec = core.peek("T")
    assert rec is not None
    row = json.loads(json.dumps(to_row(rec)))
    back = from_row(row)
    assert (back.submitted_by, back.cancelled, back.explanation) == (
        "erin via API token",
        True,
        CANCELLED,
    )
    old = {k: v for k, v in row.items() if k not in ("submitted_by", "cancelled")}
    assert (from_row(old).submitted_by, from_row(old).cancelled) == ("", False)


# --- a real server, real assistants --------------------------------------------------------------


def _submit_cli(
    tmp_path: Path, server: SchedulerProcess, module: str, family: str, root: Path, *more: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        tmp_path,
        server,
        "submit",
        f"{module}.{family}",
        "--root",
        str(root),
        "--config",
        str(client_config(tmp_path, server)),
        *more,
    )


@pytest.mark.timeout(300)
def test_submit_over_the_cli_and_the_client_runs_the_graph_on_an_assistant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``conveyor submit`` prints the id at once (no assistant exists yet, so nothing ran);
    the assistant walks the 4-task graph and runs each task once; ``Client.submit`` of
    another task answers at once too and ``Client.wait`` returns DONE; the task list says who
    submitted what, and the API refuses a submission without the token."""
    module = write_tasks(tmp_path)
    root = tmp_path / "out"
    root.mkdir()
    with scheduler(tmp_path, token=True) as server:
        done = _submit_cli(tmp_path, server, module, "Top", root, "--as", "alice", "--json")
        assert done.returncode == 0, done.stderr
        printed = json.loads(done.stdout)
        assert printed["status"] == "PENDING" and runs(root) == []
        rows = task_rows(server)
        assert set(rows) == {"Top"}  # (its graph is not registered yet)
        assert rows["Top"]["task_id"] == printed["task_id"]
        assert rows["Top"]["submitted_by"] == "alice via API token"

        refused = server.request(
            "POST", "/api/v1/submit", {"task": {"task_id": "x"}}, {"Authorization": None}
        )
        assert refused.status == 401, refused

        assistant = spawn(tmp_path, server, "assistant", modules=(module,))
        try:
            wait_status(server, "Top", {"DONE"}, 120)
            assert sorted(runs(root)) == ["A", "D", "K", "Top"]  # (each once)
            assert {f: r["status"] for f, r in task_rows(server).items()} == dict.fromkeys(
                ("Top", "K", "A", "D"), "DONE"
            )
            assert (root / "Top.out").read_text() == "ok"

            monkeypatch.syspath_prepend(str(tmp_path))
            tasks = __import__(module)
            with conveyor.Client(server.url, server.token) as client:
                task_id = client.submit(tasks.C(root=str(root)), by="bob")
                assert task_id == tasks.C(root=str(root)).task_id
                assert client.status(task_id) in (PENDING, RUNNING)
                assert client.wait(task_id, timeout=120, poll=0.1) == DONE
            assert sorted(runs(root)) == ["A", "B", "C", "D", "K", "Top"]
            assert task_rows(server)["C"]["submitted_by"] == "bob via API token"
            assert task_rows(server)["B"]["submitted_by"] == ""  # (walked into, not submitted)
        finally:
            stop(assistant)


@pytest.mark.timeout(240)
def test_a_task_outside_task_modules_never_runs_nor_is_imported(tmp_path: Path) -> None:
    """The assistant refuses it before importing anything: FAILED (then DISABLED by retries),
    the explanation names task_modules, no output, and only the submitting process ever
    imported the module (its import side effect names its pid)."""
    allowed = write_tasks(tmp_path)
    forbidden = write_tasks(tmp_path, FORBIDDEN, "ctlforbidden")
    root = tmp_path / "out"
    root.mkdir()
    with scheduler(tmp_path) as server:
        assistant = spawn(tmp_path, server, "assistant", modules=(allowed,))
        try:
            submitted = _submit_cli(tmp_path, server, forbidden, "Forbidden", root)
            assert submitted.returncode == 0, submitted.stderr
            row = wait_status(server, "Forbidden", {"FAILED", "DISABLED"}, 120)
            assert "task_modules" in row["explanation"], row
            assert forbidden in row["explanation"], row
            assert not (root / "Forbidden.out").exists()
            importers = (tmp_path / f"{forbidden}.imported").read_text().split()
            assert len(importers) == 1, importers  # (conveyor submit's own import)
            assert int(importers[0]) != assistant.pid
            assert assistant.poll() is None  # (the assistant goes on)
        finally:
            stop(assistant)


def _wait_pid(root: Path) -> psutil.Process:
    path = root / "A.pid"
    wait_for(path.exists, 120, "A to start and write its pid", interval=0.1)
    return psutil.Process(int(path.read_text()))


@pytest.mark.timeout(300)
def test_cancel_stops_a_running_fork_attempt_and_a_resubmission_runs_it(tmp_path: Path) -> None:
    """The cancel answers at once (``stopping``); the task is DISABLED "cancelled"; the
    attempt's process is gone soon after (the worker learnt it from a ping or get_work), its
    history says interrupted, and its late failure report left the explanation alone. The
    assistant goes on with other work; submitting the cancelled task again runs it."""
    module = write_tasks(tmp_path)
    root = tmp_path / "out"
    root.mkdir()
    (root / "hold").touch()
    with scheduler(tmp_path) as server:
        assistant = spawn(tmp_path, server, "assistant", modules=(module,))
        try:
            submitted = _submit_cli(tmp_path, server, module, "A", root)
            assert submitted.returncode == 0, submitted.stderr
            task_id = submitted.stdout.strip()
            attempt_process = _wait_pid(root)
            assert task_rows(server)["A"]["status"] == "RUNNING"

            cancelled = run_cli(
                tmp_path, server, "cancel", task_id, "--scheduler-url", server.url, "--json"
            )
            assert cancelled.returncode == 0, cancelled.stderr
            answer = json.loads(cancelled.stdout)
            assert (answer["cancelled"], answer["stopping"]) == ([task_id], [task_id])
            row = task_rows(server)["A"]
            assert (row["status"], row["explanation"]) == ("DISABLED", CANCELLED)
            assert row["worker"] is None
            assert gone_within([attempt_process], 60) == [], "the attempt still runs"

            # the worker goes on: other work runs
            d_run = _submit_cli(tmp_path, server, module, "D", root)
            assert d_run.returncode == 0, d_run.stderr
            wait_status(server, "D", {"DONE"}, 120)
            shown = detail(server, task_id)
            [attempt] = shown["attempts"]
            assert attempt["outcome"] == "interrupted", shown
            # the server forgets the stop once the worker reported the attempt (failed)
            wait_for(
                lambda: (
                    not server.request("POST", "/api/v1/ping", {"worker_id": attempt["worker"]})
                    .json()
                    .get("stop")
                ),
                60,
                "the assistant to report the stopped attempt",
                interval=0.2,
            )
            logged = (tmp_path / "assistant.err").read_text(errors="replace")
            assert "interrupted by a cancel on the scheduler" in logged
            shown = detail(server, task_id)
            assert (shown["status"], shown["explanation"]) == ("DISABLED", CANCELLED), shown
            assert [a["outcome"] for a in shown["attempts"]] == ["interrupted"], shown
            assert runs(root) == ["A", "D"]

            (root / "hold").unlink()
            again = _submit_cli(tmp_path, server, module, "A", root, "--json")
            assert again.returncode == 0, again.stderr
            assert json.loads(again.stdout) == {"task_id": task_id, "status": "PENDING"}
            wait_status(server, "A", {"DONE"}, 120)
            assert (root / "A.out").read_text() == "ok"
            assert task_rows(server)["A"]["explanation"] == ""
        finally:
            stop(assistant)


@pytest.mark.timeout(300)
def test_cancel_downstream_of_a_pending_subgraph(tmp_path: Path) -> None:
    """K <- A ran first (both DONE); A is submitted again and runs (held); R <- C <- B <- A,
    R <- D is submitted. ``conveyor cancel --downstream A`` cancels A, B, C and R, keeps K
    (DONE) and leaves D alone, which runs."""
    module = write_tasks(tmp_path)
    root = tmp_path / "out"
    root.mkdir()
    with scheduler(tmp_path) as server:
        assistant = spawn(tmp_path, server, "assistant", modules=(module,))
        try:
            first = _submit_cli(tmp_path, server, module, "K", root)
            assert first.returncode == 0, first.stderr
            wait_status(server, "K", {"DONE"}, 120)
            (root / "A.out").unlink()
            (root / "hold").touch()
            again = _submit_cli(tmp_path, server, module, "A", root)
            assert again.returncode == 0, again.stderr
            a_id = again.stdout.strip()
            attempt_process = _wait_pid(root)
            subgraph = _submit_cli(tmp_path, server, module, "R", root)
            assert subgraph.returncode == 0, subgraph.stderr
            wait_for(
                lambda: {"B", "C", "D"} <= set(task_rows(server)),
                120,
                "the assistant to walk R's graph",
                interval=0.2,
            )
            rows = task_rows(server)
            assert {f: rows[f]["status"] for f in "ABCKR"} == {
                "A": "RUNNING",
                "B": "PENDING",
                "C": "PENDING",
                "K": "DONE",
                "R": "PENDING",
            }
            cancelled = run_cli(
                tmp_path,
                server,
                "cancel",
                a_id,
                "--downstream",
                "--scheduler-url",
                server.url,
                "--as",
                "ops",
            )
            assert cancelled.returncode == 0, cancelled.stderr
            ids = {f: r["task_id"] for f, r in rows.items()}
            lines = cancelled.stdout.splitlines()
            assert lines[0] == f"cancelled {a_id} (its worker is told to stop its running attempt)"
            assert sorted(lines[1:]) == sorted(
                [f"cancelled {ids[f]}" for f in "BCR"] + [f"kept {ids['K']}: it is DONE"]
            )
            after = task_rows(server)
            for family in "ABCR":
                assert (after[family]["status"], after[family]["explanation"]) == (
                    "DISABLED",
                    CANCELLED,
                ), after[family]
            assert after["K"]["status"] == "DONE"
            assert after["D"]["status"] != "DISABLED"
            assert gone_within([attempt_process], 60) == []
            wait_status(server, "D", {"DONE"}, 120)
            assert {f: r["status"] for f, r in task_rows(server).items() if f != "D"} == {
                "A": "DISABLED",
                "B": "DISABLED",
                "C": "DISABLED",
                "K": "DONE",
                "R": "DISABLED",
            }
            assert "B" not in runs(root) and "C" not in runs(root)
        finally:
            stop(assistant)


@pytest.mark.timeout(240)
def test_a_restart_of_the_server_keeps_who_submitted_and_the_cancel(tmp_path: Path) -> None:
    """A worker's attempt of a submitted task is cancelled, the server is killed (-9) and
    started again: the task list still says who submitted it and that it was cancelled, and
    the attempt's late failure report still does not replace the explanation."""
    with scheduler(tmp_path, token=True) as server:
        spec = {"task_id": "Job_1", "family": "Job", "module": "nowhere", "params": {"n": "1"}}
        reply = server.request("POST", "/api/v1/submit", {"task": spec, "by": "frank"})
        assert reply.status == 200, reply
        assert reply.json() == {"task_id": "Job_1", "status": "PENDING"}
        work = server.request("POST", "/api/v1/get_work", {"worker_id": "h", "assistant": True})
        handed = work.json()["work"]
        assert (handed["task_id"], handed.get("walk")) == ("Job_1", True)
        server.request(
            "POST",
            "/api/v1/add_tasks",
            {"worker_id": "h", "assistant": True, "tasks": [spec]},
        )
        work = server.request("POST", "/api/v1/get_work", {"worker_id": "h", "assistant": True})
        attempt = work.json()["work"]["attempt"]
        cancel = server.request("POST", "/api/v1/cancel", {"task_id": "Job_1"})
        assert cancel.json() == {"cancelled": ["Job_1"], "stopping": ["Job_1"], "kept": []}
        ping = server.request("POST", "/api/v1/ping", {"worker_id": "h"}).json()
        assert ping["stop"] == [{"task_id": "Job_1", "attempt": attempt}], ping

        server.kill()
        server.start(timeout=60)
        [row] = server.request("GET", "/api/v1/tasks").json()["tasks"]
        assert (row["status"], row["explanation"], row["submitted_by"]) == (
            "DISABLED",
            CANCELLED,
            "frank via API token",
        )
        late = server.request(
            "POST",
            "/api/v1/task_failed",
            {
                "worker_id": "h",
                "task_id": "Job_1",
                "explanation": "interrupted by a cancel on the scheduler",
                "attempt": attempt,
                "outcome": "interrupted",
            },
        )
        assert late.json() == {"status": "DISABLED"}, late
        [row] = server.request("GET", "/api/v1/tasks").json()["tasks"]
        assert row["explanation"] == CANCELLED
        unknown = server.request("POST", "/api/v1/cancel", {"task_id": "nope"})
        assert unknown.status == 404 and "'nope'" in unknown.error(), unknown


@pytest.mark.timeout(120)
def test_cancel_exit_codes(tmp_path: Path) -> None:
    """An unknown task id is exit 2 with a one-line error; a scheduler out of reach is exit 3
    (the one that was there is gone)."""
    with scheduler(tmp_path) as server:
        unknown = run_cli(tmp_path, server, "cancel", "nope", "--scheduler-url", server.url)
        assert unknown.returncode == 2, unknown
        assert unknown.stderr.strip().splitlines() == [
            "conveyor: error: no task 'nope' is known to this scheduler"
        ], unknown.stderr
        url = server.url
        server.kill()
        config = tmp_path / "quick.toml"
        config.write_text("[scheduler]\nrpc_give_up_after = 1\n", encoding="utf-8")
        away = run_cli(
            tmp_path, server, "cancel", "x", "--scheduler-url", url, "--config", str(config)
        )
        assert away.returncode == 3, away
        assert away.stderr.startswith("conveyor: error: "), away.stderr
        assert "Traceback" not in away.stderr


# --- what a review found (each fails without its fix) ----------------------------------------


def test_a_stop_order_outlives_a_new_hand_out_of_the_task_elsewhere() -> None:
    """A cancelled attempt is still to be stopped when the task, submitted again, is handed to
    another worker: the first worker must not run on beside the second."""
    core, _ = _core()
    core.add_tasks("w", [_spec("a")])
    first = core.get_work("w")
    assert first is not None
    core.cancel("a")
    core.submit(_spec("a"))
    again = core.get_work("helper", assistant=True)
    assert again is not None and again.attempt != first.attempt
    assert [(s.task_id, s.attempt) for s in core.ping("w").stop] == [("a", first.attempt)]
    assert core.ping("helper").stop == ()


def test_a_stop_order_goes_once_its_worker_no_longer_runs_the_attempt() -> None:
    """A worker that stops listing the cancelled task as running (it never started it, or the
    attempt ended without a report) is no longer told to stop it."""
    core, _ = _core()
    core.add_tasks("w", [_spec("a"), _spec("b")])
    core.get_work("w")
    core.cancel("a")
    assert [s.task_id for s in core.ping("w").stop] == ["a"]
    core.get_work("w", running=("a",), max_tasks=1)
    assert [s.task_id for s in core.ping("w").stop] == ["a"]  # (still running there)
    core.get_work("w", running=(), max_tasks=1)
    assert core.ping("w").stop == ()


def test_a_stop_order_is_kept_while_a_silent_worker_may_come_back() -> None:
    """A worker declared gone may be alive and still run the attempt: told when it returns."""
    core, clock = _core()
    core.add_tasks("w", [_spec("a")])
    core.get_work("w")
    core.cancel("a")
    clock.advance(61)
    core.statuses(["a"])  # (the worker is declared gone)
    assert [s.task_id for s in core.ping("w").stop] == ["a"]


def test_an_unfenced_failure_or_a_registration_does_not_revive_a_cancelled_task() -> None:
    """A failure reported without an attempt id, or a worker registering the task again
    (PENDING, UNKNOWN), leaves it cancelled; a success still counts."""
    core, clock = _core()
    core.add_tasks("w", [_spec("a")])
    core.cancel("a")
    core.task_failed("w", "a", "boom")
    core.add_tasks("w", [_spec("a"), TaskSpec("a", "Fam", status=UNKNOWN, runnable=False)])
    clock.advance(100_000)
    rec = core.peek("a")
    assert rec is not None and (rec.status, rec.explanation, rec.cancelled) == (
        DISABLED,
        CANCELLED,
        True,
    )
    core.add_tasks("w", [TaskSpec("a", "Fam", status=DONE)])
    assert _status(core, "a") == DONE


def test_a_submitted_task_no_worker_may_run_is_not_handed_to_assistants() -> None:
    """Submitting an external task (registered not runnable) does not make it runnable."""
    core, _ = _core()
    core.add_tasks("w", [TaskSpec("x", "Ext", "somewhere", {}, runnable=False)])
    core.submit(_spec("x"))
    assert core.get_work("helper", assistant=True) is None


def test_a_submitted_task_with_labels_says_why_it_waits() -> None:
    """A submitted task whose labels no live assistant has stays PENDING with a reason."""
    core, _ = _core()
    core.get_work("helper", assistant=True, labels=())
    core.submit(TaskSpec("g", "Fam", "somewhere", {}, labels=("gpu",)))
    rec = core.peek("g")
    assert rec is not None and "gpu" in rec.waiting
    assert core.get_work("helper", assistant=True, labels=()) is None
    work = core.get_work("gpu-helper", assistant=True, labels=("gpu",))
    assert work is not None and work.task_id == "g"


def test_a_ping_of_a_subclass_answering_ok_is_nothing_to_stop() -> None:
    """A ``ping`` override written when ping was answered ``Ok`` still serves the route."""
    from conveyor.protocol import Ok, PingAnswer

    class Old(Scheduler):
        def ping(self, worker_id: str) -> Ok:  # type: ignore[override]
            super().ping(worker_id)
            return Ok()

    assert Old().call(Ping("w")) == PingAnswer()


class SubmitBroken(conveyor.Task):
    """Its requires() raises: an assistant walking it registers it broken."""

    n = conveyor.IntParameter()

    def requires(self) -> list[conveyor.Task]:
        raise ValueError("no requirements today")

    def complete(self) -> bool:
        return False


class _CountingAsks:
    """The scheduler behind a transport that counts get_work calls and stops a hot loop."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.asks = 0

    def call(self, request: object) -> object:
        if isinstance(request, GetWork):
            self.asks += 1
            if self.asks > 2000:  # (a live assistant asks every 0.05 s: a loop asks far more)
                raise RuntimeError("a hot loop of get_work")
        return self.inner.call(request)


@contextlib.contextmanager
def _live_assistant(transport: object) -> Iterator[threading.Thread]:
    """A long-lived assistant ``helper`` of ``transport`` (conveyor's tasks of this module,
    inline, asking every 0.05 s) running in a thread, which the ``with`` block may watch; it
    is drained and joined at the end."""
    config = conveyor.Config().with_overrides(
        assistant=True,
        keep_alive=True,
        task_modules=[__name__],
        executor="inline",
        log_level="warning",
        wait_interval=0.05,
    )
    with conveyor.Worker(transport, config=config, worker_id="helper") as assistant:
        runner = threading.Thread(target=assistant.run, name="assistant")
        runner.start()
        try:
            yield runner
        finally:
            assistant.drain()
            runner.join(30)


@pytest.mark.timeout(90)
def test_an_assistant_walks_again_a_resubmitted_task_it_found_broken(tmp_path: Path) -> None:
    """A task a live assistant found broken, submitted again, is walked afresh (and found
    broken again): never left pending for good, nor handed out over and over without being
    started or registered."""
    scheduler = Scheduler(worker_disconnect_delay=1e9)
    transport = _CountingAsks(scheduler)
    task = SubmitBroken(n=1)
    scheduler.submit(task_spec(task))
    with _live_assistant(transport) as runner:
        wait_for(lambda: _status(scheduler, task.task_id) == UNKNOWN, 30, "the first walk")
        rec = scheduler.peek(task.task_id)
        assert rec is not None and "helper" in rec.stakeholders
        transport.asks = 0
        scheduler.submit(task_spec(task))
        wait_for(lambda: _status(scheduler, task.task_id) == UNKNOWN, 30, "the second walk")
        assert runner.is_alive(), "the assistant died (a hot loop of get_work?)"
    assert "no requirements today" in scheduler.explanation(task.task_id)


class SubmitLeaf(conveyor.Task):
    """Writes its file."""

    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(f"{self.root}/leaf{self.n}")

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("x")


class SubmitTop(conveyor.Task):
    """Needs two leaves."""

    root = conveyor.Parameter()

    def requires(self) -> list[SubmitLeaf]:
        return [SubmitLeaf(root=self.root, n=n) for n in range(2)]

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(f"{self.root}/top")

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("t")


@pytest.mark.timeout(90)
def test_a_done_submission_is_let_go_by_its_assistant_and_pruned(tmp_path: Path) -> None:
    """Once a submitted task is done, the assistant that walked it releases its graph: the
    scheduler prunes it ``remove_delay`` later although the assistant lives on (a long-lived
    assistant fed by a web app holds only what is in progress)."""
    clock = FakeClock()
    scheduler = Scheduler(clock=clock, remove_delay=10, worker_disconnect_delay=1e9)
    top = SubmitTop(root=str(tmp_path))
    ids = [top.task_id, *(SubmitLeaf(root=str(tmp_path), n=n).task_id for n in range(2))]
    scheduler.submit(task_spec(top), by="web app")

    def let_go() -> bool:
        records = [scheduler.peek(task_id) for task_id in ids]
        return all(r is not None and r.status == DONE and not r.stakeholders for r in records)

    with _live_assistant(scheduler) as runner:
        # (it lives on: run() has not ended, nor released anything at its end)
        wait_for(let_go, 30, "the done submission to be released by its live assistant")
        assert runner.is_alive()
        clock.advance(11)
        assert scheduler.statuses(ids) == {}


class SubmitMissing(conveyor.ExternalTask):
    """Data nobody makes."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(f"{self.root}/never")


class SubmitWaits(conveyor.Task):
    """Waits for data that never comes."""

    root = conveyor.Parameter()

    def requires(self) -> SubmitMissing:
        return SubmitMissing(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(f"{self.root}/waits")

    def run(self) -> None:
        raise AssertionError("never runs")


@pytest.mark.timeout(90)
def test_a_live_assistant_lets_go_of_a_submission_cancelled_elsewhere(tmp_path: Path) -> None:
    """A submission the assistant walked but that settled without it (cancelled here) is let
    go while the assistant lives on: it asks the scheduler, while idle, about what it holds."""
    scheduler = Scheduler(worker_disconnect_delay=1e9)
    waits = SubmitWaits(root=str(tmp_path))
    missing = SubmitMissing(root=str(tmp_path)).task_id
    scheduler.submit(task_spec(waits), by="web app")

    def held(task_id: str) -> bool:
        rec = scheduler.peek(task_id)
        return rec is not None and "helper" in rec.stakeholders

    with _live_assistant(scheduler) as runner:
        wait_for(lambda: held(waits.task_id) and held(missing), 30, "the walk")
        scheduler.cancel(waits.task_id)
        wait_for(lambda: not held(waits.task_id) and not held(missing), 60, "the let-go")
        assert runner.is_alive()
