"""Scheduler records as JSON-able rows, and back (what state stores save and load).

Only what cannot be derived is stored; dependents, unmet counts, heaps and resource use are
rebuilt by :meth:`~conveyor.scheduler.policy.SchedulerCore.restore`. Rows are plain data:
nothing is pickled.

:func:`from_row` is the one place where a stored row is validated: every field of
:func:`to_row` must be there with its type, nothing else may be, and the status must be a
:class:`~conveyor.protocol.TaskStatus`. A row that fails raises :class:`RowError` naming the
field, so a store (or the server) can say which row is unusable and why instead of crashing
or serving a state that does not exist. Fields added after rows were first written
(:data:`ADDED_FIELDS`) may be missing: a row saved by an older conveyor gets their default.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ..protocol import AttemptEnd, RetrySpec, TaskStatus
from ..tasklike import DEFAULT_LOADER
from .policy import ATTEMPT_HISTORY, Attempt, TaskRecord

__all__ = ["ADDED_FIELDS", "SCHEMA_VERSION", "RowError", "from_row", "to_row"]

SCHEMA_VERSION = 1


class RowError(ValueError):
    """A stored row is not a task record; ``field`` names the offending field ("" = the row)."""

    def __init__(self, message: str, field: str = "") -> None:
        """Say what is wrong (and what was expected) with ``field``."""
        super().__init__(message)
        self.field = field


def to_row(rec: TaskRecord) -> dict[str, Any]:
    """A record as a JSON-able dict."""
    return {
        "task_id": rec.task_id,
        "seq": rec.seq,
        "family": rec.family,
        "module": rec.module,
        "params": dict(rec.params),
        "loader": rec.loader,
        "status": rec.status,
        "deps": list(rec.deps),
        "own_priority": rec.own_priority,
        "priority": rec.priority,
        "resources": dict(rec.resources),
        "stakeholders": sorted(rec.stakeholders),
        "runners": sorted(rec.runners),
        "worker": rec.worker,
        "retry_count": rec.retry_count,
        "retry": None if rec.retry is None else _retry_row(rec.retry),
        "labels": list(rec.labels),
        "waiting": rec.waiting,
        "batch_key": rec.batch_key,
        "batch_max": rec.batch_max,
        "batch": list(rec.batch),
        "submitted_by": rec.submitted_by,
        "cancelled": rec.cancelled,
        "failures": list(rec.failures or ()),
        "wake_at": rec.wake_at,
        "explanation": rec.explanation,
        "status_message": rec.status_message,
        "progress": rec.progress,
        "tracking_url": rec.tracking_url,
        "registered": rec.registered,
        "attempt": rec.attempt,
        "reported": rec.reported,
        "attempts": [
            {
                "attempt": a.attempt,
                "started": a.started,
                "ended": a.ended,
                "outcome": a.outcome,
                "worker": a.worker,
            }
            for a in rec.attempts or ()
        ],
    }


def from_row(row: object, strings: dict[str, str] | None = None) -> TaskRecord:
    """A record from :func:`to_row`'s dict; RowError naming the field if ``row`` is not one.

    ``strings``, one dict kept for a whole load, makes the records share one string object
    per distinct family, module, loader, worker id and parameter name (each loaded row has its
    own copies otherwise); an empty attempt history is None then, as in a record never
    saved. The record is equal either way.
    """
    if not isinstance(row, dict):
        raise RowError(f"the row is {_json_kind(row)}; expected a JSON object")
    if row.keys() != _FIELD_NAMES:  # (a row of today has every field: nothing to look for)
        missing = [name for name in _FIELDS if name not in row and name not in ADDED_FIELDS]
        if missing:
            raise RowError(f"field {missing[0]!r} is missing", missing[0])
        unknown = sorted(str(name) for name in row if name not in _FIELDS)
        if unknown:
            raise RowError(f"field {unknown[0]!r} is not a field of a task row", unknown[0])
    values = {}
    for name, check, kept, empty in _CHECKS:
        value = row[name] if name in row else ADDED_FIELDS[name]
        kind = type(value)
        if kind in kept:  # (what the check would return as it is: no call)
            values[name] = value
            continue
        if kind is list and not value and empty is not _NO_EMPTY:
            values[name] = empty  # (what the check returns for [])
            continue
        try:
            values[name] = check(value)
        except _Expected as exc:
            raise RowError(f"field {name!r} is {_shown(value)}; expected {exc}", name) from None
    if strings is not None:
        _share(values, strings)
    return TaskRecord(**values)


def _share(values: dict[str, Any], strings: dict[str, str]) -> None:
    """Replace the repeated strings of a checked row's ``values`` by those of ``strings``
    (adding the new ones), and an empty attempt history by None."""
    one = strings.setdefault
    for name in ("family", "module", "loader"):
        values[name] = one(values[name], values[name])
    worker = values["worker"]
    if worker is not None:
        values["worker"] = one(worker, worker)
    for name in ("stakeholders", "runners"):
        if values[name]:
            values[name] = tuple([one(w, w) for w in values[name]])
    if values["params"]:
        values["params"] = {one(k, k): v for k, v in values["params"].items()}
    attempts = values["attempts"]
    if not attempts:
        values["attempts"] = None
    else:
        for attempt in attempts:
            attempt.worker = one(attempt.worker, attempt.worker)


# --- one check per field: the value converted, or _Expected saying what it should be ------------


class _Expected(Exception):
    """A value does not fit; the message is what was expected."""


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _Expected("a string")
    return value


def _integer(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Expected("an integer")
    return value


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _Expected("an integer >= 0")
    return value


def _number(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise _Expected("a finite number")
    return float(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Expected("true or false")
    return value


def _status(value: Any) -> TaskStatus:
    if not isinstance(value, str) or value not in _STATUSES:
        raise _Expected("one of " + ", ".join(TaskStatus))
    return TaskStatus(value)


_STATUSES = frozenset(TaskStatus)


def _texts(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Expected("a list of strings")
    return tuple(value)


def _text_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _Expected("an object of string values")
    return dict(value)


def _count_map(value: Any) -> dict[str, int]:
    if not isinstance(value, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value.values()
    ):
        raise _Expected("an object of integers >= 0")
    return dict(value)


def _failures(value: Any) -> deque[float] | None:
    if not isinstance(value, list):
        raise _Expected("a list of finite numbers (failure times)")
    try:
        times = [_number(v) for v in value]
    except _Expected:
        raise _Expected("a list of finite numbers (failure times)") from None
    return deque(times) if times else None


_ATTEMPT_KEYS = ("attempt", "started", "ended", "outcome", "worker")
_OUTCOMES = frozenset(AttemptEnd)
_ATTEMPTS_EXPECTED = "a list of attempts, each an object with exactly the fields " + ", ".join(
    _ATTEMPT_KEYS
)


def _attempts(value: Any) -> list[Attempt]:
    """The history; only its latest :data:`ATTEMPT_HISTORY` entries are kept (a row saved when
    the bound was larger stays usable)."""
    if not isinstance(value, list):
        raise _Expected(_ATTEMPTS_EXPECTED)
    history = []
    for item in value[-ATTEMPT_HISTORY:]:
        if not isinstance(item, dict) or sorted(item) != sorted(_ATTEMPT_KEYS):
            raise _Expected(_ATTEMPTS_EXPECTED)
        outcome = item["outcome"]
        if outcome is not None and outcome not in _OUTCOMES:
            raise _Expected(
                _ATTEMPTS_EXPECTED + "; outcome null or one of " + ", ".join(AttemptEnd)
            )
        try:
            entry = Attempt(
                attempt=_count(item["attempt"]),
                started=_number(item["started"]),
                worker=_text(item["worker"]),
                ended=_optional(_number)(item["ended"]),
                outcome=None if outcome is None else AttemptEnd(outcome),
            )
        except _Expected as exc:
            raise _Expected(f"{_ATTEMPTS_EXPECTED} (one has a field that is not {exc})") from None
        history.append(entry)
    return history


_RETRY_KEYS = ("delay", "backoff", "max_delay", "jitter")
_RETRY_EXPECTED = (
    "null or an object with exactly the fields delay, backoff, max_delay, jitter (each null or "
    "a finite number: delay and max_delay >= 0, backoff >= 1, jitter from 0 to 1)"
)


def _retry_row(retry: RetrySpec) -> dict[str, float | None]:
    """A task's own retry schedule as a row's ``retry`` object."""
    return {
        "delay": retry.delay,
        "backoff": retry.backoff,
        "max_delay": retry.max_delay,
        "jitter": retry.jitter,
    }


def _retry(value: Any) -> RetrySpec | None:
    """A row's ``retry``: null, or the four numbers of a :class:`RetrySpec` within bounds."""
    if value is None:
        return None
    if not isinstance(value, dict) or sorted(value) != sorted(_RETRY_KEYS):
        raise _Expected(_RETRY_EXPECTED)
    try:
        numbers = {k: None if value[k] is None else _number(value[k]) for k in _RETRY_KEYS}
    except _Expected:
        raise _Expected(_RETRY_EXPECTED) from None
    delay, backoff = numbers["delay"], numbers["backoff"]
    most, jitter = numbers["max_delay"], numbers["jitter"]
    if (
        (delay is not None and delay < 0)
        or (backoff is not None and backoff < 1)
        or (most is not None and most < 0)
        or (jitter is not None and not 0 <= jitter <= 1)
    ):
        raise _Expected(_RETRY_EXPECTED)
    return RetrySpec(delay, backoff, most, jitter)


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def optional(value: Any) -> Any:
        if value is None:
            return None
        try:
            return check(value)
        except _Expected as exc:
            raise _Expected(f"null or {exc}") from None

    return optional


