"""Scheduler records as JSON-able rows, and back (what state stores save and load).

Only what cannot be derived is stored; dependents, unmet counts, heaps and resource use are
rebuilt by :meth:`~conveyor.scheduler.policy.SchedulerCore.restore`. Rows are plain data:
nothing is pickled.

:func:`from_row` is the one place where a row is validated: every field of :func:`to_row` must
be there with its type, nothing else may be, and the status must be a
:class:`~conveyor.protocol.TaskStatus`. A row that fails raises :class:`RowError` naming the
field, so a store (or the server) can say which row is unusable and why instead of crashing
or serving a state that does not exist. Fields added after rows were first written
(:data:`ADDED_FIELDS`) may be missing: a row saved by an older conveyor gets their default.

A store may keep rows compact (:func:`compact_row`: the fields at their default of
:data:`DEFAULTS` left out, and a field it keeps elsewhere, such as the dependencies in an
edges table); :func:`full_row` gives the whole row back, and :func:`from_stored` makes the
record of a compact row (what :func:`from_row` makes of the whole row, the same RowError
included) in a time that grows with the fields stored.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ..protocol import AttemptEnd, RetrySpec, TaskStatus
from ..secrets import REDACTED, is_secret_name
from .policy import ATTEMPT_HISTORY, Attempt, TaskRecord

__all__ = [
    "ADDED_FIELDS",
    "DEFAULTS",
    "SCHEMA_VERSION",
    "RowError",
    "compact_encoder",
    "compact_row",
    "from_row",
    "from_stored",
    "full_row",
    "read_row",
    "refuse_lone_surrogates",
    "stored_json",
    "to_row",
    "workers_json",
]

SCHEMA_VERSION = 1


class RowError(ValueError):
    """A stored row is not a task record; ``field`` names the offending field ("" = the row).
    ``expected`` is what the field should hold, when the message quotes the value it holds
    instead ("" otherwise): a reader that must not show the value says only that."""

    def __init__(self, message: str, field: str = "", expected: str = "") -> None:
        """Say what is wrong (and what was expected) with ``field``."""
        super().__init__(message)
        self.field = field
        self.expected = expected


def to_row(rec: TaskRecord) -> dict[str, Any]:
    """A record as a JSON-able dict.

    Its ``deps`` is the record's own list when the record holds one (a registration merged
    dependencies in: :attr:`TaskRecord.deps`), not a copy, so that a row costs the same
    however many dependencies its task has; that list only ever grows at its end. A store
    reads a row while saving it and keeps nothing of it, except that it may keep that very
    list to tell, at the next save, what was added at its end (as the built-in stores do).
    """
    deps = rec.deps
    return {
        "task_id": rec.task_id,
        "seq": rec.seq,
        "family": rec.family,
        "module": rec.module,
        "params": dict(rec.params),
        "loader": rec.loader,
        "status": rec.status,
        "deps": deps if type(deps) is list else list(deps),
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

    One pass over the fields, each checked inline; a value that is the default of
    :data:`DEFAULTS` itself (as :func:`full_row` fills it in) is not looked at again.
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
        row = {**ADDED_FIELDS, **row}
    one = strings.setdefault if strings is not None else _same
    task_id = row["task_id"]
    if type(task_id) is not str:
        task_id = _checked(row, "task_id", _text)
    seq = row["seq"]
    if type(seq) is not int:
        seq = _checked(row, "seq", _integer)
    family, module, loader = row["family"], row["module"], row["loader"]
    if type(family) is not str:
        family = _checked(row, "family", _text)
    if type(module) is not str:
        module = _checked(row, "module", _text)
    if type(loader) is not str:
        loader = _checked(row, "loader", _text)
    status = _STATUS_OF.get(row["status"]) if type(row["status"]) is str else None
    if status is None:
        status = _checked(row, "status", _status)
    params = row["params"]
    if params is _D_PARAMS or (type(params) is dict and not params):
        params = {}
    elif type(params) is dict and all(type(v) is str for v in params.values()):
        params = {one(k, k): v for k, v in params.items()} if strings is not None else dict(params)
    else:
        params = _checked(row, "params", _text_map)
    deps = row["deps"]
    if deps is _D_DEPS or (type(deps) is list and not deps):
        deps = ()
    elif type(deps) is list and all(type(d) is str for d in deps):
        # a list, as a merge makes it (a store's saves follow its growth), each dependency
        # once (a row an older release wrote may repeat one: counted twice, it never clears)
        deps = list(dict.fromkeys(deps))
    else:
        deps = list(dict.fromkeys(_checked(row, "deps", _texts)))
    stakeholders = _strings(row, "stakeholders", _D_STAKEHOLDERS)
    runners = _strings(row, "runners", _D_RUNNERS)
    if strings is not None:
        family, module, loader = one(family, family), one(module, module), one(loader, loader)
        if stakeholders:
            stakeholders = tuple([one(w, w) for w in stakeholders])
        if runners:
            runners = tuple([one(w, w) for w in runners])
    worker = row["worker"]
    if worker is not None:
        worker = worker if type(worker) is str else _checked(row, "worker", _optional(_text))
        worker = one(worker, worker)
    attempts: list[Attempt] | None
    raw_attempts = row["attempts"]
    if raw_attempts is _D_ATTEMPTS or (type(raw_attempts) is list and not raw_attempts):
        attempts = None if strings is not None else []
    else:
        attempts = _checked(row, "attempts", _attempts)
        if strings is not None:
            for attempt in attempts:
                attempt.worker = one(attempt.worker, attempt.worker)
    waiting = row["waiting"]
    if type(waiting) is not str:
        waiting = _checked(row, "waiting", _text)
    batch_key = row["batch_key"]
    if type(batch_key) is not str:
        batch_key = _checked(row, "batch_key", _text)
    submitted_by = row["submitted_by"]
    if type(submitted_by) is not str:
        submitted_by = _checked(row, "submitted_by", _text)
    explanation = row["explanation"]
    if type(explanation) is not str:
        explanation = _checked(row, "explanation", _text)
    status_message = row["status_message"]
    if type(status_message) is not str:
        status_message = _checked(row, "status_message", _text)
    tracking_url = row["tracking_url"]
    if type(tracking_url) is not str:
        tracking_url = _checked(row, "tracking_url", _text)
    own_priority = row["own_priority"]
    if type(own_priority) is not int:
        own_priority = _checked(row, "own_priority", _integer)
    priority = row["priority"]
    if type(priority) is not int:
        priority = _checked(row, "priority", _integer)
    batch_max = row["batch_max"]
    if type(batch_max) is not int or batch_max < 0:
        batch_max = _checked(row, "batch_max", _count)
    attempt = row["attempt"]
    if type(attempt) is not int or attempt < 0:
        attempt = _checked(row, "attempt", _count)
    reported = row["reported"]
    if type(reported) is not int or reported < 0:
        reported = _checked(row, "reported", _count)
    cancelled = row["cancelled"]
    if cancelled is not True and cancelled is not False:
        cancelled = _checked(row, "cancelled", _boolean)
    registered = row["registered"]
    if registered is not True and registered is not False:
        registered = _checked(row, "registered", _boolean)
    wake_at = row["wake_at"]
    if type(wake_at) is not float or wake_at - wake_at != 0.0:  # (inf - inf and nan are nan)
        wake_at = _checked(row, "wake_at", _number)
    progress = row["progress"]
    if progress is not None and (type(progress) is not float or progress - progress != 0.0):
        progress = _checked(row, "progress", _optional(_number))
    retry_count = row["retry_count"]
    if retry_count is not None and type(retry_count) is not int:
        retry_count = _checked(row, "retry_count", _optional(_integer))
    labels, batch = row["labels"], row["batch"]
    labels = () if labels is _D_LABELS else _strings(row, "labels", _D_LABELS)
    batch = () if batch is _D_BATCH else _strings(row, "batch", _D_BATCH)
    resources = row["resources"]
    resources = {} if resources is _D_RESOURCES else _resources(row)
    failures = None if row["failures"] is _D_FAILURES else _failure_times(row)
    return TaskRecord(
        task_id=task_id,
        seq=seq,
        family=family,
        module=module,
        params=params,
        loader=loader,
        status=status,
        deps=deps,
        own_priority=own_priority,
        priority=priority,
        resources=resources,
        stakeholders=stakeholders,
        runners=runners,
        worker=worker,
        retry_count=retry_count,
        retry=None if row["retry"] is None else _checked(row, "retry", _retry),
        labels=labels,
        waiting=waiting,
        batch_key=batch_key,
        batch_max=batch_max,
        batch=batch,
        submitted_by=submitted_by,
        cancelled=cancelled,
        failures=failures,
        wake_at=wake_at,
        explanation=explanation,
        status_message=status_message,
        progress=progress,
        tracking_url=tracking_url,
        registered=registered,
        attempt=attempt,
        reported=reported,
        attempts=attempts,
    )


def from_stored(
    stored: object, strings: dict[Any, Any] | None = None, deps: list[str] | None = None
) -> TaskRecord:
    """``from_row(full_row(stored, deps=deps), strings)``: the record of a compact row
    (:func:`compact_row`) with ``deps`` as its dependencies (None: the row's own), or the
    RowError :func:`from_row` raises for it, in a time that grows with the fields ``stored``
    holds rather than with all of them (a store's load of a million rows).

    Each field present is converted by its entry in :data:`_STORED`, which takes only the
    plain values json makes and shares repeated ones through ``strings`` as it goes (the
    strings of :func:`from_row`, and the tuples of worker ids: they are few); anything else,
    a bad value or merely an unusual one (a whole number as a time), goes to :func:`from_row`,
    which names the field or accepts it."""
    if type(stored) is not dict or not stored.keys() >= _REQUIRED:
        return _canonical(stored, strings, deps)
    values = _RECORD_START.copy()
    for name, make in _RECORD_MADE:
        values[name] = make()
    values["attempts"] = [] if strings is None else None
    convert = _STORED
    try:
        for name, value in stored.items():
            values[name] = convert[name](value, strings)
        if deps is not None:
            values["deps"] = _dep_list(deps)
    except (KeyError, _Expected):  # (an unknown field, or a value that does not fit)
        return _canonical(stored, strings, deps)
    # (every field in the class's order, each key in its place: positional arguments, which
    # cost half what 38 keywords do)
    return TaskRecord(*values.values())


def _canonical(
    stored: object, strings: dict[Any, Any] | None, deps: list[str] | None
) -> TaskRecord:
    """What :func:`from_row` makes of the whole row (the RowError naming the field)."""
    if isinstance(stored, dict):
        stored = full_row(stored) if deps is None else full_row(stored, deps=deps)
    return from_row(stored, strings)


def _dep_list(value: Any) -> Sequence[str]:
    if type(value) is list and not value:
        return ()
    if type(value) is list and all(type(d) is str for d in value):
        return list(dict.fromkeys(value))  # (each once, as from_row)
    return list(dict.fromkeys(_texts(value)))


# --- from_stored's conversions: (value, strings) -> the record's value, or _Expected ----------
# (strict: only the types json gives for a row a store wrote; from_row judges anything else)


def _unfit() -> _Expected:
    return _Expected("a value from_row judges")


def _stored_text(value: Any, _strings: object) -> str:
    if type(value) is not str:
        raise _unfit()
    return value


def _stored_shared_text(value: Any, strings: dict[Any, Any] | None) -> str:
    if type(value) is not str:
        raise _unfit()
    return value if strings is None else strings.setdefault(value, value)


def _stored_worker(value: Any, strings: dict[Any, Any] | None) -> str | None:
    return None if value is None else _stored_shared_text(value, strings)


def _stored_integer(value: Any, _strings: object) -> int:
    if type(value) is not int:
        raise _unfit()
    return value


def _stored_count(value: Any, _strings: object) -> int:
    if type(value) is not int or value < 0:
        raise _unfit()
    return value


def _stored_boolean(value: Any, _strings: object) -> bool:
    if value is not True and value is not False:
        raise _unfit()
    return value


def _stored_status(value: Any, _strings: object) -> TaskStatus:
    status = _STATUS_OF.get(value) if type(value) is str else None
    if status is None:
        raise _unfit()
    return status


def _stored_params(value: Any, strings: dict[Any, Any] | None) -> dict[str, str]:
    if type(value) is not dict:
        raise _unfit()
    for text in value.values():
        if type(text) is not str:
            raise _unfit()
    if strings is None:
        return dict(value)
    one: Callable[[str, str], str] = strings.setdefault
    return {one(k, k): v for k, v in value.items()}


def _stored_workers(value: Any, strings: dict[Any, Any] | None) -> tuple[str, ...]:
    """Stakeholders or runners: one shared tuple per distinct list of worker ids."""
    if type(value) is not list:
        raise _unfit()
    if not value:
        return ()
    if strings is None:
        return _texts(value)
    try:  # (keyed apart from anything from_row puts in strings, which takes any key)
        shared: tuple[str, ...] | None = strings.get((_WORKERS, *value))
    except TypeError:  # (an element json made a list or an object of: not a string)
        raise _unfit() from None
    if shared is None:  # (only checked tuples go in under that key: one found is all strings)
        one = strings.setdefault
        shared = tuple([one(w, w) for w in _texts(value)])
        strings[_WORKERS, *shared] = shared
    return shared


_WORKERS = object()
"""The first element of the key a tuple of worker ids is shared under in ``strings``."""


def _stored_attempts(value: Any, strings: dict[Any, Any] | None) -> list[Attempt] | None:
    if type(value) is not list:
        raise _unfit()
    if not value:
        return [] if strings is None else None
    history = []
    for item in value[-ATTEMPT_HISTORY:]:
        if type(item) is not dict or item.keys() != _ATTEMPT_KEYSET:
            raise _unfit()
        attempt, started, ended = item["attempt"], item["started"], item["ended"]
        outcome, worker = item["outcome"], item["worker"]
        if (
            type(attempt) is not int
            or attempt < 0
            or type(started) is not float
            or started - started != 0.0  # (inf - inf and nan are nan)
            or type(worker) is not str
            or (ended is not None and (type(ended) is not float or ended - ended != 0.0))
        ):
            raise _unfit()
        if outcome is not None:
            outcome = _OUTCOME_OF.get(outcome) if type(outcome) is str else None
            if outcome is None:
                raise _unfit()
        if strings is not None:
            worker = strings.setdefault(worker, worker)
        history.append(Attempt(attempt, started, worker, ended, outcome))
    return history


def _judged(check: Callable[[Any], Any]) -> Callable[[Any, object], Any]:
    """A field seldom stored: its check of :data:`_FIELDS` (or ``check``), strings unshared."""

    def judged(value: Any, _strings: object) -> Any:
        return check(value)

    return judged


def _same(value: str, _default: str) -> str:
    return value


def _checked(row: dict[str, Any], name: str, check: Callable[[Any], Any]) -> Any:
    """``check(row[name])``: the slow path of :func:`from_row`, which names the field."""
    value = row[name]
    try:
        return check(value)
    except _Expected as exc:
        if name == "params" and isinstance(value, dict):  # (a secret's value is not shown)
            value = {k: REDACTED if is_secret_name(str(k)) else v for k, v in value.items()}
        message = f"field {name!r} is {_shown(value)}; expected {exc}"
        raise RowError(message, name, str(exc)) from None


def _strings(row: dict[str, Any], name: str, default: object) -> tuple[str, ...]:
    value = row[name]
    if value is default or (type(value) is list and not value):
        return ()
    if type(value) is list and all(type(v) is str for v in value):
        return tuple(value)
    result: tuple[str, ...] = _checked(row, name, _texts)
    return result


def _resources(row: dict[str, Any]) -> dict[str, int]:
    value = row["resources"]
    if value is _D_RESOURCES or (type(value) is dict and not value):
        return {}
    result: dict[str, int] = _checked(row, "resources", _count_map)
    return result


def _failure_times(row: dict[str, Any]) -> deque[float] | None:
    value = row["failures"]
    if value is _D_FAILURES or (type(value) is list and not value):
        return None
    result: deque[float] | None = _checked(row, "failures", _failures)
    return result


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
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _Expected("a finite number")
    try:
        number = float(value)
    except OverflowError:  # (an integer of hundreds of digits: json reads one as it is)
        raise _Expected("a finite number") from None
    if not math.isfinite(number):
        raise _Expected("a finite number")
    return number


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
        if outcome is not None and (not isinstance(outcome, str) or outcome not in _OUTCOMES):
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
_STATUS_OF: Mapping[str, TaskStatus] = {str(s): s for s in TaskStatus}

ADDED_FIELDS: Mapping[str, Any] = MappingProxyType(
    {
        "attempt": 0,
        "reported": 0,
        "attempts": [],
        "loader": "conveyor",  # (conveyor's own loader: the only one before the field)
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

_D_DEPS: list[str] = []
_D_STAKEHOLDERS: list[str] = []
_D_RUNNERS: list[str] = []
_D_LABELS: list[str] = []
_D_BATCH: list[str] = []
_D_FAILURES: list[float] = []
_D_ATTEMPTS: list[dict[str, Any]] = []
_D_PARAMS: dict[str, str] = {}
_D_RESOURCES: dict[str, int] = {}

DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "loader": "conveyor",  # (what is stored: not to follow a change of DEFAULT_LOADER)
        "deps": _D_DEPS,
        "own_priority": 0,
        "priority": 0,
        "resources": _D_RESOURCES,
        "worker": None,
        "retry_count": None,
        "retry": None,
        "labels": _D_LABELS,
        "waiting": "",
        "batch_key": "",
        "batch_max": 0,
        "batch": _D_BATCH,
        "submitted_by": "",
        "cancelled": False,
        "failures": _D_FAILURES,
        "wake_at": 0.0,
        "explanation": "",
        "status_message": "",
        "progress": None,
        "tracking_url": "",
        "attempt": 0,
        "reported": 0,
        "attempts": _D_ATTEMPTS,
    }
)
"""The fields a compact row (:func:`compact_row`) may leave out, each with the value it then
has: everything but the id, change number, status, what the task is (family, module,
parameters), who registered it and may run it, and whether it was registered, which every
stored row keeps. The values are shared by every row :func:`full_row` fills: never change
them."""


def compact_row(row: Mapping[str, Any], *, without: str = "") -> dict[str, Any]:
    """``row`` without the fields whose value is their default of :data:`DEFAULTS` (and
    without the field ``without``, if one is named: a store that keeps it elsewhere). A store
    writes this instead of the whole row; :func:`full_row` gives the row back."""
    compact = dict(row)
    for name, default, kind in _DEFAULT_LIST:
        if name in compact:
            value = compact[name]
            if value == default and type(value) is kind:
                del compact[name]
    if without:
        compact.pop(without, None)
    return compact


def stored_json(row: Mapping[str, Any], *, without: str = "") -> str:
    """The compact JSON a store writes of ``row`` (:func:`compact_row`, ``without`` left out
    too): the same text as ``json.dumps(compact_row(row, without=without),
    separators=(",", ":"))``, made by one encoder built once (a row is a tree: no check for
    cycles)."""
    return _encode(compact_row(row, without=without))


@functools.lru_cache(maxsize=4096)
def workers_json(workers: tuple[str, ...]) -> str:
    """A task's stakeholders or runners in the JSON :func:`stored_json` writes of them (sorted,
    as :func:`to_row` gives them), for a store that sets them in a stored row alone: few
    distinct tuples, shared by the records, so each is encoded once."""
    return _encode(sorted(workers))


def compact_encoder(*, ensure_ascii: bool = True, allow_nan: bool = True) -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=..., allow_nan=...)`` for
    trees (no check for cycles), with json's C encoder built once instead of on each call (a
    third of the cost of encoding a row or a short answer)."""
    plain = json.JSONEncoder(
        separators=(",", ":"), check_circular=False, ensure_ascii=ensure_ascii, allow_nan=allow_nan
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # (no C accelerator: json's own encoder)
        return plain.encode
    strings = (
        json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    )
    # what JSONEncoder.encode builds on each call, built once: the C encoder of these settings
    encoder = make(None, plain.default, strings, None, ":", ",", False, False, allow_nan)

    def encode(value: Any) -> str:
        return "".join(encoder(value, 0))

    return encode


_encode = compact_encoder()

_ABSENT = object()
_REQUIRED = frozenset(_FIELDS) - frozenset(DEFAULTS)
_RECORD_DEFAULTS: dict[str, Any] = {
    **{name: value for name, value in DEFAULTS.items() if not isinstance(value, list | dict)},
    "deps": (),
    "labels": (),
    "batch": (),
    "failures": None,
}
"""What a record has for each field a compact row leaves out (the mutable ones, resources and
attempts, are made afresh for each record)."""


def _record_start() -> tuple[dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...]]:
    """Every field of a :class:`TaskRecord`, in the class's order, with what a record loaded
    from a compact row has before its stored fields are set (a place for each required one),
    and the fields whose value is made afresh for each record, with what makes it."""
    start: dict[str, Any] = {}
    made = []
    for f in dataclasses.fields(TaskRecord):
        if not f.init or f.kw_only:
            raise TypeError(f"TaskRecord.{f.name} is not positional: from_stored cannot fill it")
        if f.name in _REQUIRED or f.name in _RECORD_DEFAULTS:
            start[f.name] = _RECORD_DEFAULTS.get(f.name)
            continue
        start[f.name] = f.default
        if f.default_factory is not dataclasses.MISSING:
            made.append((f.name, f.default_factory))
        elif f.default is dataclasses.MISSING:
            raise TypeError(f"TaskRecord.{f.name} has no default: from_stored cannot fill it")
    if list(start) != list(inspect.signature(TaskRecord).parameters):  # (an InitVar, say)
        raise TypeError("TaskRecord's parameters are not its fields: from_stored cannot fill it")
    return start, tuple(made)


_RECORD_START, _RECORD_MADE = _record_start()


def _tuple_of_texts(value: Any) -> tuple[str, ...]:
    return () if type(value) is list and not value else _texts(value)


_STORED: dict[str, Callable[[Any, dict[Any, Any] | None], Any]] = {
    **{name: _judged(check) for name, check in _FIELDS.items()},
    "task_id": _stored_text,
    "seq": _stored_integer,
    "family": _stored_shared_text,
    "module": _stored_shared_text,
    "params": _stored_params,
    "loader": _stored_shared_text,
    "status": _stored_status,
    "deps": _judged(_dep_list),
    "own_priority": _stored_integer,
    "priority": _stored_integer,
    "stakeholders": _stored_workers,
    "runners": _stored_workers,
    "worker": _stored_worker,
    "labels": _judged(_tuple_of_texts),
    "batch": _judged(_tuple_of_texts),
    "waiting": _stored_text,
    "explanation": _stored_text,
    "status_message": _stored_text,
    "tracking_url": _stored_text,
    "registered": _stored_boolean,
    "cancelled": _stored_boolean,
    "attempt": _stored_count,
    "reported": _stored_count,
    "attempts": _stored_attempts,
}
"""Per field, what :func:`from_stored` makes of its stored value (raising _Expected)."""
_ATTEMPT_KEYSET = frozenset(_ATTEMPT_KEYS)
_OUTCOME_OF: Mapping[str, AttemptEnd] = {str(o): o for o in AttemptEnd}
_DEFAULT_LIST = tuple((name, value, type(value)) for name, value in DEFAULTS.items())
"""Each left-out field of a compact row, its default and the default's type (a value equal to
the default but of another type, 0 for 0.0, is kept)."""


def refuse_lone_surrogates(data: str, stored: object) -> None:
    """RowError (field ``data``) if JSON text ``data`` decoded into ``stored`` holds a string
    with a lone surrogate, which no store can write back (UTF-8 has none): a row edited so,
    since the server refuses them at its edge. Looked for only where the text has a ``\\u``
    escape that can make one: the drivers decode stored text as strict UTF-8, so a surrogate
    can come from nothing else (a character beyond the BMP is written as a pair, and loads)."""
    if "\\ud" not in data and "\\uD" not in data:
        return
    try:
        json.dumps(stored, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise RowError(
            "data holds a lone surrogate (a \\ud800-\\udfff escape without its pair);"
            " expected valid Unicode",
            "data",
        ) from None


def read_row(
    task_id: object,
    data: str,
    deps: list[str] | None = None,
    *,
    edged: bool = False,
    strings: dict[Any, Any] | None = None,
) -> tuple[dict[str, Any], TaskRecord]:
    """Every check a store makes of the row it stored as JSON text ``data`` under
    ``task_id``, in one place: the row as stored (compact: :func:`compact_row`; or whole, as
    saved before schema 3) and its record (:func:`from_stored` with ``strings`` and ``deps``,
    the dependencies the store keeps elsewhere, in order; None: none there). RowError, naming
    the field, if it is not JSON, not a task record, holds a lone surrogate
    (:func:`refuse_lone_surrogates`), is the record of another task, or (``edged``: a store
    that keeps dependencies apart, as the built-in ones do since their schema 3) holds
    dependencies in its JSON where the store has none: they would be taken for the task's and
    lost at its next save (beside stored ones, those stand and the next save drops them)."""
    try:
        stored = _DECODER.decode(data)
    except (ValueError, RecursionError) as exc:
        raise RowError(f"data is not JSON ({exc})", "data") from None
    record = from_stored(stored, strings, deps)
    refuse_lone_surrogates(data, stored)
    if record.task_id != task_id:
        message = f"field 'task_id' is {record.task_id!r}, but the row's task_id is {task_id!r}"
        raise RowError(message, "task_id")
    if edged and deps is None and "deps" in stored:
        raise RowError(
            "field 'deps' is in the row's JSON; expected the dependencies only in table"
            " 'edges' (since schema 3)",
            "deps",
        )
    return stored, record


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_DECODER = json.JSONDecoder(parse_constant=_not_a_number)
"""``json.loads(data, parse_constant=_not_a_number)`` without a decoder made per row."""


def full_row(stored: Mapping[str, Any], **more: Any) -> dict[str, Any]:
    """The whole row from a compact one (:func:`compact_row`, or a full row of any version):
    every field left out has its value of :data:`DEFAULTS`; ``more`` (what the store kept
    elsewhere, such as ``deps``) is added. Every reader of a stored row reads it through this,
    so it sees the same row as was saved. The defaults filled in are shared: read only."""
    return {**DEFAULTS, **stored, **more}


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    kinds = {list: "a JSON list", str: "a JSON string", bool: "a JSON boolean"}
    return kinds.get(type(value), "a JSON number" if isinstance(value, int | float) else "not JSON")


def _shown(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=True, default=repr)
    except RecursionError:  # (decoded a few frames higher up, just under json's own limit)
        return "a value nested too deep to show"
    return text if len(text) <= 60 else text[:57] + "..."
