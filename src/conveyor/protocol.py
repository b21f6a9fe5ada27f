"""The vocabulary that crosses the worker ⇄ scheduler boundary, and its one JSON codec.

Theory of operation
-------------------
Everything a worker says to a scheduler, and everything a scheduler answers, is one of the
frozen dataclasses below; task statuses, attempt outcomes and note kinds are ``StrEnum``\\ s, so
that each concept has one name everywhere (the in-process scheduler, the ``http`` transport,
the server, the state store, ``RunResult.states`` and the hook events).

:func:`encode` turns such a value into plain JSON data and :func:`decode` turns JSON data back
into the value, checking every field against the dataclass's type annotations; a value that
does not fit raises :class:`FieldError` naming the field (``tasks[3].priority``) and what was
expected. :func:`json_schema` describes the same types for ``/openapi.json``. Nothing is
hand-written per field, so the server's validation, the transport's parsing of answers and the
published schema cannot drift apart. This module imports nothing else of conveyor's.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "REGISTRATION_STATUSES",
    "ROUTES",
    "AddTasks",
    "Annotate",
    "AttemptEnd",
    "AttemptOutcome",
    "Explanation",
    "ExplanationAnswer",
    "FieldError",
    "GetWork",
    "NoteKind",
    "Ok",
    "Ping",
    "Release",
    "Route",
    "Statuses",
    "StatusesAnswer",
    "TaskDone",
    "TaskFailed",
    "TaskFailedAnswer",
    "TaskInfo",
    "TaskList",
    "TaskSpec",
    "TaskStatus",
    "Work",
    "WorkAnswer",
    "WorkLeft",
    "WorkLeftRequest",
    "decode",
    "encode",
    "json_schema",
]

T = TypeVar("T")


class TaskStatus(enum.StrEnum):
    """A task's state as the scheduler keeps it and ``RunResult.states`` reports it."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    DISABLED = "DISABLED"
    UNKNOWN = "UNKNOWN"  # a task whose complete()/requires() was broken while scheduling


REGISTRATION_STATUSES = (
    TaskStatus.PENDING,
    TaskStatus.DONE,
    TaskStatus.DISABLED,
    TaskStatus.UNKNOWN,
)
"""What a worker may register a task as; RUNNING and FAILED only come from the scheduler."""


class AttemptOutcome(enum.StrEnum):
    """How one attempt ended (an interrupted attempt is FAILED, exception type Interrupted)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    PROCESS_DIED = "process_died"
    NEEDS_DEPS = "needs_deps"


class AttemptEnd(enum.StrEnum):
    """How an attempt ended, as the scheduler's attempt history keeps it (see docs/ui.md)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    PROCESS_DIED = "process_died"
    INTERRUPTED = "interrupted"


class NoteKind(enum.StrEnum):
    """What ``run()`` may publish while it runs."""

    STATUS_MESSAGE = "status_message"
    PROGRESS = "progress"
    TRACKING_URL = "tracking_url"


class FieldError(ValueError):
    """A value does not fit the protocol: ``field`` names where, the message what was expected."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _choices(*values: enum.StrEnum) -> dict[str, Any]:
    """Field metadata restricting an enum field to some of its members."""
    return {"choices": tuple(values)}


_NON_NEGATIVE = {"minimum": 0}


# --- values -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What a worker registers about one task (strings, numbers, lists; never a live task)."""

    task_id: str
    family: str = ""
    module: str = ""
    params: Mapping[str, str] = field(default_factory=dict)
    status: TaskStatus = field(
        default=TaskStatus.PENDING, metadata=_choices(*REGISTRATION_STATUSES)
    )
    deps: tuple[str, ...] = ()
    priority: int = 0
    resources: Mapping[str, int] = field(default_factory=dict, metadata=_NON_NEGATIVE)
    runnable: bool = True
    retry_count: int | None = None
    explanation: str = ""


@dataclass(frozen=True, slots=True)
class Work:
    """A task handed to a worker: enough to rebuild it (module, family, string params).

    ``attempt`` identifies this hand-out (a fencing token: it grows with every hand-out of the
    task, and reports name it); ``lease`` is how long, in seconds, the scheduler keeps the
    attempt for a worker it does not hear from (its ``worker_disconnect_delay``). A worker out
    of touch for most of the lease stops the attempt. 0 means not given (an older scheduler).
    """

    task_id: str
    family: str
    module: str
    params: Mapping[str, str]
    attempt: int = field(default=0, metadata=_NON_NEGATIVE)
    lease: float = field(default=0.0, metadata=_NON_NEGATIVE)