_FIELDS: dict[str, Callable[[Any], Any]] = {
    "task_id": _text,
    "seq": _integer,
    "family": _text,
    "module": _text,
    "params": _text_map,
    "loader": _text,
    "status": _status,
    "deps": _texts,
    "own_priority": _integer,
    "priority": _integer,
    "resources": _count_map,
    "stakeholders": _texts,
    "runners": _texts,
    "worker": _optional(_text),
    "retry_count": _optional(_integer),
    "retry": _retry,
    "labels": _texts,
    "waiting": _text,
    "batch_key": _text,
    "batch_max": _count,
    "batch": _texts,
    "submitted_by": _text,
    "cancelled": _boolean,
    "failures": _failures,
    "wake_at": _number,
    "explanation": _text,
    "status_message": _text,
    "progress": _optional(_number),
    "tracking_url": _text,
    "registered": _boolean,
    "attempt": _count,
    "reported": _count,
    "attempts": _attempts,
}
"""Every field of a row (the keys of :func:`to_row`) and the check that converts its value."""

_FIELD_NAMES = frozenset(_FIELDS)
_KEPT: Mapping[str, tuple[type, ...]] = {
    "task_id": (str,),
    "seq": (int,),
    "family": (str,),
    "module": (str,),
    "loader": (str,),
    "own_priority": (int,),
    "priority": (int,),
    "worker": (str, type(None)),
    "retry_count": (int, type(None)),
    "retry": (type(None),),
    "waiting": (str,),
    "batch_key": (str,),
    "submitted_by": (str,),
    "cancelled": (bool,),
    "explanation": (str,),
    "status_message": (str,),
    "progress": (type(None),),
    "tracking_url": (str,),
    "registered": (bool,),
}
"""Per field, the exact types of value its check returns unchanged (``bool`` is not ``int``)."""
_NO_EMPTY = object()
_EMPTY: Mapping[str, Any] = {
    "deps": (),
    "stakeholders": (),
    "runners": (),
    "labels": (),
    "failures": None,
}
"""Per field, what its check returns (immutable) for an empty list."""
_CHECKS = tuple(
    (name, check, _KEPT.get(name, ()), _EMPTY.get(name, _NO_EMPTY))
    for name, check in _FIELDS.items()
)

ADDED_FIELDS: Mapping[str, Any] = MappingProxyType(
    {
        "attempt": 0,
        "reported": 0,
        "attempts": [],
        "loader": DEFAULT_LOADER,
        "retry": None,
        "labels": [],
        "waiting": "",
        "batch_key": "",
        "batch_max": 0,
        "batch": [],
        "submitted_by": "",
        "cancelled": False,
    }
)
"""Fields added after rows were first written, and the value a row saved without one gets.
A field added to :func:`to_row` later belongs here too, or every older row is unusable."""


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    kinds = {list: "a JSON list", str: "a JSON string", bool: "a JSON boolean"}
    return kinds.get(type(value), "a JSON number" if isinstance(value, int | float) else "not JSON")


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=True, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."
