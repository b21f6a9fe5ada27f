"""The structured channel between an attempt's child process and the worker.

Messages are JSON lines on a pipe, one object each, tagged by ``"t"``: ``note`` (a status
message, progress or tracking URL), ``stage`` (how far the attempt has got: its task is loaded,
its ``run()`` starts; read by the supervisor alone, to explain a timeout) or ``outcome``. An
outcome's ``before_run`` says, for a timeout, what the process was still doing before
``run()`` (a supervisor on another machine, the Dask plugin's, passes it on in the outcome's
line). Dynamic dependencies travel as
``[module, family, params]`` triples and are rebuilt from the task registry: no pickle. Long
texts are truncated with a marker before they are sent, so a task that raises with a
megabyte-long message can neither deadlock nor bloat the worker.
"""

from __future__ import annotations

import enum
import json
import os
import threading
from dataclasses import dataclass
from typing import Any

from ..protocol import AttemptOutcome, NoteKind
from ..task import Task, rebuild_task
from .base import FAILED, Message, Note, Outcome

__all__ = ["AttemptStage", "LineReader", "PipeSink", "Stage", "decode", "encode", "truncate"]

MAX_TEXT = 64 * 1024
MAX_LINE = 16 * 1024 * 1024


class AttemptStage(enum.StrEnum):
    """How far an attempt's process has got, as it tells its supervisor."""

    LOADED = "loaded"
    """The task is rebuilt (its module imported); its dependencies are checked next."""
    RUNNING = "running"
    """``run()`` is about to be called."""


@dataclass(slots=True)
class Stage:
    """An attempt's process reached ``stage`` (never forwarded to the worker's sink)."""

    stage: AttemptStage


def truncate(text: str, limit: int = MAX_TEXT) -> str:
    """``text``, or its head and tail around a ``[... truncated N characters ...]`` marker."""
    if len(text) <= limit:
        return text
    keep = limit // 2
    cut = len(text) - 2 * keep
    return f"{text[:keep]}\n[... truncated {cut} characters ...]\n{text[-keep:]}"


def encode(message: Message | Stage) -> bytes:
    """One message as a JSON line."""
    if isinstance(message, Stage):
        body: dict[str, Any] = {"t": "stage", "stage": str(message.stage)}
    elif isinstance(message, Note):
        value = truncate(message.value) if isinstance(message.value, str) else message.value
        body = {"t": "note", "kind": message.kind, "value": value}
    else:
        body = {
            "t": "outcome",
            "kind": message.kind,
            "duration": message.duration,
            "error": truncate(message.error),
            "exception_type": message.exception_type[:200],
            "new_deps": [
                [t.task_module, t.task_family, t.to_str_params()] for t in message.new_deps
            ],
            "missing": list(message.missing),
        }
        if message.before_run:  # (only a timeout's, and only then: older readers ignore it)
            body["before_run"] = message.before_run
        if message.found_complete:
            body["found_complete"] = True
        if message.interrupted:  # (a remote supervisor's interruption: older readers ignore it)
            body["interrupted"] = True
    return (json.dumps(body, separators=(",", ":")) + "\n").encode()


def decode(line: bytes, task_id: str) -> Message | Stage:
    """A message from one JSON line (a garbled line becomes a failed outcome)."""
    try:
        body = json.loads(line)
        if body["t"] == "stage":
            return Stage(AttemptStage(body["stage"]))
        if body["t"] == "note":
            return Note(task_id, NoteKind(body["kind"]), body["value"])
        return Outcome(
            task_id,
            AttemptOutcome(body["kind"]),
            float(body["duration"]),
            error=str(body["error"]),
            exception_type=str(body["exception_type"]),
            new_deps=tuple(_rebuild(*triple) for triple in body["new_deps"]),
            missing=tuple(body["missing"]),
            before_run=str(body.get("before_run", "")),
            found_complete=body.get("found_complete") is True,
            interrupted=body.get("interrupted") is True,
        )
    except Exception as exc:
        return Outcome(
            task_id,
            FAILED,
            error=truncate(f"unreadable message from the task's process ({exc}): {line[:200]!r}"),
            exception_type="ChannelError",
        )


def _rebuild(module: str, family: str, params: dict[str, str]) -> Task:
    return rebuild_task(module, family, params)


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
