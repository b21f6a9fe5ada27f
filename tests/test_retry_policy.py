"""A task's own ``retry_policy`` (``conveyor.RetryPolicy``): its schedule replaces the
scheduler's settings it gives, its ``count`` the ``retry_count``, and ``retry_on`` disables the
task at once on a failure it does not list (time-outs and deaths as ``TaskTimeout`` /
``ProcessDied``); checked on a fake clock, with real process executors, and against a real
``conveyor scheduler`` over HTTP that keeps the policy across a restart and shows the next
retry in the UI's task detail."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.executors.base import Outcome
from conveyor.protocol import (
    AttemptOutcome,
    RetrySpec,
    TaskFailed,
    TaskSpec,
    TaskStatus,
    decode,
    encode,
    encode_request,
    json_schema,
)
from conveyor.scheduler.persist import from_row, to_row
from conveyor.testing import FakeClock
from conveyor.testing.processes import SchedulerProcess, StubServer, child_env, kill_marked
from conveyor.transports.http import HttpTransport
from conveyor.worker.loop import _not_retried

MARKER_VARIABLE = "RETRYPOLICY_TEST_MARKER"  # not CONVEYOR_*: those are configuration overrides

# --- the schedule on a fake clock -----------------------------------------------------------------


def _fail(
    scheduler: conveyor.Scheduler, clock: FakeClock, task_id: str, worker: str = "w"
) -> float:
    """Hand ``task_id`` out to ``worker``, report it failed; the seconds until it may run
    again, and let them pass."""
    work = scheduler.get_work(worker)
    assert work is not None and work.task_id == task_id
    scheduler.task_failed(worker, task_id, "boom", work.attempt)
    record = scheduler.peek(task_id)
    assert record is not None and record.status in (TaskStatus.FAILED, TaskStatus.DISABLED)
    waited = record.wake_at - clock()
    clock.advance(waited)
    assert scheduler.statuses([task_id])[task_id] == TaskStatus.PENDING
    return waited


def test_a_task_schedule_replaces_the_settings_it_gives_and_only_for_that_task() -> None:
    """delay, backoff and max_delay of a task's RetrySpec win; another task keeps the
    scheduler's retry_delay."""
    clock = FakeClock(1000.0)
    scheduler = conveyor.Scheduler(clock=clock, retry_delay=100, retry_count=10)
    own = RetrySpec(delay=10, backoff=2.0, max_delay=30)
    scheduler.add_tasks("w", [TaskSpec("own", retry=own)])
    scheduler.add_tasks("v", [TaskSpec("plain")])
    assert [_fail(scheduler, clock, "own") for _ in range(4)] == [10, 20, 30, 30]
    assert _fail(scheduler, clock, "plain", worker="v") == 100


def test_unset_fields_of_a_task_schedule_are_the_schedulers() -> None:
    """A RetrySpec with only backoff multiplies the scheduler's retry_delay, capped by its
    retry_max_delay."""
    clock = FakeClock(0.0)
    scheduler = conveyor.Scheduler(
        clock=clock, retry_delay=5, retry_max_delay=40, retry_count=10, disable_window=10**6
    )
    scheduler.add_tasks("w", [TaskSpec("t", retry=RetrySpec(backoff=3.0))])
    assert [_fail(scheduler, clock, "t") for _ in range(3)] == [5, 15, 40]


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 50.0), (0.5, 100.0), (0.75, 125.0)])
def test_a_task_jitter_moves_the_wait_within_its_fraction(draw: float, expected: float) -> None:
    """jitter 0.5 of a 100 s delay lands from 50 to 150 s (where the drawn number says)."""
    clock = FakeClock(0.0)
    scheduler = conveyor.Scheduler(clock=clock, retry_delay=999, retry_jitter=0.0)
    scheduler.jitter = lambda: draw
    scheduler.add_tasks("w", [TaskSpec("t", retry=RetrySpec(delay=100, jitter=0.5))])
    assert _fail(scheduler, clock, "t") == pytest.approx(expected)


