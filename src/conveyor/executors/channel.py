"""The structured channel between an attempt's process and its supervisor.

The wire format is :mod:`conveyor.protocol`'s: each message is one JSON line holding an
:data:`~conveyor.protocol.AttemptMessage` (:func:`~conveyor.protocol.encode_attempt_message`),
tagged by ``"message"``: ``stage`` (how far the attempt has got: its task is loaded, its
``run()`` starts; read by the supervisor alone, to explain a timeout), ``note`` (a status
message, progress or tracking URL) or how the attempt ended. The same lines are what ``python
-m conveyor.attempt`` writes on its standard output.

This module translates between those wire values and the executor protocol's live
:class:`~.base.Note` / :class:`~.base.Outcome` (:func:`to_wire`, :func:`from_wire`). Dynamic
dependencies travel as :class:`~conveyor.protocol.DependencyRef` and are rebuilt by a task
loader (the one its caller names, :attr:`conveyor.protocol.AttemptSpec.loader`; conveyor's own
by default): no pickle. Long texts are truncated with a marker before they are sent, so a task
that raises with a megabyte-long message can neither deadlock nor bloat the worker.
"""

from __future__ import annotations

import json
import os
import threading

from .. import protocol as p
from ..errors import TaskLoadError
from ..loaders import task_loader
from ..protocol import AttemptOutcome, AttemptStage, FailureCause, Stage
from ..task import is_task_like
from ..tasklike import DEFAULT_LOADER, TaskLike
from .base import FAILED, Message, Note, Outcome

__all__ = [
    "AttemptStage",
    "LineReader",
    "PipeSink",
    "Stage",
    "decode",
    "encode",
    "from_wire",
    "task_ref",
    "to_wire",
    "truncate",
]

MAX_TEXT = 64 * 1024
MAX_LINE = 16 * 1024 * 1024


def truncate(text: str, limit: int = MAX_TEXT) -> str:
    """``text``, or its head and tail around a ``[... truncated N characters ...]`` marker."""
    if len(text) <= limit:
        return text
    keep = limit // 2
    cut = len(text) - 2 * keep
    return f"{text[:keep]}\n[... truncated {cut} characters ...]\n{text[-keep:]}"


def task_ref(task: TaskLike) -> p.DependencyRef:
    """What rebuilds ``task`` in another process."""
    return p.DependencyRef(task.task_module, task.task_family, dict(task.task_params))


def to_wire(message: Message | Stage) -> p.AttemptMessage:
    """The protocol value of an executor message (texts truncated)."""
    if isinstance(message, Stage):
        return message
    if isinstance(message, Note):
        value = truncate(message.value) if isinstance(message.value, str) else message.value
        return p.Note(message.kind, value)
    return _end_to_wire(message)


def _end_to_wire(outcome: Outcome) -> p.AttemptMessage:
    kind, duration, error = outcome.kind, outcome.duration, truncate(outcome.error)
    if kind == AttemptOutcome.SUCCEEDED:
        return p.Succeeded(duration, outcome.found_complete, truncate(outcome.explanation))
    if kind == AttemptOutcome.NEEDS_DEPS:
        return p.NeedsDependencies(duration, tuple(task_ref(t) for t in outcome.new_deps))
    if kind == AttemptOutcome.TIMED_OUT:
        return p.TimedOut(duration, outcome.timeout, error, outcome.before_run)
    if kind == AttemptOutcome.PROCESS_DIED:
        return p.Died(duration, error, outcome.exitcode, outcome.signal)
    cause = FailureCause.ERROR
    if outcome.interrupted:
        cause = FailureCause.INTERRUPTED
    elif outcome.load_error:
        cause = FailureCause.TASK_LOAD
    not_retried = truncate(outcome.not_retried, 1000)
    exception_type = outcome.exception_type[:200]
    return p.Failed(duration, error, exception_type, cause, outcome.missing, not_retried)


