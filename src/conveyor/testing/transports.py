"""A conformance check for scheduler transports: built-in and third-party alike.

``check_transport(transport)`` drives a transport through every call of
:class:`conveyor.transports.base.SchedulerTransport` against whatever scheduler stands behind it
(the in-process one, a central server, a third party's service) and raises ``AssertionError``
naming the first broken promise. Task ids are unique per call, so it can run against a
scheduler that holds other tasks. It returns the names of the calls it checked::

    from conveyor.testing import check_transport
    from conveyor.transports.base import TransportContext

    def test_my_transport_conforms():
        check_transport(MyTransport(TransportContext.of(config)))
"""

from __future__ import annotations

import uuid

from ..errors import StaleReport
from ..protocol import NoteKind, TaskInfo, TaskSpec, TaskStatus, Work, WorkLeft
from ..transports.base import SchedulerTransport

__all__ = ["check_transport"]


def check_transport(transport: SchedulerTransport) -> list[str]:
    """Check every transport call; return their names in the order they were checked."""
    run = uuid.uuid4().hex[:12]
    worker = f"conformance-{run}"
    dep, top, flaky = (f"conformance_{run}_{name}" for name in ("dep", "top", "flaky"))
    params = {"run": run, "text": "ünïcode ✓"}
    assert isinstance(transport, SchedulerTransport), "not a SchedulerTransport"
    transport.ping(worker)
    transport.add_tasks(
        worker,
        [
            TaskSpec(dep, "Dep", "conformance.mod", params, priority=5),
            TaskSpec(top, "Top", "conformance.mod", params, deps=(dep,)),
            TaskSpec(flaky, "Flaky", "conformance.mod", params, priority=-5, retry_count=1),
        ],
    )
    work = transport.get_work(worker, False, ())
    assert isinstance(work, Work), f"get_work returned {work!r}, expected a Work"
    assert (work.task_id, work.family, work.module) == (dep, "Dep", "conformance.mod"), work
    assert dict(work.params) == params, "the hand-out changed the parameters"
    left = transport.work_left(worker)
    assert isinstance(left, WorkLeft), f"work_left returned {left!r}"
    assert left.pending >= 1, f"work_left does not count the pending tasks: {left}"

    transport.annotate(dep, NoteKind.STATUS_MESSAGE, "half way")
    transport.annotate(dep, NoteKind.PROGRESS, 50)
    transport.annotate(dep, NoteKind.TRACKING_URL, "http://tracking.invalid/1")
    listed = {t.task_id: t for t in transport.task_list() if t.task_id in (dep, top, flaky)}
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

    dep2 = f"conformance_{run}_dep2"
    # a registration of a known task merges its dependencies (the worker names only new ones)
    transport.add_tasks(
        worker,
        [
            TaskSpec(dep2, "Dep", "conformance.mod", params, priority=5),
            TaskSpec(top, "Top", "conformance.mod", params, deps=(dep2,)),
        ],
    )
    merged = {t.task_id: t for t in transport.task_list()}[top]
    assert merged.dependencies == (dep, dep2), f"dependencies were not merged: {merged}"
    transport.task_done(worker, dep)
    work = transport.get_work(worker, False, ())
    assert work is not None and work.task_id == dep2, f"the merged dependency: {work!r}"
    transport.task_done(worker, dep2)
    work = transport.get_work(worker, False, ())
    assert work is not None and work.task_id == top, f"after its dependencies: {work!r}"
    transport.task_done(worker, top)
    work = transport.get_work(worker, False, ())
    assert work is not None and work.task_id == flaky, f"the last task: {work!r}"
    status = transport.task_failed(worker, flaky, "it broke\nline two", work.attempt)
    assert status in (TaskStatus.FAILED, TaskStatus.DISABLED), status
    if work.attempt:  # a scheduler with attempt ids: reports count once, stale ones are refused
        again = transport.task_failed(worker, flaky, "it broke\nline two", work.attempt)
        assert again == status, f"a report sent again was applied again: {status} -> {again}"
        try:
            transport.task_done(worker, flaky, work.attempt + 1)
        except StaleReport:
            pass
        else:
            raise AssertionError("a report of an attempt that was never handed out was accepted")
    assert isinstance(status, TaskStatus), f"task_failed returned {status!r}, not a TaskStatus"
    assert transport.explanation(flaky) == "it broke\nline two", "the explanation changed"
    unknown = f"conformance_{run}_unknown"
    statuses = transport.statuses([dep, top, flaky, unknown])
    if unknown in statuses:  # leaving an unknown id out, or saying UNKNOWN, are both fine
        assert statuses.pop(unknown) == TaskStatus.UNKNOWN, statuses
    assert statuses == {dep: "DONE", top: "DONE", flaky: status}, statuses
    assert all(isinstance(s, TaskStatus) for s in statuses.values()), statuses
    assert transport.get_work(worker, False, ()) is None, "handed out a task that is not ready"
    return [
        "ping",
        "add_tasks",
        "get_work",
        "work_left",
        "annotate",
        "task_list",
        "merge",
        "task_done",
        "task_failed",
        "attempts",
        "explanation",
        "statuses",
    ]
