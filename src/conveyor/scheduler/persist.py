"""Scheduler records as JSON-able rows, and back (what state stores save and load).

Only what cannot be derived is stored; dependents, unmet counts, heaps and resource use are
rebuilt by :meth:`~conveyor.scheduler.policy.SchedulerCore.restore`. Rows are plain data:
nothing is pickled.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ..protocol import TaskStatus
from .policy import TaskRecord

__all__ = ["SCHEMA_VERSION", "from_row", "to_row"]

SCHEMA_VERSION = 1


def to_row(rec: TaskRecord) -> dict[str, Any]:
    """A record as a JSON-able dict."""
    return {
        "task_id": rec.task_id,
        "seq": rec.seq,
        "family": rec.family,
        "module": rec.module,
        "params": dict(rec.params),
        "status": rec.status,
        "deps": list(rec.deps),
        "own_priority": rec.own_priority,
        "priority": rec.priority,
        "resources": dict(rec.resources),
        "stakeholders": sorted(rec.stakeholders),
        "runners": sorted(rec.runners),
        "worker": rec.worker,
        "retry_count": rec.retry_count,
        "failures": list(rec.failures or ()),
        "wake_at": rec.wake_at,
        "explanation": rec.explanation,
        "status_message": rec.status_message,
        "progress": rec.progress,
        "tracking_url": rec.tracking_url,
        "registered": rec.registered,
    }


def from_row(row: dict[str, Any]) -> TaskRecord:
    """A record from :func:`to_row`'s dict."""
    return TaskRecord(
        task_id=str(row["task_id"]),
        seq=int(row["seq"]),
        family=str(row["family"]),
        module=str(row["module"]),
        params={str(k): str(v) for k, v in row["params"].items()},
        status=TaskStatus(row["status"]),
        deps=tuple(row["deps"]),
        own_priority=int(row["own_priority"]),
        priority=int(row["priority"]),
        resources={str(k): int(v) for k, v in row["resources"].items()},
        stakeholders=tuple(row["stakeholders"]),
        runners=tuple(row["runners"]),
        worker=row["worker"],
        retry_count=row["retry_count"],
        failures=deque(row["failures"]) if row["failures"] else None,
        wake_at=float(row["wake_at"]),
        explanation=str(row["explanation"]),
        status_message=str(row["status_message"]),
        progress=row["progress"],
        tracking_url=str(row["tracking_url"]),
        registered=bool(row["registered"]),
    )
