"""A conformance check for scheduler transports: built-in and third-party alike.

``check_transport(transport)`` drives a transport through its one method, ``call``, with every
request of :data:`conveyor.protocol.ROUTES`, against whatever scheduler stands behind it (the
in-process one, a central server, a third party's service), and raises ``AssertionError``
naming the first broken promise: an answer of the wrong type, a hand-out in the wrong order, a
report applied twice. Task ids are unique per call, so it can run against a scheduler that
holds other tasks. It returns the names of the checks it made::

    from conveyor.testing import check_transport
    from conveyor.transports.base import TransportContext

    def test_my_transport_conforms():
        check_transport(MyTransport(TransportContext.of(config)))

What ``Annotate`` stored and how registrations merge dependencies show only in the scheduler's
task list, which is a read, not a request: pass ``task_list`` (a callable returning the
:class:`~conveyor.protocol.TaskInfo` entries, such as ``Scheduler.task_list`` or
``HttpTransport.task_list``) to check those too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import StaleReport
from ..protocol import (
    AddTasks,
    Annotate,
    Explanation,
    GetWork,
    NoteKind,
    Ok,
    Ping,
    PingAnswer,
    Release,
    Statuses,
    TaskDone,
    TaskFailed,
    TaskInfo,
    TaskSpec,
    TaskStatus,
    Work,
    WorkLeft,
    WorkLeftRequest,
    route_of,
)
from ..transports.base import SchedulerTransport

__all__ = ["check_transport"]

TaskLister = Callable[[], Iterable[TaskInfo]]


class _Checked:
    """The transport under test, each answer checked against the type its route names."""

    def __init__(self, transport: SchedulerTransport) -> None:
        self.transport = transport

    def __call__(self, request: Any) -> Any:
        answer = self.transport.call(request)
        expected = route_of(request).answer
        name, wanted = type(request).__name__, expected.__name__
        if expected is PingAnswer and isinstance(answer, Ok):  # (a transport of the time when
            return answer  # ping answered Ok: the worker takes it as nothing to stop)
        assert isinstance(answer, expected), (
            f"call({name}) answered {answer!r}, expected an answer of type {wanted}"
        )
        return answer


def check_transport(
    transport: SchedulerTransport, task_list: TaskLister | None = None
) -> list[str]:
    """Check every request through ``transport.call``; return the checks' names in order
    (``task_list`` and ``merge`` only when ``task_list`` is given)."""
    assert isinstance(transport, SchedulerTransport), "not a SchedulerTransport (no call())"
    call = _Checked(transport)
    run = uuid.uuid4().hex[:12]
    worker = f"conformance-{run}"
    dep, top, flaky = (f"conformance_{run}_{name}" for name in ("dep", "top", "flaky"))
    params = {"run": run, "text": "ünïcode ✓"}
    done = ["ping", "add_tasks", "get_work", "work_left", "annotate"]
    call(Ping(worker))
    call(
        AddTasks(
            worker,
            (
                TaskSpec(dep, "Dep", "conformance.mod", params, priority=5),
                TaskSpec(top, "Top", "conformance.mod", params, deps=(dep,)),
                TaskSpec(flaky, "Flaky", "conformance.mod", params, priority=-5, retry_count=1),
            ),
        )
    )
    work = _hand_out(call, worker)
    assert isinstance(work, Work), f"GetWork answered {work!r}, expected a Work"
    assert (work.task_id, work.family, work.module) == (dep, "Dep", "conformance.mod"), work
    assert dict(work.params) == params, "the hand-out changed the parameters"
    left = call(WorkLeftRequest(worker))
    assert isinstance(left, WorkLeft), f"WorkLeftRequest answered {left!r}"
    assert left.pending >= 1, f"WorkLeftRequest does not count the pending tasks: {left}"

    call(Annotate(dep, NoteKind.STATUS_MESSAGE, "half way"))
    call(Annotate(dep, NoteKind.PROGRESS, 50.0))
    call(Annotate(dep, NoteKind.TRACKING_URL, "http://tracking.invalid/1"))
    dep2 = f"conformance_{run}_dep2"
    if task_list is not None:
        _check_listed(task_list, worker, dep, top, flaky)
    # a registration of a known task merges its dependencies (the worker names only new ones)
    call(
        AddTasks(
            worker,
            (
                TaskSpec(dep2, "Dep", "conformance.mod", params, priority=5),
                TaskSpec(top, "Top", "conformance.mod", params, deps=(dep2,)),
            ),
        )
    )
    if task_list is not None:
        merged = {t.task_id: t for t in task_list()}[top]
        assert merged.dependencies == (dep, dep2), f"dependencies were not merged: {merged}"
        done += ["task_list", "merge"]
    call(TaskDone(worker, dep))
    work = _hand_out(call, worker)
    assert work is not None and work.task_id == dep2, f"the merged dependency: {work!r}"
    call(TaskDone(worker, dep2))
    work = _hand_out(call, worker)
    assert work is not None and work.task_id == top, f"after its dependencies: {work!r}"
    call(TaskDone(worker, top))
    work = _hand_out(call, worker)
    assert work is not None and work.task_id == flaky, f"the last task: {work!r}"
    status = _check_reports(call, worker, flaky, work.attempt)
    explanation = call(Explanation(flaky)).explanation
    assert explanation == "it broke\nline two", f"the explanation changed: {explanation!r}"
    _check_statuses(call, run, {dep: TaskStatus.DONE, top: TaskStatus.DONE, flaky: status})
    assert _hand_out(call, worker) is None, "handed out a task that is not ready"
    call(Release(worker, (dep, top, flaky, dep2)))
    call(Release(worker))
    checked = [*done, "task_done", "task_failed", "attempts", "explanation", "statuses"]
    return [*checked, "release"]


def _hand_out(call: _Checked, worker: str) -> Work | None:
    """The next hand-out for ``worker`` (it runs nothing)."""
    work: Work | None = call(GetWork(worker, False, ())).work
    return work


def _check_listed(task_list: TaskLister, worker: str, dep: str, top: str, flaky: str) -> None:
    """The task list shows the running task with its annotations, and the dependencies."""
    listed = {t.task_id: t for t in task_list() if t.task_id in (dep, top, flaky)}
    assert set(listed) == {dep, top, flaky}, f"task_list lacks tasks: {sorted(listed)}"
    assert all(isinstance(t, TaskInfo) for t in listed.values()), "task_list entries"
    running = listed[dep]
    assert running.status is TaskStatus.RUNNING and running.worker == worker, running
    assert (running.status_message, running.progress, running.tracking_url) == (
        "half way",
        50.0,
        "http://tracking.invalid/1",
    ), running
    assert listed[top].dependencies == (dep,), listed[top]


def _check_reports(call: _Checked, worker: str, flaky: str, attempt: int) -> TaskStatus:
    """A failure report answers the new status; with attempt ids, a report sent again is not
    applied again and one of an attempt never handed out is refused (StaleReport)."""
    failed = TaskFailed(worker, flaky, "it broke\nline two", attempt)
    status = call(failed).status
    assert isinstance(status, TaskStatus), f"TaskFailed answered {status!r}, not a TaskStatus"
    assert status in (TaskStatus.FAILED, TaskStatus.DISABLED), status
    if attempt:  # a scheduler with attempt ids: reports count once, stale ones are refused
        again = call(failed).status
        assert again == status, f"a report sent again was applied again: {status} -> {again}"
        try:
            call(TaskDone(worker, flaky, attempt + 1))
        except StaleReport:
            pass
        else:
            raise AssertionError("a report of an attempt that was never handed out was accepted")
    return status


def _check_statuses(call: _Checked, run: str, expected: dict[str, TaskStatus]) -> None:
    """Statuses answers each known id's status as a TaskStatus; an unknown id is left out or
    said UNKNOWN."""
    unknown = f"conformance_{run}_unknown"
    statuses = dict(call(Statuses((*expected, unknown))).statuses)
    if unknown in statuses:  # leaving an unknown id out, or saying UNKNOWN, are both fine
        assert statuses.pop(unknown) == TaskStatus.UNKNOWN, statuses
    assert statuses == expected, statuses
    assert all(isinstance(s, TaskStatus) for s in statuses.values()), statuses