def test_a_task_jitter_never_passes_its_max_delay() -> None:
    """The cap holds with jitter: the highest draw stays at max_delay."""
    clock = FakeClock(0.0)
    scheduler = conveyor.Scheduler(clock=clock)
    scheduler.jitter = lambda: 0.999999
    spec = RetrySpec(delay=100, jitter=1.0, max_delay=120)
    scheduler.add_tasks("w", [TaskSpec("t", retry=spec)])
    assert _fail(scheduler, clock, "t") == 120


def test_not_retried_disables_at_once_with_the_reason() -> None:
    """A failure reported not_retried makes the task DISABLED on the first failure, for
    disable_persist, the reason after the explanation."""
    clock = FakeClock(0.0)
    scheduler = conveyor.Scheduler(clock=clock, retry_count=5, disable_persist=600)
    scheduler.add_tasks("w", [TaskSpec("t")])
    work = scheduler.get_work("w")
    assert work is not None
    why = "ValueError is not in retry_on (KeyError)"
    status = scheduler.task_failed("w", "t", "Traceback...\n", work.attempt, not_retried=why)
    assert status == TaskStatus.DISABLED
    assert scheduler.explanation("t") == f"Traceback...\nnot retried: {why}"
    record = scheduler.peek("t")
    assert record is not None and record.wake_at == 600


# --- RetryPolicy: values, validation, what crosses ------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": -1}, "RetryPolicy(count=-1): expected an integer >= 0"),
        ({"count": 1.5}, "RetryPolicy(count=1.5): expected an integer >= 0"),
        ({"delay": -1}, "RetryPolicy(delay=-1): expected a number >= 0"),
        ({"backoff": 0.5}, "RetryPolicy(backoff=0.5): expected a number >= 1"),
        ({"max_delay": float("inf")}, "RetryPolicy(max_delay=inf): expected a number >= 0"),
        ({"jitter": 1.5}, "RetryPolicy(jitter=1.5): expected a number from 0 to 1"),
        ({"jitter": "0.1"}, "RetryPolicy(jitter='0.1'): expected a number from 0 to 1"),
        ({"retry_on": (KeyError, int)}, "<class 'int'> is not an exception class"),
        ({"retry_on": "KeyError"}, "expected a tuple of exception classes"),
    ],
)
def test_bad_values_are_refused_when_the_policy_is_made(
    kwargs: dict[str, Any], message: str
) -> None:
    """Each bad field raises TaskDefinitionError (a ValueError too) naming it."""
    with pytest.raises(conveyor.TaskDefinitionError) as caught:
        conveyor.RetryPolicy(**kwargs)
    assert isinstance(caught.value, ValueError)
    assert message in str(caught.value)


def test_retry_on_is_judged_by_isinstance_and_outcomes_by_subclass() -> None:
    """A subclass of a listed exception is retried; TaskTimeout/ProcessDied count as listed
    when a base class of theirs is (ConveyorError)."""
    policy = conveyor.RetryPolicy(retry_on=[OSError])  # a list becomes a tuple
    assert policy.retry_on == (OSError,)
    assert policy.not_retried(FileNotFoundError()) == ""
    assert policy.not_retried(ValueError()) == "ValueError is not in retry_on (OSError)"
    assert policy.not_retried_outcome(timed_out=True) == (
        "a time-out (TaskTimeout) is not in retry_on (OSError)"
    )
    broad = conveyor.RetryPolicy(retry_on=(conveyor.ConveyorError,))
    assert broad.not_retried_outcome(timed_out=True) == ""
    assert broad.not_retried_outcome(timed_out=False) == ""
    assert conveyor.RetryPolicy().not_retried(ValueError()) == ""


def test_only_the_numbers_cross_and_a_spec_round_trips() -> None:
    """spec() has the numbers (None when none is set); the wire leaves a missing retry out
    and decodes a given one; the schema publishes the bounds."""
    assert conveyor.RetryPolicy(count=2, retry_on=(KeyError,)).spec() is None
    spec = conveyor.RetryPolicy(delay=3, jitter=0.25).spec()
    assert spec == RetrySpec(delay=3.0, jitter=0.25)
    assert (
        "retry" not in encode_request(conveyor.protocol.AddTasks("w", (TaskSpec("t"),)))["tasks"][0]
    )
    assert decode(TaskSpec, encode(TaskSpec("t", retry=spec))).retry == spec
    with pytest.raises(conveyor.protocol.FieldError, match=r"^retry: expected an object or null"):
        decode(TaskSpec, {"task_id": "t", "retry": {"backoff": 0.5}})
    schema = json_schema(RetrySpec)
    assert schema["properties"]["jitter"]["anyOf"][0] == {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
    }