@dataclass(frozen=True, slots=True)
class WorkLeft:
    """What remains for a worker when no task is ready for it."""

    pending: int
    unique_pending: int
    running_elsewhere: int


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """One entry of the scheduler's task list (``GET /api/v1/tasks``, see docs/server.md)."""

    task_id: str
    family: str
    params: Mapping[str, str]
    status: TaskStatus
    worker: str | None
    priority: int
    dependencies: tuple[str, ...]
    status_message: str
    progress: float | None
    tracking_url: str
    explanation: str = ""


# --- requests and answers of the worker-facing routes ----------------------------------------


@dataclass(frozen=True, slots=True)
class AddTasks:
    """Register or update tasks for a worker."""

    worker_id: str
    tasks: tuple[TaskSpec, ...]
    assistant: bool = False


@dataclass(frozen=True, slots=True)
class GetWork:
    """Ask for the best runnable task; ``running`` lists what the worker runs now."""

    worker_id: str
    assistant: bool = False
    running: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class WorkLeftRequest:
    """Ask what may still run for a worker."""

    worker_id: str


@dataclass(frozen=True, slots=True)
class TaskDone:
    """Report a successful attempt; ``attempt`` is its :attr:`Work.attempt` (0: not known).

    A report is applied once: sent again (its answer was lost), it is acknowledged without
    being applied again; about an attempt no longer current, it is refused (HTTP 409).
    """

    worker_id: str
    task_id: str
    attempt: int = field(default=0, metadata=_NON_NEGATIVE)


@dataclass(frozen=True, slots=True)
class TaskFailed:
    """Report a failed attempt with its explanation (``attempt`` as in :class:`TaskDone`) and
    how it ended (``outcome``, kept in the task's attempt history; ``failed`` if not said)."""

    worker_id: str
    task_id: str
    explanation: str
    attempt: int = field(default=0, metadata=_NON_NEGATIVE)
    outcome: AttemptEnd = field(
        default=AttemptEnd.FAILED,
        metadata=_choices(
            AttemptEnd.FAILED,
            AttemptEnd.TIMED_OUT,
            AttemptEnd.PROCESS_DIED,
            AttemptEnd.INTERRUPTED,
        ),
    )


@dataclass(frozen=True, slots=True)
class Annotate:
    """Store a status message, progress percentage (0 to 100) or tracking URL."""

    task_id: str
    kind: NoteKind
    value: str | float

    def __post_init__(self) -> None:
        """A progress is a number from 0 to 100; the other kinds are text."""
        if self.kind is NoteKind.PROGRESS:
            value = self.value
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if isinstance(value, str) or not number or not 0 <= value <= 100:  # no float():
                # a huge integer such as 10**400 would overflow it
                raise FieldError(
                    "value",
                    f"expected a progress percentage from 0 to 100, got {self.value!r}"[:200],
                )
        elif not isinstance(self.value, str):
            raise FieldError(
                "value", f"expected a string for {self.kind}, got {type(self.value).__name__}"
            )


@dataclass(frozen=True, slots=True)
class Ping:
    """Keep a worker alive."""

    worker_id: str


@dataclass(frozen=True, slots=True)
class Release:
    """A worker's run ended: it no longer needs the tasks ``task_ids`` it registered (finished
    ones may be pruned ``remove_delay`` later while the worker id lives on). ``task_ids`` None
    (or left out) means every task the worker id registered, as before the field existed: a
    worker id shared by runs at the same time names its run's tasks. Sent by newer workers
    only."""

    worker_id: str
    task_ids: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Statuses:
    """Ask for the status of some tasks."""

    task_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Explanation:
    """Ask for a task's stored failure explanation."""

    task_id: str


@dataclass(frozen=True, slots=True)
class Ok:
    """The answer of a call that only changes state."""

    ok: bool = True


@dataclass(frozen=True, slots=True)
class WorkAnswer:
    """The answer to :class:`GetWork`: a task, or None when nothing is ready."""

    work: Work | None


@dataclass(frozen=True, slots=True)
class TaskFailedAnswer:
    """The answer to :class:`TaskFailed`: the task's status afterwards."""

    status: TaskStatus