def from_wire(
    message: p.AttemptMessage, task_id: str, loader: str = DEFAULT_LOADER
) -> Message | Stage:
    """The executor message for a protocol value of attempt ``task_id`` (a dynamic
    dependency is rebuilt from its module, family and parameters by the attempt's task
    ``loader``, the name :attr:`conveyor.protocol.AttemptSpec.loader` carries)."""
    if isinstance(message, Stage):
        return message
    if isinstance(message, p.Note):
        return Note(task_id, message.kind, message.value)
    if isinstance(message, p.Succeeded):
        found, text = message.found_complete, message.explanation
        return Outcome(
            task_id,
            AttemptOutcome.SUCCEEDED,
            message.duration,
            found_complete=found,
            explanation=text,
        )
    if isinstance(message, p.NeedsDependencies):
        deps = tuple(_rebuild(loader, d) for d in message.new_deps)
        return Outcome(task_id, AttemptOutcome.NEEDS_DEPS, message.duration, new_deps=deps)
    if isinstance(message, p.TimedOut):
        return Outcome(
            task_id,
            AttemptOutcome.TIMED_OUT,
            message.duration,
            message.error,
            "Timeout",
            timeout=message.timeout,
            before_run=message.before_run,
        )
    if isinstance(message, p.Died):
        return Outcome(
            task_id,
            AttemptOutcome.PROCESS_DIED,
            message.duration,
            message.error,
            "ProcessDied",
            exitcode=message.exitcode,
            signal=message.signal,
        )
    return Outcome(
        task_id,
        FAILED,
        message.duration,
        message.error,
        message.exception_type,
        missing=message.missing,
        interrupted=message.cause == FailureCause.INTERRUPTED,
        load_error=message.cause == FailureCause.TASK_LOAD,
        not_retried=message.not_retried,
    )


def _rebuild(loader: str, ref: p.DependencyRef) -> TaskLike:
    """The dependency ``ref`` names, rebuilt by the task loader ``loader``; TaskLoadError for
    what is not a task (a :class:`~conveyor.Task` or another :class:`~conveyor.TaskLike`:
    what a worker's graph holds)."""
    task = task_loader(loader).load(ref.module, ref.family, ref.params)
    if not is_task_like(task):
        raise TaskLoadError(
            f"the task loader {loader!r} made {task!r}, which is not a task "
            "(conveyor.TaskLike: task_id, task_family, task_module, task_params, "
            "task_policy(), complete(), requires(), run())"
        )
    return task


def encode(message: Message | Stage) -> bytes:
    """One message as a JSON line of the protocol's codec."""
    body = p.encode_attempt_message(to_wire(message))
    return (json.dumps(body, separators=(",", ":")) + "\n").encode()


def decode(line: bytes, task_id: str, loader: str = DEFAULT_LOADER) -> Message | Stage:
    """A message from one JSON line (a garbled line becomes a failed outcome); dynamic
    dependencies rebuilt by the task loader ``loader`` (:func:`from_wire`)."""
    try:
        return from_wire(p.decode_attempt_message(json.loads(line)), task_id, loader)
    except TaskLoadError as exc:  # a yielded dependency its loader cannot build
        return Outcome(
            task_id,
            FAILED,
            error=truncate(
                f"run() yielded a task the attempt's task loader {loader!r} cannot rebuild in "
                f"the worker: {exc}"
            ),
            exception_type="TaskLoadError",
            load_error=True,
        )
    except Exception as exc:
        return Outcome(
            task_id,
            FAILED,
            error=truncate(f"unreadable message from the task's process ({exc}): {line[:200]!r}"),
            exception_type="ChannelError",
        )


class PipeSink:
    """The child's end: writes each message as one line to a file descriptor, thread-safely."""

    def __init__(self, fd: int) -> None:
        """Write to ``fd`` (blocking)."""
        self.fd = fd
        self._lock = threading.Lock()

    def __call__(self, message: Message | Stage) -> None:
        """Send one message."""
        data = encode(message)
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self.fd, view)
                view = view[written:]


class LineReader:
    """The worker's end: accumulates bytes and yields complete lines (over-long ones cut)."""

    def __init__(self) -> None:
        """Start empty."""
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return the complete lines it finished."""
        self._buffer += data
        if b"\n" not in data:
            if len(self._buffer) > MAX_LINE:  # a runaway line: keep memory bounded
                del self._buffer[MAX_LINE // 2 :]
            return []
        *lines, rest = self._buffer.split(b"\n")
        self._buffer = bytearray(rest)
        return [bytes(line) for line in lines if line]