def test_a_record_keeps_its_schedule_in_its_row_and_old_rows_load() -> None:
    """to_row/from_row carry retry; a row saved before the field loads with None; a bad one
    is refused naming the field."""
    scheduler = conveyor.Scheduler()
    scheduler.add_tasks("w", [TaskSpec("t", retry=RetrySpec(delay=7.0, backoff=2.0))])
    record = scheduler.peek("t")
    assert record is not None
    row = json.loads(json.dumps(to_row(record)))
    assert from_row(row).retry == RetrySpec(delay=7.0, backoff=2.0)
    del row["retry"]
    assert from_row(row).retry is None
    row["retry"] = {"delay": -1, "backoff": None, "max_delay": None, "jitter": None}
    with pytest.raises(conveyor.scheduler.persist.RowError, match="'retry'"):
        from_row(row)


class RpBadAttribute(conveyor.Task):
    """A task whose retry_policy is checked lazily (a property)."""

    @property
    def retry_policy(self) -> Any:  # type: ignore[override]
        """Not a RetryPolicy."""
        return {"count": 3}


def test_a_retry_policy_that_is_not_one_is_a_task_definition_error() -> None:
    """A class attribute is refused when the class is made, a property when the policy is
    first asked."""
    with pytest.raises(conveyor.TaskDefinitionError, match=r"retry_policy = 5; expected"):
        type("RpBadClass", (conveyor.Task,), {"retry_policy": 5, "__module__": __name__})
    with pytest.raises(conveyor.TaskDefinitionError, match=r"RpBadAttribute\.retry_policy"):
        RpBadAttribute().task_policy()


def test_an_interrupted_attempt_is_retried_whatever_retry_on_says() -> None:
    """The worker's own interruption is not the task's failure: never a verdict."""

    class RpNarrow(conveyor.Task):
        retry_policy = conveyor.RetryPolicy(retry_on=(KeyError,))

    task = RpNarrow()
    stopped = Outcome("t", AttemptOutcome.FAILED, interrupted=True, not_retried="x")
    assert _not_retried(task, stopped) == ""
    timed_out = Outcome("t", AttemptOutcome.TIMED_OUT)
    assert _not_retried(task, timed_out).startswith("a time-out (TaskTimeout)")


# --- a worker with the in-process scheduler ---------------------------------------------------


class RpWrongValue(conveyor.Task):
    """Raises ValueError; only KeyError is worth a retry."""

    retry_policy = conveyor.RetryPolicy(count=4, delay=11, retry_on=(KeyError,))

    def run(self) -> None:
        """Fail."""
        raise ValueError("bad value")


class RpMissingKey(conveyor.Task):
    """Raises KeyError, which is worth a retry."""

    retry_count = 7
    retry_policy = conveyor.RetryPolicy(count=4, delay=11, retry_on=(KeyError,))

    def run(self) -> None:
        """Fail."""
        raise KeyError("gone")


def _run(task: conveyor.Task, tmp_path: Path, **worker: Any) -> conveyor.Scheduler:
    """Run ``task`` once on a worker of an in-process scheduler; the scheduler."""
    scheduler = conveyor.Scheduler(retry_delay=900, retry_count=2)
    lines = ["[worker]", *(f"{k} = {json.dumps(v)}" for k, v in worker.items())]
    config = tmp_path / f"worker-{uuid.uuid4().hex[:8]}.toml"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with conveyor.Worker(scheduler, config=config) as running:
        running.add(task)
        assert not running.run()
    return scheduler


def test_an_exception_outside_retry_on_disables_the_task_after_one_failure(
    tmp_path: Path,
) -> None:
    """ValueError with retry_on=(KeyError,): DISABLED at once, the reason in the explanation."""
    task = RpWrongValue()
    scheduler = _run(task, tmp_path, executor="inline")
    assert scheduler.statuses([task.task_id])[task.task_id] == TaskStatus.DISABLED
    explanation = scheduler.explanation(task.task_id)
    assert "ValueError: bad value" in explanation
    assert explanation.endswith("not retried: ValueError is not in retry_on (KeyError)")