@dataclass(frozen=True, slots=True)
class StatusesAnswer:
    """The answer to :class:`Statuses` (unknown ids are left out)."""

    statuses: Mapping[str, TaskStatus]


@dataclass(frozen=True, slots=True)
class ExplanationAnswer:
    """The answer to :class:`Explanation` ('' when there is none)."""

    explanation: str


@dataclass(frozen=True, slots=True)
class TaskList:
    """The answer of ``GET /api/v1/tasks``."""

    tasks: tuple[TaskInfo, ...]


@dataclass(frozen=True, slots=True)
class Route:
    """A worker-facing ``POST /api/v1/<name>`` route: its request and its answer."""

    name: str
    request: type[Any]
    answer: type[Any]


ROUTES: dict[str, Route] = {
    route.name: route
    for route in (
        Route("add_tasks", AddTasks, Ok),
        Route("get_work", GetWork, WorkAnswer),
        Route("work_left", WorkLeftRequest, WorkLeft),
        Route("task_done", TaskDone, Ok),
        Route("task_failed", TaskFailed, TaskFailedAnswer),
        Route("annotate", Annotate, Ok),
        Route("ping", Ping, Ok),
        Route("statuses", Statuses, StatusesAnswer),
        Route("explanation", Explanation, ExplanationAnswer),
        Route("release", Release, Ok),
    )
}


# --- the codec ----------------------------------------------------------------------------------


def encode(value: Any) -> Any:
    """A protocol value as plain JSON data (dicts, lists, strings, numbers, None)."""
    encoder = _ENCODERS.get(type(value))
    if encoder is not None:
        return encoder(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _encoder_of(type(value))(value)
    if isinstance(value, enum.StrEnum):
        return str(value)
    if isinstance(value, tuple | list):
        return [encode(item) for item in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    return value


_Convert = typing.Callable[[Any], Any]
_ENCODERS: dict[type[Any], _Convert] = {}


def _encoder_of(cls: type[Any]) -> _Convert:
    """A function encoding instances of dataclass ``cls``, built once from its annotations."""
    found = _ENCODERS.get(cls)
    if found is not None:
        return found
    hints = _hints(cls)
    converters = [(f.name, _converter(hints[f.name])) for f in _fields(cls)]

    def encode_one(value: Any) -> dict[str, Any]:
        out = {}
        for name, convert in converters:
            item = getattr(value, name)
            out[name] = item if convert is None else convert(item)
        return out

    _ENCODERS[cls] = encode_one
    return encode_one


def _converter(hint: Any) -> _Convert | None:
    """How to encode a value of type ``hint`` (None: it is JSON already)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [_converter(o) for o in typing.get_args(hint) if o is not type(None)]
        if all(option is None for option in options):
            return None
        return encode  # mixed unions are rare: the generic path
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return str
    if dataclasses.is_dataclass(hint):
        return _encoder_of(hint)  # type: ignore[arg-type]
    if origin is tuple:
        each = _converter(typing.get_args(hint)[0])
        if each is None:
            return list
        return lambda v: [each(i) for i in v]
    if origin is Mapping:
        value = _converter(typing.get_args(hint)[1])
        if value is None:
            return dict
        return lambda v: {str(k): value(i) for k, i in v.items()}
    return None


def decode(cls: type[T], data: Any, where: str = "", *, strict: bool = True) -> T:
    """``data`` (parsed JSON) as a ``cls``; FieldError naming the field if it does not fit.

    Fields with a default may be left out. Unknown fields are refused when ``strict`` (a
    request the server receives) and ignored otherwise (an answer from a newer server).
    """
    if not isinstance(data, dict):
        raise FieldError(where or "body", "expected a JSON object")
    fields = _fields(cls)
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for f in fields:
        path = f"{where}.{f.name}" if where else f.name
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise FieldError(path, "missing required field")
            continue
        values[f.name] = _value(hints[f.name], data[f.name], path, f.metadata, strict)
    names = [f.name for f in fields]
    unknown = sorted(set(data) - set(names)) if strict else ()
    if unknown:
        path = f"{where}.{unknown[0]}" if where else unknown[0]
        raise FieldError(path, "unknown field; expected one of " + ", ".join(names))
    try:
        return cls(**values)
    except FieldError as exc:  # a cross-field check in __post_init__
        path = f"{where}.{exc.field}" if where else exc.field
        raise FieldError(path, str(exc).split(": ", 1)[-1]) from None


def _value(hint: Any, data: Any, path: str, meta: Mapping[str, Any], strict: bool) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _union(typing.get_args(hint), data, path, meta, strict)
    if hint is Any:
        return data
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        allowed = meta.get("choices") or _members(hint)
        if not isinstance(data, str) or data not in allowed:
            raise FieldError(path, "expected one of " + ", ".join(map(str, allowed)))
        return hint(data)
    if dataclasses.is_dataclass(hint):
        return decode(hint, data, path, strict=strict)  # type: ignore[arg-type]
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if not isinstance(data, list):
            raise FieldError(path, f"expected a list of {_describe(item)}")
        return tuple(_value(item, v, f"{path}[{i}]", meta, strict) for i, v in enumerate(data))
    if origin is Mapping:
        item = typing.get_args(hint)[1]
        if not isinstance(data, dict):
            raise FieldError(path, f"expected an object of {_describe(item, meta)}")
        return {str(k): _value(item, v, f"{path}.{k}", meta, strict) for k, v in data.items()}
    return _scalar(hint, data, path, meta)


def _union(
    options: tuple[Any, ...], data: Any, path: str, meta: Mapping[str, Any], strict: bool
) -> Any:
    if data is None and type(None) in options:
        return None
    for option in options:
        if option is type(None):
            continue
        try:
            return _value(option, data, path, meta, strict)
        except FieldError:
            continue
    raise FieldError(path, "expected " + " or ".join(_describe(o) for o in options))


_SCALARS: dict[Any, typing.Callable[[Any], bool]] = {
    str: lambda v: isinstance(v, str),
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _scalar(hint: Any, data: Any, path: str, meta: Mapping[str, Any]) -> Any:
    if not _SCALARS[hint](data):
        raise FieldError(path, f"expected {_describe(hint, meta)}, got {type(data).__name__}")
    if "minimum" in meta and data < meta["minimum"]:
        raise FieldError(path, f"expected {_describe(hint, meta)}, got {data!r}")
    return data


def _describe(hint: Any, meta: Mapping[str, Any] | None = None) -> str:
    if hint is type(None):
        return "null"
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return "one of " + ", ".join(hint)
    if dataclasses.is_dataclass(hint):
        return "an object"
    base = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}
    text = base.get(hint, "a value")
    if meta and "minimum" in meta:
        text = f"{text} >= {meta['minimum']}"
    return text


def json_schema(hint: Any, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema of a protocol type (a dataclass, or a field's annotation)."""
    meta = meta or {}
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [json_schema(option, meta) for option in typing.get_args(hint)]}
    if hint is type(None):
        return {"type": "null"}
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return {"type": "string", "enum": [str(v) for v in meta.get("choices") or hint]}
    if dataclasses.is_dataclass(hint):
        fields = _fields(hint)  # type: ignore[arg-type]
        hints = _hints(hint)  # type: ignore[arg-type]
        return {
            "type": "object",
            "properties": {f.name: json_schema(hints[f.name], f.metadata) for f in fields},
            "required": [
                f.name
                for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ],
            "additionalProperties": False,
        }
    if origin is tuple:
        return {"type": "array", "items": json_schema(typing.get_args(hint)[0], meta)}
    if origin is Mapping:
        return {
            "type": "object",
            "additionalProperties": json_schema(typing.get_args(hint)[1], meta),
        }
    kinds = {str: "string", bool: "boolean", int: "integer", float: "number"}
    schema: dict[str, Any] = {"type": kinds.get(hint, "string")}
    if "minimum" in meta:
        schema["minimum"] = meta["minimum"]
    return schema


_MEMBERS: dict[type[Any], tuple[Any, ...]] = {}


def _members(enum_cls: type[enum.StrEnum]) -> tuple[Any, ...]:
    found = _MEMBERS.get(enum_cls)
    if found is None:
        found = _MEMBERS[enum_cls] = tuple(enum_cls)
    return found


_FIELDS: dict[type[Any], tuple[dataclasses.Field[Any], ...]] = {}
_HINTS: dict[type[Any], dict[str, Any]] = {}


def _fields(cls: type[Any]) -> tuple[dataclasses.Field[Any], ...]:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = dataclasses.fields(cls)
    return found


def _hints(cls: type[Any]) -> dict[str, Any]:
    found = _HINTS.get(cls)
    if found is None:
        found = _HINTS[cls] = typing.get_type_hints(cls)
    return found