def test_an_exception_in_retry_on_is_retried_on_the_tasks_schedule(tmp_path: Path) -> None:
    """KeyError is retried: FAILED, waiting the task's delay; its count wins over its
    retry_count and the scheduler's."""
    task = RpMissingKey()
    scheduler = _run(task, tmp_path, executor="inline")
    record = scheduler.peek(task.task_id)
    assert record is not None and record.status == TaskStatus.FAILED
    assert record.retry_count == 4
    assert record.retry == RetrySpec(delay=11.0)
    assert record.failures is not None
    assert record.wake_at == pytest.approx(record.failures[-1] + 11)


# --- real process executors: the verdict crosses from the attempt's process, time-outs and deaths


TASKS = """
import os
import time

import conveyor

ONLY_KEYS = conveyor.RetryPolicy(retry_on=(KeyError,))


class RpForkedValue(conveyor.Task):
    retry_policy = ONLY_KEYS

    def run(self):
        raise ValueError("bad value in a child")


class RpSlow(conveyor.Task):
    worker_timeout = 1.0
    retry_policy = ONLY_KEYS

    def run(self):
        time.sleep(60)


class RpSlowRetried(RpSlow):
    retry_policy = conveyor.RetryPolicy(retry_on=(KeyError, conveyor.TaskTimeout))


class RpDies(conveyor.Task):
    retry_policy = ONLY_KEYS

    def run(self):
        os._exit(3)


class RpDiesRetried(conveyor.Task):
    def run(self):
        os._exit(3)
"""


@pytest.fixture
def mod(task_module: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The task module, importable here and by name in an attempt's fresh interpreter."""
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.chdir(tmp_path)
    name = task_module(TASKS)
    __import__(name)
    return sys.modules[name]


PROCESS_EXECUTOR = "fork" if hasattr(os, "fork") else "subprocess"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("family", "executor", "expected", "reason"),
    [
        ("RpForkedValue", "subprocess", "DISABLED", "ValueError is not in retry_on (KeyError)"),
        ("RpSlow", PROCESS_EXECUTOR, "DISABLED", "a time-out (TaskTimeout) is not in retry_on"),
        ("RpSlowRetried", PROCESS_EXECUTOR, "FAILED", ""),
        ("RpDies", PROCESS_EXECUTOR, "DISABLED", "a process death (ProcessDied) is not in"),
        ("RpDiesRetried", PROCESS_EXECUTOR, "FAILED", ""),
    ],
)
def test_process_executors_apply_retry_on(
    mod: Any, tmp_path: Path, family: str, executor: str, expected: str, reason: str
) -> None:
    """A child's exception is judged in the child; a time-out or death by the worker, as
    TaskTimeout / ProcessDied; without them in retry_on the task is DISABLED at once."""
    task = getattr(mod, family)()
    scheduler = _run(task, tmp_path, executor=executor, workers=1, kill_grace=1)
    assert scheduler.statuses([task.task_id])[task.task_id] == expected
    explanation = scheduler.explanation(task.task_id)
    if reason:
        assert f"not retried: {reason}" in explanation
    else:
        assert "not retried" not in explanation


# --- a real central server ------------------------------------------------------------------------

SERVER_TASKS = """
import conveyor


class RpFlaky(conveyor.Task):
    retry_policy = conveyor.RetryPolicy(delay=30, backoff=3, retry_on=(KeyError,))

    def run(self):
        raise KeyError("not there yet")


class RpStrict(conveyor.Task):
    retry_policy = conveyor.RetryPolicy(retry_on=(KeyError,))

    def run(self):
        raise ValueError("wrong")
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SchedulerProcess]:
    """A ``conveyor scheduler`` subprocess with a long default retry delay, no token."""
    marker = uuid.uuid4().hex
    config = tmp_path / "server.toml"
    config.write_text(
        "[scheduler]\nretry_delay = 1000\nretry_count = 5\ndisable_persist = 500\n",
        encoding="utf-8",
    )
    process = SchedulerProcess(tmp_path, config, child_env(tmp_path, MARKER_VARIABLE, marker))
    try:
        process.start()
        yield process
    finally:
        process.kill()
        kill_marked(MARKER_VARIABLE, marker)


def _detail(server: SchedulerProcess, task_id: str) -> dict[str, Any]:
    reply = server.request("GET", "/ui/api/task?id=" + task_id)
    assert reply.status == 200, reply
    detail: dict[str, Any] = reply.json()["task"]
    return detail


def _post(server: SchedulerProcess, route: str, body: Any) -> Any:
    reply = server.request("POST", f"/api/v1/{route}", body)
    assert reply.status == 200, (route, reply)
    return reply.json()


@pytest.mark.timeout(180)
def test_the_server_applies_keeps_and_shows_a_task_policy(
    server: SchedulerProcess,
    task_module: Callable[[str], str],
    run_cli: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """A worker over HTTP registers the policy; the server schedules RpFlaky's retry after its
    own delay and disables RpStrict at once; after a restart (and an operator's retry) the
    stored backoff still applies; the UI detail says when the next retry is."""
    name = task_module(SERVER_TASKS)
    for family in ("RpFlaky", "RpStrict"):
        done = run_cli("run", f"{name}.{family}", "--scheduler-url", server.url, cwd=tmp_path)
        assert done.returncode != 0, done.stdout + done.stderr
    tasks = {t["family"]: t for t in _post_get(server)}
    flaky, strict = tasks["RpFlaky"]["task_id"], tasks["RpStrict"]["task_id"]

    shown = _detail(server, flaky)
    assert shown["status"] == "FAILED"
    assert shown["next_retry"] == pytest.approx(shown["attempts"][-1]["ended"] + 30)
    refused = _detail(server, strict)
    assert refused["status"] == "DISABLED"
    assert refused["explanation"].endswith("not retried: ValueError is not in retry_on (KeyError)")
    assert refused["next_retry"] == pytest.approx(refused["attempts"][-1]["ended"] + 500)

    server.kill()
    with sqlite3.connect(server.state) as db:
        (data,) = db.execute("SELECT data FROM tasks WHERE task_id = ?", (flaky,)).fetchone()
    assert json.loads(data)["retry"] == {
        "delay": 30.0,
        "backoff": 3.0,
        "max_delay": None,
        "jitter": None,
    }
    server.start()

    retried = server.request("POST", "/ui/api/retry", {"task_ids": [flaky]})
    assert retried.status == 200 and retried.json()["changed"] == [flaky], retried
    _post(server, "add_tasks", {"worker_id": "w2", "tasks": [{"task_id": flaky}]})
    work = _post(server, "get_work", {"worker_id": "w2"})["work"]
    assert work is not None and work["task_id"] == flaky
    body = {"worker_id": "w2", "task_id": flaky, "explanation": "again", "attempt": work["attempt"]}
    assert _post(server, "task_failed", body)["status"] == "FAILED"
    again = _detail(server, flaky)
    assert again["next_retry"] == pytest.approx(again["attempts"][-1]["ended"] + 90)  # 30 * 3


def _post_get(server: SchedulerProcess) -> list[dict[str, Any]]:
    reply = server.request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply
    tasks: list[dict[str, Any]] = reply.json()["tasks"]
    return tasks


def test_a_server_predating_not_retried_gets_the_failure_without_it() -> None:
    """The http transport reports a failure with not_retried again without it when the server
    refuses the field (422 naming it): the task is then retried as before."""
    answers = iter(
        [
            (422, {"error": "not_retried: unknown field", "field": "not_retried"}),
            (200, {"status": "FAILED"}),
            (200, {"status": "FAILED"}),
        ]
    )
    old = StubServer(lambda path: next(answers))
    try:
        transport = HttpTransport(conveyor.Config().with_overrides(scheduler_url=old.url))
        failed = TaskFailed("w", "t", "boom", 5, not_retried="ValueError is not in retry_on ()")
        assert transport.call(failed).status == TaskStatus.FAILED
        assert transport.call(failed).status == TaskStatus.FAILED  # (not offered again)
    finally:
        old.close()
    assert old.asked == ["/api/v1/task_failed"] * 3
